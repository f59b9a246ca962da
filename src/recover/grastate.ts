/**
 * What a Galera member's disk says, read without starting its server:
 * `grastate.dat` (cluster UUID, the last committed seqno of a clean
 * shutdown, Galera's safe_to_bootstrap mark), `gvwstate.dat` (the last
 * primary component, for pc.recovery), the schemas of the datadir, and the
 * position InnoDB recorded (`mariadbd --wsrep-recover`, when grastate.dat
 * says seqno -1 after a crash). Pure parsing; the reading is members.ts.
 */

/** Galera's nil UUID: no cluster (a datadir that never joined one, or a position lost in a crash). */
export const NIL_UUID = '00000000-0000-0000-0000-000000000000';

/** Schemas every MariaDB datadir has from its installation: they are not the cloud's data. */
export const SYSTEM_SCHEMAS: ReadonlySet<string> = new Set(['mysql', 'performance_schema', 'sys', 'lost+found']);

/** A Galera position: cluster UUID and seqno (-1: unknown). */
export interface GaleraPosition {
  readonly uuid: string;
  readonly seqno: number;
}

/** The fields of grastate.dat stackctl reads. */
export interface Grastate {
  /** Absent, or the nil UUID, when the datadir never joined a cluster. */
  readonly uuid?: string;
  /** -1 while the server runs and after a crash; the last committed seqno after a clean shutdown. */
  readonly seqno?: number;
  /** Galera's mark on the last member to leave a cluster that shut down cleanly. */
  readonly safeToBootstrap?: boolean;
}

/** A member's data volume, as the node's shell saw it (members.ts VOLUME_SCRIPT). */
export interface VolumeReport {
  /** The Docker volume exists on the node. */
  readonly volume: boolean;
  /** Absent when the datadir has no grastate.dat. */
  readonly grastate?: Grastate;
  /** gvwstate.dat is there: the member was in a primary component when it stopped (pc.recovery). */
  readonly gvwstate: boolean;
  /** Directories of the datadir, system ones included. */
  readonly schemas: readonly string[];
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** True for a real cluster UUID (not absent, not nil). */
export function isClusterUuid(uuid: string | undefined): uuid is string {
  return uuid !== undefined && UUID.test(uuid) && uuid !== NIL_UUID;
}

/** Parse grastate.dat (`key: value` lines; unknown keys and comments ignored). */
export function parseGrastate(text: string): Grastate {
  let uuid: string | undefined;
  let seqno: number | undefined;
  let safe: boolean | undefined;
  for (const line of text.split('\n')) {
    const m = /^\s*([a-z_]+):\s*(\S*)\s*$/.exec(line);
    if (!m) continue;
    const [, key, value] = m as unknown as [string, string, string];
    if (key === 'uuid' && UUID.test(value)) uuid = value;
    else if (key === 'seqno' && /^-?\d+$/.test(value)) seqno = Number(value);
    else if (key === 'safe_to_bootstrap' && /^[01]$/.test(value)) safe = value === '1';
  }
  return {
    ...(uuid !== undefined ? { uuid } : {}),
    ...(seqno !== undefined ? { seqno } : {}),
    ...(safe !== undefined ? { safeToBootstrap: safe } : {}),
  };
}

/**
 * The position `mariadbd --wsrep-recover` logged (`WSREP: Recovered position: <uuid>:<seqno>`, the
 * last such line), or undefined when it logged none (InnoDB could not be opened, or no wsrep state).
 */
export function parseRecoveredPosition(log: string): GaleraPosition | undefined {
  let found: GaleraPosition | undefined;
  for (const m of log.matchAll(/WSREP: Recovered position:\s*([0-9a-f-]{36}):(-?\d+)/g))
    found = { uuid: m[1]!, seqno: Number(m[2]) };
  return found;
}

/** Parse the volume script's output (`volume:`, `grastate:`, `gvwstate:` and `schema:` lines). */
export function parseVolumeReport(text: string): VolumeReport {
  let volume = false;
  let gvwstate = false;
  const grastate: string[] = [];
  const schemas: string[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-z]+): ?(.*)$/.exec(line);
    if (!m) continue;
    const [, key, value] = m as unknown as [string, string, string];
    if (key === 'volume') volume = value.trim() === 'present';
    else if (key === 'grastate') grastate.push(value);
    else if (key === 'gvwstate') gvwstate = value.trim() === 'present';
    else if (key === 'schema' && value.trim()) schemas.push(value.trim());
  }
  return {
    volume,
    ...(grastate.length ? { grastate: parseGrastate(grastate.join('\n')) } : {}),
    gvwstate,
    schemas,
  };
}

/**
 * Whether a member's volume holds data that a new cluster would lose: a cluster UUID in grastate.dat,
 * or a schema beyond the installation's own (a datadir whose grastate.dat was lost or reset still
 * holds the cloud's databases). A volume the image just initialised holds none.
 */
export function holdsData(v: VolumeReport): boolean {
  if (!v.volume) return false;
  if (isClusterUuid(v.grastate?.uuid)) return true;
  return v.schemas.some((s) => !SYSTEM_SCHEMAS.has(s) && !s.startsWith('#'));
}
