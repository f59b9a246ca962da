/**
 * The prechecks against the lab's plan (ctl-0, cmp-0) on fake nodes and a
 * fake Nova: each passes with a short detail or refuses naming the node,
 * the service and the finding; the status is collected once per context;
 * the capacity arithmetic is a table.
 */
import { detachedScope, type RunScope } from '../../src/orchestrator/engine.js';
import { clusterCheck } from '../../src/status/clusters.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ContainerInfo, ExecResult } from '../../src/remote/index.js';
import type { OneOffResult, UpgradeContext } from '../../src/upgrade/context.js';
import type { UpgradeAction } from '../../src/upgrade/model.js';
import {
  CAPACITY_DEFAULTS,
  PRECHECK_HANDLERS,
  PRECHECK_DEFAULTS,
  evacuationCapacity,
  failedFindings,
  parseFlavors,
  parseHypervisorRow,
  type HostCapacity,
  type InstanceDemand,
  type Resources,
} from '../../src/upgrade/prechecks.js';
import { deployed, fakeEngine, labPlan, workOn } from '../status/fixture.js';
import { FakeNova, fakeContext } from './fake-nova.js';
import { rejection } from '../helpers/errors.js';

const sample = (name: string): string =>
  readFileSync(join(import.meta.dirname, '..', 'status', 'samples', name), 'utf8');
const ok = (stdout: string): ExecResult => ({ code: 0, stdout, stderr: '' });

const r = (vcpus: number, memoryMiB: number, diskGiB: number): Resources => ({ vcpus, memoryMiB, diskGiB });
const vm = (name: string, need: Resources): InstanceDemand => ({ id: `id-${name}`, name, host: 'cmp-0', need });
const hv = (host: string, free: Resources): HostCapacity => ({ host, free });

describe('evacuationCapacity', () => {
  const table: {
    scenario: string;
    instances: InstanceDemand[];
    hosts: HostCapacity[];
    fits: boolean;
    shortfall: Partial<Resources>;
    unplaceable: string[];
  }[] = [
    {
      scenario: 'an empty batch fits anywhere, even with no receiving host',
      instances: [],
      hosts: [],
      fits: true,
      shortfall: {},
      unplaceable: [],
    },
    {
      scenario: 'instances that fit in total and one by one',
      instances: [vm('a', r(2, 2048, 20)), vm('b', r(2, 2048, 20))],
      hosts: [hv('cmp-1', r(2, 2048, 20)), hv('cmp-2', r(4, 4096, 40))],
      fits: true,
      shortfall: {},
      unplaceable: [],
    },
    {
      scenario: 'memory short: the shortfall is the difference, in MiB',
      instances: [vm('a', r(1, 4096, 10)), vm('b', r(1, 4096, 10))],
      hosts: [hv('cmp-1', r(16, 6144, 100))],
      fits: false,
      shortfall: { memoryMiB: 2048 },
      unplaceable: ['b'],
    },
    {
      scenario: 'vCPUs and disk short at once: both named',
      instances: [vm('a', r(8, 1024, 100))],
      hosts: [hv('cmp-1', r(4, 8192, 40)), hv('cmp-2', r(2, 8192, 40))],
      fits: false,
      shortfall: { vcpus: 2, diskGiB: 20 },
      unplaceable: ['a'],
    },
    {
      scenario: 'enough in total but split over hosts too small for the largest instance',
      instances: [vm('big', r(2, 8192, 20))],
      hosts: [hv('cmp-1', r(4, 4096, 100)), hv('cmp-2', r(4, 4096, 100))],
      fits: false,
      shortfall: {},
      unplaceable: ['big'],
    },
    {
      scenario: 'largest first: the big one is placed before the small ones fill its host',
      instances: [vm('s1', r(1, 1024, 10)), vm('big', r(2, 6144, 10)), vm('s2', r(1, 1024, 10))],
      hosts: [hv('cmp-1', r(4, 6144, 100)), hv('cmp-2', r(4, 2048, 100))],
      fits: true,
      shortfall: {},
      unplaceable: [],
    },
    {
      scenario: 'no receiving host at all',
      instances: [vm('a', r(1, 512, 1))],
      hosts: [],
      fits: false,
      shortfall: { vcpus: 1, memoryMiB: 512, diskGiB: 1 },
      unplaceable: ['a'],
    },
  ];
  for (const t of table) {
    it(t.scenario, () => {
      const v = evacuationCapacity(t.instances, t.hosts);
      expect({ fits: v.fits, shortfall: v.shortfall, unplaceable: v.unplaceable }).toEqual({
        fits: t.fits,
        shortfall: t.shortfall,
        unplaceable: t.unplaceable,
      });
    });
  }
});

describe('parsing the client', () => {
  it('counts a flavour root, ephemeral and swap disks against local disk, by ID and by name', () => {
    const f = parseFlavors(
      JSON.stringify([
        { ID: '1', Name: 'm1.tiny', RAM: 512, Disk: 1, Ephemeral: 0, Swap: '', VCPUs: 1 },
        { ID: '2', Name: 'm1.swap', RAM: 2048, Disk: 10, Ephemeral: 5, Swap: 1536, VCPUs: 2 },
      ]),
    );
    expect(f.get('1')).toEqual(r(1, 512, 1));
    expect(f.get('m1.swap')).toEqual(r(2, 2048, 17));
  });

  it('frees hypervisor totals times the allocation ratios, minus what is used, never below zero', () => {
    const row = {
      vCPUs: 4,
      'vCPUs Used': 10,
      'Memory MB': 8192,
      'Memory MB Used': 12800,
      'Local GB': 100,
      'Local GB Used': 120,
    };
    expect(CAPACITY_DEFAULTS.allocationRatio).toEqual({ vcpus: 16, memoryMiB: 1.5, diskGiB: 1 });
    expect(parseHypervisorRow(row)).toEqual(r(54, 0, 0));
    expect(parseHypervisorRow(row, r(1, 2, 2))).toEqual(r(0, 3584, 80));
    // the Zed client's list has no disk columns: disk is not reported, never a shortfall
    const { 'Local GB': _t, 'Local GB Used': _u, ...noDisk } = row;
    expect(parseHypervisorRow(noDisk).diskGiB).toBe(Infinity);
  });
});

/** The lab's nodes, every container as planned; `tweak` changes them, `answer` the commands in containers. */
function labNodes(
  opts: {
    tweak?: (node: string, c: Map<string, ContainerInfo>) => void;
    answer?: (container: string, argv: readonly string[]) => ExecResult | undefined;
    unreachable?: readonly string[];
    shell?: (node: string) => ExecResult;
  } = {},
) {
  const { plan, deployPlan } = labPlan();
  const versions = new Map<string, number>();
  const answer = (c: string, argv: readonly string[]): ExecResult => {
    const own = opts.answer?.(c, argv);
    if (own) return own;
    if (argv[0] === 'mariadb') return ok(sample('galera-wsrep-off.tsv'));
    if (argv[0] === 'rabbitmqctl') return ok(sample('rabbitmq-cluster-status-3.10.json'));
    return { code: 1, stdout: '', stderr: `unexpected ${argv.join(' ')}` };
  };
  const sums = deployPlan.steps.flatMap((s) => s.nodes.flatMap((n) => n.configs.map((c) => `${c.sha256}  ${c.dest}`)));
  const engines = new Map(
    plan.nodes.map((n) => {
      const containers = new Map(workOn(deployPlan, n.name).map((w) => [w.name, deployed(plan.cloud.name, w)]));
      opts.tweak?.(n.name, containers);
      const engine = fakeEngine(containers, answer);
      const version = engine.version.bind(engine);
      return [
        n.name,
        Object.assign(engine, {
          version: () => {
            versions.set(n.name, (versions.get(n.name) ?? 0) + 1);
            return version();
          },
        }),
      ];
    }),
  );
  const connect: UpgradeContext['connect'] = (node) => {
    if (opts.unreachable?.includes(node)) throw new Error(`connect ECONNREFUSED ${node}:22`);
    return {
      node,
      docker: engines.get(node)!,
      files: { upload: async () => 0 },
      exec: async (cmd) => (cmd[0] === 'true' ? (opts.shell?.(node) ?? ok('')) : ok(sums.join('\n'))),
    };
  };
  return { connect, versions };
}

/** Nova as the samples show it (agents up on ctl-0 and cmp-0), optionally changed. */
function novaView(change: (services: Record<string, unknown>[]) => void = () => undefined) {
  return {
    openstack: async (argv: readonly string[]) => {
      if (argv.join(' ') === 'compute service list -f json') {
        const rows = JSON.parse(sample('openstack-compute-service-list.json')) as Record<string, unknown>[];
        change(rows);
        return JSON.stringify(rows);
      }
      if (argv.join(' ') === 'hypervisor list -f json') return sample('openstack-hypervisor-list.json');
      throw new Error(`unexpected openstack ${argv.join(' ')}`);
    },
  };
}

/** The prechecks' handlers and the engine's cluster check, as a precheck phase runs them. */
const run = (a: UpgradeAction, ctx: UpgradeContext): Promise<string> =>
  (
    ({ ...PRECHECK_HANDLERS, 'cluster-check': clusterCheck }) as unknown as Record<
      string,
      (a: UpgradeAction, c: UpgradeContext, r: RunScope) => Promise<string>
    >
  )[a.kind]!(a, ctx, detachedScope({ kind: 'precheck' }));

describe('check-healthy, and cluster-check in a precheck phase', () => {
  it('pass on a healthy cloud, from one status collection shared by every check of the context', async () => {
    const nodes = labNodes();
    const ctx = fakeContext({ connect: nodes.connect, cloud: novaView() });
    const details = [
      await run({ kind: 'check-healthy', service: 'keystone', nodes: ['ctl-0'] }, ctx),
      await run({ kind: 'check-healthy', service: 'nova-compute', nodes: ['cmp-0'] }, ctx),
      await run({ kind: 'check-healthy', service: 'nova-conductor', nodes: ['ctl-0'] }, ctx),
      await run({ kind: 'cluster-check', service: 'mariadb', nodes: ['ctl-0'] }, ctx),
      await run({ kind: 'cluster-check', service: 'rabbitmq', nodes: ['ctl-0'] }, ctx),
    ];
    expect(details).toEqual([
      'keystone healthy on ctl-0',
      'nova-compute healthy on cmp-0',
      'nova-conductor healthy on ctl-0',
      'mariadb standalone (one member, no replication)',
      'rabbitmq cluster whole: 1 member(s)',
    ]);
    expect(Object.fromEntries(nodes.versions)).toEqual({ 'ctl-0': 1, 'cmp-0': 1 });
    // A new context collects again.
    await run({ kind: 'check-healthy', service: 'mariadb', nodes: ['ctl-0'] }, fakeContext({ connect: nodes.connect }));
    expect(nodes.versions.get('ctl-0')).toBe(2);
  });

  it('refuses a service with a stopped container, naming node, container and state; others still pass', async () => {
    const nodes = labNodes({
      tweak: (node, c) => {
        if (node === 'ctl-0')
          c.set('keystone', {
            ...c.get('keystone')!,
            state: { ...c.get('keystone')!.state, status: 'exited', running: false, exitCode: 137 },
          });
      },
    });
    const ctx = fakeContext({ connect: nodes.connect, cloud: novaView() });
    const err = await rejection(run({ kind: 'check-healthy', service: 'keystone', nodes: ['ctl-0'] }, ctx));
    expect(err.code).toBe('E_PRECHECK_UNHEALTHY');
    expect(err.message).toBe('service keystone is not healthy: ctl-0 keystone: exited (exit code 137)');
    expect(err.hint).toMatch(/Nothing was stopped/);
    expect(await run({ kind: 'check-healthy', service: 'memcached', nodes: ['ctl-0'] }, ctx)).toBe(
      'memcached healthy on ctl-0',
    );
  });

  it("refuses nova-compute when Nova reports its agent down, from Nova's own view", async () => {
    const nodes = labNodes();
    const cloud = novaView((rows) => {
      for (const row of rows) if (row.Binary === 'nova-compute') row.State = 'down';
    });
    const ctx = fakeContext({ connect: nodes.connect, cloud });
    const err = await rejection(run({ kind: 'check-healthy', service: 'nova-compute', nodes: ['cmp-0'] }, ctx));
    expect(err.message).toMatch(/cmp-0 nova-compute: compute service down/);
    expect(await run({ kind: 'check-healthy', service: 'keystone', nodes: ['ctl-0'] }, ctx)).toMatch(/healthy/);
  });

  it('refuses the services of a node that cannot be reached, once it was read again after a pause', async () => {
    const down = labNodes({ unreachable: ['cmp-0'] });
    let tries = 0;
    const ctx = fakeContext({
      connect: (node) => {
        if (node === 'cmp-0') tries++;
        return down.connect(node);
      },
      cloud: novaView(),
    });
    const t0 = ctx.clock.t;
    const err = await rejection(run({ kind: 'check-healthy', service: 'nova-compute', nodes: ['cmp-0'] }, ctx));
    expect(err.message).toMatch(/cmp-0 node: .*ECONNREFUSED/);
    expect(tries).toBe(2);
    expect(ctx.clock.t - t0).toBeGreaterThanOrEqual(PRECHECK_DEFAULTS.rereadAfterMs);
  });

  it('passes when a node unreadable at first (an overloaded machine) answers the second reading', async () => {
    const up = labNodes();
    const down = labNodes({ unreachable: ['cmp-0'] });
    let tries = 0;
    const ctx = fakeContext({
      connect: (node) => (node === 'cmp-0' && tries++ === 0 ? down.connect(node) : up.connect(node)),
      cloud: novaView(),
    });
    expect(await run({ kind: 'check-healthy', service: 'nova-compute', nodes: ['cmp-0'] }, ctx)).toBe(
      'nova-compute healthy on cmp-0',
    );
    expect(tries).toBe(2);
    // a stopped container is a finding, not a reason to look again: one reading only
    const stopped = labNodes({
      tweak: (node, c) => {
        if (node === 'ctl-0')
          c.set('keystone', {
            ...c.get('keystone')!,
            state: { ...c.get('keystone')!.state, status: 'exited', running: false },
          });
      },
    });
    const ctx2 = fakeContext({ connect: stopped.connect, cloud: novaView() });
    await rejection(run({ kind: 'check-healthy', service: 'keystone', nodes: ['ctl-0'] }, ctx2));
    expect(stopped.versions.get('ctl-0')).toBe(1);
  });

  it('refuses Galera when a member does not answer, and RabbitMQ when a broker is missing', async () => {
    const nodes = labNodes({
      answer: (_c, argv) => {
        if (argv[0] === 'mariadb') return { code: 1, stdout: '', stderr: "ERROR 2002: Can't connect" };
        if (argv[0] === 'rabbitmqctl')
          return ok(JSON.stringify({ disk_nodes: ['rabbit@ctl-0'], running_nodes: [], partitions: {}, alarms: [] }));
        return undefined;
      },
    });
    const ctx = fakeContext({ connect: nodes.connect, cloud: novaView() });
    const g = await rejection(run({ kind: 'cluster-check', service: 'mariadb', nodes: ['ctl-0'] }, ctx));
    expect(g.code).toBe('E_CLUSTER_INCOMPLETE');
    expect(g.message).toMatch(
      /^mariadb: the cluster is not whole \(1 member\(s\) planned\): ctl-0: mariadb exited with 1: ERROR 2002/,
    );
    expect(g.hint).toMatch(/Nothing was stopped/);
    const q = await rejection(run({ kind: 'cluster-check', service: 'rabbitmq', nodes: ['ctl-0'] }, ctx));
    expect(q.code).toBe('E_CLUSTER_INCOMPLETE');
    expect(q.message).toMatch(/ctl-0: running none/);
  });
});

describe('check-reachable', () => {
  it('passes when every node runs `true` and its Docker engine answers', async () => {
    const ctx = fakeContext({ connect: labNodes().connect });
    expect(await run({ kind: 'check-reachable', nodes: ['ctl-0', 'cmp-0'] }, ctx)).toBe(
      '2 node(s) answer over SSH, Docker 20.10.24',
    );
  });

  it('names every node that does not answer and why', async () => {
    const nodes = labNodes({
      unreachable: ['cmp-0'],
      shell: (node) => (node === 'ctl-0' ? { code: 126, stdout: '', stderr: '' } : ok('')),
    });
    const err = await rejection(
      run({ kind: 'check-reachable', nodes: ['ctl-0', 'cmp-0'] }, fakeContext({ connect: nodes.connect })),
    );
    expect(err.code).toBe('E_PRECHECK_UNREACHABLE');
    expect(err.message).toMatch(/^2 node\(s\) do not answer: ctl-0: SSH: true exited with 126; cmp-0: .*ECONNREFUSED/);
    expect(err.details.nodes).toEqual(['ctl-0', 'cmp-0']);
  });
});

describe('check-images', () => {
  afterEach(() => void vi.unstubAllGlobals());

  it('names every repository:tag the registry lacks (E_IMAGE_NOT_IN_REGISTRY)', async () => {
    const asked: string[] = [];
    vi.stubGlobal('fetch', async (url: string) => {
      asked.push(url);
      return new Response(null, { status: url.includes('/nova-api/') ? 404 : 200 });
    });
    const images = ['10.0.0.1:5000/stackctl/keystone:zed-2', '10.0.0.1:5000/stackctl/nova-api:zed-2'];
    const ctx = fakeContext();
    const err = await rejection(run({ kind: 'check-images', images }, ctx));
    expect(err.code).toBe('E_IMAGE_NOT_IN_REGISTRY');
    expect(err.message).toMatch(/stackctl\/nova-api:zed-2$/);
    expect(asked).toEqual([
      'http://10.0.0.1:5000/v2/stackctl/keystone/manifests/zed-2',
      'http://10.0.0.1:5000/v2/stackctl/nova-api/manifests/zed-2',
    ]);
    vi.stubGlobal('fetch', async () => new Response(null, { status: 200 }));
    expect(await run({ kind: 'check-images', images }, ctx)).toBe(
      '2 target image(s) present in the registry 10.0.0.1:5000',
    );
  });
});

describe('check-capacity', () => {
  const flavors = [{ id: 'f1', name: 'm1.medium', vcpus: 2, ram: 4096, disk: 40 }];
  const hosts = () => [
    { host: 'cmp-0', status: 'enabled' as const, state: 'up' as const, vcpus: 4, memoryMb: 16384, diskGb: 200 },
    { host: 'cmp-1', status: 'enabled' as const, state: 'up' as const, vcpus: 4, memoryMb: 8192, diskGb: 200 },
    { host: 'cmp-2', status: 'disabled' as const, state: 'up' as const, vcpus: 64, memoryMb: 262144, diskGb: 4000 },
  ];
  const servers = (n: number) =>
    Array.from({ length: n }, (_, i) => ({
      id: `s${i}`,
      name: `vm${i}`,
      status: 'ACTIVE',
      host: 'cmp-0',
      flavor: 'f1',
    }));

  it('passes when the enabled hosts outside the batch hold the running instances', async () => {
    const nova = new FakeNova(hosts(), flavors, [
      ...servers(2),
      { id: 'x', name: 'off', status: 'SHUTOFF', host: 'cmp-0', flavor: 'f1' },
    ]);
    const detail = await run({ kind: 'check-capacity', batch: ['cmp-0'] }, fakeContext({ cloud: nova }));
    expect(detail).toBe(
      '2 instance(s) (4 vCPUs, 8192 MiB memory, 80 GiB disk) fit on cmp-1 (64 vCPUs, 11776 MiB memory, ? GiB disk free)' +
        '; 1 instance(s) not running stay where they are',
    );
    // statistics from the list: `hypervisor show` below 2.88 would ask the compute for its uptime over RPC
    expect(nova.calls).toContainEqual([
      '--os-compute-api-version',
      '2.87',
      'hypervisor',
      'list',
      '--long',
      '-f',
      'json',
    ]);
    expect(nova.calls.some((c) => c.includes('show') && c.includes('hypervisor'))).toBe(false);
    // Nothing changed.
    expect(nova.calls.some((c) => c.includes('set') || c.includes('migrate'))).toBe(false);
  });

  it('refuses with the shortfall per resource when they do not fit (a disabled host does not count)', async () => {
    const nova = new FakeNova(hosts(), flavors, servers(3));
    const err = await rejection(run({ kind: 'check-capacity', batch: ['cmp-0'] }, fakeContext({ cloud: nova })));
    expect(err.code).toBe('E_EVACUATION_CAPACITY');
    expect(err.details.shortfall).toEqual({ memoryMiB: 512 });
    expect(err.details.receivers).toEqual(['cmp-1']);
    expect(err.message).toMatch(/short of 512 MiB memory/);
  });

  it('passes when the batch holds no instance, without asking for flavours or hypervisors', async () => {
    const nova = new FakeNova(hosts(), flavors, []);
    expect(await run({ kind: 'check-capacity', batch: ['cmp-0'] }, fakeContext({ cloud: nova }))).toBe(
      'cmp-0: no running instance to move',
    );
    expect(nova.calls.map((c) => c[0])).toEqual(['server']);
  });
});

describe('check-service', () => {
  const action = {
    kind: 'check-service' as const,
    service: 'nova-api',
    node: 'ctl-0',
    image: '10.0.0.1:5000/stackctl/nova-api:zed-2',
    command: ['nova-status', 'upgrade', 'check'],
  };
  const withExit = (res: OneOffResult) => {
    const calls: { node: string; container: string; image: string; command: readonly string[] }[] = [];
    const ctx = fakeContext({
      oneOff: async (node, work, image, command) => {
        calls.push({ node, container: work.name, image, command });
        return res;
      },
    });
    return { ctx, calls };
  };

  it('runs the check with the target image in a one-off borrowing the service container, and passes on 0', async () => {
    const { ctx, calls } = withExit({ code: 0, log: 'Check: Cells v2 Result: Success' });
    expect(await run(action, ctx)).toBe('nova-api: nova-status upgrade check passed');
    expect(calls).toEqual([{ node: 'ctl-0', container: 'nova_api', image: action.image, command: action.command }]);
  });

  it('passes a warning (exit 1) with the warning in the detail', async () => {
    const { ctx } = withExit({ code: 1, log: 'Result: Warning\nDetails: policy file is JSON' });
    expect(await run(action, ctx)).toMatch(/passed with a warning: .*policy file is JSON/);
  });

  it('refuses a failure (exit 2) with the end of the log', async () => {
    const { ctx } = withExit({ code: 2, log: 'Check: Placement API\nResult: Failure\nDetails: no placement endpoint' });
    const err = await rejection(run(action, ctx));
    expect(err.code).toBe('E_UPGRADE_CHECK');
    expect(err.message).toMatch(
      /nova-api: 'nova-status upgrade check' .* on ctl-0 exited with 2 \(failure\): .*no placement endpoint/s,
    );
  });

  /** oslo.upgradecheck's table, as Epoxy's nova-status prints it. */
  const table = (rows: [string, string][]): string =>
    '+-----------------------------------+\n| Upgrade Check Results             |\n+===================================+\n' +
    rows
      .map(
        ([check, result]) =>
          `| Check: ${check.padEnd(26)} |\n| Result: ${result.padEnd(25)} |\n| Details: None              |\n`,
      )
      .join('+-----------------------------------+\n') +
    '+-----------------------------------+\n';

  it('reads the failed findings from the check table', () => {
    expect(
      failedFindings(
        table([
          ['Cells v2', 'Success'],
          ['Older than N-1 computes', 'Failure'],
          ['hw_machine_type unset', 'Warning'],
        ]),
      ),
    ).toEqual(['Older than N-1 computes']);
    expect(failedFindings('no table at all')).toEqual([]);
  });

  it('in a fast-forward window, passes a failure only when every failed finding is waived', async () => {
    const inWindow = { ...action, inWindow: true, waive: ['Older than N-1 computes'] };
    const waived = withExit({ code: 2, log: table([['Older than N-1 computes', 'Failure']]) });
    expect(await run(inWindow, waived.ctx)).toBe(
      'nova-api: nova-status upgrade check failed only on what this window replaces (waived: Older than N-1 computes)',
    );
    const other = withExit({
      code: 2,
      log: table([
        ['Older than N-1 computes', 'Failure'],
        ['Placement API', 'Failure'],
      ]),
    });
    const err = await rejection(run(inWindow, other.ctx));
    expect(err.code).toBe('E_UPGRADE_CHECK');
    expect(err.hint).toMatch(/inside nova-api's window: its containers are stopped.*--resume/);
    // outside a window nothing is waived, and nothing was stopped yet
    const outside = withExit({ code: 2, log: table([['Older than N-1 computes', 'Failure']]) });
    const err2 = await rejection(run({ ...action, waive: ['Older than N-1 computes'] }, outside.ctx));
    expect(err2.hint).toMatch(/Nothing was stopped/);
    // an unexpected error (255) is never waived
    const crashed = withExit({ code: 255, log: table([['Older than N-1 computes', 'Failure']]) });
    expect((await rejection(run(inWindow, crashed.ctx))).code).toBe('E_UPGRADE_CHECK');
  });

  it('refuses when the target plan has no container of the service on the node', async () => {
    const { ctx } = withExit({ code: 0, log: '' });
    const err = await rejection(run({ ...action, node: 'cmp-0' }, ctx));
    expect(err.code).toBe('E_PRECHECK_NO_CONTAINER');
  });
});
