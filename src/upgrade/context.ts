/**
 * What the upgrade runner gives each action: the nodes, the current and the
 * target deploy plans, the cloud's admin credentials, one-off containers, a
 * clock and an event sink. The runner (runner.ts) builds one per run; the
 * prechecks (prechecks.ts) and the hooks (run-hooks.ts, evacuate.ts) only
 * read through it, so tests can hand them a context of their own.
 */
import type { StackctlEvent } from '../core/events.js';
import type { Secret } from '../core/secret.js';
import type { Inventory } from '../inventory/schema.js';
import type { NodeAccess } from '../orchestrator/executor.js';
import type { ContainerWork, DeployPlan } from '../orchestrator/planner.js';
import type { Release } from '../roles/schema.js';
import type { UpgradeAction, UpgradePlan } from './model.js';

/** The result of a one-off container (migration command, upgrade check). */
export interface OneOffResult {
  readonly code: number;
  /** The end of its log (stdout and stderr). */
  readonly log: string;
  /**
   * Set when this run had started it before it was killed: found still `running` (and waited
   * for), or found `finished` with exit status 0 (the migration is done: not run again).
   */
  readonly adopted?: 'running' | 'finished';
}

/** Where the OpenStack client runs, with admin credentials in its environment (never in argv). */
export interface CloudClient {
  /**
   * Run `openstack …` (argv without the leading `openstack`) in a running
   * container that carries the client (keystone, else nova_api) on a
   * controller that answers; resolves with stdout, rejects with a
   * StackctlError naming the command and the end of stderr.
   */
  openstack(args: readonly string[], opts?: { readonly timeoutMs?: number }): Promise<string>;
}

/** Everything an upgrade action may use. */
export interface UpgradeContext {
  readonly inventory: Inventory;
  /** Path of the inventory file (hooks and messages name it). */
  readonly inventoryFile: string;
  readonly plan: UpgradePlan;
  readonly current: Release;
  readonly target: Release;
  /** The deploy plan of the running release: container names, images and hashes as they are now. */
  readonly currentDeploy: DeployPlan;
  /** The deploy plan of the target release: what every container becomes. */
  readonly targetDeploy: DeployPlan;
  /** node -> dest -> rendered content of the target (holds secrets; only uploaded). */
  readonly targetRendered: ReadonlyMap<string, ReadonlyMap<string, string>>;
  /** A node's shell, files and Docker engine (one SSH connection per node, cached). */
  connect(node: string): NodeAccess;
  /** Service secrets by name. */
  secret(name: string): Secret | undefined;
  /** The OpenStack client with the cloud's admin credentials. */
  readonly cloud: CloudClient;
  /** The target plan's ContainerWork of a container on a node (undefined when the node does not run it). */
  targetWork(node: string, container: string): ContainerWork | undefined;
  /** The current plan's ContainerWork of a container on a node. */
  currentWork(node: string, container: string): ContainerWork | undefined;
  /**
   * Run a one-off container on `node` that borrows `work`'s definition (volumes,
   * configs, network) with `image` and `command`; removes it afterwards. Bounded by
   * `timeoutMs` (default 10 min).
   */
  oneOff(
    node: string,
    work: ContainerWork,
    image: string,
    command: readonly string[],
    opts?: { readonly timeoutMs?: number; readonly name?: string },
  ): Promise<OneOffResult>;
  readonly emit: (e: StackctlEvent) => void;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  /** Set once the operator asked to stop (SIGINT): long waits end early. */
  readonly signal?: AbortSignal;
  /** The upgrade run's id (names the folder of its backups). */
  readonly run?: string;
  /** service -> path of its latest database backup on its node, filled by the backup action. */
  readonly backups?: Map<string, string>;
}

/**
 * Performs one action; resolves with a short text for the progress line and
 * the report, rejects with a StackctlError (code, message naming node and
 * service, hint) when the action failed.
 */
export type ActionHandler<A extends UpgradeAction = UpgradeAction> = (
  action: A,
  ctx: UpgradeContext,
) => Promise<string>;

/** One handler per kind of action. */
export type ActionHandlers = {
  readonly [K in UpgradeAction['kind']]: ActionHandler<Extract<UpgradeAction, { kind: K }>>;
};
