import { Type, type Static } from '@sinclair/typebox';

/**
 * The inventory's JSON Schema (field names of DESIGN.md section 3). Types are
 * derived from it (`Static<>`), so schema and code cannot drift; the published
 * copy in schemas/inventory.schema.json is checked against this in the tests.
 * Every object is closed (`additionalProperties: false`): an unknown key is
 * almost always a typo.
 */

const strict = { additionalProperties: false } as const;

/** Dotted-quad IPv4 address. Ranges are checked semantically. */
export const Ipv4 = Type.String({
  pattern: '^(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)(\\.(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)){3}$',
  description: 'IPv4 address, dotted quad',
});

/** A network name: a key of `networks`. */
export const NetworkName = Type.String({
  pattern: '^[a-z0-9][a-z0-9_-]*$',
  description: 'a network name: lower-case letters, digits, hyphens and underscores',
});

/** A DNS label usable as a hostname, a node or credentials name. */
export const Name = Type.String({
  pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$',
  description: 'lower-case letters, digits and hyphens; starts and ends with a letter or digit; at most 63 characters',
});

export const NetworkSchema = Type.Object(
  {
    cidr: Type.String({ pattern: '^[0-9.]+/\\d{1,2}$', description: 'IPv4 network in CIDR form, e.g. 172.17.0.0/24' }),
    gateway: Type.Optional({ ...Ipv4, description: 'default gateway on this network' }),
    vlan: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 4094, description: '802.1Q VLAN id (untagged if absent)' }),
    ),
    vip: Type.Optional({ ...Ipv4, description: 'virtual IP held by keepalived on the controllers of this network' }),
    dhcp_range: Type.Optional(
      Type.Tuple([Ipv4, Ipv4], {
        description: 'first and last address handed out by DHCP during inspection; never allocated to nodes',
      }),
    ),
    allocation_range: Type.Optional(
      Type.Tuple([Ipv4, Ipv4], {
        description: 'first and last address IPAM may allocate to nodes (default: every host address of the cidr)',
      }),
    ),
    mtu: Type.Optional(Type.Integer({ minimum: 1280, maximum: 9216, description: 'MTU of the network' })),
  },
  { ...strict, description: 'one L3 network' },
);

export const BmcSchema = Type.Object(
  {
    address: Type.String({
      minLength: 1,
      description:
        'ipmi://host[:port], redfish+https://host[:port]/redfish/v1/Systems/ID or redfish+http://… ' +
        '(loopback, or with insecure_http: true)',
    }),
    credentials: { ...Name, description: 'name of a credentials entry in the secrets file (bmc.<name>)' },
    ca_bundle: Type.Optional(Type.String({ minLength: 1, description: 'Redfish: PEM CA bundle path for TLS checks' })),
    insecure_http: Type.Optional(
      Type.Boolean({
        description:
          'Redfish: true allows redfish+http:// to a BMC off loopback (credentials cross the network in clear text)',
      }),
    ),
  },
  { ...strict, description: "the node's baseboard management controller" },
);

export const NicSchema = Type.Object(
  {
    mac: Type.String({
      pattern: '^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$',
      description: 'MAC address, six colon-separated hex pairs; quote it in YAML',
    }),
    network: { ...NetworkName, description: 'the network this NIC is cabled to (a key of networks)' },
    name: Type.Optional(Type.String({ pattern: '^[a-zA-Z0-9_.-]{1,15}$', description: 'interface name on the host' })),
  },
  { ...strict, description: 'one network interface' },
);

export const RootDeviceSchema = Type.Object(
  {
    min_size_gb: Type.Optional(Type.Integer({ minimum: 1, description: 'smallest acceptable disk, GiB' })),
    size_gb: Type.Optional(Type.Integer({ minimum: 1, description: 'exact disk size, GiB' })),
    serial: Type.Optional(Type.String({ minLength: 1, description: 'disk serial number' })),
    wwn: Type.Optional(Type.String({ minLength: 1, description: 'World Wide Name' })),
    model: Type.Optional(Type.String({ minLength: 1, description: 'disk model (substring match)' })),
    vendor: Type.Optional(Type.String({ minLength: 1, description: 'disk vendor (substring match)' })),
    rotational: Type.Optional(Type.Boolean({ description: 'true for spinning disks, false for SSD/NVMe' })),
    hctl: Type.Optional(Type.String({ pattern: '^\\d+:\\d+:\\d+:\\d+$', description: 'SCSI host:channel:target:lun' })),
    by_path: Type.Optional(Type.String({ pattern: '^/dev/disk/by-path/', description: '/dev/disk/by-path/… link' })),
    name: Type.Optional(
      Type.String({ pattern: '^/dev/', description: 'kernel device name (unstable across boots; prefer serial/wwn)' }),
    ),
  },
  { ...strict, description: 'root device hints: every given hint must match exactly one disk' },
);

export const NodeSchema = Type.Object(
  {
    name: { ...Name, description: 'hostname of the node, unique in the inventory' },
    role: Type.String({ pattern: '^[A-Z][A-Za-z0-9]*$', description: 'a role defined in roles/<Role>.yaml' }),
    bmc: BmcSchema,
    nics: Type.Array(NicSchema, { minItems: 1, description: 'network interfaces; one must be on provisioning' }),
    root_device: Type.Optional(RootDeviceSchema),
    preprovisioned: Type.Optional(
      Type.Boolean({
        description:
          "true: the host was installed by others (OS, sshd with stackctl's key, dockerd trusting the registry); " +
          'deploy never enrolls, inspects or provisions it',
      }),
    ),
    ips: Type.Optional(
      Type.Record(NetworkName, Ipv4, {
        description: 'fixed addresses by network name; addresses on the other networks of the role come from IPAM',
      }),
    ),
  },
  { ...strict, description: 'one physical machine' },
);

const ResourceName = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$', maxLength: 64 });

export const FlavorSchema = Type.Object(
  {
    name: ResourceName,
    vcpus: Type.Integer({ minimum: 1, maximum: 1024 }),
    ram_mb: Type.Integer({ minimum: 64 }),
    disk_gb: Type.Integer({ minimum: 0 }),
  },
  { ...strict, description: 'a Nova flavour created (never changed) at step 5' },
);

export const ImageSchema = Type.Union([
  Type.Object(
    {
      name: ResourceName,
      size_kb: Type.Integer({
        minimum: 1,
        maximum: 65536,
        description: 'size of the generated raw image (zeros): enough for the fake virt driver, which never reads it',
      }),
    },
    { ...strict, description: 'a small public Glance image generated and uploaded at step 5' },
  ),
  Type.Object(
    {
      name: ResourceName,
      build: Type.Literal('guest', {
        description:
          'the guest image stackctl builds (stackctl images build guest; the deploy reads it from --guest-image)',
      }),
    },
    {
      ...strict,
      description:
        'the guest image, uploaded at step 5 as <name> (a raw root disk naming its kernel and initramfs), ' +
        '<name>-kernel and <name>-ramdisk',
    },
  ),
]);

export const ExternalNetworkSchema = Type.Object(
  {
    name: ResourceName,
    network: Type.Optional(
      Type.String({
        pattern: '^[a-z][a-z0-9_]*$',
        default: 'external',
        description:
          "the inventory network it is (default external): its cidr and gateway make the subnet, and the gateway chassis' br-ex holds its NIC",
      }),
    ),
    floating_range: Type.Tuple([Ipv4, Ipv4], {
      description: 'first and last floating IP of the subnet (outside the VIP and the addresses IPAM gives nodes)',
    }),
  },
  {
    ...strict,
    description: "Neutron's external (provider, flat on the physnet neutron_external_physnet) network, made at step 5",
  },
);

export const TenantNetworkSchema = Type.Object(
  {
    name: ResourceName,
    cidr: Type.String({ pattern: '^[0-9.]+/\\d{1,2}$', description: 'its subnet (DHCP from OVN)' }),
    router: { ...ResourceName, description: 'a router between it and the external network (its gateway)' },
  },
  { ...strict, description: 'a starter tenant (Geneve) network of the admin project and its router, made at step 5' },
);

export const ResourcesSchema = Type.Object(
  {
    flavors: Type.Optional(Type.Array(FlavorSchema, { default: [] })),
    images: Type.Optional(Type.Array(ImageSchema, { default: [] })),
    external_network: Type.Optional(ExternalNetworkSchema),
    tenant_network: Type.Optional(TenantNetworkSchema),
  },
  {
    ...strict,
    description: 'flavours, images and starter networks made at the end of a deploy, so the cloud is usable at once',
  },
);

export const CloudSchema = Type.Object(
  {
    name: { ...Name, description: 'name of the cloud' },
    release: Type.String({
      pattern: '^[a-z0-9][a-z0-9.-]*$',
      description: 'release manifest images/releases/<release>.yaml',
    }),
    domain: Type.Optional(Type.String({ pattern: '^[a-z0-9.-]+$', description: 'DNS domain of the nodes' })),
    region: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$',
        description:
          'Keystone region id (default RegionOne): a letter or digit, then letters, digits, . _ and -, ' +
          'at most 64 characters; no spaces (the id goes into URLs, shell files and every service config)',
      }),
    ),
    registry: Type.Optional(
      Type.String({
        pattern: '^[a-zA-Z0-9.-]+(:\\d+)?$',
        description: 'container registry host[:port] the nodes pull from',
      }),
    ),
    registry_insecure: Type.Optional(
      Type.Boolean({
        description:
          'true: the registry speaks plain HTTP and the nodes pull from it without TLS (their dockerd lists it ' +
          "under insecure-registries). Required, as stackctl's own registry has no TLS yet; images are still " +
          'pulled by pinned digest, so content that does not match the pin is refused',
      }),
    ),
    settings: Type.Optional(
      Type.Record(
        Type.String({ pattern: '^[a-z][a-z0-9_]*$' }),
        Type.Union([Type.String(), Type.Number(), Type.Boolean()]),
        {
          description: 'cloud-wide template settings, e.g. nova_compute_driver: fake.FakeDriver for the lab',
        },
      ),
    ),
    resources: Type.Optional(ResourcesSchema),
  },
  { ...strict, description: 'the cloud as a whole' },
);

/** The TLS endpoints stackctl makes certificates for (src/certs/endpoints.ts describes each). */
export const TLS_ENDPOINTS = ['public', 'internal', 'registry'] as const;
export type TlsEndpoint = (typeof TLS_ENDPOINTS)[number];

const PemPath = (what: string) =>
  Type.String({ minLength: 1, description: `${what}: a PEM file, relative to the inventory's folder or absolute` });

export const TlsCaSchema = Type.Object(
  {
    cert: PemPath("the CA's certificate"),
    key: Type.Optional(
      PemPath(
        "the CA's private key (mode 0600 or stricter); without it, stackctl cannot issue certificates and every " +
          'endpoint needs its own under tls.endpoints',
      ),
    ),
  },
  { ...strict, description: "the operator's CA, used instead of one stackctl generates" },
);

export const TlsFilesSchema = Type.Object(
  {
    cert: PemPath('the certificate (the leaf first; intermediates may follow)'),
    key: PemPath("the certificate's private key"),
  },
  { ...strict, description: "an operator's certificate and key for one endpoint" },
);

/** Days left under which `stackctl status` fails on a served certificate (tls.expiry_days). */
export const TLS_EXPIRY_DAYS_DEFAULT = 30;

export const TlsSchema = Type.Object(
  {
    public: Type.Optional(
      Type.Boolean({
        default: true,
        description:
          'HAProxy terminates TLS on the external network (the public API endpoints become https://, plain HTTP ' +
          'there is no longer served); default true once a tls: section exists',
      }),
    ),
    internal: Type.Optional(
      Type.Boolean({
        default: false,
        description:
          'HAProxy terminates TLS on the internal_api network too (the internal and admin endpoints become https://); ' +
          "every service's client of them, and stackctl's, verifies it with the cloud's CA",
      }),
    ),
    expiry_days: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 825,
        default: TLS_EXPIRY_DAYS_DEFAULT,
        description:
          "stackctl status fails (naming it) on a served certificate or the CA with fewer days left (status' --cert-days overrides)",
      }),
    ),
    ca: Type.Optional(TlsCaSchema),
    endpoints: Type.Optional(
      Type.Object(
        {
          public: Type.Optional(TlsFilesSchema),
          internal: Type.Optional(TlsFilesSchema),
          registry: Type.Optional(TlsFilesSchema),
        },
        {
          ...strict,
          description: 'endpoint -> operator certificate; an endpoint not named here gets one stackctl issues',
        },
      ),
    ),
  },
  {
    ...strict,
    description:
      "operator-provided CA and certificates (docs/tls.md); what is absent, 'stackctl certs generate' creates",
  },
);

/** Where in an upgrade a user hook runs (besides where a service file names it). */
export const HOOK_POINTS = ['pre-upgrade', 'pre-batch', 'post-batch', 'post-upgrade'] as const;
export type HookPoint = (typeof HOOK_POINTS)[number];

export const UpgradeHookSchema = Type.Object(
  {
    at: Type.Optional(
      Type.Array(Type.Union(HOOK_POINTS.map((p) => Type.Literal(p))), {
        minItems: 1,
        uniqueItems: true,
        description:
          'points where the hook runs; absent: only where a service file names it (e.g. pre_batch: [nova-evacuate])',
      }),
    ),
    run_on: Type.Union([Type.Literal('deploy-host'), Type.Literal('nodes')], {
      description: 'deploy-host: once, on the machine running stackctl; nodes: on each node of the batch',
    }),
    command: Type.Array(Type.String(), {
      minItems: 1,
      description: 'argv, no shell; STACKCTL_HOOK, STACKCTL_HOOK_POINT and STACKCTL_BATCH_NODES are in its environment',
    }),
    timeout_s: Type.Optional(Type.Integer({ minimum: 1, default: 600, description: 'seconds before the hook fails' })),
  },
  { ...strict, description: 'a user hook of stackctl upgrade' },
);

export const EvacuationSettingsSchema = Type.Object(
  {
    concurrency: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 64, default: 2, description: 'live migrations in flight at once' }),
    ),
    timeout_s: Type.Optional(
      Type.Integer({
        minimum: 1,
        default: 300,
        description: "deadline of one instance's live migration; past it the migration is aborted",
      }),
    ),
    poll_s: Type.Optional(
      Type.Integer({ minimum: 1, default: 5, description: 'interval between two looks at a migrating instance' }),
    ),
    abort_grace_s: Type.Optional(
      Type.Integer({
        minimum: 1,
        default: 120,
        description: 'time an aborted live migration has to roll back to its source',
      }),
    ),
    watch_workloads: Type.Optional(
      Type.Boolean({
        default: true,
        description:
          'watch every migrating instance from the deploy host (the state page of the guest image stackctl builds) and write the workload ledger',
      }),
    ),
    workload_max_gap_s: Type.Optional(
      Type.Integer({
        minimum: 1,
        default: 30,
        description:
          'the longest a watched instance may go unanswered during the evacuation; beyond it, or a changed boot id, the evacuation fails',
      }),
    ),
  },
  { ...strict, description: 'knobs of the built-in nova-evacuate hook and of nodes maintenance' },
);

export const PullSettingsSchema = Type.Object(
  {
    concurrency: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 256,
        default: 4,
        description: 'nodes pulling the target images at once (each pulls its images one by one)',
      }),
    ),
  },
  { ...strict, description: "knobs of the upgrade's pre-pull phase" },
);

export const UpgradeSettingsSchema = Type.Object(
  {
    evacuation: Type.Optional(EvacuationSettingsSchema),
    pull: Type.Optional(PullSettingsSchema),
    hooks: Type.Optional(
      Type.Record(Type.String({ pattern: '^[a-z][a-z0-9-]*$' }), UpgradeHookSchema, {
        description: 'hook name -> hook; a name of a built-in hook (nova-evacuate, nova-enable) replaces it',
      }),
    ),
  },
  { ...strict, description: 'settings of stackctl upgrade' },
);

export const InventorySchema = Type.Object(
  {
    cloud: CloudSchema,
    networks: Type.Record(NetworkName, NetworkSchema, {
      description: 'network name -> definition; must include provisioning',
    }),
    nodes: Type.Array(NodeSchema, { minItems: 1, description: 'the physical machines' }),
    upgrade: Type.Optional(UpgradeSettingsSchema),
    tls: Type.Optional(TlsSchema),
  },
  {
    ...strict,
    $id: 'urn:stackctl:schema:inventory',
    title: 'stackctl inventory',
  },
);

/** A schema-valid inventory. */
export type Inventory = Static<typeof InventorySchema>;
export type InventoryNode = Static<typeof NodeSchema>;
export type Network = Static<typeof NetworkSchema>;
export type Nic = Static<typeof NicSchema>;
export type RootDevice = Static<typeof RootDeviceSchema>;
export type UpgradeHook = Static<typeof UpgradeHookSchema>;
export type Tls = Static<typeof TlsSchema>;
export type TlsFiles = Static<typeof TlsFilesSchema>;
