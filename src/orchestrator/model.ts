/**
 * The converge engine's plan as data: deploy and upgrade are both a list of
 * phases, each a list of steps, each a barrier whose actions may run in
 * parallel (DESIGN.md 6: one engine, one journal, one handler per action kind).
 *
 * `deploy` converges the nodes to the plan of the inventory's release
 * (converge.ts turns what it observed into phases); `upgrade` converges them
 * to another release's plan (src/upgrade/planner.ts diffs the two plans and
 * adds the services' migration and evacuation rules). Both are run by
 * engine.ts. Nothing here does I/O.
 */

/** One container of a target plan that an action puts in place (its hash covers image, options and configs). */
export interface TargetContainer {
  readonly name: string;
  readonly service: string;
  /** The target image reference. */
  readonly image: string;
  /** The target container hash (the `org.stackctl.hash` label it gets). */
  readonly hash: string;
  /** What runs there now, when the planner knows: the image the container is moved from. */
  readonly from?: string;
}

/** A declared backup of a service file's `upgrade.backup`: the command's standard output is the file. */
export interface BackupCommand {
  /** The file's name, after the service and the time: `<service>-<time>-<name>`. */
  readonly name: string;
  /** The running container of the service the command runs in (`docker exec`). */
  readonly container: string;
  readonly command: readonly string[];
}

/** Which database migration command of a service's upgrade section. */
export type MigrationStage = 'expand' | 'migrate' | 'contract' | 'offline';

/**
 * The actions the engine performs on nodes, for deploy and upgrade alike. Every kind
 * has one handler (handlers.ts), one formatter and one journal subject (format.ts).
 */
export type NodeAction =
  | {
      /** A service's preparation of the node's own OS (modules, devices, host units). */
      readonly kind: 'host';
      readonly node: string;
      readonly services: readonly string[];
    }
  | {
      /** Images the node lacks, pulled before anything of the step stops. */
      readonly kind: 'pull';
      readonly node: string;
      readonly images: readonly string[];
    }
  | {
      /**
       * Converge the node to the target plan for these services: their config files uploaded where
       * their content differs, then each container created, recreated or started as its hash says,
       * and health gated. Re-entrant: what is in place is left alone.
       */
      readonly kind: 'ensure';
      readonly node: string;
      readonly services: readonly string[];
      readonly containers: readonly TargetContainer[];
      /**
       * After health, wait until the service answers through the load balancer's internal VIP
       * (the services started next need it). Off in rolling rounds: a drained backend gets no
       * requests there, and `enable` waits for the load balancer's own check instead.
       */
      readonly frontendGate: boolean;
    }
  | {
      /** Once per cloud, on the service's bootstrap node, when its input hash changed. */
      readonly kind: 'run-once';
      readonly node: string;
      readonly service: string;
      /** database, task, register or resources. */
      readonly work: 'database' | 'task' | 'register' | 'resources';
      readonly name: string;
    }
  | { readonly kind: 'drain'; readonly node: string; readonly frontends: readonly string[] }
  | { readonly kind: 'enable'; readonly node: string; readonly frontends: readonly string[] }
  | {
      readonly kind: 'stop';
      readonly service: string;
      readonly node: string;
      readonly containers: readonly string[];
      /** Named volumes removed once the containers are gone (a distribution change resets them). */
      readonly resetVolumes?: readonly string[];
    }
  | {
      /** Every target container of the services on the node is healthy. */
      readonly kind: 'health';
      readonly node: string;
      readonly services: readonly string[];
      /**
       * Containers among them the run leaves alone that it found unwell (restarting, health check
       * failing): a deploy's guard, where it covers them, looks at them in place of the health gate.
       */
      readonly unwell?: readonly string[];
    }
  | {
      /** The service's cluster (its file's `cluster_check`) has every member back and healthy. */
      readonly kind: 'cluster-check';
      readonly service: string;
      readonly nodes: readonly string[];
    }
  | {
      /**
       * A service's data saved before it moves: its SQL databases dumped by the database service
       * (on the database node), or the commands its file declares (`upgrade.backup`, run in its old
       * containers on `node`), each one's standard output a file.
       */
      readonly kind: 'backup';
      readonly service: string;
      readonly node: string;
      readonly databases: readonly string[];
      readonly commands?: readonly BackupCommand[];
    }
  | {
      readonly kind: 'migrate';
      readonly stage: MigrationStage;
      readonly service: string;
      /** The bootstrap node of the service: migrations run once. */
      readonly node: string;
      /** The container whose definition (volumes, config) the one-off run borrows. */
      readonly container: string;
      /** Always the target image: the new code migrates. */
      readonly image: string;
      readonly command: readonly string[];
    };
export type NodeActionKind = NodeAction['kind'];

/** What every action has: a kind (the runner needs nothing else of it). */
export interface AnyAction {
  readonly kind: string;
}

/** A barrier: its actions may run in parallel; the next step starts when all of them ended. */
export interface Step<A extends AnyAction = NodeAction> {
  readonly title: string;
  readonly actions: readonly A[];
  /** At most this many lanes (nodes) work on the step at once (unset: every lane). */
  readonly concurrency?: number;
}

/** A declared stop of the run: it waits for `--continue`. */
export interface Pause {
  readonly reason: string;
}

/**
 * How a phase fares with a failed action:
 * - `stop`: the run stops after the step that failed (a rolling restart never goes on to the
 *   next node, a migration never runs after a failed one);
 * - `budget`: the failed node is left out of the rest of the run and the others go on; at the
 *   end of the phase the failure budget decides whether the run goes on.
 */
export type OnFailure = 'stop' | 'budget';

/** How the APIs of the services a phase restarts fare (printed with the plan). */
export type Availability =
  /** behind the load balancer, always up: one node at a time */
  | 'rolling'
  /** an offline migration: down on every node for the window */
  | 'window'
  /** one node serves it: down while that node restarts */
  | 'single-node'
  /** every node restarts together */
  | 'all-at-once';

/** One named phase. */
export interface Phase<A extends AnyAction = NodeAction> {
  /** Stable id, used by --resume and in the journal: `step:2:apply`, `control:keystone`, `batch:2`... */
  readonly id: string;
  /** What kind of phase, for reports (`host`, `pull`, `apply`, `roll`, `run-once`, `precheck`, `control`, `batches`...). */
  readonly kind: string;
  readonly title: string;
  /** The deploy step (1-5) a deploy phase belongs to. */
  readonly deployStep?: number;
  /** Services whose containers the phase changes. */
  readonly services: readonly string[];
  readonly availability?: Availability;
  /** Stop before this phase and wait for --continue. */
  readonly pauseBefore?: Pause;
  readonly onFailure: OnFailure;
  readonly steps: readonly Step<A>[];
}

/** Nodes an action concerns: the failure budget and the lanes read it. */
export function nodesOfAction(a: AnyAction): readonly string[] {
  const x = a as { node?: unknown; nodes?: unknown; batch?: unknown };
  if (typeof x.node === 'string') return [x.node];
  if (Array.isArray(x.nodes)) return x.nodes as string[];
  if (Array.isArray(x.batch)) return x.batch as string[];
  return [];
}

/** The lane an action runs in: actions of one node run in plan order; undefined: a lane of its own. */
export function laneOf(a: AnyAction): string | undefined {
  const x = a as { node?: unknown };
  return typeof x.node === 'string' ? x.node : undefined;
}
