/**
 * Collection against fake nodes: nodes in parallel under the limit, an
 * unreachable or hanging node reported without hiding the others, the
 * clusters asked in their containers, and the admin password handed to the
 * OpenStack client only through the exec environment.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RemoteError } from '../../src/core/errors.js';
import { Secret } from '../../src/core/secret.js';
import type { ContainerInfo, ExecResult } from '../../src/remote/index.js';
import { adminCredentials } from '../../src/roles/credentials.js';
import { collectStatus, type StatusNodeAccess } from '../../src/status/collect.js';
import { formatStatus } from '../../src/status/format.js';
import { catalog } from '../helpers/plan.js';
import { deployed, fakeEngine, labPlan, workOn, type ExecCall } from './fixture.js';

const sample = (name: string): string => readFileSync(join(import.meta.dirname, 'samples', name), 'utf8');
const ok = (stdout: string): ExecResult => ({ code: 0, stdout, stderr: '' });
const PASSWORD = 'S3cret-admin-pw';

/**
 * Nodes whose containers are all deployed as planned; `tweak` may change or drop them. `agentLists`:
 * Neutron's answers to successive agent listings (the last one repeats; default the sample).
 */
function cloud(
  services: readonly string[],
  tweak: (node: string, c: Map<string, ContainerInfo>) => void = () => undefined,
  pin?: string,
  agentLists: readonly string[] = [sample('openstack-network-agent-list.json')],
) {
  let listings = 0;
  const { plan, deployPlan } = labPlan(services, pin);
  const calls: ExecCall[] = [];
  // the fake containers all run image sha256:0; pinned, it carries every repository's pinned digest
  const imageDigests = new Map(
    pin ? [['sha256:0', plan.images.map((i) => `${i.ref.slice(0, i.ref.lastIndexOf(':'))}@${pin}`)]] : [],
  );
  const inspected: string[] = [];
  const answer = (_c: string, argv: readonly string[]): ExecResult => {
    if (argv[0] === 'mariadb') return ok(sample('galera-wsrep-off.tsv'));
    if (argv[0] === 'rabbitmqctl') return ok(sample('rabbitmq-cluster-status-3.10.json'));
    if (argv.join(' ') === 'openstack compute service list -f json')
      return ok(sample('openstack-compute-service-list.json'));
    if (argv.join(' ') === 'openstack hypervisor list -f json') return ok(sample('openstack-hypervisor-list.json'));
    if (argv.join(' ') === 'openstack network agent list -f json')
      return ok(agentLists[Math.min(listings++, agentLists.length - 1)]!);
    if (argv[0] === 'ovn-sbctl') return ok(sample('ovn-sbctl-chassis.json'));
    if (argv[0] === 'sh' && argv.join(' ').includes('cluster/status')) return ok(sample('ovsdb-standalone.txt'));
    return { code: 1, stdout: '', stderr: `unexpected ${argv.join(' ')}` };
  };
  const engines = new Map(
    plan.nodes.map((n) => {
      const containers = new Map(workOn(deployPlan, n.name).map((w) => [w.name, deployed(plan.cloud.name, w)]));
      tweak(n.name, containers);
      return [n.name, fakeEngine(containers, answer, calls, imageDigests, inspected)];
    }),
  );
  // Every planned config file present with the planned content.
  const sums = deployPlan.steps.flatMap((s) => s.nodes.flatMap((n) => n.configs.map((c) => `${c.sha256}  ${c.dest}`)));
  const connect = (node: string): StatusNodeAccess => ({
    node,
    docker: engines.get(node)!,
    exec: async () => ok(sums.join('\n')),
  });
  return { plan, deployPlan, services: [...services], roles: catalog.provides, calls, connect, inspected };
}

const IDENTITY = ['haproxy', 'keepalived', 'mariadb', 'memcached', 'keystone'];

describe('collectStatus', () => {
  it('all as planned: healthy, exit 0, Galera standalone, no RabbitMQ cluster, OpenStack not deployed', async () => {
    const c = cloud(IDENTITY);
    const r = await collectStatus(c, { connect: c.connect });
    expect(r.findings).toEqual([]);
    expect([r.verdict, r.exitCode]).toEqual(['healthy', 0]);
    expect(r.nodes.map((n) => [n.name, n.reachable, n.containers.length])).toEqual([
      ['ctl-0', true, 6],
      ['cmp-0', true, 0],
    ]);
    expect(r.clusters.map((x) => [x.service, x.kind, x.state])).toEqual([['mariadb', 'galera', 'ok']]);
    expect(r.openstack.state).toBe('not deployed');
  });

  it('an unreachable node is reported with its error; the other is still reported in full', async () => {
    const c = cloud(IDENTITY);
    const r = await collectStatus(c, {
      connect: (node) => {
        if (node !== 'cmp-0') return c.connect(node);
        const access = c.connect(node);
        return {
          ...access,
          docker: {
            ...access.docker,
            version: () =>
              Promise.reject(
                new RemoteError('E_SSH_CONNECT', 'cmp-0 (192.168.24.11:22): connect EHOSTUNREACH', {
                  hint: 'Is it on?',
                }),
              ),
          },
        };
      },
    });
    expect([r.verdict, r.exitCode]).toEqual(['unreachable', 5]);
    const cmp = r.nodes.find((n) => n.name === 'cmp-0')!;
    expect(cmp).toMatchObject({
      reachable: false,
      error: { code: 'E_SSH_CONNECT', message: 'cmp-0 (192.168.24.11:22): connect EHOSTUNREACH', hint: 'Is it on?' },
    });
    expect(r.nodes.find((n) => n.name === 'ctl-0')?.containers).toHaveLength(6);
    expect(r.findings).toEqual([
      {
        severity: 'unreachable',
        node: 'cmp-0',
        subject: 'node',
        message: 'E_SSH_CONNECT: cmp-0 (192.168.24.11:22): connect EHOSTUNREACH',
      },
    ]);
  });

  it('a node that never answers is cut off at the deadline, and a connect that throws is a finding too', async () => {
    const c = cloud(IDENTITY);
    const t0 = Date.now();
    const r = await collectStatus(
      c,
      {
        connect: (node) => {
          if (node === 'ctl-0') throw new RemoteError('E_NODE_ADDRESS', 'node ctl-0 has no address');
          const access = c.connect(node);
          return { ...access, docker: { ...access.docker, version: () => new Promise<never>(() => undefined) } };
        },
      },
      { timeoutMs: 300 },
    );
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(r.nodes.map((n) => [n.name, n.reachable, n.error?.code])).toEqual([
      ['ctl-0', false, 'E_NODE_ADDRESS'],
      ['cmp-0', false, 'E_STATUS_TIMEOUT'],
    ]);
    // Galera's member on ctl-0 is not a second finding: the node's is enough.
    expect(r.findings.map((f) => [f.node, f.subject])).toEqual([
      ['ctl-0', 'node'],
      ['cmp-0', 'node'],
    ]);
    expect(r.clusters.find((x) => x.service === 'mariadb')?.state).toBe('unknown');
  });

  it('queries at most `concurrency` nodes at once', async () => {
    const c = cloud(IDENTITY);
    let now = 0;
    let max = 0;
    const r = await collectStatus(
      c,
      {
        connect: (node) => {
          const access = c.connect(node);
          return {
            ...access,
            docker: {
              ...access.docker,
              version: async () => {
                max = Math.max(max, ++now);
                await new Promise((res) => setTimeout(res, 20));
                now--;
                return { version: 'x', apiVersion: 'y' };
              },
            },
          };
        },
      },
      { concurrency: 1 },
    );
    expect(r.exitCode).toBe(0);
    expect(max).toBe(1);
  });

  it('a stopped container is unhealthy; the Galera query is not run in a stopped mariadb', async () => {
    const c = cloud(IDENTITY, (node, containers) => {
      if (node !== 'ctl-0') return;
      const db = containers.get('mariadb')!;
      containers.set('mariadb', { ...db, state: { ...db.state, status: 'exited', running: false, exitCode: 1 } });
    });
    const r = await collectStatus(c, { connect: c.connect });
    expect([r.verdict, r.exitCode]).toEqual(['unhealthy', 8]);
    expect(r.clusters.find((x) => x.service === 'mariadb')).toEqual({
      service: 'mariadb',
      kind: 'galera',
      state: 'unknown',
      expected: 1,
      members: [{ node: 'ctl-0', error: 'container mariadb exited' }],
    });
    expect(r.findings.map((f) => `${f.node} ${f.subject}: ${f.message}`)).toEqual([
      'ctl-0 mariadb: exited (exit code 1)',
      'ctl-0 mariadb: not queried: container mariadb exited',
    ]);
    expect(c.calls).toEqual([]);
  });

  it('Nova in the plan: the client runs in keystone with the admin password in its environment, never in argv', async () => {
    const services = [
      ...IDENTITY,
      'rabbitmq',
      'placement',
      'nova-api',
      'nova-conductor',
      'nova-scheduler',
      'nova-compute',
    ];
    const c = cloud(services);
    const credentials = adminCredentials(c.plan, new Secret(PASSWORD), { iface: 'internal', region: 'RegionOne' })!.env;
    const r = await collectStatus({ ...c, credentials }, { connect: c.connect });
    expect(r.openstack).toMatchObject({ state: 'ok', via: 'ctl-0/keystone' });
    expect(r.openstack.computeServices).toHaveLength(3);
    expect(r.openstack.hypervisors).toEqual([{ hostname: 'cmp-0', type: 'fake', hostIp: '10.86.20.11', state: 'up' }]);
    const client = c.calls.filter((x) => x.argv[0] === 'openstack');
    expect(client.map((x) => [x.container, x.argv.slice(1, 3).join(' ')])).toEqual([
      ['keystone', 'compute service'],
      ['keystone', 'hypervisor list'],
    ]);
    for (const x of client) {
      expect(x.argv.join(' ')).not.toContain(PASSWORD);
      expect(x.env?.OS_PASSWORD).toBeInstanceOf(Secret);
      expect(x.env?.OS_INTERFACE).toBe('internal');
      expect(String(x.env?.OS_AUTH_URL)).toMatch(/^http:\/\/[\d.]+:5000\/v3$/);
    }
    expect(r.clusters.find((x) => x.service === 'rabbitmq')).toMatchObject({
      kind: 'rabbitmq',
      state: 'ok',
      expected: 1,
    });
    expect([r.verdict, r.exitCode]).toEqual(['healthy', 0]);
    expect(JSON.stringify(r)).not.toContain(PASSWORD);
  });
});

describe('collectStatus: the dataplane', () => {
  it('every service planned: the chassis read in ovn_sb_db, the agents through the admin client; a lost chassis names its node', async () => {
    const c = cloud(labPlan().services);
    const credentials = adminCredentials(c.plan, new Secret(PASSWORD), { iface: 'internal', region: 'RegionOne' })!.env;
    const r = await collectStatus({ ...c, credentials }, { connect: c.connect });
    expect(r.network).toMatchObject({ state: 'ok', chassisVia: 'ctl-0/ovn_sb_db', agentsVia: 'ctl-0/keystone' });
    expect(r.network?.chassis?.map((x) => x.name).sort()).toEqual(['cmp-0', 'ctl-0']);
    expect(r.network?.agents).toHaveLength(3);
    expect(r.findings.filter((f) => f.subject === 'chassis' || /agent/.test(f.subject))).toEqual([]);
    const sb = c.calls.find((x) => x.argv[0] === 'ovn-sbctl')!;
    expect(sb.container).toBe('ovn_sb_db');
    expect(sb.argv).toContain('--no-leader-only');
    expect(sb.argv).toContain('--columns=name,hostname,external_ids');
    expect(formatStatus(r)).toMatch(/network: ok \(chassis from ctl-0\/ovn_sb_db, agents from ctl-0\/keystone\)\n/);
    expect(formatStatus(r)).toMatch(/ctl-0 +ctl-0 +yes +physnet1:br-ex/);

    // the chassis list read on a node whose ovn_sb_db is stopped: the finding says where and why
    const stopped = cloud(labPlan().services, (node, containers) => {
      const sbdb = containers.get('ovn_sb_db');
      if (sbdb) containers.set('ovn_sb_db', { ...sbdb, state: { ...sbdb.state, running: false, status: 'exited' } });
    });
    const s = await collectStatus({ ...stopped, credentials }, { connect: stopped.connect });
    expect(s.network?.state).toBe('problem');
    expect(s.findings).toContainEqual(
      expect.objectContaining({
        node: 'cloud',
        subject: 'chassis',
        message: expect.stringMatching(/^the chassis list could not be read: ctl-0: container ovn_sb_db exited/),
      }),
    );
    expect(s.exitCode).not.toBe(0);
  });

  it('an agent listed not alive is asked about again 3 s later, and only the second answer counts', async () => {
    const alive = sample('openstack-network-agent-list.json');
    const dead = JSON.stringify(
      (JSON.parse(alive) as Record<string, unknown>[]).map((a) => ({ ...a, Alive: a.Host !== 'cmp-0' })),
    );
    const listings = (c: ReturnType<typeof cloud>): number =>
      c.calls.filter((x) => x.argv.join(' ') === 'openstack network agent list -f json').length;
    const credentials = (c: ReturnType<typeof cloud>) =>
      adminCredentials(c.plan, new Secret(PASSWORD), { iface: 'internal', region: 'RegionOne' })!.env;

    // dead in the listing that pinged, alive in the next: healthy, after one 3 s pause
    const pauses: number[] = [];
    const sleep = async (ms: number): Promise<void> => void pauses.push(ms);
    const transient = cloud(labPlan().services, undefined, undefined, [dead, alive]);
    const t = await collectStatus(
      { ...transient, credentials: credentials(transient) },
      { connect: transient.connect, sleep },
    );
    expect([listings(transient), pauses]).toEqual([2, [3000]]);
    expect(t.network?.state).toBe('ok');
    expect(t.network?.agents?.every((a) => a.alive)).toBe(true);

    // dead in both: unhealthy, the finding says it was asked twice
    const down = cloud(labPlan().services, undefined, undefined, [dead]);
    const d = await collectStatus({ ...down, credentials: credentials(down) }, { connect: down.connect, sleep });
    expect(listings(down)).toBe(2);
    expect(d.findings).toContainEqual(
      expect.objectContaining({
        node: 'cmp-0',
        subject: 'OVN Controller agent',
        message: 'Neutron reports it not alive (asked twice, 3 s apart)',
      }),
    );
    expect(d.exitCode).not.toBe(0);

    // all alive at once: one listing, no pause
    const healthy = cloud(labPlan().services);
    pauses.length = 0;
    await collectStatus({ ...healthy, credentials: credentials(healthy) }, { connect: healthy.connect, sleep });
    expect([listings(healthy), pauses]).toEqual([1, []]);
  });
});

describe('collectStatus: images against their pins', () => {
  const PIN = `sha256:${'a'.repeat(64)}`;
  const MOVED = `sha256:${'b'.repeat(64)}`;
  const KEYSTONE = '192.168.24.1:5000/stackctl/keystone:zed-1';

  it('unpinned images: listed, the registry not asked, nothing found', async () => {
    const c = cloud(IDENTITY);
    let asked = 0;
    const r = await collectStatus(c, { connect: c.connect, checkTags: async () => (asked++, []) });
    expect(asked).toBe(0);
    expect(r.images).toMatchObject({ state: 'not deployed', tags: [] });
    expect(r.images.unpinned).toContain(KEYSTONE);
    expect(r.findings).toEqual([]);
    expect(c.inspected).toEqual([]);
  });

  it("pinned images whose tags still name the pin: healthy; each running image's digests looked at once", async () => {
    const c = cloud(IDENTITY, undefined, PIN);
    const asked: string[] = [];
    const r = await collectStatus(c, {
      connect: c.connect,
      checkTags: async (images) =>
        images.map((i) => (asked.push(i.ref), { ref: i.ref, pinned: i.digest!, state: 'pinned' as const })),
    });
    expect(r.findings).toEqual([]);
    expect([r.verdict, r.images.state]).toEqual(['healthy', 'ok']);
    // the checked services' images only (not those of nova or glance)
    expect(asked).toContain(KEYSTONE);
    expect(asked.some((a) => a.includes('nova'))).toBe(false);
    expect(r.images.unpinned).toEqual([]);
    const ks = r.nodes[0]!.containers.find((x) => x.name === 'keystone')!;
    expect(ks.image.digest).toEqual({ pinned: PIN, running: expect.arrayContaining([PIN]), matches: true });
    expect(c.inspected).toEqual(['sha256:0']);
  });

  it('a tag moved in the registry: drift, saying the cloud stays on the pin and how to move', async () => {
    const c = cloud(IDENTITY, undefined, PIN);
    const r = await collectStatus(c, {
      connect: c.connect,
      checkTags: async (images) =>
        images.map((i) =>
          i.ref === KEYSTONE
            ? { ref: i.ref, pinned: i.digest!, state: 'moved' as const, current: MOVED }
            : { ref: i.ref, pinned: i.digest!, state: 'pinned' as const },
        ),
    });
    expect([r.verdict, r.exitCode, r.images.state]).toEqual(['drift', 9, 'problem']);
    expect(r.findings).toEqual([
      {
        severity: 'drift',
        node: 'cloud',
        subject: KEYSTONE,
        message:
          'tag now points to sha256:bbbbbbbbbbbb, not the pinned sha256:aaaaaaaaaaaa: the cloud stays on the pin; ' +
          'run stackctl images pin --refresh to move (then deploy)',
      },
    ]);
  });

  it('a registry that does not answer: unhealthy, the rest of the report intact', async () => {
    const c = cloud(IDENTITY, undefined, PIN);
    const r = await collectStatus(c, {
      connect: c.connect,
      checkTags: async () => {
        throw new RemoteError('E_REGISTRY_UNREACHABLE', 'the registry 192.168.24.1:5000 does not answer');
      },
    });
    expect(r.images).toMatchObject({ state: 'unknown', error: 'the registry 192.168.24.1:5000 does not answer' });
    expect(r.findings).toEqual([
      {
        severity: 'unhealthy',
        node: 'cloud',
        subject: 'registry',
        message: 'the registry 192.168.24.1:5000 does not answer',
      },
    ]);
    expect(r.nodes[0]!.containers).toHaveLength(6);
  });
});
