/**
 * `stackctl status` when Galera is down: the cluster-wide finding and each member's disk and log,
 * each member asked in the container and with the client its service file's `cluster_check` names.
 */
import { describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { planDeploy } from '../../src/orchestrator/planner.js';
import type { ContainerEngine, ExecResult } from '../../src/remote/index.js';
import { collectStatus, type StatusNodeAccess } from '../../src/status/collect.js';
import { describeGaleraMember, outageFinding } from '../../src/status/galera.js';
import type { GaleraMember } from '../../src/status/model.js';
import type { Catalog } from '../../src/roles/catalog.js';
import { renamedGaleraCatalog } from '../helpers/galera.js';
import { catalog, planFromText, release } from '../helpers/plan.js';
import { deployed, fakeEngine, workOn, type ExecCall } from './fixture.js';

const UUID = 'a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f';
const waiting: GaleraMember = {
  node: 'ctl-1',
  error: "mariadb exited with 1: ERROR 2002 (HY000): Can't connect to server on 10.0.0.11",
  diagnosis: {
    running: 'running, server not answering',
    uuid: UUID,
    seqno: -1,
    safeToBootstrap: false,
    position: '17 (start log)',
    gvwstate: true,
    data: true,
    log: [
      `galera: starting from position ${UUID}:17 (InnoDB, after a crash)`,
      `galera: joining cluster ${UUID} through 10.0.0.10 10.0.0.12`,
    ],
  },
};

describe('Galera outage in stackctl status', () => {
  it('no member of several in a primary component: one cloud finding naming the recover dry run', () => {
    const f = outageFinding(3, [waiting, { ...waiting, node: 'ctl-2' }, { node: 'ctl-0', error: 'node unreachable' }]);
    expect(f).toEqual({
      severity: 'unhealthy',
      node: 'cloud',
      subject: 'galera',
      message:
        "no member runs a primary component (ctl-1, ctl-2 waiting): 'stackctl recover galera --dry-run' shows each member's position and the one to restart the cluster from",
    });
  });

  it('none while a member is Primary, nor for a single server', () => {
    expect(
      outageFinding(3, [{ node: 'ctl-0', clusterStatus: 'Primary', localState: 'Synced', clusterSize: 2 }, waiting]),
    ).toBeUndefined();
    expect(outageFinding(1, [waiting])).toBeUndefined();
  });

  it("a member's line carries its disk, position and last log lines", () => {
    expect(describeGaleraMember(waiting)).toBe(
      `ctl-1: mariadb exited with 1: ERROR 2002 (HY000): Can't connect to server on 10.0.0.11\n` +
        `    running, server not answering; grastate uuid ${UUID}, seqno -1, safe_to_bootstrap 0, gvwstate.dat, position 17 (start log)\n` +
        `    | galera: starting from position ${UUID}:17 (InnoDB, after a crash)\n` +
        `    | galera: joining cluster ${UUID} through 10.0.0.10 10.0.0.12`,
    );
  });

  it.each([
    { roles: 'the shipped service file', cat: catalog },
    { roles: 'a service file naming its Galera server and client otherwise', cat: renamedGaleraCatalog() },
  ])(
    'collectStatus on three controllers with no primary component: each member read from its disk and log, one cloud finding ($roles)',
    async ({ cat }: { cat: Catalog }) => {
      const check = cat.provides.clusterChecks.get('mariadb')!;
      const { plan } = planFromText(
        generateInventoryYaml({ controllers: 3, computes: 1 }),
        undefined,
        release,
        undefined,
        cat,
      );
      const deployPlan = planDeploy(plan, cat, { services: ['mariadb'] });
      const calls: ExecCall[] = [];
      const sums = deployPlan.steps.flatMap((st) =>
        st.nodes.flatMap((n) => n.configs.map((c) => `${c.sha256}  ${c.dest}`)),
      );
      const refused: ExecResult = { code: 1, stdout: '', stderr: "ERROR 2002 (HY000): Can't connect to local server" };
      const connect = (node: string): StatusNodeAccess => {
        const containers = new Map(workOn(deployPlan, node).map((w) => [w.name, deployed(plan.cloud.name, w)]));
        const engine = fakeEngine(
          containers,
          (_c, argv) => (argv[0] === check.command[0] ? refused : { code: 0, stdout: '', stderr: '' }),
          calls,
        );
        const docker: ContainerEngine = {
          ...engine,
          logs: async () => ({ stdout: `galera: joining cluster ${UUID} through the others\nnoise\n`, stderr: '' }),
        };
        return {
          node,
          docker,
          exec: async (command) =>
            Array.isArray(command) && command[0] === 'sha256sum'
              ? { code: 0, stdout: sums.join('\n'), stderr: '' }
              : {
                  code: 0,
                  stdout: `volume: present\ngrastate: uuid: ${UUID}\ngrastate: seqno: -1\ngrastate: safe_to_bootstrap: 0\nschema: keystone\n`,
                  stderr: '',
                },
        };
      };
      const r = await collectStatus({ plan, deployPlan, services: ['mariadb'], roles: cat.provides }, { connect });
      // the cluster check and each member's reading: the file's command, in the file's container
      const asked = calls.filter((c) => c.argv[0] !== 'sh');
      expect(asked).toHaveLength(6);
      for (const c of asked) expect([c.container, c.argv]).toEqual([check.container, check.command]);
      const view = r.clusters.find((c) => c.service === 'mariadb')!;
      expect([view.kind, view.state, view.expected]).toEqual(['galera', 'unknown', 3]);
      for (const m of view.members as GaleraMember[])
        expect(m.diagnosis, m.node).toMatchObject({
          uuid: UUID,
          seqno: -1,
          safeToBootstrap: false,
          data: true,
          log: [`galera: joining cluster ${UUID} through the others`],
        });
      expect(r.findings.filter((f) => f.node === 'cloud')).toEqual([
        {
          severity: 'unhealthy',
          node: 'cloud',
          subject: 'mariadb',
          message: expect.stringMatching(
            /^no member runs a primary component \(ctl-0, ctl-1, ctl-2 waiting\): 'stackctl recover galera --dry-run'/,
          ),
        },
      ]);
    },
  );
});
