/**
 * Reading one Galera member on its node, without changing it: its container
 * (Docker's state, restarts, health), its server's view of the cluster when
 * it answers SQL, its data volume (grastate.dat, gvwstate.dat, schemas, read
 * by the node's shell at the volume's mountpoint), and the lines of its log
 * that explain a failed start. `readPosition` is the one reader that runs
 * something: `mariadbd --wsrep-recover` (start.sh's `recover` mode) in a
 * one-off container on the member's data, for a member that is stopped.
 */
import { StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import type { ContainerEngine, ExecOptions, ExecResult, RemoteCommand } from '../remote/index.js';
import type { ContainerWork } from '../orchestrator/planner.js';
import { LABEL, containerSpec } from '../orchestrator/state.js';
import { parseVariables } from '../status/galera.js';
import {
  holdsData,
  isClusterUuid,
  parseRecoveredPosition,
  parseVolumeReport,
  type GaleraPosition,
  type VolumeReport,
} from './grastate.js';

/**
 * What the start script of a Galera service's server container offers stackctl (the command of the
 * container its file's `cluster_check` names; roles/templates/<service>/start.sh.hbs), and the
 * server's datadir. The container, and the client that asks the server, come from the service
 * file (`galeraClusters` in guard.ts).
 */
export const GALERA = {
  /** Its datadir; the data volume is the one mounted there. */
  datadir: '/var/lib/mysql',
  /** Appended to the container's command: print the position InnoDB holds, and exit. */
  recoverArgument: 'recover',
  /** The founding permit start.sh waits for on an empty datadir (removed at every start). */
  permit: '/run/mysqld/stackctl-found-cluster',
  /** The lines start.sh logs while it waits for a peer or a permit (then every minute). */
  waitingLine: /^galera: (still )?waiting/m,
  /** Name of the one-off container of `readPosition`. */
  recoverContainer: 'stackctl-galera-recover',
} as const;

/**
 * The status variables a Galera service's `cluster_check` command must print (`name<TAB>value`
 * lines): status and the upgrade judge the cluster by the first five, the recovery also reads
 * where a running server stands (its cluster's UUID and last committed seqno).
 */
export const GALERA_VARIABLES = [
  'wsrep_on',
  'wsrep_cluster_size',
  'wsrep_local_state_comment',
  'wsrep_cluster_status',
  'wsrep_ready',
  'wsrep_cluster_state_uuid',
  'wsrep_last_committed',
] as const;

/** Docker's state of the member's container, plus `missing`. */
export type ContainerStatus = 'running' | 'restarting' | 'exited' | 'created' | 'paused' | 'dead' | 'missing';

const STATUSES: readonly ContainerStatus[] = ['running', 'restarting', 'exited', 'created', 'paused', 'dead'];

/** Docker's status text as a ContainerStatus (`removing` and unknown ones count as exited). */
function containerStatus(status: string): ContainerStatus {
  return (STATUSES as readonly string[]).includes(status) ? (status as ContainerStatus) : 'exited';
}

/** A member's server, as it answered (SHOW GLOBAL STATUS). */
export interface ServerView {
  /** Primary, non-Primary, Disconnected. */
  readonly clusterStatus?: string;
  /** Synced, Joining, Donor/Desynced, Initialized, … */
  readonly localState?: string;
  readonly clusterSize?: number;
  readonly stateUuid?: string;
  readonly lastCommitted?: number;
}

/** Where a member's position was read from. */
export type PositionSource = 'grastate' | 'innodb' | 'server' | 'start log';

/** A position and its source. */
export interface KnownPosition extends GaleraPosition {
  readonly source: PositionSource;
}

/** Everything read of one member. */
export interface MemberState {
  readonly node: string;
  /** Set when the node (SSH or its dockerd) could not be read: its data is unknown. */
  readonly error?: string;
  readonly container: {
    readonly status: ContainerStatus;
    readonly restartCount: number;
    readonly health?: string;
    readonly exitCode?: number;
  };
  /** Set when the server answered SQL. */
  readonly server?: ServerView;
  /** The data volume (absent when the node could not be read). */
  readonly disk?: VolumeReport;
  /** The volume holds data a new cluster would lose (grastate.ts holdsData). */
  readonly data: boolean;
  /** The last lines of the container's log that say why it is not up (start.sh's and Galera's). */
  readonly log: readonly string[];
}

/** What reading a member needs of its node (the `Remote` facade and the executor's NodeAccess fit). */
export interface GaleraAccess {
  readonly node: string;
  exec(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
  readonly docker: ContainerEngine;
}

/** Deadlines of the readers. */
export const MEMBER_DEFAULTS = {
  /** A shell command or SQL query on a node. */
  commandTimeoutMs: 30_000,
  /** `mariadbd --wsrep-recover` in its one-off container (InnoDB crash recovery included). */
  recoverTimeoutMs: 5 * 60_000,
  /** Lines of the container's log searched for the reasons of a failed start. */
  logLines: 1000,
  /** Of those, how many are kept. */
  keptLines: 12,
  pollMs: 500,
} as const;

/** Log lines that explain a Galera member that is not up. */
const EXPLAINING = /^galera: |It may not be safe to bootstrap|failed to reach primary view|\[ERROR\]|Aborting/;

/**
 * The node's shell reads the data volume named $1 where Docker keeps it: `volume:`, then each line
 * of grastate.dat as `grastate:`, `gvwstate: present`, and each directory of the datadir as `schema:`.
 * Read-only, and nothing interpolated: the volume name is an argument.
 */
export const VOLUME_SCRIPT = [
  `mp=$(docker volume inspect --format '{{.Mountpoint}}' "$1" 2>/dev/null) || { echo 'volume: absent'; exit 0; }`,
  `echo 'volume: present'`,
  `if [ -f "$mp/grastate.dat" ]; then sed 's/^/grastate: /' "$mp/grastate.dat"; fi`,
  `if [ -f "$mp/gvwstate.dat" ]; then echo 'gvwstate: present'; fi`,
  `for d in "$mp"/*/; do [ -d "$d" ] && echo "schema: $(basename "$d")"; done`,
  'exit 0',
].join('\n');

/**
 * Writes `safe_to_bootstrap: 1` into grastate.dat of the volume named $1, in place (the file keeps
 * its owner, mysql); fails when the volume or the file is missing.
 */
export const SAFE_TO_BOOTSTRAP_SCRIPT = [
  `mp=$(docker volume inspect --format '{{.Mountpoint}}' "$1") || exit 3`,
  `f="$mp/grastate.dat"`,
  `[ -f "$f" ] || { echo "no $f" >&2; exit 4; }`,
  `new=$(sed 's/^safe_to_bootstrap:.*/safe_to_bootstrap: 1/' "$f")`,
  `printf '%s\\n' "$new" > "$f"`,
].join('\n');

/** The named volume a member's container mounts at the datadir. */
export function dataVolumeOf(w: ContainerWork): string {
  for (const v of w.definition.volumes ?? []) {
    const [source, target] = v.split(':');
    if (target === GALERA.datadir && source && !source.startsWith('/')) return source;
  }
  throw new StackctlError(
    'E_GALERA_NO_VOLUME',
    `${w.node}: container ${w.name} (${w.service}) has no named volume at ${GALERA.datadir}`,
    { hint: `Mount a named volume at ${GALERA.datadir} in roles/services/${w.service}.yaml.` },
  );
}

/** The server's view from its answer to the `cluster_check` command (GALERA_VARIABLES). */
export function serverView(output: string): ServerView {
  const v = parseVariables(output);
  const num = (k: string): number | undefined => {
    const s = v.get(k);
    return s !== undefined && /^-?\d+$/.test(s) ? Number(s) : undefined;
  };
  const size = num('wsrep_cluster_size');
  const committed = num('wsrep_last_committed');
  return {
    ...(v.has('wsrep_cluster_status') ? { clusterStatus: v.get('wsrep_cluster_status')! } : {}),
    ...(v.has('wsrep_local_state_comment') ? { localState: v.get('wsrep_local_state_comment')! } : {}),
    ...(size !== undefined ? { clusterSize: size } : {}),
    ...(v.has('wsrep_cluster_state_uuid') ? { stateUuid: v.get('wsrep_cluster_state_uuid')! } : {}),
    ...(committed !== undefined ? { lastCommitted: committed } : {}),
  };
}

/** A member's server in a primary component and synced: the member is up. */
export function isUp(m: Pick<MemberState, 'server'>): boolean {
  return m.server?.clusterStatus === 'Primary' && m.server.localState === 'Synced';
}

/**
 * The position a member's state gives without running anything: grastate.dat after a clean shutdown
 * (seqno >= 0), or the running server's own (a member that answers outside a primary component).
 */
export function knownPosition(m: MemberState): KnownPosition | undefined {
  const g = m.disk?.grastate;
  if (g?.uuid !== undefined && g.seqno !== undefined && g.seqno >= 0)
    return { uuid: g.uuid, seqno: g.seqno, source: 'grastate' };
  const s = m.server;
  if (s?.stateUuid !== undefined && isClusterUuid(s.stateUuid) && s.lastCommitted !== undefined && s.lastCommitted >= 0)
    return { uuid: s.stateUuid, seqno: s.lastCommitted, source: 'server' };
  // A server that runs (or restarts) without answering waits for a primary component and commits
  // nothing: it is still at the position its start.sh logged.
  if (!s && (m.container.status === 'running' || m.container.status === 'restarting')) {
    const p = startPosition(m.log);
    if (p) return { ...p, source: 'start log' };
  }
  return undefined;
}

/** The position start.sh's last start logged (`galera: starting from position <uuid>:<seqno> ...`). */
export function startPosition(lines: readonly string[]): GaleraPosition | undefined {
  for (let i = lines.length - 1; i >= 0; i--) {
    const l = lines[i]!;
    const m = /^galera: starting from position ([0-9a-f-]{36}):(\d+) /.exec(l);
    if (m) return isClusterUuid(m[1]) ? { uuid: m[1]!, seqno: Number(m[2]) } : undefined;
    // an older start's line must not stand for this one's
    if (/^galera: crashed, and InnoDB holds no position/.test(l)) return undefined;
  }
  return undefined;
}

/**
 * Read one member, asking its server with `query` (the argv of its service's `cluster_check`, run
 * in the member's container `w`); never throws: an unreachable node is a member with `error`.
 */
export async function readMember(
  access: GaleraAccess,
  w: ContainerWork,
  query: readonly string[],
): Promise<MemberState> {
  const timeoutMs = MEMBER_DEFAULTS.commandTimeoutMs;
  let container: MemberState['container'] = { status: 'missing', restartCount: 0 };
  try {
    const info = await access.docker.inspectContainer(w.name);
    if (info) {
      container = {
        status: containerStatus(info.state.status),
        restartCount: info.restartCount,
        ...(info.state.health ? { health: info.state.health } : {}),
        ...(info.state.running ? {} : { exitCode: info.state.exitCode }),
      };
    }
    const vol = await access.exec(['sh', '-c', VOLUME_SCRIPT, 'sh', dataVolumeOf(w)], { timeoutMs });
    if (vol.code !== 0) throw new Error(`reading volume ${dataVolumeOf(w)} failed: ${vol.stderr.trim().slice(-300)}`);
    const disk = parseVolumeReport(vol.stdout);
    let server: ServerView | undefined;
    if (container.status === 'running') {
      server = await askServer(access.docker, w.name, query);
    }
    const log = container.status === 'missing' ? [] : await explainingLines(access.docker, w.name);
    return { node: w.node, container, ...(server ? { server } : {}), disk, data: holdsData(disk), log };
  } catch (err) {
    return { node: w.node, error: messageOf(err), container, data: false, log: [] };
  }
}

/** Ask a member's server its view with `query` (undefined when it does not answer). */
export async function askServer(
  docker: Pick<ContainerEngine, 'exec'>,
  container: string,
  query: readonly string[],
): Promise<ServerView | undefined> {
  const r = await docker.exec(container, query, { timeoutMs: 15_000 }).catch(() => undefined);
  return r?.code === 0 ? serverView(r.stdout) : undefined;
}

/** The lines of a container's log that explain a Galera start (start.sh's decisions, Galera's refusals). */
export async function explainingLines(docker: Pick<ContainerEngine, 'logs'>, name: string): Promise<string[]> {
  try {
    const l = await docker.logs(name, { tail: MEMBER_DEFAULTS.logLines });
    return (l.stdout + '\n' + l.stderr)
      .split('\n')
      .filter((line) => EXPLAINING.test(line))
      .slice(-MEMBER_DEFAULTS.keptLines);
  } catch {
    return [];
  }
}

/** Side effects of the one-off reader. */
export interface OneOffDeps {
  readonly cloud: string;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
}

/**
 * The position InnoDB holds on a stopped member: its container's own command with `recover`
 * (start.sh runs `mariadbd --wsrep-recover`) in a one-off container with the same volumes and
 * configs, removed afterwards. Undefined when mariadbd logged no position.
 */
export async function readPosition(
  access: GaleraAccess,
  w: ContainerWork,
  deps: OneOffDeps,
): Promise<{ position?: GaleraPosition; log: string }> {
  const command = w.definition.command;
  if (!command?.length) {
    throw new StackctlError(
      'E_GALERA_NO_COMMAND',
      `${w.node}: container ${w.name} has no command to run in recover mode`,
      {
        hint: `roles/services/${w.service}.yaml must run the start script (start.sh) as the container's command.`,
      },
    );
  }
  const name = GALERA.recoverContainer;
  const { healthcheck: _h, labels: _l, ...spec } = containerSpec(deps.cloud, w);
  await access.docker.removeContainer(name, { force: true }); // a leftover of a killed run
  await access.docker.createContainer({
    ...spec,
    name,
    command: [...command, GALERA.recoverArgument],
    restart: 'no',
    labels: { [LABEL.cloud]: deps.cloud, [LABEL.service]: w.service },
  });
  try {
    await access.docker.startContainer(name);
    const deadline = deps.now() + MEMBER_DEFAULTS.recoverTimeoutMs;
    for (;;) {
      const info = await access.docker.inspectContainer(name);
      if (!info?.state.running) break;
      if (deps.now() > deadline) {
        throw new TimeoutError(
          'E_GALERA_RECOVER_TIMEOUT',
          `${w.node}: mariadbd --wsrep-recover still runs after ${MEMBER_DEFAULTS.recoverTimeoutMs / 1000} s`,
          { hint: `InnoDB's crash recovery may be long on a large datadir: see 'docker logs ${name}' on ${w.node}.` },
        );
      }
      await deps.sleep(MEMBER_DEFAULTS.pollMs);
    }
    const l = await access.docker.logs(name, { tail: 400 });
    const log = l.stdout + l.stderr;
    const position = parseRecoveredPosition(log);
    return { ...(position ? { position } : {}), log };
  } finally {
    await access.docker.removeContainer(name, { force: true }).catch(() => undefined);
  }
}
