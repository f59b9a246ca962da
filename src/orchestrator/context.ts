/**
 * What the engine gives every action, for deploy and upgrade alike: the
 * nodes, the plan the cloud runs and the plan it converges to (the same one
 * for a deploy), what generic code knows of the services, one-off containers,
 * secrets, a clock and an event sink. The CLI builds one per run; tests hand
 * handlers a context of their own. The upgrade's context extends it.
 */
import type { Secret } from '../core/secret.js';
import type { ContainerEngine, ExecOptions, ExecResult, RemoteCommand } from '../remote/index.js';
import type { UploadOptions, UploadSource } from '../remote/index.js';
import type { ServiceRoles } from '../roles/service-roles.js';
import type { EngineBase } from './engine.js';
import type { ConfigWork, ContainerWork, DeployPlan, HostWork, RunOnceWork } from './planner.js';
import type { GuestImageData } from './identity.js';

/** What the engine needs of a node (the `Remote` facade fits): its shell, files and Docker engine. */
export interface NodeAccess {
  readonly node: string;
  exec(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
  readonly files: { upload(source: UploadSource, dest: string, opts?: UploadOptions): Promise<number> };
  readonly docker: ContainerEngine;
}

/** The result of a one-off container (migration command, upgrade check). */
export interface OneOffResult {
  readonly code: number;
  /** The end of its log (stdout and stderr). */
  readonly log: string;
  /**
   * Set when this run had started it before it was killed: found still `running` (and waited
   * for), or found `finished` with exit status 0 (the migration is done: not run again).
   */
  readonly adopted?: 'running' | 'finished';
}

/**
 * What a deploy checks beyond Docker's health for the containers of a service whose state is a
 * cluster's (src/recover/guard.ts, for Galera): a member whose server waits for the others, or
 * refuses to start, is explained by the whole cluster, and restarted with it where that is safe.
 * Each call resolves to the changes it made on the nodes, or throws a StackctlError that names the
 * cause and the command to run (its `details.log` goes to the report).
 */
export interface DeployGuard {
  /** Whether the guard has checks of its own for this container (else Docker's health gate alone). */
  covers(w: ContainerWork): boolean;
  /** Right after the run created or started the container, before its health gate. */
  started(access: NodeAccess, w: ContainerWork): Promise<number>;
  /** A container the run leaves alone but found unwell: up now, else the error; in place of its health gate. */
  unchanged(access: NodeAccess, w: ContainerWork): Promise<number>;
}

/** Everything an action of the engine may use. */
export interface EngineContext extends EngineBase {
  /** What generic code knows of the services (their files' `provides`, `cluster_check`, `agent`). */
  readonly services: ServiceRoles;
  /** The deploy plan the cloud runs now: container names, images and hashes as they are. */
  readonly currentDeploy: DeployPlan;
  /** The deploy plan the run converges to (the same as currentDeploy for a deploy). */
  readonly targetDeploy: DeployPlan;
  /** node -> dest -> rendered content of the target (holds secrets; only uploaded). */
  readonly targetRendered: ReadonlyMap<string, ReadonlyMap<string, string>>;
  /** A node's shell, files and Docker engine (one SSH connection per node, cached). */
  connect(node: string): NodeAccess;
  /** Service secrets by name. */
  secret(name: string): Secret | undefined;
  /** The guest image step 5 uploads (`build: guest` starter images), read when first asked for. */
  guestImage?(): GuestImageData;
  /** The target plan's ContainerWork of a container on a node (undefined when the node does not run it). */
  targetWork(node: string, container: string): ContainerWork | undefined;
  /** The current plan's ContainerWork of a container on a node. */
  currentWork(node: string, container: string): ContainerWork | undefined;
  /**
   * Run a one-off container on `node` that borrows `work`'s definition (volumes,
   * configs, network) with `image` and `command`; removes it once it ended. It may run as
   * long as it writes to its log: quiet for `timeoutMs` (default: the run's quietTimeoutMs),
   * it is reported stuck and left running for a resumed run to wait for.
   */
  oneOff(
    node: string,
    work: ContainerWork,
    image: string,
    command: readonly string[],
    opts?: { readonly timeoutMs?: number; readonly name?: string },
  ): Promise<OneOffResult>;
  /** The run's id (names the folder of its backups). */
  readonly run?: string;
  /** How long a task or one-off container may go without a new log line (--task-timeout). */
  readonly quietTimeoutMs?: number;
  /** service -> path of its latest database backup on its node, filled by the backup action. */
  readonly backups?: Map<string, string>;
  /** A deploy's checks beyond Docker's health (the Galera cluster's); none in an upgrade. */
  readonly guard?: DeployGuard;
  /** Recreate a container whose `workloads` still run (--allow-workload-stop): they stop with it. */
  readonly allowWorkloadStop?: boolean;
}

/** Container work of a service on every node of a deploy plan (on one node when given). */
export function containersOf(plan: DeployPlan, service: string, node?: string): ContainerWork[] {
  return plan.steps.flatMap((st) =>
    st.nodes.flatMap((n) =>
      node !== undefined && n.node !== node ? [] : n.containers.filter((c) => c.service === service),
    ),
  );
}

/** Config files of the services on a node in a deploy plan. */
export function configsOf(plan: DeployPlan, node: string, services: readonly string[]): ConfigWork[] {
  return plan.steps.flatMap((st) =>
    st.nodes.flatMap((n) => (n.node === node ? n.configs.filter((c) => services.includes(c.service)) : [])),
  );
}

/** Host preparations of the services on a node in a deploy plan. */
export function hostWorkOf(plan: DeployPlan, node: string, services: readonly string[]): HostWork[] {
  return plan.steps.flatMap((st) =>
    st.nodes.flatMap((n) => (n.node === node ? n.host.filter((h) => services.includes(h.service)) : [])),
  );
}

/** The run-once work of a deploy plan by node, service, kind and name. */
export function runOnceOf(
  plan: DeployPlan,
  node: string,
  service: string,
  kind: RunOnceWork['kind'],
  name: string,
): RunOnceWork | undefined {
  for (const st of plan.steps)
    for (const w of st.runOnce)
      if (w.node === node && w.service === service && w.kind === kind && w.name === name) return w;
  return undefined;
}

/** Nodes running a service in a deploy plan, sorted. */
export function nodesRunning(plan: DeployPlan, service: string): string[] {
  return [...new Set(containersOf(plan, service).map((w) => w.node))].sort();
}
