/**
 * In-memory fakes for the engine's tests on upgrade plans: a context whose nodes are
 * maps of running containers, and a handlers table that records every call
 * and can be told to fail.
 */
import { StackctlError } from '../../src/core/errors.js';
import type { StackctlEvent } from '../../src/core/events.js';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import type { ContainerWork, DeployPlan } from '../../src/orchestrator/planner.js';
import type { ContainerInfo } from '../../src/remote/index.js';
import type { Release } from '../../src/roles/schema.js';
import type { ActionHandler, ActionHandlers, UpgradeContext } from '../../src/upgrade/context.js';
import { subjectOf } from '../../src/upgrade/journal.js';
import type { UpgradeAction, UpgradePhase, UpgradePlan } from '../../src/upgrade/model.js';

/** A container as the fake Docker shows it. */
export interface FakeContainer {
  image: string;
  running: boolean;
}

/** node -> container name -> state. */
export type FakeCloud = Map<string, Map<string, FakeContainer>>;

/** A NodeAccess whose Docker engine only answers inspectContainer, from `cloud`. */
function fakeAccess(node: string, cloud: FakeCloud): NodeAccess {
  const unused = (): never => {
    throw new Error(`the fake node ${node} does not do that`);
  };
  return {
    node,
    exec: async () => unused(),
    files: { upload: async () => unused() },
    docker: {
      where: node,
      inspectContainer: async (name: string): Promise<ContainerInfo | undefined> => {
        const c = cloud.get(node)?.get(name);
        if (!c) return undefined;
        return {
          id: name,
          name,
          image: c.image,
          imageId: `sha256:${c.image}`,
          labels: {},
          state: {
            status: c.running ? 'running' : 'exited',
            running: c.running,
            exitCode: 0,
            startedAt: '',
            finishedAt: '',
            oomKilled: false,
          },
          restartCount: 0,
        };
      },
    } as unknown as NodeAccess['docker'],
  };
}

/** One call of a fake handler. */
export interface Call {
  readonly kind: UpgradeAction['kind'];
  readonly subject: string;
  readonly at: number;
}

/** A handlers table that records calls (with a logical clock) and fails where told. */
export function recordingHandlers(
  opts: {
    /** `kind subject` pairs that fail with E_FAKE (optionally naming the failed nodes). */
    fail?: Map<string, readonly string[] | undefined>;
    /** A swap moves the node's containers of the fake cloud to the target image. */
    cloud?: FakeCloud;
    /** How long (logical ticks) an action takes, to watch the barrier. */
    ticks?: (a: UpgradeAction) => number;
  } = {},
): { handlers: ActionHandlers; calls: Call[]; spans: { kind: string; subject: string; from: number; to: number }[] } {
  const calls: Call[] = [];
  const spans: { kind: string; subject: string; from: number; to: number }[] = [];
  let clock = 0;
  const handler: ActionHandler = async (a) => {
    const from = ++clock;
    calls.push({ kind: a.kind, subject: subjectOf(a), at: from });
    for (let i = 0; i < (opts.ticks?.(a) ?? 0); i++) await Promise.resolve();
    const key = `${a.kind} ${subjectOf(a)}`;
    if (opts.fail?.has(key)) {
      const nodes = opts.fail.get(key);
      throw new StackctlError('E_FAKE', `${key} failed`, {
        hint: 'fix the fake',
        details: { ...(nodes ? { nodes } : {}), log: 'last line of the log' },
      });
    }
    if (a.kind === 'ensure' && opts.cloud) {
      for (const c of a.containers) opts.cloud.get(a.node)?.set(c.name, { image: c.image, running: true });
    }
    if (a.kind === 'stop' && opts.cloud) {
      for (const c of a.containers) opts.cloud.get(a.node)?.delete(c);
    }
    spans.push({ kind: a.kind, subject: subjectOf(a), from, to: ++clock });
    return a.kind === 'backup' ? `${a.node}:/var/lib/stackctl/backups/run/${a.service}.sql.gz` : `${a.kind} ok`;
  };
  const kinds: UpgradeAction['kind'][] = [
    'check-reachable',
    'check-healthy',
    'cluster-check',
    'check-images',
    'check-capacity',
    'check-service',
    'pull',
    'hook',
    'drain',
    'ensure',
    'stop',
    'host',
    'run-once',
    'health',
    'enable',
    'backup',
    'migrate',
  ];
  return {
    handlers: Object.fromEntries(kinds.map((k) => [k, handler])) as unknown as ActionHandlers,
    calls,
    spans,
  };
}

/** A ContainerWork of the target plan, with only what the runner reads. */
export function work(node: string, service: string, name: string, image: string): ContainerWork {
  return { node, service, name, image, step: 4 } as unknown as ContainerWork;
}

/** A deploy plan holding these containers (one step). */
export function deployPlanOf(works: readonly ContainerWork[]): DeployPlan {
  const nodes = [...new Set(works.map((w) => w.node))];
  return {
    cloud: 'lab',
    steps: [
      {
        step: 4,
        title: 'services',
        nodes: nodes.map((node) => ({
          node,
          role: 'controller',
          host: [],
          configs: [],
          containers: works.filter((w) => w.node === node),
          images: [],
        })),
        runOnce: [],
      },
    ],
    unsupported: [],
  };
}

/** A plan made of these phases (update zed -> zed-update). */
export function planOf(phases: readonly UpgradePhase[], maxFailPercent = 0): UpgradePlan {
  const side = { release: 'zed', openstack: 'zed', series: '2022.2', suite: 'bookworm' };
  return {
    cloud: 'lab',
    kind: 'update',
    from: side,
    to: { ...side, release: 'zed-update' },
    releasesAhead: 0,
    options: { batch: 1, pauseAt: 'never', maxFailPercent, canary: false },
    changes: [],
    unchanged: [],
    phases,
    warnings: [],
  };
}

/** A context over the fake cloud. */
export function fakeContext(
  plan: UpgradePlan,
  opts: { cloud?: FakeCloud; targetDeploy?: DeployPlan; inventoryFile?: string } = {},
): { ctx: UpgradeContext; events: StackctlEvent[] } {
  const cloud = opts.cloud ?? new Map();
  const events: StackctlEvent[] = [];
  const empty: DeployPlan = { cloud: 'lab', steps: [], unsupported: [] };
  let t = 0;
  const ctx: UpgradeContext = {
    services: { clusterChecks: new Map(), agents: new Map(), networkAgents: new Map() },
    // the lab's plain-HTTP registry (cloud.registry_insecure)
    inventory: { cloud: { registry_insecure: true } } as UpgradeContext['inventory'],
    inventoryFile: opts.inventoryFile ?? '/nonexistent/inv.yaml',
    registry: { scheme: 'http' },
    plan,
    current: { name: 'zed' } as Release,
    target: { name: 'zed-update' } as Release,
    currentDeploy: empty,
    targetDeploy: opts.targetDeploy ?? empty,
    targetRendered: new Map(),
    connect: (node) => fakeAccess(node, cloud),
    secret: () => undefined,
    cloud: { openstack: async () => '' },
    targetWork: () => undefined,
    currentWork: () => undefined,
    oneOff: async () => ({ code: 0, log: '' }),
    emit: (e) => events.push(e),
    now: () => (t += 10),
    sleep: async () => undefined,
  };
  return { ctx, events };
}

/** `base` (zed-update in the tests) with new OVN images too, as a rebuilt ovn-host / ovn-central package would give. */
export function withNewOvnImages(base: Release, name = 'zed-ovn'): Release {
  return {
    ...base,
    name,
    images: {
      ...base.images,
      'ovn-controller': { ...base.images['ovn-controller']!, tag: 'zed-ovn-1' },
      'ovn-central': { ...base.images['ovn-central']!, tag: 'zed-ovn-1' },
    },
  };
}
