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
import type { RegistryAccess } from '../images/registry-api.js';
import type { Handler, Handlers } from '../orchestrator/engine.js';
import type { Release } from '../roles/schema.js';
import type { OpenStackClient } from '../status/openstack-client.js';
import type { UpgradeAction, UpgradePlan } from './model.js';

export type { NodeAccess, OneOffResult } from '../orchestrator/context.js';

/**
 * The OpenStack client with the cloud's admin credentials: src/status/openstack-client.ts
 * (in the first controller's client container that answers; credentials in the exec environment).
 */
export type CloudClient = OpenStackClient;

/** Everything an upgrade action may use. */
export interface UpgradeContext extends EngineContext {
  readonly inventory: Inventory;
  /** Path of the inventory file (hooks and messages name it). */
  readonly inventoryFile: string;
  /** How this machine asks the registry (scheme, and the cloud CA's client when stackctl's registry serves TLS). */
  readonly registry: RegistryAccess;
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
