/**
 * Fake nodes for executeDeploy tests: the deploy plan of one service on a 3-controller cloud, each
 * node's containers as Docker would describe them (labelled with the plan's hash), its config files
 * in place (what `sha256sum` answers), and executor dependencies with a clock that sleeping advances.
 * Each test supplies the Docker calls its story needs.
 */
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import type { ExecutorDeps } from '../../src/orchestrator/executor.js';
import { MemoryJournal } from '../../src/orchestrator/journal.js';
import { planDeploy, type ContainerWork, type DeployPlan } from '../../src/orchestrator/planner.js';
import { LABEL } from '../../src/orchestrator/state.js';
import type { ContainerEngine, ContainerInfo } from '../../src/remote/index.js';
import { catalog, planFromText } from '../helpers/plan.js';

/** The deploy plan of `service` on 3 controllers and 1 compute, and what it puts on each node. */
export function servicePlan(service: string) {
  const plan: DeployPlan = planDeploy(
    planFromText(generateInventoryYaml({ controllers: 3, computes: 1 })).plan,
    catalog,
    { services: [service] },
  );
  const worksOn = (node: string): ContainerWork[] =>
    plan.steps.flatMap((st) => st.nodes.filter((n) => n.node === node).flatMap((n) => n.containers));
  const configsOn = (node: string) =>
    plan.steps.flatMap((st) => st.nodes.filter((n) => n.node === node).flatMap((n) => n.configs));
  return { plan, worksOn, configsOn };
}

/** How a fake container is doing, as `docker inspect` says. */
export interface FakeState {
  readonly status: 'running' | 'restarting' | 'exited';
  readonly health?: 'starting' | 'healthy' | 'unhealthy';
}

/** Docker's description of the plan's container `w` in `state`, labelled with the plan's hash. */
export function containerInfo(w: ContainerWork, state: FakeState): ContainerInfo {
  return {
    id: w.name,
    name: w.name,
    image: w.image,
    imageId: '',
    labels: { [LABEL.hash]: w.hash },
    state: {
      status: state.status,
      running: state.status !== 'exited',
      exitCode: state.status === 'exited' ? 137 : 0,
      startedAt: '',
      finishedAt: '',
      oomKilled: false,
      ...(state.health ? { health: state.health } : {}),
    },
    restartCount: state.status === 'restarting' ? 7 : 0,
  };
}

/** Whether `argv` is the plan's health check of container `name` on `node`. */
export function isHealthcheck(
  worksOn: (node: string) => ContainerWork[],
  node: string,
  name: string,
  argv: readonly string[],
): boolean {
  const hc = worksOn(node).find((w) => w.name === name)?.definition.healthcheck?.test;
  return hc !== undefined && argv.join(' ') === hc.join(' ');
}

/** A node whose config files all match the plan, with `docker` for its engine; uploads go to `upload`. */
export function fakeNode(
  node: string,
  configsOn: ReturnType<typeof servicePlan>['configsOn'],
  docker: Partial<ContainerEngine>,
  upload: (dest: string) => number = () => 0,
): NodeAccess {
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
    files: { upload: async (_source, dest) => upload(dest) },
    docker: docker as ContainerEngine,
  };
}

/** Executor dependencies over `connect`, with a fake clock that `sleep` advances. */
export function fakeDeps(connect: (node: string) => NodeAccess, extra: Partial<ExecutorDeps> = {}): ExecutorDeps {
  let t = 0;
  return {
    connect,
    rendered: new Map(),
    journal: new MemoryJournal(),
    emit: () => undefined,
    catalog,
    clusterCheck: async () => 'not asked',
    now: () => t,
    sleep: async (ms) => void (t += ms),
    ...extra,
  };
}
