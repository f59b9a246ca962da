import { resolve } from 'node:path';
import { sha256 } from '../core/hash.js';
import { readTextFile } from '../core/fs.js';
import { defaultReleasesDir, defaultRolesDir } from '../core/paths.js';
import { InputError, messageOf, ValidationFailed, type Issue } from '../core/errors.js';
import { allocate, ipamFileFor, loadIpamState, type Allocation } from '../inventory/ipam.js';
import { MAX_INVENTORY_BYTES, parseInventory, type LoadedInventory } from '../inventory/load.js';
import { loadSecrets, secretsFileFor, type Secrets } from '../inventory/secrets.js';
import { loadCatalog, type Catalog } from '../roles/catalog.js';
import { loadRelease } from '../roles/release.js';
import type { Release, Service } from '../roles/schema.js';
import { buildPlan, type Plan, type PlanResult } from '../roles/plan.js';
import { adminCredentials } from '../roles/credentials.js';
import { IDENTITY_ADMIN_PASSWORD } from '../orchestrator/planner.js';
import { Secret } from '../core/secret.js';
import { certsDirFor, readPem } from '../certs/files.js';
import { caFile, endpointFiles, loadTlsMaterial } from '../certs/served.js';
import { nodeCertSans, servicesNeedingNodeCert } from '../certs/nodes.js';
import type { Sans } from '../certs/x509.js';
import { caFetch } from '../images/registry-https.js';
import type { RegistryTls } from '../images/registry-tls.js';
import { resolveDigests, unpinnedImages } from '../images/pin.js';
import type { RegistryAccess } from '../images/registry-api.js';
import {
  digestsOf,
  loadPins,
  pinsFileFor,
  savePins,
  withPins,
  type PinChange,
  type PinSource,
  type PinState,
} from '../images/pins.js';

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
  /** The image pin file (`<inventory>.images.json`). */
  readonly imagesFile: string;
  /** The image pins read from it (empty when there is none). */
  readonly pins: PinState;
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
  const imagesFile = pinsFileFor(inventoryFile);
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
    imagesFile,
    pins: loadPins(imagesFile),
    catalog,
    secrets,
    loaded,
    release,
    allocation,
    warnings,
  };
}

/** The value of a setting for this cloud: the inventory's, else the release's, else the service's default. */
export function settingOf(all: Pick<Loaded, 'loaded' | 'release' | 'catalog'>, name: string): unknown {
  return (
    all.loaded.inventory.cloud.settings?.[name] ??
    all.release.settings?.[name] ??
    all.catalog.settings.get(name)?.default
  );
}

/**
 * The nodes that need a certificate of their own (certs/nodes.ts), with the names it carries:
 * what `certs generate` issues, and what the plan renders for them. `served`: where the node
 * serves it (a needing service's `node_certificate.served`: its port on the node's address on the
 * network its setting names), when the node has an address there.
 */
export function nodeCertSubjects(
  all: Pick<Loaded, 'loaded' | 'release' | 'catalog' | 'allocation'>,
): { node: string; sans: Sans; served?: { host: string; port: number } }[] {
  const inv = all.loaded.inventory;
  const domain = inv.cloud.domain ?? `${inv.cloud.name}.local`;
  const byRole = new Map<string, Service[]>();
  const needing = (role: string): Service[] => {
    let v = byRole.get(role);
    if (v === undefined) {
      const services = (all.catalog.roles.get(role)?.services ?? []).map((s) => all.catalog.services.get(s)!);
      const names = servicesNeedingNodeCert(services, (name) => settingOf(all, name));
      byRole.set(role, (v = services.filter((s) => names.includes(s.name))));
    }
    return v;
  };
  return inv.nodes
    .filter((n) => needing(n.role).length > 0)
    .map((n) => {
      const addresses = all.allocation.addresses.get(n.name) ?? {};
      const listener = needing(n.role).find((s) => s.node_certificate?.served)?.node_certificate?.served;
      const host = listener && addresses[String(settingOf(all, listener.network_setting))];
      return {
        node: n.name,
        sans: nodeCertSans(n.name, domain, addresses),
        ...(listener && host ? { served: { host, port: listener.port } } : {}),
      };
    });
}

/**
 * The plan of everything loaded (pure: builds nothing on disk). `keepRendered: false` leaves out
 * the rendered files (PlanInput.keepRendered), for commands that only show the plan.
 */
export function planOf(all: Loaded, opts: { readonly keepRendered?: boolean } = {}): PlanResult {
  return buildPlan({
    inventory: all.loaded.inventory,
    inventoryDigest: all.inventoryDigest,
    catalog: all.catalog,
    release: all.release,
    addresses: all.allocation.addresses,
    ...(all.secrets ? { secrets: all.secrets.services } : {}),
    // the served certificates' keys are read only where the real files are rendered (with the
    // secrets); the CA, public, is shown in a plan without them too
    ...(all.loaded.inventory.tls
      ? {
          tls: loadTlsMaterial(all.inventoryFile, certsDirFor(all.inventoryFile), all.loaded.inventory.tls, {
            keys: all.secrets !== undefined,
            nodes: nodeCertSubjects(all).map((n) => n.node),
          }),
        }
      : {}),
    pins: digestsOf(all.pins),
    ...(opts.keepRendered === false ? { keepRendered: false } : {}),
    ...optionalCa(all),
  });
}

/** The registry CA for the plan: required with the secrets (a deploy), shown when readable without them. */
function optionalCa(all: Loaded): { registryCa?: string } {
  let ca: string | undefined;
  try {
    ca = registryCaPem(all);
  } catch (e) {
    if (all.secrets) throw e; // a preview without secrets shows what it can
  }
  return ca ? { registryCa: ca } : {};
}

/** The registry's host:port as the nodes pull from it: cloud.registry, else the release manifest's. */
export function registryOf(all: Pick<Loaded, 'loaded' | 'release'>): string {
  return all.loaded.inventory.cloud.registry ?? all.release.registry;
}

/** The registry's host (name or address, without the port): what its certificate must name. */
export function registryHost(all: Pick<Loaded, 'loaded' | 'release'>): string {
  return registryOf(all).replace(/:\d+$/, '');
}

/**
 * What stackctl's registry serves for this inventory: plain HTTP with cloud.registry_insecure,
 * else TLS with the inventory's registry certificate (the `tls:` section's, from `certs generate`
 * or tls.endpoints.registry), trusted through the cloud's CA. Reads the key: call it only where the
 * registry is started or configured. InputError E_CERT_MISSING when the files cannot be read.
 */
export function registryTls(all: Pick<Loaded, 'loaded' | 'release' | 'inventoryFile'>): RegistryTls | false {
  const inv = all.loaded.inventory;
  if (inv.cloud.registry_insecure === true || !inv.tls) return false;
  const dir = certsDirFor(all.inventoryFile);
  const files = endpointFiles(all.inventoryFile, dir, inv.tls, 'registry');
  const ca = caFile(all.inventoryFile, dir, inv.tls)!;
  try {
    return {
      certPem: readPem(files.cert),
      key: new Secret(readPem(files.key)),
      caPem: readPem(ca),
      host: registryHost(all),
    };
  } catch (e) {
    throw registryCertMissing(all, e);
  }
}

/**
 * How this machine asks the inventory's registry: plain HTTP with cloud.registry_insecure; with a
 * `tls:` section, HTTPS trusting the cloud's CA only and checking the registry's name (whatever
 * address is asked); else HTTPS with the system's trust (an operator's registry).
 */
export function registryAccess(all: Loaded, address?: string): RegistryAccess {
  const ca = registryCaPem(all);
  return {
    scheme: all.loaded.inventory.cloud.registry_insecure === true ? 'http' : 'https',
    ...(address ? { address } : {}),
    ...(ca ? { fetch: caFetch(ca, registryHost(all)) } : {}),
  };
}

/**
 * The CA (PEM) the registry's clients trust it with when stackctl's registry serves TLS for this
 * inventory (see registryTls); undefined for plain HTTP. E_CERT_MISSING when the CA cannot be read.
 */
export function registryCaPem(all: Pick<Loaded, 'loaded' | 'release' | 'inventoryFile'>): string | undefined {
  const inv = all.loaded.inventory;
  if (inv.cloud.registry_insecure === true || !inv.tls) return undefined;
  const ca = caFile(all.inventoryFile, certsDirFor(all.inventoryFile), inv.tls)!;
  try {
    return readPem(ca);
  } catch (e) {
    throw registryCertMissing(all, e);
  }
}

function registryCertMissing(all: Pick<Loaded, 'loaded' | 'release'>, e: unknown): InputError {
  return new InputError(
    'E_CERT_MISSING',
    `the registry ${registryOf(all)} is served over TLS (cloud.registry_insecure is not true) but its certificate or CA cannot be read: ${messageOf(e)}`,
    {
      hint: "Run 'stackctl certs generate -i INVENTORY' (or name the operator's files under tls.endpoints.registry and tls.ca).",
      cause: e,
    },
  );
}

/** How to pin. */
export interface PinOptions {
  readonly by: PinSource;
  /** Write the pin file (the caller holds the inventory's run lock); false: pin in memory only. */
  readonly save: boolean;
  /** host:port to ask instead of the references' registry. */
  readonly address?: string;
  readonly fetch?: typeof fetch;
  readonly now?: () => Date;
  /** The release the images belong to, named in errors (default: the inventory's). */
  readonly release?: string;
  /** Deadline of each registry request (default REGISTRY_TIMEOUT_MS). */
  readonly timeoutMs?: number;
}

/**
 * Pin `refs` (tag references) to the digests the registry names for them now,
 * and save the pin file when asked. Returns `all` with the new pins (plan it
 * again to use them) and what changed. Throws, pinning nothing, when the
 * registry lacks an image or does not answer.
 */
export async function pinImages(
  all: Loaded,
  refs: readonly string[],
  opts: PinOptions,
): Promise<{ all: Loaded; changes: PinChange[] }> {
  if (!refs.length) return { all, changes: [] };
  const resolved = await resolveDigests(refs, {
    ...registryAccess(all, opts.address),
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
    ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
    release: opts.release ?? all.release.name,
  });
  const { state, changes } = withPins(all.pins, resolved, opts.by, (opts.now ?? (() => new Date()))());
  if (changes.length && opts.save) savePins(all.imagesFile, state);
  return { all: { ...all, pins: state }, changes };
}

/**
 * The plan of everything loaded with its images pinned: those without a pin
 * (every one of the plan, or those `unpinned` picks) are resolved from the
 * registry once and pinned first (saved when `save`); pinned images never ask
 * the registry. What deploy and `plan` use.
 */
export async function planPinned(
  all: Loaded,
  opts: PinOptions,
  unpinned: (planned: PlanResult) => readonly string[] = (p) => unpinnedImages(p.plan),
): Promise<{ all: Loaded; planned: PlanResult; changes: PinChange[] }> {
  const planned = planOf(all);
  const fresh = unpinned(planned);
  if (!fresh.length) return { all, planned, changes: [] };
  const pinned = await pinImages(all, fresh, opts);
  return { all: pinned.all, planned: planOf(pinned.all), changes: pinned.changes };
}

/**
 * The environment of the cloud's admin client on the internal endpoints (status, upgrade,
 * nodes maintenance), or undefined when the secrets file has no admin password or the plan no
 * identity service.
 */
export function internalAdminEnv(all: Loaded, plan: Plan): Record<string, string | Secret> | undefined {
  const password = all.secrets?.services.get(IDENTITY_ADMIN_PASSWORD);
  return password
    ? adminCredentials(plan, password, { iface: 'internal', region: all.loaded.inventory.cloud.region ?? 'RegionOne' })
        ?.env
    : undefined;
}
