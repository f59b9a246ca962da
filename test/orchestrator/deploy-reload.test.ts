/**
 * A file HAProxy re-reads in place (config `reload: true`), on disk but not served, as a deploy
 * killed between its upload and HAProxy's reload leaves it, through executeDeploy against fake
 * nodes: the next deploy finds every file in place and the container's hash unchanged, yet sees
 * through the container's own check (Docker's verdict lags an interval behind) that it does not serve
 * them, and waits for that check to pass, restarting nothing; a check that never passes fails the run
 * with E_RELOAD_TIMEOUT and the container's log.
 */
import { describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import { executeDeploy, predict, type ExecutorDeps } from '../../src/orchestrator/executor.js';
import { MemoryJournal } from '../../src/orchestrator/journal.js';
import { planDeploy, type ContainerWork } from '../../src/orchestrator/planner.js';
import { LABEL } from '../../src/orchestrator/state.js';
import type { ContainerEngine } from '../../src/remote/index.js';
import { catalog, planFromText } from '../helpers/plan.js';

const plan = planDeploy(planFromText(generateInventoryYaml({ controllers: 3, computes: 1 })).plan, catalog, {
  services: ['haproxy'],
});
const worksOn = (node: string): ContainerWork[] =>
  plan.steps.flatMap((st) => st.nodes.filter((n) => n.node === node).flatMap((n) => n.containers));
const configsOn = (node: string) =>
  plan.steps.flatMap((st) => st.nodes.filter((n) => n.node === node).flatMap((n) => n.configs));

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
        return (
          w && {
            id: name,
            name,
            image: w.image,
            imageId: '',
            labels: { [LABEL.hash]: w.hash },
            state: {
              status: 'running',
              running: true,
              exitCode: 0,
              startedAt: '',
              finishedAt: '',
              oomKilled: false,
              health: 'healthy',
            },
            restartCount: 0,
          }
        );
      },
      imageExists: async () => true,
      exec: async (name, argv) => {
        const hc = worksOn(node).find((w) => w.name === name)?.definition.healthcheck?.test;
        if (!hc || argv.join(' ') !== hc.join(' ')) return { code: 1, stdout: '', stderr: 'unexpected' };
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
    return {
      node,
      exec: async (command) => {
        const argv = typeof command === 'string' ? [command] : command;
        if (argv[0] === 'sha256sum')
          return {
            code: 0,
            stdout: configsOn(node)
              .map((c) => `${c.sha256}  ${c.dest}\n`)
              .join(''),
            stderr: '',
          };
        return { code: 1, stdout: '', stderr: 'no such file' };
      },
      files: { upload: async (_s, dest) => (log.push(`${node} upload ${dest}`), 1) },
      docker: docker as ContainerEngine,
    };
  };
  let t = 0;
  const deps: ExecutorDeps = {
    connect: access,
    rendered: new Map(),
    journal: new MemoryJournal(),
    emit: () => undefined,
    catalog,
    clusterCheck: async () => 'not asked',
    now: () => t,
    sleep: async (ms) => void (t += ms),
  };
  return { log, checks, deps };
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
