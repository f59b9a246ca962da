/**
 * The deploy guard against fake nodes: it covers the Galera members only; a member left alone but
 * unwell is explained by the cluster; Galera's first deploy founds through the permit only once every
 * member was read and none holds data; an unreadable member stops it; a member joining a running
 * cluster needs nothing; the container and the query are the ones the service file's
 * `cluster_check` names.
 */
import { describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import { formatEvent, type StackctlEvent } from '../../src/core/events.js';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { planDeploy, type ContainerWork } from '../../src/orchestrator/planner.js';
import { deployGuard, galeraClusters, recoverCommandOf } from '../../src/recover/guard.js';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import { GALERA, GALERA_VARIABLES } from '../../src/recover/members.js';
import type { ContainerEngine, ContainerInfo, ExecResult } from '../../src/remote/index.js';
import type { ClusterCheck } from '../../src/roles/schema.js';
import type { Catalog } from '../../src/roles/catalog.js';
import { RENAMED, renamedGaleraCatalog } from '../helpers/galera.js';
import { catalog, planFromText, release } from '../helpers/plan.js';

const threeOf = (cat: Catalog) =>
  planDeploy(
    planFromText(generateInventoryYaml({ controllers: 3, computes: 1 }), undefined, release, undefined, cat).plan,
    cat,
  );
const three = threeOf(catalog);
const one = planDeploy(planFromText(generateInventoryYaml({ controllers: 1, computes: 1 })).plan, catalog);
const checks = catalog.provides.clusterChecks;
/** The Galera server container and its query, as roles/services/mariadb.yaml names them. */
const DB = checks.get('mariadb')!.container;
const QUERY = checks.get('mariadb')!.command;
const workIn = (plan: typeof three, node: string, name: string): ContainerWork =>
  plan.steps
    .flatMap((s) => s.nodes.filter((n) => n.node === node).flatMap((n) => n.containers))
    .find((c) => c.name === name)!;
const work = (node: string, name: string): ContainerWork => workIn(three, node, name);

/** A container as Docker inspects it. */
function info(name: string, state: Partial<ContainerInfo['state']>, restartCount = 0): ContainerInfo {
  return {
    id: name,
    name,
    image: 'img',
    imageId: 'sha256:0',
    labels: {},
    state: { status: 'running', running: true, exitCode: 0, startedAt: '', finishedAt: '', oomKilled: false, ...state },
    restartCount,
  };
}

/** One fake node: its containers, their logs, answers to execs in them, and its volume report. */
interface FakeNode {
  containers: Map<string, ContainerInfo>;
  logs: Map<string, string>;
  answer: (container: string, argv: readonly string[]) => ExecResult;
  volume: string;
  execs: { container: string; argv: readonly string[] }[];
}
function node(over: Partial<FakeNode> = {}): FakeNode {
  return {
    containers: new Map(),
    logs: new Map(),
    answer: () => ({ code: 1, stdout: '', stderr: 'ERROR 2002: Can not connect' }),
    volume: 'volume: absent\n',
    execs: [],
    ...over,
  };
}
function access(name: string, n: FakeNode): NodeAccess {
  const docker: Partial<ContainerEngine> = {
    inspectContainer: async (ref) => n.containers.get(ref),
    exec: async (container, argv) => {
      n.execs.push({ container, argv });
      return n.answer(container, argv);
    },
    logs: async (ref) => ({ stdout: n.logs.get(ref) ?? '', stderr: '' }),
  };
  return {
    node: name,
    exec: async () => ({ code: 0, stdout: n.volume, stderr: '' }),
    files: {
      upload: async () => {
        throw new Error('the guard uploads nothing');
      },
    },
    docker: docker as ContainerEngine,
  };
}
function guardFor(
  nodes: Record<string, FakeNode | 'unreachable'>,
  events: StackctlEvent[] = [],
  plan = three,
  cx: ReadonlyMap<string, ClusterCheck> = checks,
) {
  let t = 0;
  return deployGuard(plan, cx, {
    emit: (e) => void events.push(e),
    connect: (name) => {
      const n = nodes[name];
      if (!n) throw new Error(`no fake node ${name}`);
      if (n === 'unreachable')
        throw new StackctlError('E_SSH_CONNECT_TIMEOUT', `${name} (root@192.0.2.9): no SSH session within 10000 ms`);
      return access(name, n);
    },
    now: () => t,
    sleep: async (ms) => void (t += ms),
    run: 'r1',
    inventoryFile: 'site.yaml',
  });
}
async function errorOf(p: Promise<unknown>): Promise<StackctlError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof StackctlError) return e;
    throw e;
  }
  throw new Error('no error');
}

describe('galeraClusters', () => {
  it('three controllers: three members, the bootstrap node the others wait for; one: no cluster (wsrep off)', () => {
    const [c, ...more] = galeraClusters(three, checks);
    expect([c!.service, c!.members.map((m) => m.node), c!.bootstrapNode, more]).toEqual([
      'mariadb',
      ['ctl-0', 'ctl-1', 'ctl-2'],
      'ctl-0',
      [],
    ]);
    expect(galeraClusters(one, checks)).toEqual([]);
  });

  it("the container and the query are the ones the service file's cluster_check names", () => {
    const renamed = renamedGaleraCatalog();
    const [c] = galeraClusters(threeOf(renamed), renamed.provides.clusterChecks);
    expect(c!.members.map((m) => m.name)).toEqual([RENAMED.container, RENAMED.container, RENAMED.container]);
    expect(c!.query[0]).toBe(RENAMED.client);
    // no cluster_check of kind galera: no cluster, whatever the containers are called
    expect(galeraClusters(three, new Map([...checks].filter(([s]) => s !== 'mariadb')))).toEqual([]);
  });

  it('the shipped galera check prints every variable the recovery and status read', () => {
    for (const [service, check] of checks)
      if (check.kind === 'galera')
        for (const v of GALERA_VARIABLES) expect(check.command.at(-1), `${service}: ${v}`).toContain(`'${v}'`);
  });

  it('the recover command names the service only when the service files declare several Galera services', () => {
    expect(recoverCommandOf('site.yaml', 'mariadb', checks)).toBe('stackctl recover galera -i site.yaml');
    const two = new Map([...checks, ['other-db', checks.get('mariadb')!]]);
    expect(recoverCommandOf('site.yaml', 'other-db', two)).toBe(
      'stackctl recover galera -i site.yaml --service other-db',
    );
  });
});

describe('deployGuard: what it covers', () => {
  it('the Galera server container of each member, nothing else; with one server (wsrep off), nothing', () => {
    const g = guardFor({});
    expect(['mariadb', 'memcached', 'keystone', 'haproxy'].map((c) => g.covers(work('ctl-1', c)))).toEqual([
      true,
      false,
      false,
      false,
    ]);
    const w = one.steps.flatMap((s) => s.nodes.flatMap((n) => n.containers)).find((c) => c.name === DB)!;
    expect(
      deployGuard(one, checks, { connect: () => access('ctl-0', node()), now: () => 0, sleep: async () => {} }).covers(
        w,
      ),
    ).toBe(false);
  });

  it("a container it does not cover, left alone and unwell: Docker's health gate alone (restarts not held against it)", async () => {
    const n = node({
      containers: new Map([['memcached', info('memcached', { status: 'restarting', running: true, exitCode: 71 }, 4)]]),
      logs: new Map([['memcached', 'failed to listen on TCP port 11211: Address already in use\n']]),
    });
    const e = await errorOf(guardFor({ 'ctl-0': n }).unchanged(access('ctl-0', n), work('ctl-0', 'memcached')));
    expect(e.code).toBe('E_HEALTH_TIMEOUT');
    expect(e.details.log).toContain('Address already in use');
  });
});

describe('deployGuard: a member left alone but unwell', () => {
  const member = (over: Partial<FakeNode> = {}) =>
    node({
      containers: new Map([[DB, info(DB, { health: 'unhealthy' })]]),
      volume: 'volume: present\ngrastate: uuid: a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f\ngrastate: seqno: -1\n',
      logs: new Map([[DB, 'WSREP: failed to reach primary view: 110 (Connection timed out)\n']]),
      ...over,
    });

  it('healthy by Docker: nothing asked', async () => {
    const n = member({ containers: new Map([[DB, info(DB, { health: 'healthy' })]]) });
    expect(await guardFor({ 'ctl-1': n }).unchanged(access('ctl-1', n), work('ctl-1', DB))).toBe(0);
    expect(n.execs).toEqual([]);
  });

  it('unhealthy by Docker but its healthcheck passes now: up, the others not asked', async () => {
    const n = member({ answer: () => ({ code: 0, stdout: '', stderr: '' }) });
    expect(await guardFor({ 'ctl-1': n }).unchanged(access('ctl-1', n), work('ctl-1', DB))).toBe(0);
    expect(n.execs.map((x) => x.argv)).toEqual([work('ctl-1', DB).definition.healthcheck!.test]);
  });

  it("two members back with data, the third cannot be read: refused with every member's state and --without", async () => {
    const ctl1 = member();
    const ctl2 = member();
    const g = guardFor({ 'ctl-0': 'unreachable', 'ctl-1': ctl1, 'ctl-2': ctl2 });
    const e = await errorOf(g.unchanged(access('ctl-1', ctl1), work('ctl-1', DB)));
    expect(e.code).toBe('E_GALERA_MEMBER_UNREACHABLE');
    expect(e.message).toMatch(/^ {2}ctl-1: .*grastate uuid a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f/m);
    expect(e.hint).toContain("'stackctl recover galera -i site.yaml --without ctl-0'");
    expect(e.details.log).toContain('ctl-1: WSREP: failed to reach primary view');
    // no permit anywhere (and no container started: the fake engine has no startContainer)
    expect([...ctl1.execs, ...ctl2.execs].filter((x) => x.argv.includes(GALERA.permit))).toEqual([]);
  });
});

describe('deployGuard: Galera', () => {
  const waiting = () =>
    node({
      containers: new Map([[DB, info(DB, { health: 'starting' })]]),
      logs: new Map([[DB, 'galera: waiting: no cluster state in /var/lib/mysql and no peer answers\n']]),
      volume: 'volume: present\nschema: mysql\nschema: performance_schema\nschema: sys\n',
      answer: (_c, argv) =>
        argv[0] === 'sh' ? { code: 0, stdout: '', stderr: '' } : { code: 1, stdout: '', stderr: 'ERROR 2002' },
    });

  it('a first deploy: every member read, none holds data: the bootstrap node gets its founding permit', async () => {
    const ctl0 = waiting();
    const events: StackctlEvent[] = [];
    const g = guardFor({ 'ctl-0': ctl0, 'ctl-1': node(), 'ctl-2': node() }, events);
    expect(await g.started(access('ctl-0', ctl0), work('ctl-0', DB))).toBe(1);
    expect(events.map(formatEvent)).toEqual([
      'step 2 ctl-0: cluster galera recovery (no member holds data: founding permit handed to mariadb)',
    ]);
    const permit = ctl0.execs.filter((x) => x.argv[0] === 'sh');
    expect(permit).toHaveLength(1);
    expect(permit[0]!.argv.slice(-2)).toEqual([
      GALERA.permit,
      'deploy run r1: no member holds data (ctl-0, ctl-1, ctl-2 read)',
    ]);
  });

  it('the bootstrap node wiped while the others cannot be read: refused, no permit, the recover command in the hint', async () => {
    const ctl0 = waiting();
    const g = guardFor({ 'ctl-0': ctl0, 'ctl-1': 'unreachable', 'ctl-2': 'unreachable' });
    const e = await errorOf(g.started(access('ctl-0', ctl0), work('ctl-0', DB)));
    expect(e.code).toBe('E_GALERA_MEMBER_UNREACHABLE');
    expect(e.message).toMatch(/ctl-1, ctl-2 could not be read/);
    expect(e.message).toMatch(/^ {2}ctl-0: running, server not answering; .*no data; log: galera: waiting/m);
    expect(e.hint).toContain("'stackctl recover galera -i site.yaml --without ctl-1,ctl-2'");
    expect(ctl0.execs.filter((x) => x.argv[0] === 'sh')).toEqual([]);
  });

  it('a member started while a primary component runs: nothing to do, it joins by itself', async () => {
    const primary = node({
      containers: new Map([[DB, info(DB, { health: 'healthy' })]]),
      volume: 'volume: present\ngrastate: uuid: a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f\ngrastate: seqno: -1\n',
      answer: (_c, argv) =>
        argv.join(' ') === QUERY.join(' ')
          ? { code: 0, stdout: 'wsrep_cluster_status\tPrimary\nwsrep_local_state_comment\tSynced\n', stderr: '' }
          : { code: 1, stdout: '', stderr: '' },
    });
    const ctl1 = waiting();
    const g = guardFor({ 'ctl-0': primary, 'ctl-1': ctl1, 'ctl-2': node() });
    expect(await g.started(access('ctl-1', ctl1), work('ctl-1', DB))).toBe(0);
    expect(ctl1.execs.filter((x) => x.argv[0] === 'sh')).toEqual([]);
  });
});

describe('deployGuard: the Galera server as the service file names it', () => {
  const renamed = renamedGaleraCatalog();
  const plan = threeOf(renamed);
  const server = (n: string) => workIn(plan, n, RENAMED.container);

  it('covers the container its cluster_check names; a first deploy hands that container the permit', async () => {
    const ctl0 = node({
      containers: new Map([[RENAMED.container, info(RENAMED.container, { health: 'starting' })]]),
      logs: new Map([[RENAMED.container, 'galera: waiting: no cluster state in /var/lib/mysql and no peer answers\n']]),
      volume: 'volume: present\nschema: mysql\nschema: performance_schema\nschema: sys\n',
      answer: (_c, argv) =>
        argv[0] === 'sh' ? { code: 0, stdout: '', stderr: '' } : { code: 1, stdout: '', stderr: 'ERROR 2002' },
    });
    const events: StackctlEvent[] = [];
    const g = guardFor(
      { 'ctl-0': ctl0, 'ctl-1': node(), 'ctl-2': node() },
      events,
      plan,
      renamed.provides.clusterChecks,
    );
    expect([server('ctl-1'), workIn(plan, 'ctl-1', 'mariadb_clustercheck')].map((w) => g.covers(w))).toEqual([
      true,
      false,
    ]);
    expect(await g.started(access('ctl-0', ctl0), server('ctl-0'))).toBe(1);
    expect(events.map(formatEvent)).toEqual([
      `step 2 ctl-0: cluster galera recovery (no member holds data: founding permit handed to ${RENAMED.container})`,
    ]);
    // the server was asked with the file's client, in the file's container; the permit went there too
    const asked = ctl0.execs.filter((x) => x.argv[0] !== 'sh');
    expect(asked.length).toBeGreaterThan(0);
    for (const x of asked) expect([x.container, x.argv[0]]).toEqual([RENAMED.container, RENAMED.client]);
    expect(ctl0.execs.filter((x) => x.argv.includes(GALERA.permit)).map((x) => x.container)).toEqual([
      RENAMED.container,
    ]);
  });
});
