import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { sha256 } from '../../src/core/hash.js';
import { defaultReleasesDir, defaultRolesDir } from '../../src/core/paths.js';
import type { Secret } from '../../src/core/secret.js';
import { allocate, EMPTY_IPAM } from '../../src/inventory/ipam.js';
import { parseInventory } from '../../src/inventory/load.js';
import { stringify } from 'yaml';
import type { Inventory } from '../../src/inventory/schema.js';
import { loadCatalog, type Catalog } from '../../src/roles/catalog.js';
import { buildPlan, type PlanResult } from '../../src/roles/plan.js';
import { loadRelease } from '../../src/roles/release.js';
import { planDeploy, type DeployPlan } from '../../src/orchestrator/planner.js';
import type { Release } from '../../src/roles/schema.js';

/** The shipped roles and the zed release manifest. */
export const catalog = loadCatalog(defaultRolesDir());
export const release = loadRelease(defaultReleasesDir(), 'zed');

/**
 * The shipped roles with one file of the roles folder changed (`file` relative to it, e.g.
 * `services/mariadb.yaml`), loaded; the copy is removed once read.
 */
export function catalogWith(file: string, change: (doc: Record<string, unknown>) => void): Catalog {
  const dir = mkdtempSync(join(tmpdir(), 'stackctl-roles-'));
  try {
    cpSync(defaultRolesDir(), dir, { recursive: true });
    const path = join(dir, file);
    const doc = parseYaml(readFileSync(path, 'utf8')) as Record<string, unknown>;
    change(doc);
    writeFileSync(path, stringify(doc));
    return loadCatalog(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The plan of an inventory given as text, with fresh IPAM and optional secrets, image pins and roles. */
export function planFromText(
  text: string,
  secrets?: ReadonlyMap<string, Secret>,
  rel: Release = release,
  pins?: ReadonlyMap<string, string>,
  cat: Catalog = catalog,
): PlanResult {
  const loaded = parseInventory('inv.yaml', text, { roles: cat.roleInfo });
  const alloc = allocate(loaded.inventory, loaded.networks, cat.roleInfo, EMPTY_IPAM, (p) => loaded.source.locate(p));
  return buildPlan({
    inventory: loaded.inventory,
    inventoryDigest: sha256(text),
    catalog: cat,
    release: rel,
    addresses: alloc.addresses,
    ...(secrets ? { secrets } : {}),
    ...(pins ? { pins } : {}),
  });
}

/**
 * The deploy plans an upgrade of this inventory diffs: the current release's and the target's
 * (placeholders for secrets, as `upgrade --dry-run` without a secrets file).
 */
export function upgradeDeployPlans(
  text: string,
  current: Release,
  target: Release,
): { currentDeploy: DeployPlan; targetDeploy: DeployPlan } {
  return {
    currentDeploy: planDeploy(planFromText(text, undefined, current).effective, catalog),
    targetDeploy: planDeploy(planFromText(text, undefined, target).effective, catalog),
  };
}

/** The same for an inventory object and a catalog of the test's own (written out and read back). */
export function upgradeDeployPlansOf(
  inventory: Inventory,
  cat: Catalog,
  current: Release,
  target: Release,
): { currentDeploy: DeployPlan; targetDeploy: DeployPlan } {
  const text = stringify(inventory, { defaultStringType: 'QUOTE_DOUBLE', defaultKeyType: 'PLAIN' });
  const loaded = parseInventory('inv.yaml', text, { roles: cat.roleInfo });
  const alloc = allocate(loaded.inventory, loaded.networks, cat.roleInfo, EMPTY_IPAM, (p) => loaded.source.locate(p));
  const of = (release: Release): DeployPlan =>
    planDeploy(
      buildPlan({
        inventory: loaded.inventory,
        inventoryDigest: sha256(text),
        catalog: cat,
        release,
        addresses: alloc.addresses,
      }).effective,
      cat,
    );
  return { currentDeploy: of(current), targetDeploy: of(target) };
}
