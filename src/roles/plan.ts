import { canonicalJson, sha256, uuidFromName } from '../core/hash.js';
import { InputError } from '../core/errors.js';
import type { Secret } from '../core/secret.js';
import type { Inventory } from '../inventory/schema.js';
import { HAPROXY_CRT_DIR, SERVED_ENDPOINTS, servedEndpoints, type ServedEndpoint } from '../certs/served.js';
import { servicesNeedingNodeCert } from '../certs/nodes.js';
import type { Catalog } from './catalog.js';
import { networkExpectation } from './network-agents.js';
import { describeSetting, SECRET_REF, settingProblem, type SettingValue } from '../inventory/settings.js';
import { keyEntry, keyIndices } from '../inventory/key-repository.js';
import { PRIVILEGED_OPTIONS } from './privileged.js';
import { imageRef, pinnedRef } from './release.js';
import { STEPS, type Release, type Service, type StepNumber } from './schema.js';
import { printableText, revealSecrets, SecretRef } from './templates.js';
import { serviceRoles } from './service-roles.js';

/**
 * The deployment plan: a pure, deterministic function of inventory, role
 * catalog, release manifest, IPAM addresses and secrets. It says, per node,
 * which containers run with which image and config (by hash), and per cloud
 * the VIPs, the bootstrap node of each service and the ordered steps. Rendered
 * config contents stay in `rendered`, which is never printed: they hold secrets.
 */

/** Inputs of the plan. */
export interface PlanInput {
  readonly inventory: Inventory;
  /** sha256 of the inventory text, recorded in the plan. */
  readonly inventoryDigest: string;
  readonly catalog: Catalog;
  readonly release: Release;
  /** node -> network -> address, from IPAM. */
  readonly addresses: ReadonlyMap<string, Record<string, string>>;
  /** Service secrets; undefined renders placeholders (the plan then says so). */
  readonly secrets?: ReadonlyMap<string, Secret>;
  /**
   * Image pins (`<inventory>.images.json`): tag reference -> manifest digest. A pinned image is
   * pulled and run as `ref@digest`, and the digest enters the container hash; an image without a
   * pin keeps its tag reference (a deploy pins it first, see images/pin.ts).
   */
  readonly pins?: ReadonlyMap<string, string>;
  /**
   * Keep every node's rendered files in the result's `rendered` (default true). Commands that only
   * show or compare the plan pass false: on 10,000 nodes the files are ~50 MB of text.
   */
  readonly keepRendered?: boolean;
  /**
   * The PEM (chain, then key) of each endpoint HAProxy serves over TLS (certs/served.ts
   * loadTlsMaterial). Rendered like a secret: without `secrets` the files hold placeholders; with
   * them, a served endpoint without its PEM is refused (E_CERT_MISSING).
   */
  readonly tls?: {
    readonly pems: Partial<Record<ServedEndpoint, Secret>>;
    readonly missing?: Partial<Record<ServedEndpoint, string>>;
    /** The CA (PEM, public) the services verify the internal endpoints with, when those are served over TLS. */
    readonly ca?: string;
    /** Each node's own certificate (certs/nodes.ts): the certificate, and its key with the secrets. */
    readonly nodes?: Readonly<Record<string, { readonly cert: string; readonly key?: Secret }>>;
    /** Why a node's own certificate cannot be read. */
    readonly missingNodes?: Readonly<Record<string, string>>;
  };
  /**
   * The CA (PEM, public) every node's dockerd trusts the registry with, when stackctl's registry
   * serves TLS (cli/context.ts registryCaPem): each node gets a host preparation of its own at
   * step 1 (REGISTRY_TRUST_SERVICE) that writes it and drops the registry from insecure-registries.
   */
  readonly registryCa?: string;
}

/** The name of the host preparation that makes a node's dockerd trust the registry (not a service of the catalog). */
export const REGISTRY_TRUST_SERVICE = 'docker-registry-trust';

export interface PlanContainer {
  readonly name: string;
  readonly service: string;
  readonly step: StepNumber;
  /** What the node pulls and creates the container from: `ref@sha256:…` when pinned, else the tag reference. */
  readonly image: string;
  /** sha256 of image + container options + the configs it reads: a change means recreate. */
  readonly hash: string;
}

export interface PlanConfig {
  readonly service: string;
  readonly dest: string;
  readonly mode: string;
  readonly sha256: string;
}

/** What a service needs of a node's own OS (the service file's `host`, its `when` met). */
export interface PlanHost {
  readonly service: string;
  readonly step: StepNumber;
  /** Each entry: the modules of which the first that loads is enough (one name: that module). */
  readonly modules: readonly (readonly string[])[];
  readonly devices: readonly string[];
  readonly stopUnits: readonly string[];
  readonly hint?: string;
  /**
   * The registry (host:port) the node's dockerd pulls from over TLS and the CA it trusts it with:
   * `/etc/docker/certs.d/<registry>/ca.crt` written, the registry dropped from daemon.json's
   * insecure-registries (dockerd reloaded). Part of every deploy, whatever `--services` selects.
   */
  readonly registryTrust?: { readonly registry: string; readonly ca: string };
}

export interface PlanNode {
  readonly name: string;
  readonly role: string;
  readonly bmc: string;
  readonly addresses: Readonly<Record<string, string>>;
  readonly services: readonly string[];
  readonly containers: readonly PlanContainer[];
  readonly configs: readonly PlanConfig[];
  /** Host preparations, absent when no service of the node needs one. */
  readonly host?: readonly PlanHost[];
}

/** An image the cloud runs, and its pin. */
export interface PlanImage {
  /** The release manifest's image key. */
  readonly key: string;
  /** The tag reference: `registry/namespace/key:tag`. */
  readonly ref: string;
  /** The pinned manifest digest; absent when the image has no pin yet. */
  readonly digest?: string;
}

export interface PlanService {
  readonly name: string;
  readonly step: StepNumber;
  readonly nodes: readonly string[];
  readonly bootstrap: string;
  readonly endpoints: readonly { readonly type: string; readonly interface: string; readonly url: string }[];
  readonly frontends: readonly {
    readonly name: string;
    readonly vips: readonly string[];
    readonly port: number;
    /** The addresses among `vips` where HAProxy terminates TLS (absent: none). */
    readonly tls?: readonly string[];
  }[];
}

/** One action of a step; steps are barriers across nodes. */
export type PlanAction =
  | { readonly kind: 'container'; readonly node: string; readonly service: string; readonly container: string }
  | { readonly kind: 'database'; readonly node: string; readonly service: string; readonly database: string }
  | { readonly kind: 'task'; readonly node: string; readonly service: string; readonly task: string }
  | { readonly kind: 'register'; readonly node: string; readonly service: string; readonly user: string }
  | { readonly kind: 'resources'; readonly node: string; readonly service: string }
  | { readonly kind: 'host'; readonly node: string; readonly service: string };

export interface PlanStep {
  readonly step: StepNumber;
  readonly title: string;
  readonly actions: readonly PlanAction[];
}

/** The printable plan (no secret values, only hashes). */
export interface Plan {
  readonly cloud: {
    readonly name: string;
    readonly release: string;
    readonly openstack: string;
    readonly series: string;
    readonly region: string;
    /** Flavours and images made at step 5 (inventory `cloud.resources`). */
    readonly resources?: {
      readonly flavors: readonly { name: string; vcpus: number; ram_mb: number; disk_gb: number }[];
      /** `size_kb`: that many KiB of zeros; `build: guest`: the guest image stackctl builds. */
      readonly images: readonly ({ name: string; size_kb: number } | { name: string; build: 'guest' })[];
      /** Neutron's external network: a flat network on the physnet, its subnet and floating-IP range. */
      readonly external_network?: PlanExternalNetwork;
      /** A starter tenant network and its router to the external network. */
      readonly tenant_network?: { readonly name: string; readonly cidr: string; readonly router: string };
    };
  };
  readonly inputs: {
    readonly inventory: string;
    readonly catalog: string;
    readonly release: string;
    readonly secrets: 'present' | 'absent';
  };
  readonly vips: Readonly<Record<string, string>>;
  /** The endpoints HAProxy serves over TLS (inventory `tls`), absent when none. */
  readonly tls?: readonly ServedEndpoint[];
  /** Every image the containers of the plan use, by tag reference, with its pin. */
  readonly images: readonly PlanImage[];
  readonly nodes: readonly PlanNode[];
  readonly services: readonly PlanService[];
  readonly steps: readonly PlanStep[];
}

/** The external network step 5 makes, resolved from the inventory's network and settings. */
export interface PlanExternalNetwork {
  readonly name: string;
  readonly physnet: string;
  readonly cidr: string;
  readonly gateway: string;
  readonly floating_range: readonly [string, string];
}

/** The plan plus what must never be printed. */
export interface PlanResult {
  /**
   * The printable plan. Its config and container hashes are computed with every secret
   * replaced by a placeholder, so equal inputs print equal plans on any machine, whatever
   * secrets each generated.
   */
  readonly plan: Plan;
  /**
   * The same plan with hashes of the configs as they really are (secrets in): what a
   * deploy compares with the nodes, so that a rotated password recreates its containers.
   * Equal to `plan` when there is no secrets file.
   */
  readonly effective: Plan;
  /** node -> dest path -> rendered file content (contains secrets); empty when PlanInput.keepRendered is false. */
  readonly rendered: ReadonlyMap<string, ReadonlyMap<string, string>>;
}

const key = (service: string): string => service.replace(/-/g, '_');
/** The placeholder of a node's own certificate key: each node's files get its own. */
const NODE_KEY = 'tls_node_key';

/**
 * Order services by step, and within a step after the services they require (directly or
 * through others), names breaking ties. Requirement cycles keep the name order.
 */
export function orderByRequires(services: readonly Service[]): Service[] {
  const byName = new Map(services.map((s) => [s.name, s]));
  const depth = new Map<string, number>();
  const depthOf = (s: Service, visiting: ReadonlySet<string>): number => {
    let d = depth.get(s.name);
    if (d !== undefined) return d;
    d = 0;
    for (const r of s.requires ?? []) {
      const dep = byName.get(r);
      if (dep && dep.step === s.step && !visiting.has(r)) d = Math.max(d, depthOf(dep, new Set([...visiting, r])) + 1);
    }
    depth.set(s.name, d);
    return d;
  };
  for (const s of services) depthOf(s, new Set([s.name]));
  return [...services].sort(
    (a, b) => a.step - b.step || depth.get(a.name)! - depth.get(b.name)! || a.name.localeCompare(b.name),
  );
}

/** Build the plan. Throws InputError when inputs do not fit together (e.g. an image missing from the release). */
export function buildPlan(input: PlanInput): PlanResult {
  const { inventory: inv, catalog, release } = input;
  const region = inv.cloud.region ?? 'RegionOne';
  const registry = inv.cloud.registry;
  // every node's dockerd trusts the registry before its first pull (step 1)
  const trust: PlanHost[] = input.registryCa
    ? [
        {
          service: REGISTRY_TRUST_SERVICE,
          step: 1,
          modules: [],
          devices: [],
          stopUnits: [],
          registryTrust: { registry: registry ?? release.registry, ca: input.registryCa },
        },
      ]
    : [];

  // Services per node, ordered by step, then so that a service comes after those it requires
  // (placement before nova-api before nova-conductor: Nova's services ask Placement when they
  // start), then by name.
  const nodeServices = new Map<string, Service[]>();
  const serviceNodes = new Map<string, string[]>();
  for (const node of inv.nodes) {
    const role = catalog.roles.get(node.role)!;
    const svcs = orderByRequires(role.services.map((s) => catalog.services.get(s)!));
    nodeServices.set(node.name, svcs);
    for (const s of svcs) {
      let list = serviceNodes.get(s.name);
      if (!list) serviceNodes.set(s.name, (list = []));
      list.push(node.name);
    }
  }
  const usedServices = [...serviceNodes.keys()]
    .map((n) => catalog.services.get(n)!)
    .sort((a, b) => a.step - b.step || a.name.localeCompare(b.name));

  // Images must exist in the release.
  for (const svc of usedServices) {
    for (const c of svc.containers) {
      if (!release.images[c.image]) {
        throw new InputError(
          'E_IMAGE_NOT_IN_RELEASE',
          `service ${svc.name} needs image '${c.image}', which release ${release.name} does not list`,
          {
            hint: `Add images.${c.image} to images/releases/${release.name}.yaml.`,
            location: { file: `images/releases/${release.name}.yaml` },
          },
        );
      }
    }
    for (const req of svc.requires ?? []) {
      if (!serviceNodes.has(req)) {
        throw new InputError(
          'E_SERVICE_REQUIREMENT',
          `service ${svc.name} requires ${req}, which no node of the inventory runs`,
          {
            hint: `Give some node a role that includes ${req}.`,
            location: { file: 'roles/' },
          },
        );
      }
    }
  }

  // Template settings: defaults declared by the services, overridden by the release's, then by cloud.settings,
  // each checked against the setting's declared type (`inventory validate` has located the inventory's).
  const settings: Record<string, SettingValue> = {};
  for (const svc of usedServices) Object.assign(settings, svc.settings ?? {});
  const typed = (k: string, v: SettingValue, where: string, file?: string): SettingValue => {
    const spec = catalog.settings.get(k);
    const problem = spec && settingProblem(spec, v);
    if (spec && problem)
      throw new InputError('E_SETTING_VALUE', `${where} ${problem}`, {
        hint: `${k} (service ${spec.service}) takes ${describeSetting(spec)}.`,
        ...(file ? { location: { file } } : {}),
      });
    return v;
  };
  for (const svc of usedServices) {
    const conditions = [
      ...svc.containers.map((c) => ({ what: `container ${c.name}`, when: c.when })),
      { what: 'host preparation', when: svc.host?.when },
      { what: 'node certificate', when: svc.node_certificate?.when },
      ...(svc.host?.modules ?? []).map((m) => ({
        what: 'host preparation',
        when: typeof m === 'string' ? undefined : m.when,
      })),
      ...(svc.host?.devices ?? []).map((d) => ({
        what: 'host preparation',
        when: typeof d === 'string' ? undefined : d.when,
      })),
    ];
    for (const { what, when } of conditions)
      if (when && !(when.setting in settings)) {
        throw new InputError(
          'E_UNKNOWN_SETTING',
          `${what} of service ${svc.name} depends on setting '${when.setting}', which no service of this cloud declares`,
          { hint: `Declare it under settings: in a service file, or fix the name in roles/services/${svc.name}.yaml.` },
        );
      }
  }
  for (const [k, v] of Object.entries(release.settings ?? {})) {
    if (!(k in settings)) {
      throw new InputError(
        'E_UNKNOWN_SETTING',
        `settings.${k} of release manifest ${release.name} is not a setting of any service this cloud runs`,
        {
          hint: `Fix the name in images/releases/${release.name}.yaml; known settings: ${Object.keys(settings).sort().join(', ')}.`,
        },
      );
    }
    settings[k] = typed(
      k,
      v,
      `settings.${k} of release manifest ${release.name}`,
      `images/releases/${release.name}.yaml`,
    );
  }
  for (const [k, v] of Object.entries(inv.cloud.settings ?? {})) {
    if (!(k in settings)) {
      throw new InputError('E_UNKNOWN_SETTING', `cloud.settings.${k} is not a setting of any service this cloud runs`, {
        hint: `Known settings: ${Object.keys(settings).sort().join(', ') || '(none)'}.`,
      });
    }
    settings[k] = typed(k, v, `cloud.settings.${k}`);
  }
  // What templates see: a secret setting's value is the secret it names, which they can only write.
  const templateSettings: Record<string, SettingValue | SecretRef> = { ...settings };
  for (const [k, v] of Object.entries(settings))
    if (catalog.settings.get(k)?.type === 'secret')
      templateSettings[k] = new SecretRef(SECRET_REF.exec(String(v))![1]!);

  const vips: Record<string, string> = {};
  for (const name of Object.keys(inv.networks).sort()) {
    const vip = inv.networks[name]!.vip;
    if (vip) vips[name] = vip;
  }

  // Where each API answers: the VIP of a network, else the first HAProxy node's address there.
  const haproxyNodes = serviceNodes.get('haproxy') ?? [];
  const apiHost = (net: string): string => {
    const vip = vips[net];
    if (vip) return vip;
    const first = haproxyNodes[0] ?? serviceNodes.values().next().value?.[0];
    return (first && input.addresses.get(first)?.[net]) ?? '';
  };

  // TLS: the networks whose HTTP frontends HAProxy terminates TLS on, and the PEM it reads there.
  const served = servedEndpoints(inv.tls);
  const tlsNetwork = new Map<string, ServedEndpoint>(served.map((e) => [SERVED_ENDPOINTS[e].network, e]));
  const scheme = (net: string): 'http' | 'https' => (tlsNetwork.has(net) ? 'https' : 'http');
  const tlsSecret = (e: ServedEndpoint): string => `tls_${e}_pem`;
  if (input.secrets)
    for (const e of served)
      if (!input.tls?.pems[e] || (e === 'internal' && !input.tls.ca))
        throw new InputError(
          'E_CERT_MISSING',
          `the ${e} endpoint is served over TLS (inventory tls) but its certificate cannot be read: ${input.tls?.missing?.[e] ?? 'not loaded'}`,
          {
            hint: "Run 'stackctl certs generate -i INVENTORY' (or name the operator's files under tls.endpoints), then plan again.",
          },
        );
  // Nodes whose services speak TLS themselves get a certificate of their own (service node_certificate).
  const certNodes = new Map<string, string[]>();
  const certServicesOfRole = new Map<string, string[]>();
  for (const node of inv.nodes) {
    let svcs = certServicesOfRole.get(node.role);
    if (!svcs)
      certServicesOfRole.set(
        node.role,
        (svcs = servicesNeedingNodeCert(nodeServices.get(node.name)!, (k) => settings[k])),
      );
    if (svcs.length) certNodes.set(node.name, svcs);
  }
  if (certNodes.size && !inv.tls) {
    const [node, svcs] = certNodes.entries().next().value!;
    throw new InputError(
      'E_TLS_REQUIRED',
      `${svcs.join(', ')} on ${node} speaks TLS with a certificate of the node's own (service node_certificate), but the inventory has no tls: section for the cloud's CA`,
      {
        hint: "Add 'tls: {}' to the inventory (docs/tls.md), run 'stackctl certs generate -i INVENTORY', then plan again.",
      },
    );
  }
  if (input.secrets)
    for (const node of certNodes.keys())
      if (!input.tls?.nodes?.[node]?.key || !input.tls.ca)
        throw new InputError(
          'E_CERT_MISSING',
          `node ${node} needs a certificate of its own (${certNodes.get(node)!.join(', ')}) but it cannot be read: ${input.tls?.missingNodes?.[node] ?? 'not loaded'}`,
          {
            hint: "Run 'stackctl certs generate -i INVENTORY' (it issues each node's own certificate from the cloud's CA), then plan again.",
          },
        );
  const tlsContext: Record<string, SecretRef | string | false> = {};
  for (const e of Object.keys(SERVED_ENDPOINTS) as ServedEndpoint[])
    tlsContext[e] = served.includes(e) ? new SecretRef(tlsSecret(e)) : false;
  // the CA the services' clients verify the internal endpoints with (common/ca.pem.hbs); without
  // the secrets (a printed plan) a CA that cannot be read renders as nothing
  tlsContext['ca'] = served.includes('internal') ? (input.tls?.ca ?? '') : false;

  // Templates render with placeholders; the real files get the values substituted afterwards.
  const secretRefs: Record<string, SecretRef | { index: number; key: SecretRef }[]> = {};
  for (const svc of usedServices) {
    for (const s of svc.secrets ?? []) {
      if (s.key_repository) {
        secretRefs[s.name] = keyRepositoryRefs(s.name, svc.name, input.secrets);
        continue;
      }
      secretRefs[s.name] = new SecretRef(s.name);
      if (input.secrets) {
        const v = input.secrets.get(s.name);
        if (!v) {
          throw new InputError(
            'E_SECRET_MISSING',
            `secret '${s.name}' (service ${svc.name}) is missing from the secrets file`,
            {
              hint: "Run 'stackctl secrets generate' to add the missing secrets; existing values are kept.",
            },
          );
        }
      }
    }
  }
  const tlsValues = new Map(served.map((e) => [tlsSecret(e), input.tls?.pems[e]]));
  const secretValue = (name: string): string | undefined =>
    (tlsValues.has(name) ? tlsValues.get(name) : input.secrets?.get(name))?.reveal();

  const bootstrap = new Map<string, string>();
  for (const [svc, nodes] of serviceNodes) bootstrap.set(svc, nodes[0]!);

  const hosts: Record<string, { names: string[]; bootstrap: string; ip: Record<string, string[]> }> = {};
  for (const [svc, nodes] of serviceNodes) {
    const ip: Record<string, string[]> = {};
    for (const net of Object.keys(inv.networks).sort())
      ip[net] = nodes.map((n) => input.addresses.get(n)?.[net]).filter((a): a is string => !!a);
    hosts[key(svc)] = { names: nodes, bootstrap: bootstrap.get(svc)!, ip };
  }

  const frontends = usedServices.flatMap((svc) =>
    (svc.haproxy ?? []).map((f) => {
      const net = f.backend_network ?? 'internal_api';
      const nets = f.vip_networks.filter((n) => apiHost(n) !== '');
      // TLS is terminated on HTTP frontends only; backends stay plain HTTP on the internal network.
      const secured = (n: string): boolean => f.mode === 'http' && tlsNetwork.has(n);
      return {
        name: f.name,
        service: svc.name,
        port: f.port,
        backend_port: f.backend_port,
        mode: f.mode,
        check: f.check ?? '',
        check_port: f.check_port ?? 0,
        active_backup: f.active_backup ?? false,
        binds: nets.filter((n) => !secured(n)).map(apiHost),
        tls_binds: nets
          .filter(secured)
          .map((n) => ({ address: apiHost(n), crt: `${HAPROXY_CRT_DIR}/${tlsNetwork.get(n)!}.pem` })),
        backends: (serviceNodes.get(svc.name) ?? []).map((n) => ({ name: n, ip: input.addresses.get(n)?.[net] ?? '' })),
      };
    }),
  );

  const endpointsOf = (svc: Service): PlanService['endpoints'] =>
    (svc.endpoints ?? []).flatMap((e) =>
      (['public', 'internal', 'admin'] as const).map((iface) => ({
        type: e.type,
        interface: iface,
        url: `${scheme(iface === 'public' ? 'external' : 'internal_api')}://${apiHost(iface === 'public' ? 'external' : 'internal_api')}:${e.port}${e.path ?? ''}`,
      })),
    );
  const endpointBase = {
    public: `${scheme('external')}://${apiHost('external')}`,
    internal: `${scheme('internal_api')}://${apiHost('internal_api')}`,
    public_host: apiHost('external'),
    internal_host: apiHost('internal_api'),
  };

  // Each network's shape, for configs that need more than an address (a prefix length, an MTU).
  const networks: Record<string, { cidr: string; prefix: string; mtu: number; gateway: string }> = {};
  for (const name of Object.keys(inv.networks).sort()) {
    const n = inv.networks[name]!;
    networks[name] = { cidr: n.cidr, prefix: n.cidr.split('/')[1]!, mtu: n.mtu ?? 1500, gateway: n.gateway ?? '' };
  }

  // The Neutron agents each node must run (the deploy's last step waits until Neutron lists them alive).
  const networkAgents = networkExpectation(
    (n) => input.addresses.get(n),
    serviceNodes,
    catalog.provides.networkAgents,
  ).agents;

  const sharedContext = {
    networks,
    network_agents: networkAgents,
    cloud: {
      name: inv.cloud.name,
      release: release.name,
      region,
      domain: inv.cloud.domain ?? `${inv.cloud.name}.local`,
      settings: templateSettings,
    },
    release: { name: release.name, openstack: release.openstack, series: release.series },
    vips,
    api: endpointBase,
    hosts,
    frontends,
    secrets: secretRefs,
    tls: tlsContext,
  };

  // Each image once: its tag reference, its pin, and what nodes pull.
  const images = new Map<string, PlanImage & { readonly pull: string }>();
  const imageOf = (key: string): string => {
    let img = images.get(key);
    if (!img) {
      const ref = imageRef(release, key, registry)!;
      const digest = input.pins?.get(ref);
      images.set(key, (img = { key, ref, ...(digest ? { digest } : {}), pull: digest ? pinnedRef(ref, digest) : ref }));
    }
    return img.pull;
  };

  const keepRendered = input.keepRendered ?? true;
  const rendered = new Map<string, Map<string, string>>();
  const effectiveNodes: PlanNode[] = [];
  const nodes: PlanNode[] = inv.nodes.map((node) => {
    const addresses = sortRecord(input.addresses.get(node.name) ?? {});
    const svcs = nodeServices.get(node.name)!;
    const files = new Map<string, string>();
    // Two views of the same node: printable (placeholder hashes) and effective (real hashes).
    // Without secrets both views are the same: build one.
    const views = Array.from({ length: input.secrets ? 2 : 1 }, () => ({
      configs: [] as PlanConfig[],
      containers: [] as PlanContainer[],
    }));
    const ctx = {
      ...sharedContext,
      // the node's own certificate (what templates write as tls.node.cert, tls.node.key, tls.node.ca), or false
      tls: {
        ...tlsContext,
        node: certNodes.has(node.name)
          ? { cert: input.tls?.nodes?.[node.name]?.cert ?? '', key: new SecretRef(NODE_KEY), ca: input.tls?.ca ?? '' }
          : false,
      },
      node: {
        name: node.name,
        role: node.role,
        fqdn: `${node.name}.${sharedContext.cloud.domain}`,
        ip: addresses,
        // a stable identity of the node within its cloud (libvirt's host_uuid)
        uuid: uuidFromName(`stackctl-node:${inv.cloud.name}/${node.name}`),
      },
    };
    const nodeSecret = (name: string): string | undefined =>
      name === NODE_KEY ? input.tls?.nodes?.[node.name]?.key?.reveal() : secretValue(name);
    for (const svc of svcs) {
      const svcConfigs: {
        dest: string;
        hashes: [string, string];
        containers?: readonly string[];
        reload?: true;
      }[] = [];
      for (const cfg of svc.config ?? []) {
        const tagged = catalog.templates.get(cfg.template)!({
          ...ctx,
          service: { name: svc.name, bootstrap: bootstrap.get(svc.name) === node.name },
        });
        // the printable hash is of the placeholders (which say how each secret is escaped), not of values
        const printableHash = sha256(tagged);
        const text = input.secrets
          ? revealSecrets(tagged, nodeSecret, `roles/templates/${cfg.template}`)
          : printableText(tagged);
        const hashes: [string, string] = [printableHash, text === tagged ? printableHash : sha256(text)];
        if (keepRendered) files.set(cfg.dest, text);
        views.forEach((v, i) =>
          v.configs.push({ service: svc.name, dest: cfg.dest, mode: cfg.mode ?? '0640', sha256: hashes[i]! }),
        );
        svcConfigs.push({
          dest: cfg.dest,
          hashes,
          ...(cfg.containers ? { containers: cfg.containers } : {}),
          ...(cfg.reload ? { reload: true } : {}),
        });
      }
      for (const c of svc.containers) {
        if (c.when && !c.when.in.includes(settings[c.when.setting]!)) continue;
        const image = imageOf(c.image);
        const reads = svcConfigs.filter((f) => !f.containers || f.containers.includes(c.name));
        views.forEach((v, i) =>
          v.containers.push({
            name: c.name,
            service: svc.name,
            step: svc.step,
            image,
            // a file the container re-reads in place is not part of its identity: a change reloads it
            hash: containerHash(
              image,
              c,
              reads.filter((f) => !f.reload).map((f) => [f.dest, f.hashes[i]!]),
            ),
          }),
        );
      }
    }
    if (keepRendered) rendered.set(node.name, files);
    const host = [...trust, ...svcs.flatMap((svc) => hostOf(svc, settings))];
    const base = {
      name: node.name,
      role: node.role,
      bmc: node.bmc.address,
      addresses,
      services: svcs.map((x) => x.name),
      ...(host.length ? { host } : {}),
    };
    if (views[1]) effectiveNodes.push({ ...base, ...views[1] });
    return { ...base, ...views[0]! };
  });

  const services: PlanService[] = usedServices.map((svc) => ({
    name: svc.name,
    step: svc.step,
    nodes: serviceNodes.get(svc.name)!,
    bootstrap: bootstrap.get(svc.name)!,
    endpoints: endpointsOf(svc),
    frontends: frontends
      .filter((f) => f.service === svc.name)
      .map((f) => ({
        name: f.name,
        vips: [...f.binds, ...f.tls_binds.map((b) => b.address)],
        port: f.port,
        ...(f.tls_binds.length ? { tls: f.tls_binds.map((b) => b.address) } : {}),
      })),
  }));

  const r = inv.cloud.resources;
  const resources =
    r && (r.flavors?.length || r.images?.length || r.external_network || r.tenant_network)
      ? {
          flavors: r.flavors ?? [],
          images: r.images ?? [],
          ...(r.external_network ? { external_network: externalNetwork(inv, r.external_network, settings) } : {}),
          ...(r.tenant_network ? { tenant_network: r.tenant_network } : {}),
        }
      : undefined;
  const steps = buildSteps(nodes, usedServices, bootstrap, resources !== undefined);

  const plan: Plan = {
    cloud: {
      name: inv.cloud.name,
      release: release.name,
      openstack: release.openstack,
      series: release.series,
      region,
      ...(resources ? { resources } : {}),
    },
    inputs: {
      inventory: input.inventoryDigest,
      catalog: sha256(canonicalJson({ roles: [...catalog.roles.values()], services: [...catalog.services.values()] })),
      release: sha256(canonicalJson(release)),
      secrets: input.secrets ? 'present' : 'absent',
    },
    vips,
    ...(served.length ? { tls: served } : {}),
    images: [...images.values()]
      .sort((a, b) => a.ref.localeCompare(b.ref))
      .map(({ key, ref, digest }) => ({ key, ref, ...(digest ? { digest } : {}) })),
    nodes,
    services,
    steps,
  };
  const effective: Plan = input.secrets
    ? {
        ...plan,
        nodes: effectiveNodes,
        steps: buildSteps(effectiveNodes, usedServices, bootstrap, resources !== undefined),
      }
    : plan;
  return { plan, effective, rendered };
}

/**
 * A key repository as templates see it: its keys by index, ascending, each a SecretRef. Without
 * secrets (a printable plan on a machine that has none) the two keys `secrets generate` makes.
 */
function keyRepositoryRefs(
  name: string,
  service: string,
  secrets: ReadonlyMap<string, unknown> | undefined,
): { index: number; key: SecretRef }[] {
  const indices = secrets ? keyIndices(name, secrets.keys()) : [0, 1];
  if (indices[0] !== 0 || indices.length < 2) {
    throw new InputError(
      'E_SECRET_MISSING',
      `key repository '${name}' (service ${service}) needs a staged key ${name}_0 and a primary in the secrets file; it holds ${indices.length ? `indices ${indices.join(', ')}` : 'none'}`,
      {
        hint: "Run 'stackctl secrets generate' to create a repository that has no keys; restore lost keys from a backup of the secrets file.",
      },
    );
  }
  return indices.map((index) => ({ index, key: new SecretRef(keyEntry(name, index)) }));
}

/** A service's host preparation on its nodes, when it has one and its condition holds. */
function hostOf(svc: Service, settings: Readonly<Record<string, SettingValue>>): PlanHost[] {
  const h = svc.host;
  const holds = (when: { readonly setting: string; readonly in: readonly SettingValue[] } | undefined): boolean =>
    !when || when.in.includes(settings[when.setting]!);
  if (!h || !holds(h.when)) return [];
  return [
    {
      service: svc.name,
      step: svc.step,
      modules: (h.modules ?? [])
        .filter((m) => typeof m === 'string' || holds(m.when))
        .map((m) => (typeof m === 'string' ? [m] : m.any_of)),
      devices: (h.devices ?? [])
        .filter((d) => typeof d === 'string' || holds(d.when))
        .map((d) => (typeof d === 'string' ? d : d.path)),
      stopUnits: h.stop_units ?? [],
      ...(h.hint ? { hint: h.hint } : {}),
    },
  ];
}

/** The step at whose end service users and endpoints are registered (keystone's step). */
const REGISTER_STEP = 3;

function buildSteps(
  nodes: readonly PlanNode[],
  services: readonly Service[],
  bootstrap: ReadonlyMap<string, string>,
  withResources: boolean,
): PlanStep[] {
  const roles = serviceRoles(services);
  const dbNode = roles.database && bootstrap.get(roles.database.service);
  const keystoneNode = roles.identity && bootstrap.get(roles.identity.service);
  const computeApi = roles.computeApi?.service;
  return ([1, 2, 3, 4, 5] as const).map((step) => {
    const actions: PlanAction[] = [];
    if (step === 3 && dbNode) {
      for (const svc of services)
        for (const db of svc.databases ?? [])
          actions.push({ kind: 'database', node: dbNode, service: svc.name, database: db.name });
    }
    for (const svc of services) {
      for (const t of svc.tasks ?? [])
        if (t.step === step)
          actions.push({ kind: 'task', node: bootstrap.get(svc.name)!, service: svc.name, task: t.name });
    }
    // Users and endpoints are registered once Keystone is bootstrapped, at the end of the step that
    // starts it: Nova's conductor and scheduler authenticate as their user when they start (step 4).
    if (step === REGISTER_STEP && keystoneNode) {
      for (const svc of services)
        if (svc.service_user)
          actions.push({ kind: 'register', node: keystoneNode, service: svc.name, user: svc.service_user.name });
    }
    for (const node of nodes) {
      // the node's OS first: the containers of the step may need what it prepares
      for (const h of node.host ?? [])
        if (h.step === step) actions.push({ kind: 'host', node: node.name, service: h.service });
      for (const c of node.containers)
        if (c.step === step)
          actions.push({ kind: 'container', node: node.name, service: c.service, container: c.name });
    }
    if (step === 5 && keystoneNode && computeApi && withResources)
      actions.push({ kind: 'resources', node: keystoneNode, service: computeApi });
    return { step, title: STEPS[step], actions };
  });
}

// The options of a container are the same on every node: serialise each once.
const containerJson = new WeakMap<object, string>();

/** What `privileged` maps to, serialised once: part of a privileged container's hash. */
const privilegedJson = canonicalJson(PRIVILEGED_OPTIONS);

/**
 * sha256 of image + container options (with what `privileged` maps to, so a new mapping recreates
 * exactly the privileged containers) + the (path, hash) of each config it reads.
 */
function containerHash(
  image: string,
  container: Service['containers'][number],
  reads: readonly (readonly string[])[],
): string {
  let json = containerJson.get(container);
  if (json === undefined)
    containerJson.set(container, (json = canonicalJson(container) + (container.privileged ? privilegedJson : '')));
  return sha256(`${image}\n${json}\n${reads.map((r) => r.join(' ')).join('\n')}`);
}

// Every node has the same few network names: sort each set of them once (localeCompare is slow).
const sortedKeys = new Map<string, readonly string[]>();

function sortRecord(rec: Record<string, string>): Record<string, string> {
  const keys = Object.keys(rec);
  const id = keys.join('\u0000');
  let order = sortedKeys.get(id);
  if (!order) sortedKeys.set(id, (order = [...keys].sort((a, b) => a.localeCompare(b))));
  const out: Record<string, string> = {};
  for (const k of order) out[k] = rec[k]!;
  return out;
}

/** Stable JSON text of a plan (keys in declaration order, arrays in plan order). */
export function planToJson(plan: Plan): string {
  return JSON.stringify(plan, null, 2) + '\n';
}

/**
 * The external network of `cloud.resources`, resolved from its inventory network (the inventory's
 * checks have refused a missing network, a missing gateway and a floating-IP range that does not fit).
 */
function externalNetwork(
  inv: Inventory,
  e: NonNullable<NonNullable<Inventory['cloud']['resources']>['external_network']>,
  settings: Readonly<Record<string, SettingValue>>,
): PlanExternalNetwork {
  const netName = e.network ?? 'external';
  const net = inv.networks[netName];
  if (!net?.gateway) {
    throw new InputError(
      'E_EXTERNAL_NETWORK',
      `cloud.resources.external_network: no network '${netName}' with a gateway`,
      {
        hint: `Name a network of the inventory that has a gateway (network:).`,
      },
    );
  }
  return {
    name: e.name,
    physnet: String(settings['neutron_external_physnet'] ?? 'physnet1'),
    cidr: net.cidr,
    gateway: net.gateway,
    floating_range: [e.floating_range[0], e.floating_range[1]],
  };
}
