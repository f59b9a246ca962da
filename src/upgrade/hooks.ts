/**
 * Upgrade hooks: the built-in ones stackctl implements, and user hooks from
 * the inventory's `upgrade.hooks`. A service file names hooks at pre_batch /
 * post_batch (nova-compute: nova-evacuate, nova-enable); an inventory hook of
 * the same name replaces the built-in one.
 */
import { InputError } from '../core/errors.js';
import type { HookPoint, Inventory, UpgradeHook } from '../inventory/schema.js';
import type { Catalog } from '../roles/catalog.js';

/** stackctl's own hooks, by name: what each does. */
export const BUILTIN_HOOKS = {
  /**
   * Disable nova-compute on the batch's hosts, live-migrate their instances to
   * the other hosts, verify the hosts are empty; refuses when the other hosts
   * cannot hold the instances.
   */
  'nova-evacuate': 'disable nova-compute on the batch, live-migrate its instances away, verify the hosts are empty',
  /** Wait until nova-compute on the batch's hosts reports to Nova again and is up. */
  'nova-up': "wait until the batch's nova-compute reports to Nova again and is up",
  /** Re-enable nova-compute on the batch's hosts once their new containers are healthy. */
  'nova-enable': 're-enable nova-compute on the batch',
} as const satisfies Record<string, string>;
export type BuiltinHook = keyof typeof BUILTIN_HOOKS;

/** A hook ready to be placed in the plan. */
export interface ResolvedHook {
  readonly name: string;
  readonly source: 'built-in' | 'inventory';
  readonly runOn: 'deploy-host' | 'nodes';
  readonly command?: readonly string[];
  readonly description?: string;
}

/** Resolve a hook name: the inventory's definition first (it replaces a built-in), then the built-ins. */
export function resolveHook(name: string, inventory: Inventory, where: string): ResolvedHook {
  const user: UpgradeHook | undefined = inventory.upgrade?.hooks?.[name];
  if (user) return { name, source: 'inventory', runOn: user.run_on, command: user.command };
  if (name in BUILTIN_HOOKS) {
    return { name, source: 'built-in', runOn: 'deploy-host', description: BUILTIN_HOOKS[name as BuiltinHook] };
  }
  throw new InputError(
    'E_UNKNOWN_HOOK',
    `${where} names hook '${name}', which is neither built in nor in the inventory`,
    {
      hint: `Built-in hooks: ${Object.keys(BUILTIN_HOOKS).join(', ')}. Define it under upgrade.hooks.${name} of the inventory.`,
      details: { hook: name, where },
    },
  );
}

/** The inventory's hooks that run at a point (in name order, so plans are deterministic). */
export function userHooksAt(inventory: Inventory, point: HookPoint): ResolvedHook[] {
  return Object.entries(inventory.upgrade?.hooks ?? {})
    .filter(([, h]) => h.at?.includes(point))
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, h]) => ({ name, source: 'inventory' as const, runOn: h.run_on, command: h.command }));
}

/** Hooks the service files of the given services name at pre_batch or post_batch, first mention first. */
export function serviceHooks(catalog: Catalog, services: readonly string[], at: 'pre_batch' | 'post_batch'): string[] {
  const out: string[] = [];
  for (const s of services)
    for (const h of catalog.services.get(s)?.upgrade.hooks?.[at] ?? []) if (!out.includes(h)) out.push(h);
  return out;
}
