import { sha256 } from '../../src/core/hash.js';
import { defaultReleasesDir, defaultRolesDir } from '../../src/core/paths.js';
import type { Secret } from '../../src/core/secret.js';
import { allocate, EMPTY_IPAM } from '../../src/inventory/ipam.js';
import { parseInventory } from '../../src/inventory/load.js';
import { loadCatalog } from '../../src/roles/catalog.js';
import { buildPlan, type PlanResult } from '../../src/roles/plan.js';
import { loadRelease } from '../../src/roles/release.js';
import type { Release } from '../../src/roles/schema.js';

/** The shipped roles and the zed release manifest. */
export const catalog = loadCatalog(defaultRolesDir());
export const release = loadRelease(defaultReleasesDir(), 'zed');

/** The plan of an inventory given as text, with fresh IPAM and optional secrets. */
export function planFromText(text: string, secrets?: ReadonlyMap<string, Secret>, rel: Release = release): PlanResult {
  const loaded = parseInventory('inv.yaml', text, { roles: catalog.roleInfo });
  const alloc = allocate(loaded.inventory, loaded.networks, catalog.roleInfo, EMPTY_IPAM, (p) =>
    loaded.source.locate(p),
  );
  return buildPlan({
    inventory: loaded.inventory,
    inventoryDigest: sha256(text),
    catalog,
    release: rel,
    addresses: alloc.addresses,
    ...(secrets ? { secrets } : {}),
  });
}
