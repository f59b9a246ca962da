/**
 * The run lock: one stackctl run at a time changes an inventory's nodes and
 * state files. A second run is refused at once, naming the holder; a lock
 * left by a run that died (its process is gone, or the machine rebooted
 * since) is taken over, and the taker says so.
 *
 * `RunLock` is the interface the commands use; `FileRunLock` implements it
 * with a lock file next to the inventory. Why a lock file with the holder in
 * it, and not `flock(2)` on a held descriptor: Node has no flock (it would
 * take a native module), and the file must name its holder anyway, so a
 * refused run can say who holds the lock and since when. The file is created
 * with `link(2)` from a complete temporary file: as exclusive as `O_EXCL`
 * (the link fails when the name exists), and the lock file never exists
 * half-written, so a reader always finds a whole holder record.
 *
 * What a lock file cannot do by itself is notice that its holder died: that
 * is what the holder record is for. It names the host, the boot (Linux's
 * boot id) and the process (pid and its start time, so a pid reused by
 * another program does not keep the lock alive). A lock whose host is this
 * machine and whose boot is older, or whose process is gone, is stale; a
 * lock held from another host (a shared folder) is never judged, only named.
 * A stale lock is moved aside under a unique name and checked to be the one
 * that was judged before it is removed; if another run replaced it in
 * between, it is put back. Two runs taking over the same stale lock at once
 * therefore end with one holder (the other is refused), except in one
 * window of a few system calls when a third run starts at that very moment.
 *
 * Another implementation (an etcd lease, for a deploy host that is several
 * machines) fits the same interface: `acquire` is a compare-and-put of the
 * holder under a lease, staleness is the lease's expiry, and `releaseSync`
 * is left out.
 */
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fsyncSync,
  linkSync,
  lstatSync,
  openSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { hostname, uptime } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { ExitCode, IoError, StackctlError } from './errors.js';

/** Who holds a lock: what a refused run prints. Never a secret. */
export interface LockHolder {
  readonly pid: number;
  readonly host: string;
  /** The holder's command line, e.g. `stackctl deploy -i site.yaml --resume` (secrets masked). */
  readonly command: string;
  /** When it took the lock (ISO 8601). */
  readonly since: string;
}

/** A lock left by a run that is gone, and why it counts as gone. */
export interface StaleLock {
  readonly holder: LockHolder;
  readonly reason: string;
}

/** What `acquire` resolves to. */
export interface LockGrant {
  /** Set when the lock was taken over from a run that had died. */
  readonly takenOver?: StaleLock;
}

/** One exclusive lock; see the module comment. */
export interface RunLock {
  /** What the lock guards, as the operator named it (messages say it). */
  readonly label: string;
  /**
   * Take the lock for `command` (the holder's command line, already free of
   * secrets). Throws LockHeld, at once, when a live run holds it; takes
   * over a stale one and says so in the grant.
   */
  acquire(command: string): Promise<LockGrant>;
  /** Give the lock up; nothing happens when it is not held (or was taken over). */
  release(): Promise<void>;
  /** The same, synchronously, for a process that is exiting; implementations that cannot leave it out. */
  releaseSync?(): void;
}

/** `3 s`, `4 min`, `2 h 5 min`: how long ago, for messages. */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  const min = Math.floor(s / 60);
  return min < 120 ? `${min} min` : `${Math.floor(min / 60)} h ${min % 60} min`;
}

/** A live run holds the lock: the second run is refused, naming it. */
export class LockHeld extends StackctlError {
  constructor(
    readonly label: string,
    readonly holder: LockHolder,
    /** Where the lock lives (a file path), for the hint. */
    readonly where: string,
    /** The holder runs on another host: its process cannot be checked from here. */
    readonly foreign: boolean,
    now: Date = new Date(),
  ) {
    const age = now.getTime() - Date.parse(holder.since);
    super(
      'E_LOCKED',
      `${label} is locked by another stackctl run: '${holder.command}' ` +
        `(pid ${holder.pid} on host ${holder.host}, since ${holder.since}${Number.isNaN(age) ? '' : `, ${formatAge(age)} ago`})`,
      {
        hint: foreign
          ? `That run is on another host: wait for it to end or stop it there. If host ${holder.host} is gone for good, remove ${where}.`
          : `Wait for that run to end, or stop it (Ctrl-C in its terminal, or kill ${holder.pid}): it releases the lock when it exits. ` +
            `Read-only commands (status, plan --no-save, deploy --dry-run, nodes list) run meanwhile. Lock file: ${where}.`,
        exitCode: ExitCode.LOCKED,
        details: { ...holder, lock: where },
      },
    );
  }
}

/**
 * What the lock asks about this machine and its processes; injectable
 * (CONVENTIONS.md 8) so tests can stand in another host, boot or process.
 */
export interface LocalProbe {
  readonly pid: number;
  readonly hostname: () => string;
  /** Linux's boot id (changes at every boot); undefined where there is none. */
  readonly bootId: () => string | undefined;
  /** When this machine booted (ms since the epoch). */
  readonly bootTimeMs: () => number;
  /** The process exists (it may belong to another user). */
  readonly alive: (pid: number) => boolean;
  /** The process's start time (clock ticks since boot, /proc/PID/stat field 22); undefined where unknown. */
  readonly startTime: (pid: number) => string | undefined;
  readonly now: () => Date;
}

function readProc(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

/** Field 22 of /proc/PID/stat; the command name (field 2) may hold spaces and parentheses. */
export function procStartTime(stat: string): string | undefined {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state), so field 22 is fields[19]
  return fields[19] || undefined;
}

/** This machine, as seen from this process. */
export const LOCAL_PROBE: LocalProbe = {
  pid: process.pid,
  hostname,
  bootId: () => readProc('/proc/sys/kernel/random/boot_id')?.trim() || undefined,
  bootTimeMs: () => Date.now() - uptime() * 1000,
  alive: (pid) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch (e) {
      // EPERM: it exists, under another user
      return (e as NodeJS.ErrnoException).code === 'EPERM';
    }
  },
  startTime: (pid) => {
    const stat = readProc(`/proc/${pid}/stat`);
    return stat === undefined ? undefined : procStartTime(stat);
  },
  now: () => new Date(),
};

/** The lock file's content. */
interface LockRecord extends LockHolder {
  readonly version: 1;
  readonly boot?: string;
  readonly start?: string;
  /** Random: tells this holder's file from a later one of the same pid. */
  readonly token: string;
}

/** The lock file as found: its text, and the record when it is one. */
interface Found {
  readonly text: string;
  readonly record: LockRecord | undefined;
  readonly mtimeMs: number;
}

type Verdict = { readonly live: true; readonly foreign: boolean } | { readonly live: false; readonly reason: string };

function parseRecord(text: string): LockRecord | undefined {
  try {
    const r = JSON.parse(text) as Partial<LockRecord> | null;
    if (
      r &&
      r.version === 1 &&
      Number.isInteger(r.pid) &&
      typeof r.host === 'string' &&
      typeof r.command === 'string' &&
      typeof r.since === 'string' &&
      typeof r.token === 'string'
    ) {
      return r as LockRecord;
    }
  } catch {
    // not JSON: judged below as an unreadable lock file
  }
  return undefined;
}

const holderOf = (r: LockRecord): LockHolder => ({ pid: r.pid, host: r.host, command: r.command, since: r.since });

const errno = (e: unknown): string => (e as NodeJS.ErrnoException).code ?? 'error';

/** Rounds of create / judge / take over before giving up (each round loses only to another run's progress). */
const MAX_ROUNDS = 5;

/** The run lock as a file (see the module comment). */
export class FileRunLock implements RunLock {
  #token: string | undefined;

  constructor(
    /** The lock file, e.g. `site.lock` next to `site.yaml`. */
    readonly file: string,
    readonly label: string,
    private readonly probe: LocalProbe = LOCAL_PROBE,
  ) {}

  async acquire(command: string): Promise<LockGrant> {
    return this.acquireSync(command);
  }

  /** `acquire`, synchronously. */
  acquireSync(command: string): LockGrant {
    if (this.#token !== undefined) throw new Error(`${this.file}: the run lock is already held by this object`);
    const p = this.probe;
    const boot = p.bootId();
    const start = p.startTime(p.pid);
    const record: LockRecord = {
      version: 1,
      pid: p.pid,
      host: p.hostname(),
      command,
      since: p.now().toISOString(),
      ...(boot ? { boot } : {}),
      ...(start ? { start } : {}),
      token: randomBytes(12).toString('hex'),
    };
    const text = JSON.stringify(record, null, 2) + '\n';
    let takenOver: StaleLock | undefined;
    let last: LockRecord | undefined;
    for (let round = 0; round < MAX_ROUNDS; round++) {
      if (this.#create(text)) {
        this.#token = record.token;
        return takenOver ? { takenOver } : {};
      }
      const found = this.#read(this.file);
      if (!found) continue; // released in between: try again
      last = found.record ?? last;
      const verdict = this.#judge(found);
      if (verdict.live) {
        if (!found.record) throw this.#unreadable();
        throw new LockHeld(this.label, holderOf(found.record), this.file, verdict.foreign, p.now());
      }
      if (this.#remove(found)) {
        takenOver = {
          holder: found.record
            ? holderOf(found.record)
            : { pid: 0, host: '?', command: '(unreadable lock file)', since: new Date(found.mtimeMs).toISOString() },
          reason: verdict.reason,
        };
      }
    }
    // every round lost to another run taking the lock at the same moment
    if (last) throw new LockHeld(this.label, holderOf(last), this.file, false, p.now());
    throw this.#unreadable();
  }

  async release(): Promise<void> {
    this.releaseSync();
  }

  releaseSync(): void {
    const token = this.#token;
    if (token === undefined) return;
    this.#token = undefined;
    const found = this.#read(this.file);
    // a lock that is no longer ours (taken over, removed by hand) is left alone
    if (found?.record?.token !== token) return;
    try {
      unlinkSync(this.file);
    } catch (e) {
      if (errno(e) !== 'ENOENT') {
        throw new IoError('E_FILE_WRITE', `cannot remove the run lock ${this.file}: ${errno(e)}`, {
          hint: 'Remove it by hand; the next run would take it over once this process has exited.',
          cause: e,
          location: { file: this.file },
        });
      }
    }
  }

  /** True while this object holds the lock. */
  get held(): boolean {
    return this.#token !== undefined;
  }

  /** Create the lock file whole (temporary file, then link); false when it exists. */
  #create(text: string): boolean {
    const tmp = join(dirname(this.file), `.${basename(this.file)}.${this.probe.pid}.${randomBytes(6).toString('hex')}`);
    let fd: number | undefined;
    try {
      fd = openSync(tmp, 'wx', 0o644);
      writeSync(fd, text);
      fsyncSync(fd);
      closeSync(fd);
      fd = undefined;
      linkSync(tmp, this.file);
      return true;
    } catch (e) {
      if (errno(e) === 'EEXIST') return false;
      throw new IoError('E_FILE_WRITE', `cannot create the run lock ${this.file}: ${errno(e)}`, {
        hint: "Check that the inventory's folder exists and is writable: the lock file lives next to the inventory.",
        cause: e,
        location: { file: this.file },
      });
    } finally {
      if (fd !== undefined) closeSync(fd);
      try {
        unlinkSync(tmp);
      } catch {
        // not created
      }
    }
  }

  #read(file: string): Found | undefined {
    try {
      const st = lstatSync(file);
      // a FIFO, device or symbolic link there is not a lock stackctl made: never opened, judged unreadable
      if (!st.isFile()) return { text: '', record: undefined, mtimeMs: st.mtimeMs };
      const text = readFileSync(file, 'utf8');
      return { text, record: parseRecord(text), mtimeMs: st.mtimeMs };
    } catch (e) {
      if (errno(e) === 'ENOENT') return undefined;
      throw new IoError('E_FILE_READ', `cannot read the run lock ${file}: ${errno(e)}`, {
        hint: "Check the permissions of the inventory's folder.",
        cause: e,
        location: { file },
      });
    }
  }

  /** Live, or stale and why. */
  #judge(found: Found): Verdict {
    const p = this.probe;
    const r = found.record;
    if (!r) {
      // not written by stackctl (or damaged): stale only when older than this boot
      return found.mtimeMs < p.bootTimeMs()
        ? { live: false, reason: 'an unreadable lock file from before this machine last booted' }
        : { live: true, foreign: false };
    }
    if (r.host !== p.hostname()) return { live: true, foreign: true };
    const boot = p.bootId();
    if (r.boot && boot && r.boot !== boot) {
      return { live: false, reason: 'it was taken before this machine last booted' };
    }
    if (!p.alive(r.pid)) return { live: false, reason: `process ${r.pid} is gone` };
    const start = r.start ? p.startTime(r.pid) : undefined;
    if (start && start !== r.start) {
      return { live: false, reason: `process ${r.pid} is gone (that number now belongs to another program)` };
    }
    return { live: true, foreign: false };
  }

  /**
   * Remove the stale lock that was judged: move it aside, and only if what
   * moved is that very file, delete it; else put it back. True when removed.
   */
  #remove(stale: Found): boolean {
    const aside = `${this.file}.${this.probe.pid}.${randomBytes(6).toString('hex')}.stale`;
    try {
      renameSync(this.file, aside);
    } catch (e) {
      if (errno(e) === 'ENOENT') return false; // another run removed it first
      throw new IoError('E_FILE_WRITE', `cannot take over the run lock ${this.file}: ${errno(e)}`, {
        hint: "Check that the inventory's folder is writable.",
        cause: e,
        location: { file: this.file },
      });
    }
    const moved = this.#read(aside);
    const same = moved !== undefined && moved.text === stale.text;
    if (!same) {
      // another run took the lock over in between: give its lock back
      try {
        linkSync(aside, this.file);
      } catch {
        // a third run created one meanwhile; it holds the lock now
      }
    }
    unlinkSync(aside);
    return same;
  }

  #unreadable(): IoError {
    return new IoError('E_LOCK_FILE', `the run lock ${this.file} is not a lock file stackctl can read`, {
      hint: `If no stackctl run is working on ${this.label}, remove ${this.file}.`,
      location: { file: this.file },
    });
  }
}
