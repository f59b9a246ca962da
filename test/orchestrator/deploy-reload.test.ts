/**
 * A file HAProxy re-reads in place (config `reload: true`), on disk but not served, as a deploy
 * killed between its upload and HAProxy's reload leaves it, through executeDeploy against fake
 * nodes: the next deploy finds every file in place and the container's hash unchanged, yet sees
 * through the container's own check (Docker's verdict lags an interval behind) that it does not serve
 * them, and waits for that check to pass, restarting nothing; a check that never passes fails the run
 * with E_RELOAD_TIMEOUT and the container's log.
 */
import { describe, expect, it } from 'vitest';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import { executeDeploy, predict } from '../../src/orchestrator/executor.js';
import type { ContainerEngine } from '../../src/remote/index.js';
import { containerInfo, fakeDeps, fakeNode, isHealthcheck, servicePlan } from './fake-nodes.js';

const { plan, worksOn, configsOn } = servicePlan('haproxy');

/**
 * Nodes whose haproxy runs with the plan's hash, Docker saying healthy, every file in place; on
 * `stale` nodes its health check fails `failures` times before it passes.
 */
function cloud(stale: readonly string[], failures: number) {
  const log: string[] = [];
  const checks = new Map<string, number>();
  const access = (node: string): NodeAccess => {
    const docker: Partial<ContainerEngine> = {
      inspectContainer: async (name) => {
        const w = worksOn(node).find((x) => x.name === name);
        return w && containerInfo(w, { status: 'running', health: 'healthy' });
      },
      imageExists: async () => true,
      exec: async (name, argv) => {
        if (!isHealthcheck(worksOn, node, name, argv)) return { code: 1, stdout: '', stderr: 'unexpected' };
        const n = (checks.get(node) ?? 0) + 1;
        checks.set(node, n);
        return { code: stale.includes(node) && n <= failures ? 1 : 0, stdout: '', stderr: '' };
      },
      stopContainer: async (name) => void log.push(`${node} stop ${name}`),
      removeContainer: async (name) => void log.push(`${node} remove ${name}`),
      createContainer: async (spec) => (log.push(`${node} create ${spec.name}`), spec.name),
      startContainer: async (name) => void log.push(`${node} start ${name}`),
      logs: async (name) => ({ stdout: `${name} on ${node}: the changed configuration is refused\n`, stderr: '' }),
    };
    return fakeNode(node, configsOn, docker, (dest) => (log.push(`${node} upload ${dest}`), 1));
  };
  return { log, checks, deps: fakeDeps(access) };
}

describe('a file HAProxy reloads, on disk but not served (a deploy killed after its upload)', () => {
  it("is seen through the container's own check, waited for until served, and nothing is restarted", async () => {
    const c = cloud(['ctl-1'], 3);
    const p = await predict(plan, c.deps);
    expect(p.rows.filter((r) => r.name === 'haproxy').map((r) => [r.node, r.action, r.detail])).toEqual([
      ['ctl-0', 'unchanged', ''],
      ['ctl-1', 'unchanged', 'does not serve the files it reloads yet (a reload under way, or refused: see its log)'],
      ['ctl-2', 'unchanged', ''],
    ]);
    expect(p.plan.phases.flatMap((ph) => ph.steps.flatMap((s) => s.actions))).toEqual([
      { kind: 'health', node: 'ctl-1', services: ['haproxy'], unwell: ['haproxy'] },
    ]);
    const fresh = cloud(['ctl-1'], 3);
    const r = await executeDeploy(plan, fresh.deps, { failureBudgetPercent: 100 });
    expect(r.ok, JSON.stringify(r.failures)).toBe(true);
    // ctl-1: one failing check in the observation, two more in the gate, then the passing one
    expect(fresh.checks.get('ctl-1')).toBe(4);
    expect(fresh.log).toEqual([]);
  });

  it('one that never serves them fails the run with E_RELOAD_TIMEOUT and its log', async () => {
    const c = cloud(['ctl-2'], Infinity);
    const r = await executeDeploy(plan, c.deps, { failureBudgetPercent: 100 });
    expect(r.ok).toBe(false);
    expect(r.failures.map((f) => ({ node: f.node, code: f.code, log: f.log }))).toEqual([
      { node: 'ctl-2', code: 'E_RELOAD_TIMEOUT', log: expect.stringContaining('the changed configuration is refused') },
    ]);
    expect(c.log).toEqual([]);
  });
});
