/**
 * What an upgrade's actions get: the engine's context (nodes, the current and
 * the target deploy plans, one-off containers, a clock and an event sink) and
 * what only an upgrade has: its plan, the two releases, the inventory and the
 * cloud's admin client. The CLI builds one per run; the prechecks
 * (prechecks.ts) and the hooks (run-hooks.ts, evacuate.ts) only read through
 * it, so tests can hand them a context of their own.
 */
import type { Inventory } from '../inventory/schema.js';
import type { EngineContext } from '../orchestrator/context.js';
import type { Handler, Handlers } from '../orchestrator/engine.js';
import type { Release } from '../roles/schema.js';
import type { UpgradeAction, UpgradePlan } from './model.js';

export type { NodeAccess, OneOffResult } from '../orchestrator/context.js';

/** Where the OpenStack client runs, with admin credentials in its environment (never in argv). */
export interface CloudClient {
  /**
   * Run `openstack …` (argv without the leading `openstack`) in a running
   * container that carries the client on a controller that answers; resolves
   * with stdout, rejects with a StackctlError naming the command and the end
   * of stderr.
   */
  openstack(args: readonly string[], opts?: { readonly timeoutMs?: number }): Promise<string>;
}

/** Everything an upgrade action may use. */
export interface UpgradeContext extends EngineContext {
  readonly inventory: Inventory;
  /** Path of the inventory file (hooks and messages name it). */
  readonly inventoryFile: string;
  readonly plan: UpgradePlan;
  readonly current: Release;
  readonly target: Release;
  /** The OpenStack client with the cloud's admin credentials. */
  readonly cloud: CloudClient;
}

/**
 * Performs one action; resolves with a short text for the progress line and
 * the report, rejects with a StackctlError (code, message naming node and
 * service, hint) when the action failed.
 */
export type ActionHandler<A extends UpgradeAction = UpgradeAction> = Handler<A, UpgradeContext>;

/** One handler per kind of action. */
export type ActionHandlers = Handlers<UpgradeAction, UpgradeContext>;
