import { Type, type Static } from '@sinclair/typebox';
import { SETTING_TYPES, type SettingType, type SettingValue } from '../inventory/settings.js';

/**
 * Schemas of roles/<Role>.yaml, roles/services/<service>.yaml and
 * images/releases/<release>.yaml (TripleO's composable roles, Kolla's one
 * table per service). Generic code reads these tables: a service needs no
 * code of its own where data can say it. Optional fields with a `default`
 * get it filled in when the file is loaded.
 */

const strict = { additionalProperties: false } as const;
const ServiceName = Type.String({
  pattern: '^[a-z][a-z0-9-]*$',
  description: 'service name (file name without .yaml)',
});
const NetworkName = Type.String({ pattern: '^[a-z0-9][a-z0-9_-]*$' });
const SecretName = Type.String({ pattern: '^[a-z][a-z0-9_]*$', description: 'a key of services: in the secrets file' });
const Command = Type.Array(Type.String(), { minItems: 1, description: 'argv, no shell' });
const Commands = (description: string) => Type.Optional(Type.Array(Command, { minItems: 1, description }));

/** Deploy steps with TripleO's meanings. */
export const STEPS = {
  1: 'load balancer and VIPs',
  2: 'databases, message queue and caches',
  3: 'bootstrap: databases, users, schema migrations',
  4: 'OpenStack services',
  5: 'post-deploy: service registration and discovery',
} as const;
export type StepNumber = 1 | 2 | 3 | 4 | 5;
const Step = Type.Union([Type.Literal(1), Type.Literal(2), Type.Literal(3), Type.Literal(4), Type.Literal(5)], {
  description: '1 load balancer/VIPs, 2 DB/MQ/cache, 3 bootstrap, 4 OpenStack services, 5 post-deploy',
});

export const RoleSchema = Type.Object(
  {
    name: Type.String({ pattern: '^[A-Z][A-Za-z0-9]*$', description: 'role name; must match the file name' }),
    description: Type.String({ minLength: 1 }),
    count: Type.Optional(
      Type.Integer({ minimum: 0, description: 'node count of this role in generated lab topologies' }),
    ),
    networks: Type.Array(NetworkName, {
      minItems: 1,
      uniqueItems: true,
      description: 'networks every node of the role is on',
    }),
    update_serial: Type.Integer({
      minimum: 1,
      description: 'nodes of this role updated at once during a rolling update',
    }),
    services: Type.Array(ServiceName, { minItems: 1, uniqueItems: true }),
  },
  { ...strict, $id: 'urn:stackctl:schema:role', title: 'stackctl role' },
);
export type Role = Static<typeof RoleSchema>;

export const HealthcheckSchema = Type.Object(
  {
    test: Command,
    interval_s: Type.Optional(Type.Integer({ minimum: 1, default: 10 })),
    timeout_s: Type.Optional(Type.Integer({ minimum: 1, default: 5 })),
    retries: Type.Optional(Type.Integer({ minimum: 1, default: 3 })),
    start_period_s: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  strict,
);

/** A condition on a cloud setting. */
const When = (description: string) =>
  Type.Object(
    {
      setting: Type.String({ pattern: '^[a-z][a-z0-9_]*$', description: 'a cloud setting (service settings)' }),
      in: Type.Array(Type.Union([Type.String(), Type.Number(), Type.Boolean()]), { minItems: 1 }),
    },
    { ...strict, description },
  );

export const ContainerSchema = Type.Object(
  {
    name: Type.String({ pattern: '^[a-z][a-z0-9_-]*$', description: 'container name on the node' }),
    image: Type.String({ pattern: '^[a-z][a-z0-9-]*$', description: 'image key in the release manifest' }),
    command: Type.Optional(Command),
    user: Type.Optional(Type.String({ minLength: 1 })),
    volumes: Type.Optional(
      Type.Array(Type.String({ pattern: '^[^:]+:/[^:]*(:(ro|rw|z|Z|shared|rshared))?$' }), {
        description: 'host-path-or-volume:container-path[:ro]',
      }),
    ),
    environment: Type.Optional(Type.Record(Type.String({ pattern: '^[A-Z_][A-Z0-9_]*$' }), Type.String())),
    network_mode: Type.Optional(Type.Union([Type.Literal('host'), Type.Literal('bridge')], { default: 'host' })),
    ports: Type.Optional(
      Type.Array(Type.Integer({ minimum: 1, maximum: 65535 }), {
        description: 'ports the container listens on (host network)',
      }),
    ),
    privileged: Type.Optional(Type.Boolean()),
    init: Type.Optional(
      Type.Boolean({
        description:
          "run an init (Docker's --init) as PID 1 that reaps orphans: for a daemon that is not made to be PID 1 (libvirtd)",
      }),
    ),
    cap_add: Type.Optional(Type.Array(Type.String({ pattern: '^[A-Z_]+$' }))),
    when: Type.Optional(
      When(
        "run this container only when the setting has one of these values (e.g. libvirt's daemons only with the libvirt driver)",
      ),
    ),
    healthcheck: Type.Optional(HealthcheckSchema),
    restart: Type.Optional(
      Type.Union([Type.Literal('always'), Type.Literal('unless-stopped'), Type.Literal('no')], {
        default: 'unless-stopped',
      }),
    ),
    workloads: Type.Optional(
      Type.Object(
        {
          what: Type.String({ pattern: '^[a-z][a-z ]*$', description: "what they are, in words ('guests')" }),
          list: Type.Array(Type.String({ minLength: 1 }), {
            minItems: 1,
            description: 'a command run in the container that prints one running workload per line',
          }),
        },
        {
          ...strict,
          description:
            "the container runs users' workloads (QEMU's guests): a deploy or upgrade does not recreate it while " +
            'the list is not empty (E_WORKLOADS_RUNNING), unless told to (--allow-workload-stop)',
        },
      ),
    ),
  },
  strict,
);
export type Container = Static<typeof ContainerSchema>;

export const ConfigFileSchema = Type.Object(
  {
    template: Type.String({ pattern: '^[a-z0-9][a-z0-9_./-]*\\.hbs$', description: 'path under roles/templates/' }),
    dest: Type.String({ pattern: '^/etc/stackctl/', description: 'absolute path on the node' }),
    mode: Type.Optional(Type.String({ pattern: '^0[0-7]{3}$', default: '0640' })),
    containers: Type.Optional(
      Type.Array(Type.String(), { description: 'containers that read it (absent: all of the service)' }),
    ),
    reload: Type.Optional(
      Type.Boolean({
        description:
          'true: the containers reading it re-read it in place when it changes (they watch it and say in their ' +
          'health check whether they serve its content); it is left out of their hash, so a change reloads, not recreates',
      }),
    ),
  },
  strict,
);

export const DatabaseSchema = Type.Object(
  {
    name: Type.String({ pattern: '^[a-z][a-z0-9_]*$' }),
    user: Type.String({ pattern: '^[a-z][a-z0-9_]*$' }),
    password: SecretName,
  },
  strict,
);

export const EndpointSchema = Type.Object(
  {
    type: Type.String({ pattern: '^[a-z-]+$', description: 'catalog service type, e.g. identity, compute' }),
    service_name: Type.String({ pattern: '^[a-z-]+$' }),
    port: Type.Integer({ minimum: 1, maximum: 65535 }),
    path: Type.Optional(Type.String({ pattern: '^(/.*)?$', default: '' })),
  },
  strict,
);

export const ServiceUserSchema = Type.Object(
  {
    name: Type.String({ pattern: '^[a-z][a-z0-9_-]*$' }),
    password: SecretName,
    roles: Type.Optional(
      Type.Array(Type.String(), { default: ['admin'], description: 'roles in the service project' }),
    ),
  },
  strict,
);

export const TaskSchema = Type.Object(
  {
    name: Type.String({ pattern: '^[a-z][a-z0-9_-]*$' }),
    step: Step,
    container: Type.String({ description: 'container whose image, volumes and config the task borrows' }),
    command: Command,
    reads: Type.Optional(
      Type.Array(Type.String({ pattern: '^/etc/stackctl/' }), {
        description:
          "config files of the service the task reads besides its container's: a change of them runs the task again",
      }),
    ),
    description: Type.Optional(Type.String()),
  },
  strict,
);

export const FrontendSchema = Type.Object(
  {
    name: Type.String({ pattern: '^[a-z][a-z0-9_]*$' }),
    port: Type.Integer({ minimum: 1, maximum: 65535, description: 'port on the VIPs' }),
    backend_port: Type.Integer({ minimum: 1, maximum: 65535, description: 'port on each backend node' }),
    backend_network: Type.Optional(
      Type.String({ default: 'internal_api', description: 'network of the backend addresses' }),
    ),
    vip_networks: Type.Array(NetworkName, { minItems: 1, description: 'networks whose VIP listens' }),
    mode: Type.Union([Type.Literal('http'), Type.Literal('tcp')]),
    check: Type.Optional(Type.String({ description: 'HTTP health-check path' })),
    check_port: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 65535,
        description: "port of the HTTP health check when it is not the backend's (Galera's clustercheck)",
      }),
    ),
    active_backup: Type.Optional(
      Type.Boolean({ description: 'one active backend, the others as backup (Galera writes)' }),
    ),
  },
  strict,
);

export const SkewSchema = Type.Object(
  {
    max_releases_behind: Type.Integer({
      minimum: 0,
      description: 'how many releases older than relative_to this service may run',
    }),
    relative_to: Type.Optional(ServiceName),
    upgrade_with: Type.Optional(Type.Array(ServiceName, { description: 'services that must move in the same phase' })),
  },
  strict,
);

/** One declared backup of `upgrade.backup`: a command whose standard output is the backup file. */
export const BackupCommandSchema = Type.Object(
  {
    name: Type.String({
      pattern: '^[a-z0-9][a-z0-9._-]*$',
      maxLength: 64,
      description: 'file name of the backup, after the service and the time: <service>-<time>-<name>',
    }),
    container: Type.String({ pattern: '^[a-z][a-z0-9_-]*$', description: 'the container of this service it runs in' }),
    command: Command,
  },
  strict,
);

export const UpgradeSchema = Type.Object(
  {
    migration: Type.Union([Type.Literal('none'), Type.Literal('online'), Type.Literal('offline')], {
      description: 'online: expand/migrate/contract with the APIs up; offline: a declared pause with the APIs down',
    }),
    expand: Commands('online: additive schema changes, run once before the restart'),
    migrate: Commands('online: data migrations, run once after every node runs the new code'),
    contract: Commands('online: remove old schema, once no old-version service is up'),
    offline: Commands('offline: migrations run while every API of the service is stopped'),
    check: Commands('pre-upgrade checks (e.g. nova-status upgrade check)'),
    fast_forward_settings: Type.Optional(
      Type.Record(
        Type.String({ pattern: '^[a-z][a-z0-9_]*$' }),
        Type.Union([Type.String(), Type.Number(), Type.Boolean()]),
        {
          description:
            "settings the target's configs of the whole cloud get during a fast-forward that moves this service; " +
            'the next deploy drops them',
        },
      ),
    ),
    fast_forward_waivers: Type.Optional(
      Type.Array(Type.String({ minLength: 1 }), {
        description:
          "names of the check's findings (as it prints them) that may fail inside a fast-forward window, " +
          'because the window itself replaces what they find',
      }),
    ),
    backup_database: Type.Boolean({ description: 'dump the database before a contract or offline migration' }),
    backup: Type.Optional(
      Type.Array(BackupCommandSchema, {
        minItems: 1,
        description:
          "data that is not in the SQL database (OVN's ovsdb files...), saved before the service moves: each " +
          "command's standard output, in the running old container on the service's first node",
      }),
    ),
    before: Type.Optional(
      Type.Array(ServiceName, {
        minItems: 1,
        uniqueItems: true,
        description:
          'services this one moves before in an upgrade, although it requires them for deploy ' +
          '(ovn-controller before ovn-central: old chassis never see logical flows of a newer ovn-northd)',
      }),
    ),
    rolling: Type.Boolean({ description: 'restart node by node behind HAProxy rather than all at once' }),
    distro_change: Type.Optional(
      Type.Object(
        {
          reset_volumes: Type.Array(Type.String({ pattern: '^[a-z][a-z0-9_]*$' }), {
            minItems: 1,
            description: "named volumes of the service's containers emptied: data the new version cannot read",
          }),
        },
        {
          ...strict,
          description:
            'when the target release changes distribution suite: stop on every node, empty these volumes, ' +
            'start again (bootstrap node first) instead of rolling',
        },
      ),
    ),
    skew: Type.Optional(SkewSchema),
    hooks: Type.Optional(
      Type.Object(
        {
          pre_batch: Type.Optional(
            Type.Array(Type.String(), { description: 'built-in or user hooks run before each batch' }),
          ),
          post_batch: Type.Optional(Type.Array(Type.String(), { description: 'hooks run after each batch' })),
        },
        strict,
      ),
    ),
  },
  strict,
);

const ModuleName = Type.String({ pattern: '^[a-z0-9_-]+$', description: 'a kernel module name' });
const DevicePath = Type.String({ pattern: '^/dev/[A-Za-z0-9_./-]+$', description: 'a device node' });

export const HostSchema = Type.Object(
  {
    when: Type.Optional(When('prepare the host only when the setting has one of these values')),
    modules: Type.Optional(
      Type.Array(
        Type.Union([
          ModuleName,
          Type.Object(
            {
              any_of: Type.Array(ModuleName, { minItems: 1, uniqueItems: true }),
              when: Type.Optional(When('need these modules only when the setting has one of these values')),
            },
            {
              ...strict,
              description:
                'the first of these that loads (kvm_intel or kvm_amd: the CPU decides), optionally on a condition',
            },
          ),
        ]),
        {
          minItems: 1,
          description:
            'kernel modules loaded now (modprobe) and at every boot (/etc/modules-load.d/stackctl-<service>.conf)',
        },
      ),
    ),
    devices: Type.Optional(
      Type.Array(
        Type.Union([
          DevicePath,
          Type.Object(
            {
              path: DevicePath,
              when: When('need this device only when the setting has one of these values'),
            },
            { ...strict, description: 'a device needed on a condition (/dev/kvm only with nova_virt_type kvm)' },
          ),
        ]),
        {
          minItems: 1,
          description: 'device nodes that must exist once the modules are loaded',
        },
      ),
    ),
    stop_units: Type.Optional(
      Type.Array(Type.String({ pattern: '^[A-Za-z0-9@_.-]+\\.(service|socket)$' }), {
        minItems: 1,
        description:
          "systemd units of the host that would compete with the service's containers: stopped, disabled and masked when present",
      }),
    ),
    hint: Type.Optional(
      Type.String({ minLength: 1, description: 'what an operator can do when the preparation fails' }),
    ),
  },
  {
    ...strict,
    description:
      "what the node's own OS needs before the service's containers start (libvirt: KVM modules, /dev/kvm, no host libvirtd)",
  },
);
export type Host = Static<typeof HostSchema>;

export const SecretSpecSchema = Type.Object(
  {
    name: SecretName,
    kind: Type.Union([
      Type.Literal('password'),
      Type.Literal('fernet_key'),
      Type.Literal('erlang_cookie'),
      Type.Literal('vrrp_password'),
      Type.Literal('hex_key'),
    ]),
    key_repository: Type.Optional(
      Type.Boolean({
        description:
          'a key repository: the secrets file holds NAME_<index>, one key each (0 staged, the highest primary); templates see a list of { index, key }; `stackctl rotate` rotates it (docs/roles.md)',
      }),
    ),
  },
  strict,
);

const SettingName = Type.String({ pattern: '^[a-z][a-z0-9_]*$' });
const SettingScalar = Type.Union([Type.String(), Type.Number(), Type.Boolean()]);

/** The long form of a setting: its default and its type (src/inventory/settings.ts). */
export const SettingDeclarationSchema = Type.Object(
  {
    default: SettingScalar,
    type: Type.Union(
      Object.keys(SETTING_TYPES).map((t) => Type.Literal(t as SettingType)),
      { description: 'integer, number, boolean, string, enum, secret or network' },
    ),
    min: Type.Optional(Type.Number({ description: 'integer, number: smallest value allowed' })),
    max: Type.Optional(Type.Number({ description: 'integer, number: largest value allowed' })),
    values: Type.Optional(
      Type.Array(Type.Union([Type.String(), Type.Number()]), {
        minItems: 1,
        uniqueItems: true,
        description: 'enum: the values allowed',
      }),
    ),
    pattern: Type.Optional(
      Type.String({
        pattern: '^\\^.*\\$$',
        description: 'string: an anchored regular expression (^...$) every value matches',
      }),
    ),
    description: Type.Optional(Type.String({ minLength: 1 })),
  },
  { ...strict, description: 'a setting with its type declared' },
);
export type SettingDeclaration = Static<typeof SettingDeclarationSchema>;

const ContainerName = Type.String({ pattern: '^[a-z][a-z0-9_-]*$', description: 'a container of this service' });

/**
 * What generic code needs to know of a service (the engine, status, the upgrade): that it is the
 * cloud's load balancer, database, identity service... and how to reach that part of it. Generic
 * code reads these entries and never a service's name (src/roles/service-roles.ts).
 */
export const ProvidesSchema = Type.Object(
  {
    load_balancer: Type.Optional(
      Type.Object(
        {
          container: ContainerName,
          admin_socket: Type.String({
            pattern: '^/',
            description: 'its admin socket inside the container (drain, enable, show stat)',
          }),
        },
        strict,
      ),
    ),
    database: Type.Optional(
      Type.Object(
        {
          container: ContainerName,
          client: Type.Array(Type.String(), {
            minItems: 1,
            description: 'SQL client argv run in the container as the database admin (SQL on stdin)',
          }),
          dump: Type.Array(Type.String(), {
            minItems: 1,
            description: 'dump argv in the container; the database names are appended',
          }),
        },
        strict,
      ),
    ),
    identity: Type.Optional(
      Type.Object(
        {
          client_container: Type.String({
            pattern: '^[a-z][a-z0-9_-]*$',
            description: 'a container carrying the OpenStack client libraries (registration, the admin client)',
          }),
        },
        strict,
      ),
    ),
    message_queue: Type.Optional(Type.Object({}, strict)),
    image_store: Type.Optional(
      Type.Object({}, { ...strict, description: "the cloud's starter images are uploaded to it" }),
    ),
    compute_api: Type.Optional(
      Type.Object(
        {
          client_container: Type.String({
            pattern: '^[a-z][a-z0-9_-]*$',
            description: 'a container carrying the OpenStack client',
          }),
        },
        strict,
      ),
    ),
    network_control: Type.Optional(
      Type.Object(
        {
          container: ContainerName,
          chassis_list: Type.Array(Type.String(), {
            minItems: 1,
            description:
              "argv run in the container that lists the dataplane's chassis as an OVSDB JSON table " +
              '(`ovn-sbctl --format=json` with the columns name, hostname, external_ids)',
          }),
        },
        { ...strict, description: "the network control plane's database, where the chassis register" },
      ),
    ),
  },
  strict,
);
export type Provides = Static<typeof ProvidesSchema>;

/** How the members of a clustered service are asked whether the cluster is whole. */
export const ClusterCheckSchema = Type.Object(
  {
    kind: Type.Union([Type.Literal('galera'), Type.Literal('rabbitmq'), Type.Literal('ovsdb')], {
      description:
        'how the output is read: galera (wsrep status variables), rabbitmq (cluster_status JSON), ' +
        'ovsdb (per OVN database after a `== NAME` line: ovs-appctl cluster/status, or `standalone` and list-dbs)',
    }),
    container: ContainerName,
    command: Type.Array(Type.String(), { minItems: 1, description: 'argv run in the container on each member' }),
  },
  strict,
);
export type ClusterCheck = Static<typeof ClusterCheckSchema>;

/** An OpenStack agent the service runs: it registers in the compute service list. */
export const AgentSchema = Type.Object(
  {
    binary: Type.String({
      pattern: '^[a-z][a-z0-9-]*$',
      description: 'its Binary in `openstack compute service list`',
    }),
    hypervisor: Type.Optional(Type.Boolean({ description: 'each node of the service runs one hypervisor' })),
  },
  strict,
);

/** A Neutron agent the service runs on each of its nodes: it registers in `openstack network agent list`. */
export const NetworkAgentSchema = Type.Object(
  {
    type: Type.String({ minLength: 1, description: 'its Agent Type in `openstack network agent list`' }),
    gateway: Type.Optional(
      Type.Object(
        {
          network: Type.String({
            pattern: '^[a-z][a-z0-9_-]*$',
            description: 'a node with an address on this network of the inventory is a gateway',
          }),
          type: Type.String({ minLength: 1, description: 'its Agent Type on a gateway' }),
        },
        strict,
      ),
    ),
    chassis: Type.Optional(
      Type.Boolean({ description: "each node of the service is a chassis in the network control plane's database" }),
    ),
  },
  strict,
);
export type NetworkAgent = Static<typeof NetworkAgentSchema>;

export const ServiceSchema = Type.Object(
  {
    name: ServiceName,
    description: Type.String({ minLength: 1 }),
    step: Step,
    cluster: Type.Union([Type.Literal('none'), Type.Literal('quorum'), Type.Literal('vrrp')], {
      description: 'quorum: needs an odd number of members (Galera, RabbitMQ); vrrp: keepalived',
    }),
    requires: Type.Optional(
      Type.Array(ServiceName, { default: [], description: 'services that must run in the cloud first' }),
    ),
    bootstrap_first: Type.Optional(
      Type.Boolean({
        description:
          "the bootstrap node's containers start and become healthy before the other nodes' (cluster formation: Galera, RabbitMQ)",
      }),
    ),
    containers: Type.Array(ContainerSchema, { minItems: 1 }),
    config: Type.Optional(Type.Array(ConfigFileSchema, { default: [] })),
    secrets: Type.Optional(Type.Array(SecretSpecSchema, { default: [] })),
    databases: Type.Optional(Type.Array(DatabaseSchema, { default: [] })),
    service_user: Type.Optional(ServiceUserSchema),
    endpoints: Type.Optional(Type.Array(EndpointSchema, { default: [] })),
    tasks: Type.Optional(Type.Array(TaskSchema, { default: [], description: 'run-once tasks on the bootstrap node' })),
    haproxy: Type.Optional(Type.Array(FrontendSchema, { default: [] })),
    host: Type.Optional(HostSchema),
    node_certificate: Type.Optional(
      Type.Object(
        {
          when: Type.Optional(When('need it only when the setting has one of these values')),
          served: Type.Optional(
            Type.Object(
              {
                port: Type.Integer({ minimum: 1, maximum: 65535, description: 'the TCP port of the TLS listener' }),
                network_setting: Type.String({
                  pattern: '^[a-z][a-z0-9_]*$',
                  description: 'the setting (of type network) naming the network whose node address the listener binds',
                }),
              },
              {
                ...strict,
                description:
                  "where each node serves its certificate: `stackctl status` reads the certificate's expiry there, as a TLS client " +
                  'sees it (what the service loaded), rather than from the file last copied to the node',
              },
            ),
          ),
        },
        {
          ...strict,
          description:
            "the service speaks TLS itself on each of its nodes (server and client): each node gets a certificate of its own from the cloud's CA " +
            '(its names and addresses; `certs generate`), which templates see as tls.node.cert and tls.node.key',
        },
      ),
    ),
    provides: Type.Optional(ProvidesSchema),
    cluster_check: Type.Optional(ClusterCheckSchema),
    agent: Type.Optional(AgentSchema),
    network_agent: Type.Optional(NetworkAgentSchema),
    settings: Type.Optional(
      Type.Record(SettingName, Type.Union([Type.String(), Type.Number(), Type.Boolean(), SettingDeclarationSchema]), {
        description:
          'template settings with their defaults; an inventory overrides them with cloud.settings. ' +
          '`name: value` infers the type from the value (integer, number, boolean, or string with the default pattern); ' +
          '`name: { default, type, ... }` declares it',
      }),
    ),
    upgrade: UpgradeSchema,
  },
  { ...strict, $id: 'urn:stackctl:schema:service', title: 'stackctl service' },
);
/** A service file as written (settings in either form). */
export type ServiceFile = Static<typeof ServiceSchema>;
/**
 * A loaded service: its settings reduced to their defaults (the catalog keeps
 * their types apart, `Catalog.settings`).
 */
export type Service = Omit<ServiceFile, 'settings'> & {
  readonly settings?: Readonly<Record<string, SettingValue>>;
};

export const ReleaseSchema = Type.Object(
  {
    name: Type.String({ pattern: '^[a-z0-9][a-z0-9.-]*$' }),
    openstack: Type.String({ pattern: '^[a-z]+$', description: 'OpenStack release name' }),
    series: Type.String({
      pattern: '^\\d{4}\\.\\d$',
      description: 'OpenStack series, e.g. 2022.2; orders releases for skew rules',
    }),
    distro: Type.Object({ name: Type.Literal('debian'), suite: Type.String({ pattern: '^[a-z]+$' }) }, strict),
    registry: Type.String({ pattern: '^[a-zA-Z0-9.-]+(:\\d+)?$', description: 'default registry host[:port]' }),
    namespace: Type.String({ pattern: '^[a-z0-9][a-z0-9/_-]*$' }),
    images: Type.Record(
      Type.String({ pattern: '^[a-z][a-z0-9-]*$' }),
      Type.Object(
        {
          tag: Type.String({ pattern: '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$' }),
          from: Type.Optional(Type.String({ description: 'parent image key' })),
          suite: Type.Optional(
            Type.String({
              pattern: '^[a-z]+$',
              description:
                "the Debian suite of this image (and its children) when not the release's; only on an image without `from`",
            }),
          ),
          packages: Type.Optional(Type.Array(Type.String({ pattern: '^[a-z0-9][a-z0-9.+-]*$' }), { default: [] })),
        },
        strict,
      ),
    ),
    settings: Type.Optional(
      Type.Record(
        Type.String({ pattern: '^[a-z][a-z0-9_]*$' }),
        Type.Union([Type.String(), Type.Number(), Type.Boolean()]),
        {
          description:
            "settings this release's packages need, over the services' defaults and under the inventory's cloud.settings",
        },
      ),
    ),
  },
  { ...strict, $id: 'urn:stackctl:schema:release', title: 'stackctl release manifest' },
);
export type Release = Static<typeof ReleaseSchema>;
