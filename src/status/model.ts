/**
 * The shape of `stackctl status`: what was found on each node and in each
 * clustered service, and the findings that decide the exit status. The JSON
 * output is this report as is (docs/cli.md documents it); `version` changes
 * when a field is renamed or removed.
 */
import type { CertificateExpiry } from '../certs/expiry.js';

/** Version of the JSON shape. */
export const STATUS_FORMAT_VERSION = 2;

/** A planned container's lifecycle state, as Docker reports it. */
export const ContainerState = {
  /** Running (healthy or not: see Health). */
  RUNNING: 'running',
  /** Stopped, crashed or killed. */
  EXITED: 'exited',
  /** No container of that name on the node. */
  MISSING: 'missing',
  /** Created and never started. */
  CREATED: 'created',
  /** Docker's restart policy is bringing it back after it stopped. */
  RESTARTING: 'restarting',
  /** Frozen by `docker pause`. */
  PAUSED: 'paused',
  /** Docker failed to remove it; only removal is left. */
  DEAD: 'dead',
} as const;
export type ContainerState = (typeof ContainerState)[keyof typeof ContainerState];

/** Docker's healthcheck verdict. */
export const Health = {
  /** The healthcheck passes. */
  HEALTHY: 'healthy',
  /** The healthcheck failed `retries` times in a row. */
  UNHEALTHY: 'unhealthy',
  /** Within the start period, no verdict yet. */
  STARTING: 'starting',
  /** No healthcheck (or the container is not running). */
  NONE: 'none',
} as const;
export type Health = (typeof Health)[keyof typeof Health];

/** The container's configuration against the plan (its `org.stackctl.hash` label). */
export const ConfigState = {
  /** Hash label equals the plan's: a deploy leaves it alone. */
  CURRENT: 'current',
  /** Another hash: a deploy would recreate it (`changed` says which inputs). */
  OUTDATED: 'outdated',
  /** No container to compare. */
  UNKNOWN: 'unknown',
} as const;
export type ConfigState = (typeof ConfigState)[keyof typeof ConfigState];

/** How bad a finding is; the worst one decides the exit status. */
export const Severity = {
  /** Differs from the plan but runs: another image tag, a config a deploy would change. */
  DRIFT: 'drift',
  /** Something is down: a container not running or unhealthy, a cluster out of sync, a service down. */
  UNHEALTHY: 'unhealthy',
  /** A node could not be reached (or queried) at all. */
  UNREACHABLE: 'unreachable',
} as const;
export type Severity = (typeof Severity)[keyof typeof Severity];

/** Severities from least to most severe. */
export const SEVERITY_ORDER: readonly Severity[] = [Severity.DRIFT, Severity.UNHEALTHY, Severity.UNREACHABLE];

/** The overall verdict: healthy, or the worst severity found. */
export type Verdict = 'healthy' | Severity;

/** The state of a cluster-wide view (Galera, RabbitMQ, OpenStack). */
export const ViewState = {
  /** Queried and as the plan wants. */
  OK: 'ok',
  /** Queried, and something is wrong (see the findings). */
  PROBLEM: 'problem',
  /** The service is not in the plan (or not among `--services`): nothing to ask. */
  NOT_DEPLOYED: 'not deployed',
  /** Nobody could answer: nodes unreachable or containers down. */
  UNKNOWN: 'unknown',
} as const;
export type ViewState = (typeof ViewState)[keyof typeof ViewState];

/** One thing that is not as it should be. */
export interface Finding {
  readonly severity: Severity;
  /** The node concerned, or `cloud` for a cluster-wide finding. */
  readonly node: string;
  /** Container, cluster or service name. */
  readonly subject: string;
  readonly message: string;
}

/** A StackctlError as the report carries it. */
export interface ErrorInfo {
  readonly code: string;
  readonly message: string;
  readonly hint?: string;
}

/** One planned container on one node. */
export interface ContainerStatus {
  readonly name: string;
  readonly service: string;
  readonly state: ContainerState;
  readonly health: Health;
  /** Exit code of a container that is not running. */
  readonly exitCode?: number;
  /**
   * Docker's health is `starting` (its first check is an interval away after a start): status ran
   * the healthcheck command itself, as the deploy's gate does. `passed` makes `health` healthy.
   */
  readonly checkedNow?: { readonly passed: boolean; readonly exitCode?: number };
  /**
   * Docker started it again by its restart policy (it exited or crashed) this many times since it
   * was created, the last time at `lastStart` (Docker's StartedAt). Shown, not a finding: it may
   * have recovered; but a switch or database that crashed under its users is worth a look.
   */
  readonly restarts?: { readonly count: number; readonly lastStart: string };
  readonly image: {
    /** The image reference the container was created from (absent when missing). */
    readonly running?: string;
    /** The reference the plan (release manifest and registry) wants. */
    readonly wanted: string;
    readonly runningTag?: string;
    readonly wantedTag: string;
    readonly matches: boolean;
    /**
     * For a pinned image of a running container: the pinned digest against the registry digests
     * Docker recorded for the image the container runs (docker inspect's image id -> RepoDigests).
     */
    readonly digest?: { readonly pinned: string; readonly running: readonly string[]; readonly matches: boolean };
  };
  readonly config: {
    readonly state: ConfigState;
    /** For `outdated`: the inputs that differ (`image`, `options`, `config <path>`). */
    readonly changed: readonly string[];
  };
}

/** A planned config file whose content on the node differs from the plan. */
export interface ConfigFileDrift {
  readonly path: string;
  /** `missing` or `content changed`. */
  readonly detail: string;
}

/** One node. */
export interface NodeStatus {
  readonly name: string;
  readonly role: string;
  /** The address stackctl reached it at (SSH). */
  readonly address: string;
  readonly reachable: boolean;
  /** Why it could not be reached or queried. */
  readonly error?: ErrorInfo;
  readonly containers: readonly ContainerStatus[];
  /** Planned config files checked on the node. */
  readonly configFiles: { readonly checked: number; readonly drift: readonly ConfigFileDrift[] };
  /** Milliseconds the node's queries took. */
  readonly ms: number;
}

/**
 * What a Galera member's container, disk and log say, read when the cluster is not healthy (as
 * `stackctl recover galera` reads them).
 */
export interface GaleraDiagnosis {
  /** The container and its server: `restarting (4 restarts)`, `running, server not answering`. */
  readonly running: string;
  /** grastate.dat: the cluster UUID, the seqno (-1 after a crash), Galera's safe_to_bootstrap mark. */
  readonly uuid?: string;
  readonly seqno?: number;
  readonly safeToBootstrap?: boolean;
  /** The position the member is known to hold, when its state says it (`<seqno> (<source>)`). */
  readonly position?: string;
  /** gvwstate.dat is there: the member can restore its last primary component (pc.recovery). */
  readonly gvwstate: boolean;
  /** The data volume holds data a new cluster would lose. */
  readonly data: boolean;
  /** The last lines of its log that say why it is not up (start.sh's decisions, Galera's refusals). */
  readonly log: readonly string[];
}

/** One Galera member's view of the cluster. */
export interface GaleraMember {
  readonly node: string;
  /** `@@wsrep_on`: false for a single server without replication. */
  readonly wsrepOn?: boolean;
  readonly clusterSize?: number;
  /** wsrep_local_state_comment: Synced, Donor/Desynced, Joining, … */
  readonly localState?: string;
  /** wsrep_cluster_status: Primary, non-Primary, Disconnected. */
  readonly clusterStatus?: string;
  readonly error?: string;
  /** Read when the cluster is not healthy and this member is not Synced in a primary component. */
  readonly diagnosis?: GaleraDiagnosis;
}

/** The Galera view. */
export interface GaleraView {
  readonly state: ViewState;
  /** Members the plan has (MariaDB nodes). */
  readonly expected: number;
  readonly members: readonly GaleraMember[];
}

/** One RabbitMQ node's view of the cluster. */
export interface RabbitMember {
  readonly node: string;
  readonly clusterName?: string;
  readonly diskNodes?: readonly string[];
  readonly runningNodes?: readonly string[];
  /** Nodes this one sees on the other side of a network partition. */
  readonly partitions?: readonly string[];
  readonly alarms?: readonly string[];
  readonly error?: string;
}

/** The RabbitMQ view. */
export interface RabbitView {
  readonly state: ViewState;
  readonly expected: number;
  readonly members: readonly RabbitMember[];
}

/** A row of `openstack compute service list`. */
export interface ComputeService {
  readonly binary: string;
  readonly host: string;
  readonly zone: string;
  /** enabled / disabled */
  readonly status: string;
  /** up / down */
  readonly state: string;
  readonly updatedAt: string | null;
}

/** A row of `openstack hypervisor list`. */
export interface Hypervisor {
  readonly hostname: string;
  readonly type: string;
  readonly hostIp: string;
  /** up / down */
  readonly state: string;
}

/** The OpenStack view: Nova's own idea of its services and hypervisors. */
export interface OpenStackView {
  readonly state: ViewState;
  /** `node/container` the OpenStack client ran in. */
  readonly via?: string;
  readonly computeServices?: readonly ComputeService[];
  readonly hypervisors?: readonly Hypervisor[];
  readonly error?: string;
}

/** A chassis registered in the network control plane's database (OVN Southbound `Chassis`). */
export interface ChassisRow {
  /** Its name: the node's system-id, which stackctl sets to the node's name. */
  readonly name: string;
  readonly hostname: string;
  readonly externalIds: Readonly<Record<string, string>>;
}

/** A row of `openstack network agent list`. */
export interface NetworkAgentRow {
  /** Agent Type, e.g. `OVN Controller Gateway agent`. */
  readonly type: string;
  readonly host: string;
  readonly alive: boolean;
}

/** The dataplane: the chassis in the control plane's database and Neutron's agents, against the plan. */
export interface NetworkView {
  readonly state: ViewState;
  /** `node/container` the chassis list was read in. */
  readonly chassisVia?: string;
  readonly chassis?: readonly ChassisRow[];
  /** `node/container` the OpenStack client ran in. */
  readonly agentsVia?: string;
  readonly agents?: readonly NetworkAgentRow[];
  readonly errors?: readonly string[];
}

/** One OVN database as an ovn-central member serves it. */
export interface OvsdbDatabase {
  /** OVN_Northbound or OVN_Southbound. */
  readonly name: string;
  /** A RAFT member (true) or a standalone database (false). */
  readonly clustered?: boolean;
  /** RAFT: leader, follower, candidate. */
  readonly role?: string;
  /** RAFT: `self` or the leader's server id. */
  readonly leader?: string;
  /** RAFT: `cluster member`, `joining cluster`, `disconnected from the cluster`… */
  readonly status?: string;
  /** RAFT: the last index of the member's log. */
  readonly logIndex?: number;
  /** RAFT: servers the member knows in the cluster. */
  readonly servers?: number;
  readonly error?: string;
}

/** One ovn-central member's view of OVN's databases. */
export interface OvsdbMember {
  readonly node: string;
  readonly databases?: readonly OvsdbDatabase[];
  readonly error?: string;
}

/** The OVN databases' view. */
export interface OvsdbView {
  readonly state: ViewState;
  readonly expected: number;
  readonly members: readonly OvsdbMember[];
}

/** Any cluster member, of any kind. */
export type ClusterMember = GaleraMember | RabbitMember | OvsdbMember;

/** One clustered service's view (src/status/clusters.ts reads it as its file's cluster_check says). */
export interface ClusterView {
  readonly service: string;
  /** How its members were read: galera, rabbitmq, ovsdb. */
  readonly kind: 'galera' | 'rabbitmq' | 'ovsdb';
  readonly state: ViewState;
  /** Members the plan has. */
  readonly expected: number;
  readonly members: readonly ClusterMember[];
}

/** A pinned image's tag as the registry names it now. */
export interface ImageTagStatus {
  /** The tag reference (`registry/namespace/key:tag`). */
  readonly ref: string;
  readonly pinned: string;
  /** pinned: the tag still names the pin; moved: another digest (`current`); gone: no such tag any more. */
  readonly state: 'pinned' | 'moved' | 'gone';
  readonly current?: string;
}

/** The images of the checked services against the registry: have their tags moved since they were pinned? */
export interface ImagesView {
  /** ok: every pinned tag still names its pin; problem: some moved or are gone; unknown: the registry was not asked or did not answer. */
  readonly state: ViewState;
  /** Pinned images whose tags were asked about, with what the registry said. */
  readonly tags: readonly ImageTagStatus[];
  /** Tag references of images without a pin (the next deploy pins them). */
  readonly unpinned: readonly string[];
  readonly error?: string;
}

/** The certificates the cloud serves (HAProxy's TLS frontends) and its CA, against the expiry threshold. */
export interface CertificatesView {
  /** ok: every one has at least `thresholdDays` left; problem: one expires sooner, expired or could not be read; not deployed: no TLS. */
  readonly state: ViewState;
  readonly thresholdDays: number;
  readonly certificates: readonly CertificateExpiry[];
}

/** Everything `stackctl status` found. */
export interface StatusReport {
  readonly version: typeof STATUS_FORMAT_VERSION;
  readonly cloud: string;
  /** ISO time the collection started. */
  readonly time: string;
  /** The services checked (`--services`, or every service of the plan). */
  readonly services: readonly string[];
  readonly verdict: Verdict;
  readonly exitCode: number;
  readonly nodes: readonly NodeStatus[];
  /** Each clustered service (its file's cluster_check) as its members see it. */
  readonly clusters: readonly ClusterView[];
  readonly openstack: OpenStackView;
  /** The dataplane's chassis and Neutron's agents (absent when no checked service declares them). */
  readonly network?: NetworkView;
  /** The images' tags in the registry against their pins. */
  readonly images: ImagesView;
  /** The served certificates' expiry (absent when the status run was not given any to read). */
  readonly certificates?: CertificatesView;
  readonly findings: readonly Finding[];
  readonly ms: number;
}
