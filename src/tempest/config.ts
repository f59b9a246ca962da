/**
 * Tempest's configuration for a stackctl cloud, as pure data: which services
 * the plan deploys, which API features the cloud has, and the flavours and
 * images the compute tests boot. `renderTempestConf` turns it into the INI
 * text of `etc/tempest.conf`; nothing here touches the network or the disk.
 */
import { InputError } from '../core/errors.js';
import type { Secret } from '../core/secret.js';
import { CONTROL_CHARS } from '../inventory/settings.js';
import { ESCAPERS } from '../roles/escape.js';
import type { Plan } from '../roles/plan.js';

/**
 * `[service_available]` from the plan's services: Tempest's flag, the stackctl
 * services that must all be planned for it to be true, and why.
 */
export const SERVICE_AVAILABLE: readonly {
  readonly flag: string;
  readonly services: readonly string[];
  readonly why: string;
}[] = [
  { flag: 'nova', services: ['nova-api', 'nova-conductor', 'nova-scheduler', 'nova-compute'], why: 'the compute API' },
  { flag: 'glance', services: ['glance'], why: 'the image API (file store)' },
  {
    flag: 'neutron',
    services: ['neutron-server', 'neutron-agents'],
    why:
      'Tempest with neutron creates a network, subnet and router per test project and boots servers on them; ' +
      'the Neutron API alone (no agents, no mechanism drivers) cannot bind a port, so servers boot with no NIC',
  },
  { flag: 'cinder', services: ['cinder-api'], why: 'block storage is not deployed by stackctl' },
  { flag: 'swift', services: ['swift-proxy'], why: 'object storage is not deployed by stackctl' },
];

/** Tempest flags that are false whatever the plan: services stackctl never deploys. */
export const NEVER_AVAILABLE = ['heat', 'horizon', 'aodh', 'ironic', 'designate', 'octavia', 'barbican'] as const;

/**
 * `[compute-feature-enabled]` per Nova compute driver (the inventory setting
 * `nova_compute_driver`): a flag is on only where the driver implements the
 * operation and the cloud has what it needs (a second flavour, shared storage,
 * consoles, Neutron ports). The reason for each off flag is in `COMPUTE_OFF_WHY`.
 */
export const COMPUTE_FEATURES: Readonly<Record<string, Readonly<Record<string, boolean>>>> = {
  'fake.FakeDriver': {
    pause: true,
    suspend: true,
    rescue: true,
    snapshot: true,
    console_output: true,
    change_password: false,
    resize: false,
    cold_migration: false,
    live_migration: false,
    vnc_console: false,
    spice_console: false,
    serial_console: false,
    interface_attach: false,
    shelve: false,
    personality: false,
    config_drive: false,
    metadata_service: false,
    attach_encrypted_volume: false,
    block_migration_for_live_migration: false,
    volume_multiattach: false,
  },
  'libvirt.LibvirtDriver': {
    pause: true,
    suspend: true,
    rescue: true,
    snapshot: true,
    console_output: true,
    change_password: false,
    resize: true,
    cold_migration: true,
    live_migration: false,
    vnc_console: false,
    spice_console: false,
    serial_console: false,
    interface_attach: false,
    shelve: true,
    personality: false,
    config_drive: true,
    metadata_service: false,
    attach_encrypted_volume: false,
    block_migration_for_live_migration: false,
    volume_multiattach: false,
  },
};

/** Why a compute feature flag is off (for docs/tempest.md and `tempest config` output). */
export const COMPUTE_OFF_WHY: Readonly<Record<string, string>> = {
  change_password: 'needs a guest agent',
  resize: 'needs a second flavour (flavor_ref_alt) and, for the fake driver, nothing real to resize',
  cold_migration: 'needs two compute nodes',
  live_migration: 'needs two compute nodes and shared or block-migratable storage',
  vnc_console: 'no console proxy is deployed',
  spice_console: 'no console proxy is deployed',
  serial_console: 'no console proxy is deployed',
  interface_attach: 'needs Neutron ports that can be bound (no agents)',
  shelve: 'the fake driver keeps no disk to offload',
  personality: 'removed from the API at microversion 2.57',
  config_drive: 'nothing boots, so nothing reads a config drive',
  metadata_service: 'no metadata agent',
  attach_encrypted_volume: 'no block storage',
  block_migration_for_live_migration: 'needs two compute nodes',
  volume_multiattach: 'no block storage',
};

/** A flavour or image of the cloud, as its API lists it. */
export interface CloudResource {
  readonly id: string;
  readonly name: string;
  /** Images only: Glance's status (`active` when usable). */
  readonly status?: string;
}

/** A flavour or image Tempest was told to use that the cloud does not have (or cannot use). */
export class MissingCloudResource extends InputError {
  readonly kind: 'flavor' | 'image';
  readonly wanted: string;
  readonly existing: readonly string[];
  constructor(kind: 'flavor' | 'image', wanted: string, existing: readonly string[], why = 'does not exist') {
    const list = existing.length ? existing.join(', ') : 'none';
    super(
      kind === 'flavor' ? 'E_TEMPEST_FLAVOR_MISSING' : 'E_TEMPEST_IMAGE_MISSING',
      `${kind} ${wanted} ${why} in the cloud; existing ${kind === 'flavor' ? 'flavours' : 'active images'}: ${list}`,
      {
        hint:
          `Pass --${kind} with one of the existing names, or add ${wanted} to the inventory's cloud.resources ` +
          `and run 'stackctl deploy --steps 5'.`,
        details: { kind, wanted, existing },
      },
    );
    this.kind = kind;
    this.wanted = wanted;
    this.existing = existing;
  }
}

/**
 * The id of the flavour or image called `wanted` (a name or an id), or a
 * MissingCloudResource naming it and listing the usable ones. An image must be
 * `active`; two resources with the same name are ambiguous and refused too.
 */
export function resolveResource(kind: 'flavor' | 'image', wanted: string, found: readonly CloudResource[]): string {
  const usable = kind === 'image' ? found.filter((r) => r.status === undefined || r.status === 'active') : found;
  const names = [...new Set(usable.map((r) => r.name))].sort();
  const byId = found.find((r) => r.id === wanted);
  const byName = found.filter((r) => r.name === wanted);
  const hit = byId ? [byId] : byName;
  if (hit.length === 0) throw new MissingCloudResource(kind, wanted, names);
  if (hit.length > 1)
    throw new MissingCloudResource(kind, wanted, names, `is ambiguous (${hit.length} share the name; pass an id)`);
  const [r] = hit as [CloudResource];
  if (kind === 'image' && r.status !== undefined && r.status !== 'active')
    throw new MissingCloudResource(kind, wanted, names, `is ${r.status}, not active,`);
  return r.id;
}

/** The flavours and images Tempest boots: names chosen by the operator or the plan's starter resources. */
export interface ResourceChoice {
  readonly flavor: string;
  readonly flavorAlt: string;
  readonly image: string;
  readonly imageAlt: string;
}

/**
 * Names Tempest uses: `--flavor`/`--image` when given, else the first of the
 * inventory's `cloud.resources` (and the second as the alternate, when there
 * is one; Tempest accepts the same one twice).
 */
export function chooseResources(plan: Plan, opts: { flavor?: string; image?: string }): ResourceChoice {
  const flavors = plan.cloud.resources?.flavors.map((f) => f.name) ?? [];
  const images = plan.cloud.resources?.images.map((i) => i.name) ?? [];
  const pick = (kind: 'flavor' | 'image', given: string | undefined, planned: string[]): [string, string] => {
    if (given) return [given, given];
    const [first, second] = planned;
    if (!first)
      throw new InputError(`E_TEMPEST_NO_${kind.toUpperCase()}`, `no ${kind} for Tempest: none given, none planned`, {
        hint: `Pass --${kind} NAME, or list one under cloud.resources.${kind}s in the inventory.`,
      });
    return [first, second ?? first];
  };
  const [flavor, flavorAlt] = pick('flavor', opts.flavor, flavors);
  const [image, imageAlt] = pick('image', opts.image, images);
  return { flavor, flavorAlt, image, imageAlt };
}

/** Everything `etc/tempest.conf` is made from. */
export interface TempestInput {
  /** Keystone v3 URL, e.g. `http://10.0.0.250:5000/v3`. */
  readonly authUrl: string;
  readonly region: string;
  /** Endpoint interface Tempest uses for every service: public or internal. */
  readonly iface: 'public' | 'internal';
  readonly adminPassword: Secret;
  /** Names of the plan's services. */
  readonly services: readonly string[];
  /** `nova_compute_driver` of the plan (default libvirt). */
  readonly computeDriver: string;
  /** Number of compute nodes in the plan. */
  readonly computeNodes: number;
  /** Ids Tempest boots. */
  readonly refs: { flavor: string; flavorAlt: string; image: string; imageAlt: string };
  /** The workspace folder (absolute): logs and locks go under it. */
  readonly workspace: string;
  /** The cloud's CA (a file in the workspace) for https:// endpoints: certificates are then verified. */
  readonly caFile?: string;
}

/** Flags of `[service_available]` for the plan's services. */
export function serviceAvailable(services: readonly string[]): Record<string, boolean> {
  const have = new Set(services);
  const flags: Record<string, boolean> = {};
  for (const s of SERVICE_AVAILABLE) flags[s.flag] = s.services.every((x) => have.has(x));
  for (const f of NEVER_AVAILABLE) flags[f] = false;
  return flags;
}

/** `[compute-feature-enabled]` for a driver; an unknown driver gets the conservative libvirt set. */
export function computeFeatures(driver: string, computeNodes: number): Record<string, boolean> {
  const base = { ...(COMPUTE_FEATURES[driver] ?? COMPUTE_FEATURES['libvirt.LibvirtDriver']!) };
  if (computeNodes < 2) base['cold_migration'] = false;
  return base;
}

type IniValue = string | number | boolean | Secret;
type Ini = Record<string, Record<string, IniValue>>;

/** The sections of tempest.conf as data (the password still a Secret). */
export function tempestSections(t: TempestInput): Ini {
  const endpoint = t.iface === 'internal' ? 'internalURL' : 'publicURL';
  const available = serviceAvailable(t.services);
  return {
    DEFAULT: {
      log_dir: `${t.workspace}/logs`,
      log_file: 'tempest.log',
      use_stderr: false,
    },
    oslo_concurrency: { lock_path: `${t.workspace}/tempest_lock` },
    auth: {
      admin_username: 'admin',
      admin_password: t.adminPassword,
      admin_project_name: 'admin',
      admin_domain_name: 'Default',
      // Tempest makes a project and users per test class and removes them after.
      use_dynamic_credentials: true,
      // no network per project: the Neutron API alone cannot wire one (see SERVICE_AVAILABLE)
      create_isolated_networks: false,
      tempest_roles: 'member',
    },
    identity: {
      uri_v3: t.authUrl,
      auth_version: 'v3',
      region: t.region,
      v3_endpoint_type: t.iface,
      default_domain_id: 'default',
      ...(t.caFile ? { ca_certificates_file: t.caFile } : {}),
      disable_ssl_certificate_validation: !t.caFile,
    },
    'identity-feature-enabled': {
      api_v2: false,
      api_v3: true,
      trust: true,
      project_tags: true,
      application_credentials: true,
      access_rules: true,
      // off in keystone.conf: password expiry, lockout and history are not configured
      security_compliance: false,
    },
    compute: {
      region: t.region,
      endpoint_type: endpoint,
      image_ref: t.refs.image,
      image_ref_alt: t.refs.imageAlt,
      flavor_ref: t.refs.flavor,
      flavor_ref_alt: t.refs.flavorAlt,
      min_compute_nodes: Math.max(1, t.computeNodes),
      // Zed's Nova: 2.1 to 2.93
      min_microversion: '2.1',
      max_microversion: '2.93',
      build_timeout: 300,
    },
    'compute-feature-enabled': computeFeatures(t.computeDriver, t.computeNodes),
    image: { region: t.region, endpoint_type: endpoint },
    'image-feature-enabled': {
      api_v1: false,
      api_v2: true,
      // the file store has no staging area configured for the interoperable import
      import_image: false,
      os_glance_reserved: true,
    },
    placement: { region: t.region, endpoint_type: t.iface },
    network: { region: t.region, endpoint_type: endpoint },
    'network-feature-enabled': { ipv6: false },
    validation: {
      // nothing boots under the fake driver: no SSH, no ping
      run_validation: false,
    },
    service_available: available,
  };
}

/** One INI value as Tempest (oslo.config) reads it: text escaped by oslo.config's rules (docs/roles.md). */
function iniValue(v: IniValue): string {
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') return String(v);
  const text = typeof v === 'string' ? v : v.reveal();
  if (CONTROL_CHARS.test(text))
    throw new InputError('E_TEMPEST_VALUE', 'a value of tempest.conf holds a control character (not shown)', {
      hint: 'Check the admin password in the secrets file and the workspace path: no newline or tab.',
    });
  return ESCAPERS.ini.escape(text);
}

/** The text of etc/tempest.conf. It holds the admin password: write it 0600. */
export function renderTempestConf(t: TempestInput, header = 'written by stackctl tempest config'): string {
  const lines = [`# Tempest configuration of this cloud, ${header}. Holds the admin password: keep private.`];
  for (const [section, values] of Object.entries(tempestSections(t))) {
    lines.push('', `[${section}]`);
    for (const [k, v] of Object.entries(values)) lines.push(`${k} = ${iniValue(v)}`);
  }
  return lines.join('\n') + '\n';
}
