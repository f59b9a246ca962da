import { resolve } from 'node:path';
import { sha256 } from '../core/hash.js';
import { readTextFile } from '../core/fs.js';
import { defaultReleasesDir, defaultRolesDir } from '../core/paths.js';
import { type Issue } from '../core/errors.js';
import { allocate, ipamFileFor, loadIpamState, type Allocation } from '../inventory/ipam.js';
import { MAX_INVENTORY_BYTES, parseInventory, type LoadedInventory } from '../inventory/load.js';
import { loadSecrets, secretsFileFor, type Secrets } from '../inventory/secrets.js';
import { ValidationFailed } from '../core/errors.js';
import { loadCatalog, type Catalog } from '../roles/catalog.js';
import { loadRelease } from '../roles/release.js';
import type { Release } from '../roles/schema.js';
import { buildPlan, type PlanResult } from '../roles/plan.js';

/** Options every inventory-reading command shares. */
export interface InventoryOptions {
  inventory: string;
  secrets?: string;
  roles?: string;
  releases?: string;
}

/** Everything loaded and checked for one inventory. */
export interface Loaded {
  readonly inventoryFile: string;
  readonly inventoryDigest: string;
  readonly secretsFile: string;
  readonly ipamFile: string;
  readonly catalog: Catalog;
  readonly secrets: Secrets | undefined;
  readonly loaded: LoadedInventory;
  readonly release: Release;
  readonly allocation: Allocation;
  readonly warnings: readonly Issue[];
}

/**
 * Load catalog, secrets and inventory, run the semantic checks and IPAM (in
 * memory: nothing is written here). Throws ValidationFailed with every fault.
 */
export function loadAll(opts: InventoryOptions): Loaded {
  const inventoryFile = resolve(opts.inventory);
  const secretsFile = resolve(opts.secrets ?? secretsFileFor(inventoryFile));
  const ipamFile = ipamFileFor(inventoryFile);
  const catalog = loadCatalog(opts.roles ? resolve(opts.roles) : defaultRolesDir());
  const secrets = loadSecrets(secretsFile);
  const text = readTextFile(inventoryFile, MAX_INVENTORY_BYTES);
  const display = opts.inventory;
  const loaded = parseInventory(display, text, {
    roles: catalog.roleInfo,
    ...(secrets
      ? {
          bmcCredentials: new Set(secrets.bmc.keys()),
          secretNames: new Set(secrets.services.keys()),
          secretsFile: secrets.file,
        }
      : {}),
  });
  const warnings: Issue[] = [...loaded.warnings];
  if (!secrets) {
    warnings.push({
      severity: 'warning',
      code: 'W_NO_SECRETS',
      message: `no secrets file ${secretsFile}: BMC credential references were not checked and configs render with placeholders`,
      hint: "Run 'stackctl secrets generate -i " + display + "' to create it.",
      location: { file: display },
    });
  }
  const release = loadRelease(
    opts.releases ? resolve(opts.releases) : defaultReleasesDir(),
    loaded.inventory.cloud.release,
  );
  const allocation = allocate(loaded.inventory, loaded.networks, catalog.roleInfo, loadIpamState(ipamFile), (p) =>
    loaded.source.locate(p),
  );
  warnings.push(...allocation.issues.filter((i) => i.severity === 'warning'));
  const errors = allocation.issues.filter((i) => i.severity === 'error');
  if (errors.length) throw new ValidationFailed(display, [...errors, ...warnings]);
  return {
    inventoryFile,
    inventoryDigest: sha256(text),
    secretsFile,
    ipamFile,
    catalog,
    secrets,
    loaded,
    release,
    allocation,
    warnings,
  };
}

/** The plan of everything loaded (pure: builds nothing on disk). */
export function planOf(all: Loaded): PlanResult {
  return buildPlan({
    inventory: all.loaded.inventory,
    inventoryDigest: all.inventoryDigest,
    catalog: all.catalog,
    release: all.release,
    addresses: all.allocation.addresses,
    ...(all.secrets ? { secrets: all.secrets.services } : {}),
  });
}
