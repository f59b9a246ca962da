/**
 * The deploy's guard on the engine, through executeDeploy against fake nodes (the guard itself,
 * src/recover/guard.ts, has its own tests): a container the deploy leaves alone but finds unwell goes
 * to the guard in place of the health gate when the guard covers it, and its failure names the
 * container's health path with the guard's log; a container the deploy starts goes to the guard
 * before its health gate; a container still in its start period whose health check passes is well;
 * without a guard, the health gate alone.
 */
import { describe, expect, it } from 'vitest';
import { RemoteError } from '../../src/core/errors.js';
import type { DeployGuard, NodeAccess } from '../../src/orchestrator/context.js';
import { executeDeploy, predict, type ExecutorDeps } from '../../src/orchestrator/executor.js';
import type { ContainerEngine } from '../../src/remote/index.js';
import { containerInfo, fakeDeps, fakeNode, isHealthcheck, servicePlan, type FakeState } from './fake-nodes.js';

const { plan, worksOn, configsOn } = servicePlan('mariadb');

/** What a container looks like to Docker on a fake node; its health check passes when `passes`. */
interface FakeContainer extends FakeState {
  passes: boolean;
}

/** Fake nodes running the plan's mariadb containers (labelled with the plan's hash, configs in place). */
function cloud(state: Record<string, Record<string, FakeContainer>>) {
  const log: string[] = [];
  const access = (node: string): NodeAccess => {
    const containers = state[node]!;
    const docker: Partial<ContainerEngine> = {
      inspectContainer: async (name) => {
        const c = containers[name];
        const w = worksOn(node).find((x) => x.name === name);
        return c && w ? containerInfo(w, c) : undefined;
      },
      imageExists: async () => true,
      exec: async (name, argv) => {
        if (!isHealthcheck(worksOn, node, name, argv)) return { code: 1, stdout: '', stderr: 'unexpected' };
        log.push(`${node} healthcheck ${name}`);
        return { code: containers[name]?.passes ? 0 : 1, stdout: '', stderr: '' };
      },
      startContainer: async (name) => {
        log.push(`${node} start ${name}`);
        containers[name] = { status: 'running', health: 'starting', passes: true };
      },
      logs: async (name) => ({ stdout: `${name} on ${node}: its last words\n`, stderr: '' }),
    };
    return fakeNode(node, configsOn, docker);
  };
  const guard = (fail?: { code: string; when: 'started' | 'unchanged' }): DeployGuard => ({
    covers: (w) => w.name === 'mariadb',
    started: async (_a, w) => {
      log.push(`${w.node} guard started ${w.name}`);
      if (fail?.when === 'started') throw new RemoteError(fail.code, `${w.node}: the cluster says no`);
      return 1;
    },
    unchanged: async (_a, w) => {
      log.push(`${w.node} guard unchanged ${w.name}`);
      if (fail?.when === 'unchanged')
        throw new RemoteError(fail.code, `Galera: ${w.node} cannot join`, {
          hint: 'stackctl recover galera -i site.yaml --without ctl-0',
          details: { log: `${w.node}: galera: waiting` },
        });
      return 0;
    },
  });
  const deps = (g?: DeployGuard): ExecutorDeps => fakeDeps(access, g ? { guard: g } : {});
  return { log, guard, deps };
}

const well = (): FakeContainer => ({ status: 'running', health: 'healthy', passes: true });

describe("the deploy guard on the engine's health gate and container start", () => {
  it('a left-alone member restarting or failing its check goes to the guard; one in its start period that passes does not', async () => {
    const c = cloud({
      'ctl-0': { mariadb: { status: 'running', health: 'starting', passes: true }, mariadb_clustercheck: well() },
      'ctl-1': { mariadb: { status: 'running', health: 'starting', passes: false }, mariadb_clustercheck: well() },
      'ctl-2': { mariadb: { status: 'restarting', passes: false }, mariadb_clustercheck: well() },
    });
    const p = await predict(plan, c.deps());
    expect(p.rows.filter((r) => r.name === 'mariadb').map((r) => [r.node, r.action, r.detail])).toEqual([
      ['ctl-0', 'unchanged', ''],
      ['ctl-1', 'unchanged', 'health check not passed yet'],
      ['ctl-2', 'unchanged', 'restarting (7 restart(s))'],
    ]);
    expect(p.plan.phases.flatMap((ph) => ph.steps.flatMap((s) => s.actions))).toEqual([
      { kind: 'health', node: 'ctl-1', services: ['mariadb'], unwell: ['mariadb'] },
      { kind: 'health', node: 'ctl-2', services: ['mariadb'], unwell: ['mariadb'] },
    ]);

    c.log.length = 0;
    const r = await executeDeploy(plan, c.deps(c.guard({ code: 'E_GALERA_MEMBER_UNREACHABLE', when: 'unchanged' })), {
      failureBudgetPercent: 100,
    });
    expect(r.ok).toBe(false);
    expect(c.log.filter((l) => l.includes('guard')).sort()).toEqual([
      'ctl-1 guard unchanged mariadb',
      'ctl-2 guard unchanged mariadb',
    ]);
    expect(
      r.failures.map((f) => ({ node: f.node, path: f.path, code: f.code, class: f.class, hint: f.hint, log: f.log })),
    ).toEqual(
      ['ctl-1', 'ctl-2'].map((n) => ({
        node: n,
        path: `step 2/${n}/mariadb/health`,
        code: 'E_GALERA_MEMBER_UNREACHABLE',
        class: 'hard',
        hint: 'stackctl recover galera -i site.yaml --without ctl-0',
        log: `${n}: galera: waiting`,
      })),
    );
  });

  it('a member the guard finds well again: the deploy is done, nothing started', async () => {
    const c = cloud({
      'ctl-0': { mariadb: well(), mariadb_clustercheck: well() },
      'ctl-1': { mariadb: { status: 'running', health: 'unhealthy', passes: false }, mariadb_clustercheck: well() },
      'ctl-2': { mariadb: well(), mariadb_clustercheck: well() },
    });
    const r = await executeDeploy(plan, c.deps(c.guard()));
    expect([r.ok, r.failures]).toEqual([true, []]);
    expect(c.log.filter((l) => l.includes('guard') || l.includes('start'))).toEqual(['ctl-1 guard unchanged mariadb']);
  });

  it('a member the deploy starts goes to the guard after the start and before its health gate', async () => {
    const c = cloud({
      'ctl-0': { mariadb: well(), mariadb_clustercheck: well() },
      'ctl-1': { mariadb: { status: 'exited', passes: false }, mariadb_clustercheck: well() },
      'ctl-2': { mariadb: well(), mariadb_clustercheck: well() },
    });
    const r = await executeDeploy(plan, c.deps(c.guard()));
    expect([r.ok, r.failures]).toEqual([true, []]);
    expect(c.log.filter((l) => l.startsWith('ctl-1'))).toEqual([
      'ctl-1 start mariadb',
      'ctl-1 guard started mariadb',
      'ctl-1 healthcheck mariadb',
    ]);
  });

  it('the guard refusing a member the deploy started: a hard failure at the start, its health not waited for', async () => {
    const c = cloud({
      'ctl-0': { mariadb: well(), mariadb_clustercheck: well() },
      'ctl-1': { mariadb: { status: 'exited', passes: false }, mariadb_clustercheck: well() },
      'ctl-2': { mariadb: well(), mariadb_clustercheck: well() },
    });
    const r = await executeDeploy(plan, c.deps(c.guard({ code: 'E_GALERA_NO_DATA', when: 'started' })));
    expect(r.ok).toBe(false);
    expect(r.failures.map((f) => [f.path, f.code, f.class, f.message])).toEqual([
      ['step 2/ctl-1/mariadb/start', 'E_GALERA_NO_DATA', 'hard', 'ctl-1: the cluster says no'],
    ]);
    expect(c.log.filter((l) => l.startsWith('ctl-1'))).toEqual(['ctl-1 start mariadb', 'ctl-1 guard started mariadb']);
  });

  it('without a guard (or for a container it does not cover), the health gate alone: its deadline, then its log', async () => {
    const c = cloud({
      'ctl-0': { mariadb: well(), mariadb_clustercheck: well() },
      'ctl-1': {
        mariadb: { status: 'restarting', passes: false },
        mariadb_clustercheck: { status: 'running', health: 'unhealthy', passes: false },
      },
      'ctl-2': { mariadb: well(), mariadb_clustercheck: well() },
    });
    const r = await executeDeploy(plan, c.deps());
    expect(r.failures.map((f) => [f.path.split('/')[1], f.code, f.log?.trim()]).sort()).toEqual([
      ['ctl-1', 'E_HEALTH_TIMEOUT', expect.stringMatching(/on ctl-1: its last words/)],
    ]);
    expect(c.log.some((l) => l.includes('guard'))).toBe(false);
  });
});
