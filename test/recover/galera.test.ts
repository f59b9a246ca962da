/**
 * recoverGalera against fake nodes: the dry run of a full outage reads the stopped members'
 * positions in one-off containers (the container's command with `recover`, removed afterwards) and
 * names the member to bootstrap, stopping and writing nothing; the formatted report shows it. The
 * same with a service file whose Galera server container has another name.
 */
import { describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { planDeploy } from '../../src/orchestrator/planner.js';
import { formatRecoverReport } from '../../src/recover/format.js';
import { recoverGalera } from '../../src/recover/galera.js';
import { galeraClusters } from '../../src/recover/guard.js';
import { GALERA, type GaleraAccess } from '../../src/recover/members.js';
import type { ContainerEngine, ContainerInfo, ContainerSpec } from '../../src/remote/index.js';
import type { Catalog } from '../../src/roles/catalog.js';
import { renamedGaleraCatalog } from '../helpers/galera.js';
import { catalog, planFromText, release } from '../helpers/plan.js';

const UUID = 'a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f';
/** The Galera cluster of three controllers with these roles. */
const clusterOf = (cat: Catalog) =>
  galeraClusters(
    planDeploy(
      planFromText(generateInventoryYaml({ controllers: 3, computes: 1 }), undefined, release, undefined, cat).plan,
      cat,
    ),
    cat.provides.clusterChecks,
  )[0]!;

/** A node whose Galera server container (`server`) exited after a crash; its InnoDB holds `seqno`. */
function crashedNode(name: string, seqno: number, server: string) {
  const calls: string[] = [];
  const containers = new Map<string, ContainerInfo>([
    [
      server,
      {
        id: 'x',
        name: server,
        image: 'img',
        imageId: 'sha256:0',
        labels: {},
        state: { status: 'exited', running: false, exitCode: 137, startedAt: '', finishedAt: '', oomKilled: false },
        restartCount: 0,
      },
    ],
  ]);
  let oneOff: ContainerSpec | undefined;
  const docker: Partial<ContainerEngine> = {
    inspectContainer: async (ref) =>
      containers.get(ref) ??
      (ref === GALERA.recoverContainer && oneOff
        ? {
            ...containers.get(server)!,
            name: ref,
            state: { ...containers.get(server)!.state, exitCode: 0 },
          }
        : undefined),
    removeContainer: async (ref) => void calls.push(`remove ${ref}`),
    createContainer: async (spec) => {
      oneOff = spec;
      calls.push(`create ${spec.name}: ${spec.command?.join(' ')} (restart ${spec.restart})`);
      return 'id';
    },
    startContainer: async (ref) => void calls.push(`start ${ref}`),
    stopContainer: async (ref) => void calls.push(`stop ${ref}`),
    logs: async (ref) => ({
      stdout:
        ref === GALERA.recoverContainer
          ? `[Note] WSREP: Recovered position: ${UUID}:${seqno}\n`
          : 'galera: joining cluster\n',
      stderr: '',
    }),
    exec: async () => ({ code: 1, stdout: '', stderr: '' }),
  };
  const access: GaleraAccess = {
    node: name,
    exec: async (argv) => {
      calls.push(`shell ${(argv as string[]).slice(0, 2).join(' ')}`);
      return {
        code: 0,
        stdout: `volume: present\ngrastate: uuid: ${UUID}\ngrastate: seqno: -1\ngrastate: safe_to_bootstrap: 0\ngvwstate: present\nschema: keystone\n`,
        stderr: '',
      };
    },
    docker: docker as ContainerEngine,
  };
  return { access, calls };
}

describe.each([
  { roles: 'the shipped service file', cat: catalog },
  { roles: 'a service file naming its Galera server otherwise', cat: renamedGaleraCatalog() },
])('recoverGalera, dry run of a full outage ($roles)', ({ cat }) => {
  const cluster = clusterOf(cat);
  const server = cat.provides.clusterChecks.get('mariadb')!.container;
  it("reads each stopped member's InnoDB position in a one-off container and names the most advanced", async () => {
    expect(cluster.members.map((m) => m.name)).toEqual([server, server, server]);
    const nodes = {
      'ctl-0': crashedNode('ctl-0', 40, server),
      'ctl-1': crashedNode('ctl-1', 42, server),
      'ctl-2': crashedNode('ctl-2', 41, server),
    };
    const lines: string[] = [];
    let t = 0;
    const r = await recoverGalera(
      cluster,
      {
        connect: (n) => nodes[n as keyof typeof nodes].access,
        now: () => t,
        sleep: async (ms) => void (t += ms),
        say: (l) => void lines.push(l),
      },
      { dryRun: true, recoverCommand: 'stackctl recover galera -i site.yaml' },
    );
    expect(r.summary).toBe('bootstrap ctl-1 (seqno 42), then join ctl-0, ctl-2');
    expect(r.changed).toBe(false);
    const c = nodes['ctl-1'].calls;
    expect(c.filter((x) => !x.startsWith('shell'))).toEqual([
      `remove ${GALERA.recoverContainer}`,
      `create ${GALERA.recoverContainer}: sh /etc/mysql/mariadb.conf.d/stackctl/start.sh recover (restart no)`,
      `start ${GALERA.recoverContainer}`,
      `remove ${GALERA.recoverContainer}`,
    ]);
    // nothing stopped or started, no grastate.dat written: the shell only ran the read-only volume script
    for (const n of Object.values(nodes)) {
      expect(n.calls.some((x) => x === `stop ${server}` || x === `start ${server}`)).toBe(false);
      expect(n.calls.filter((x) => x.startsWith('shell'))).toEqual(['shell sh -c']);
    }
    const text = formatRecoverReport(r, true);
    expect(text).toMatch(new RegExp(`^ctl-1 +exited \\(exit code 137\\) +${UUID} +42 +innodb +0 +yes$`, 'm'));
    expect(text).toContain('choice: bootstrap ctl-1 (seqno 42), then join ctl-0, ctl-2 (dry run: nothing changed)');
  });
});
