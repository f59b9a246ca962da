/**
 * The one OpenStack client adapter. Nothing else runs `openstack` or reads
 * its output: `stackctl status`, the upgrade prechecks and the evacuation all
 * come here.
 *
 * - Running: `openstack ARGS` in a running container that carries the client
 *   (the identity service's, else the compute API's; `clientContainers`),
 *   with the admin credentials in the exec's environment through the Docker
 *   API, never in argv, a log or an error. `containerClient` runs in one
 *   given container (status: the one it saw running); `cloudClient` tries the
 *   controllers in plan order and remembers the one that answered (upgrade).
 * - Reading: every command it runs is in `OPENSTACK_COMMANDS` with `-f json`;
 *   `jsonRows` and `jsonObject` decode its output and refuse anything else
 *   (E_OPENSTACK_CLIENT), and the typed readers turn rows into records whose
 *   field names are ours, whatever column names the client release prints.
 */
import { RemoteError, StackctlError, messageOf } from '../core/errors.js';
import type { Secret } from '../core/secret.js';
import type { DeployPlan } from '../orchestrator/planner.js';
import type { ContainerEngine } from '../remote/index.js';
import type { ServiceRoles } from '../roles/service-roles.js';
import { serviceCaFile } from '../certs/served.js';
import type { ComputeService, Hypervisor, NetworkAgentRow } from './model.js';

/** The OpenStack client: argv after `openstack`, stdout back; rejects with E_OPENSTACK_CLIENT. */
export interface OpenStackClient {
  openstack(args: readonly string[], opts?: { readonly timeoutMs?: number }): Promise<string>;
}

/** OS_* variables of the admin user (roles/credentials.ts adminCredentials). */
export type ClientCredentials = Readonly<Record<string, string | Secret>>;

/** Knobs of the client. */
export const CLOUD_CLIENT_DEFAULTS = {
  /** Deadline of one `openstack` command (keystone token, then the API call). */
  timeoutMs: 120_000,
  /** Characters of stderr an error quotes. */
  stderrTail: 600,
} as const;

/** Compute API microversions the commands need. */
export const MICROVERSION = {
  /** The last one whose hypervisor list carries vCPU and memory statistics (2.88 dropped them). */
  hypervisorStats: '2.87',
  /** Migration records listed per server. */
  migrations: '2.59',
  /** A live migration in progress can be aborted. */
  abort: '2.65',
} as const;

/** Every command the adapter runs (argv after `openstack`). */
export const OPENSTACK_COMMANDS = {
  /** Every Nova service (or one binary's) with host, zone, status, state and last report. */
  computeServices: (binary?: string) => [
    'compute',
    'service',
    'list',
    ...(binary ? ['--service', binary] : []),
    '-f',
    'json',
  ],
  /** Every hypervisor with hostname, type, host IP and state. */
  hypervisors: ['hypervisor', 'list', '-f', 'json'],
  /** Every Neutron agent with its type, host and liveness. */
  networkAgents: ['network', 'agent', 'list', '-f', 'json'],
  /**
   * Hypervisors with their vCPU and memory statistics (`--long`, microversion ≤ 2.87).
   * NOTE: not `hypervisor show`: for microversions below 2.88 the client also asks the compute
   * for its uptime over RPC, which timed out once on the lab right after the control plane's
   * restart (HTTP 500 MessagingTimeout after 60 s). The list does not carry the local disk.
   */
  hypervisorStats: [
    '--os-compute-api-version',
    MICROVERSION.hypervisorStats,
    'hypervisor',
    'list',
    '--long',
    '-f',
    'json',
  ],
  /** Every instance on a host, with its flavour ID (microversion 2.1 returns the flavour's ID). */
  serversOn: (host: string) => [
    'server',
    'list',
    '--all-projects',
    '--host',
    host,
    '--long',
    '--limit',
    '-1',
    '-f',
    'json',
  ],
  /** Every flavour, private ones too, with VCPUs, RAM, Disk, Ephemeral and Swap. */
  flavors: ['flavor', 'list', '--all', '--long', '-f', 'json'],
  /** One server: status, host, task state. */
  serverShow: (server: string) => ['server', 'show', server, '-f', 'json'],
  /** A server's migration records. */
  migrations: (server: string) => [
    '--os-compute-api-version',
    MICROVERSION.migrations,
    'server',
    'migration',
    'list',
    '--server',
    server,
    '-f',
    'json',
  ],
  /** Abort a server's live migration in progress. */
  abortMigration: (server: string, migration: string) => [
    '--os-compute-api-version',
    MICROVERSION.abort,
    'server',
    'migration',
    'abort',
    server,
    migration,
  ],
  liveMigrate: (server: string, microversion: string) => [
    '--os-compute-api-version',
    microversion,
    'server',
    'migrate',
    '--live-migration',
    server,
  ],
  disableService: (host: string, reason: string, binary: string) => [
    'compute',
    'service',
    'set',
    '--disable',
    '--disable-reason',
    reason,
    host,
    binary,
  ],
  enableService: (host: string, binary: string) => ['compute', 'service', 'set', '--enable', host, binary],
} as const;

/* ---------------------------------------------------------------- running */

/** Client container -> the CA file its service's config folder holds (common/ca.pem.hbs). */
export function clientCaFiles(roles: ServiceRoles): Readonly<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const r of [roles.identity, roles.computeApi]) if (r) out[r.clientContainer] = serviceCaFile(r.service);
  return out;
}

/**
 * The credentials of a client in one container: with OS_CACERT, the cloud's CA in that
 * container's config folder, when they name an https:// endpoint (tls.internal) and none is set.
 */
export function credentialsIn(
  credentials: ClientCredentials,
  container: string,
  caFiles: Readonly<Record<string, string>> | undefined,
): ClientCredentials {
  const url = credentials['OS_AUTH_URL'];
  const ca = caFiles?.[container];
  return typeof url === 'string' && url.startsWith('https://') && ca && !credentials['OS_CACERT']
    ? { ...credentials, OS_CACERT: ca }
    : credentials;
}

/** Containers that carry the OpenStack client, in order of preference: the identity service's, the compute API's. */
export function clientContainers(roles: ServiceRoles): string[] {
  return [roles.identity?.clientContainer, roles.computeApi?.clientContainer].filter(
    (c): c is string => c !== undefined,
  );
}

const tail = (s: string, n: number): string => {
  const t = s.trim();
  return t.length > n ? '…' + t.slice(-n) : t;
};

/** What running the client in a container needs of a node's Docker engine. */
export type ClientEngine = Pick<ContainerEngine, 'exec'>;

/**
 * Run `openstack ARGS` once in `container` on `node`, the credentials in the
 * exec's environment. Resolves with stdout; a command that runs and exits
 * non-zero rejects with E_OPENSTACK_CLIENT naming it and the end of its
 * stderr. Errors of the node (SSH, Docker) are rejected as they come.
 */
export async function runOpenStack(
  docker: ClientEngine,
  at: { readonly node: string; readonly container: string },
  args: readonly string[],
  credentials: ClientCredentials,
  timeoutMs: number = CLOUD_CLIENT_DEFAULTS.timeoutMs,
): Promise<string> {
  const r = await docker.exec(at.container, ['openstack', ...args], { env: credentials, timeoutMs });
  if (r.code !== 0) {
    throw new RemoteError(
      'E_OPENSTACK_CLIENT',
      `openstack ${args.join(' ')} failed on ${at.node}/${at.container} (exit ${r.code}): ${tail(r.stderr || r.stdout, CLOUD_CLIENT_DEFAULTS.stderrTail)}`,
      {
        hint: 'Run the same command by hand in that container (with the admin credentials) to see the whole answer.',
        details: { command: ['openstack', ...args], node: at.node, container: at.container, exitCode: r.code },
      },
    );
  }
  return r.stdout;
}

/** The client in one container (status: one it saw running). */
export function containerClient(o: {
  readonly docker: ClientEngine;
  readonly node: string;
  readonly container: string;
  readonly credentials: ClientCredentials;
  readonly timeoutMs?: number;
  /** Client container -> the CA file there (clientCaFiles), for an https:// endpoint. */
  readonly caFiles?: Readonly<Record<string, string>>;
}): OpenStackClient {
  const credentials = credentialsIn(o.credentials, o.container, o.caFiles);
  return {
    openstack: (args, opts = {}) =>
      runOpenStack(o.docker, o, args, credentials, opts.timeoutMs ?? o.timeoutMs ?? CLOUD_CLIENT_DEFAULTS.timeoutMs),
  };
}

/** What the failover client needs. */
export interface CloudClientDeps {
  readonly connect: (node: string) => { readonly docker: Pick<ContainerEngine, 'exec' | 'inspectContainer'> };
  /** The deploy plan whose containers are running (the current one during prechecks). */
  readonly plan: DeployPlan;
  readonly credentials: ClientCredentials;
  /** Containers that carry the client, in order of preference (clientContainers). */
  readonly containers: readonly string[];
  /** Client container -> the CA file there (clientCaFiles), for an https:// endpoint. */
  readonly caFiles?: Readonly<Record<string, string>>;
}

/** Where the client can run: node and container, in plan order then in the containers' order. */
export function clientCandidates(
  plan: DeployPlan,
  containers: readonly string[],
): { node: string; container: string }[] {
  const onNode = new Map<string, Set<string>>();
  for (const st of plan.steps)
    for (const nw of st.nodes)
      for (const c of nw.containers) {
        if (!containers.includes(c.name)) continue;
        let s = onNode.get(nw.node);
        if (!s) onNode.set(nw.node, (s = new Set()));
        s.add(c.name);
      }
  const out: { node: string; container: string }[] = [];
  for (const [node, names] of onNode)
    for (const container of containers) if (names.has(container)) out.push({ node, container });
  return out;
}

/**
 * The client of an upgrade, on the first controller that answers. A node
 * whose SSH or Docker fails, or whose client container is not running, is
 * skipped for the next one; the node that answered is remembered, and left
 * when it stops answering. A command that runs and exits non-zero rejects
 * (E_OPENSTACK_CLIENT) without trying elsewhere: another controller would
 * give the same answer.
 */
export function cloudClient(deps: CloudClientDeps): OpenStackClient {
  const candidates = clientCandidates(deps.plan, deps.containers);
  let preferred: { node: string; container: string } | undefined;

  return {
    async openstack(args, opts = {}) {
      const timeoutMs = opts.timeoutMs ?? CLOUD_CLIENT_DEFAULTS.timeoutMs;
      const order = preferred ? [preferred, ...candidates.filter((c) => c !== preferred)] : candidates;
      const skipped: string[] = [];
      for (const at of order) {
        let docker: Pick<ContainerEngine, 'exec' | 'inspectContainer'>;
        try {
          docker = deps.connect(at.node).docker;
          const info = await docker.inspectContainer(at.container);
          if (!info?.state.running) {
            skipped.push(`${at.node}/${at.container}: ${info ? info.state.status : 'missing'}`);
            continue;
          }
        } catch (err) {
          skipped.push(
            `${at.node}/${at.container}: ${err instanceof StackctlError ? err.code + ': ' : ''}${messageOf(err)}`,
          );
          if (preferred === at) preferred = undefined;
          continue;
        }
        let out: string;
        try {
          out = await runOpenStack(
            docker,
            at,
            args,
            credentialsIn(deps.credentials, at.container, deps.caFiles),
            timeoutMs,
          );
        } catch (err) {
          // the command ran and failed: the answer of the cloud, not of this node
          if (err instanceof StackctlError && err.code === 'E_OPENSTACK_CLIENT') {
            preferred = at;
            throw err;
          }
          skipped.push(
            `${at.node}/${at.container}: ${err instanceof StackctlError ? err.code + ': ' : ''}${messageOf(err)}`,
          );
          if (preferred === at) preferred = undefined;
          continue;
        }
        preferred = at;
        return out;
      }
      throw new RemoteError(
        'E_OPENSTACK_CLIENT',
        `openstack ${args.join(' ')}: no controller could run the client (${skipped.join('; ') || `no ${deps.containers.join(' or ')} container in the plan`})`,
        {
          hint: `A running ${deps.containers.join(' or ')} container is needed: stackctl status shows which are down.`,
          details: { command: ['openstack', ...args], tried: skipped },
        },
      );
    },
  };
}

/* ---------------------------------------------------------------- reading */

function json(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new RemoteError('E_OPENSTACK_CLIENT', `${what}: not JSON: ${text.trim().slice(0, 200)}`, {
      hint: 'Run the command by hand in the client container to see its output.',
    });
  }
}

/** The rows of a `-f json` list; E_OPENSTACK_CLIENT for output that is not a JSON list. */
export function jsonRows(text: string, what: string): Record<string, unknown>[] {
  const j = json(text, what);
  if (!Array.isArray(j)) throw new RemoteError('E_OPENSTACK_CLIENT', `${what}: expected a JSON list`);
  return j.filter((r): r is Record<string, unknown> => typeof r === 'object' && r !== null);
}

/** The object of a `-f json` show; E_OPENSTACK_CLIENT for output that is not a JSON object. */
export function jsonObject(text: string, what: string): Record<string, unknown> {
  const j = json(text, what);
  if (typeof j !== 'object' || j === null || Array.isArray(j))
    throw new RemoteError('E_OPENSTACK_CLIENT', `${what}: expected a JSON object`);
  return j as Record<string, unknown>;
}

/** A cell as text ('' for null or missing). */
export const str = (v: unknown): string => (v === null || v === undefined ? '' : String(v));

/** A cell as a number (0 when it is not one). */
export const num = (v: unknown): number => {
  const n = typeof v === 'number' ? v : Number(str(v));
  return Number.isFinite(n) ? n : 0;
};

/** The first cell present among names (the client's column names moved between releases). */
export const field = (r: Readonly<Record<string, unknown>>, ...names: string[]): unknown => {
  for (const n of names) if (r[n] !== undefined && r[n] !== null) return r[n];
  return undefined;
};

/** Parse `openstack compute service list -f json`. */
export function parseComputeServices(text: string): ComputeService[] {
  return jsonRows(text, 'compute service list').map((r) => ({
    binary: str(r.Binary),
    host: str(r.Host),
    zone: str(r.Zone),
    status: str(r.Status),
    state: str(r.State),
    updatedAt: r['Updated At'] === null || r['Updated At'] === undefined ? null : str(r['Updated At']),
  }));
}

/** Parse `openstack hypervisor list -f json`. */
export function parseHypervisors(text: string): Hypervisor[] {
  return jsonRows(text, 'hypervisor list').map((r) => ({
    hostname: str(r['Hypervisor Hostname']),
    type: str(r['Hypervisor Type']),
    hostIp: str(r['Host IP']),
    state: str(r.State),
  }));
}

/** One row of `server list --long`. */
export interface ServerRow {
  readonly id: string;
  readonly name: string;
  readonly status: string;
  readonly host: string;
  readonly flavorId: string;
  readonly flavorName: string;
  /** Its IPv4 addresses on every network (fixed and floating), as the listing's Networks column gives them. */
  readonly addresses?: readonly string[];
}

/** The IPv4 addresses in a Networks column: `{"net": ["10.0.0.5", "172.24.4.9"]}` or `net=10.0.0.5, 172.24.4.9`. */
function addressesOf(networks: unknown): string[] {
  const text = typeof networks === 'string' ? networks : JSON.stringify(networks ?? '');
  return [...text.matchAll(/\b\d{1,3}(?:\.\d{1,3}){3}\b/g)].map((m) => m[0]);
}

/** Parse `openstack server list --long -f json`. */
export function parseServers(text: string): ServerRow[] {
  return jsonRows(text, 'server list').map((r) => ({
    id: str(r.ID),
    name: str(r.Name),
    status: str(r.Status),
    host: str(field(r, 'Host', 'OS-EXT-SRV-ATTR:host')),
    flavorId: str(field(r, 'Flavor ID')),
    flavorName: str(field(r, 'Flavor Name', 'Flavor')),
    addresses: addressesOf(field(r, 'Networks')),
  }));
}

/** A server as `server show` gives it while it migrates. */
export interface ServerState {
  readonly status: string;
  readonly host: string;
  /** Nova's task state (`migrating`), empty when none. */
  readonly taskState: string;
}

/** Parse `openstack server show -f json`. */
export function parseServerShow(text: string): ServerState {
  const j = jsonObject(text, 'server show');
  return {
    status: str(field(j, 'status', 'Status')),
    host: str(field(j, 'OS-EXT-SRV-ATTR:host', 'compute_host', 'host')),
    taskState: str(field(j, 'OS-EXT-STS:task_state', 'task_state')),
  };
}

/** One record of `server migration list`. */
export interface MigrationRow {
  readonly id: string;
  /** Nova's status, lower case (`running`, `completed`...). */
  readonly status: string;
}

/** Parse `openstack server migration list -f json`. */
export function parseMigrations(text: string): MigrationRow[] {
  return jsonRows(text, 'server migration list').map((r) => ({
    id: str(field(r, 'Id', 'id')),
    status: str(field(r, 'Status', 'status')).toLowerCase(),
  }));
}

/* ---------------------------------------------------------------- asking */

/** Nova's services (or one binary's): `compute service list`. */
export async function listComputeServices(c: OpenStackClient, binary?: string): Promise<ComputeService[]> {
  return parseComputeServices(await c.openstack(OPENSTACK_COMMANDS.computeServices(binary)));
}

/** Nova's hypervisors: `hypervisor list`. */
export async function listHypervisors(c: OpenStackClient): Promise<Hypervisor[]> {
  return parseHypervisors(await c.openstack(OPENSTACK_COMMANDS.hypervisors));
}

/** Parse `openstack network agent list -f json` (Alive: a boolean, or the table's `:-)` / `XXX`). */
export function parseNetworkAgents(text: string): NetworkAgentRow[] {
  return jsonRows(text, 'network agent list').map((r) => ({
    type: str(field(r, 'Agent Type', 'agent_type')),
    host: str(field(r, 'Host', 'host')),
    alive: [true, ':-)', 'True', 'true'].includes(field(r, 'Alive', 'alive') as string | boolean),
  }));
}

/** Neutron's agents: `network agent list`. */
export async function listNetworkAgents(c: OpenStackClient): Promise<NetworkAgentRow[]> {
  return parseNetworkAgents(await c.openstack(OPENSTACK_COMMANDS.networkAgents));
}

/** Nova's own view, both lists asked at once. */
export async function novaView(
  c: OpenStackClient,
): Promise<{ computeServices: ComputeService[]; hypervisors: Hypervisor[] }> {
  const [computeServices, hypervisors] = await Promise.all([listComputeServices(c), listHypervisors(c)]);
  return { computeServices, hypervisors };
}
