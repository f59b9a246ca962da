/**
 * The engine of the node state machine: applies an event to a node record by
 * looking it up in TRANSITIONS, and persists every node's state and history
 * next to the inventory, durably before `apply()` returns: a crash at any
 * instant leaves the state of the last transition that returned (or of the
 * one in flight). Workflows call `apply()` before and after each side effect,
 * so after a crash the files say where each node stood.
 *
 * Two files: `<inventory>.nodes.json`, the snapshot (nodes-file.ts), and
 * `<inventory>.nodes.journal`, one line per transition since the snapshot
 * (node-journal.ts). A transition appends one line (one write, fdatasync): its
 * cost does not depend on the number of nodes. The journal is folded into the
 * snapshot (compaction) when it grows past the snapshot's size, and when a
 * run that wrote ends (`close()`).
 */
import { ExitCode, IoError, StackctlError } from '../core/errors.js';
import { type EventSink, NO_EVENTS } from '../core/events.js';
import { DISK_NODE_FILES, sameStamp, type FileStamp, type NodeFiles } from './node-files.js';
import {
  entryLine,
  headerLine,
  journalFileFor,
  parseEntries,
  parseJournal,
  replay,
  snapshotDigest,
} from './node-journal.js';
import { parseNodesFile, serializeNodes } from './nodes-file.js';
import { newRecord, withEntry, type NodeRecord } from './records.js';
import { TRANSITIONS, isNodeState, type NodeEvent, type NodeState } from './states.js';

export { MAX_HISTORY, newRecord, type HistoryEntry, type NodeRecord } from './records.js';
export { journalFileFor } from './node-journal.js';

/** `from -> event -> to`, indexed once. */
const NEXT: ReadonlyMap<string, NodeState> = new Map(TRANSITIONS.map(([from, ev, to]) => [`${from}\0${ev}`, to]));

/** The state an event leads to from `state`, or undefined when the table has no such row. */
export function nextState(state: NodeState, event: NodeEvent): NodeState | undefined {
  return NEXT.get(`${state}\0${event}`);
}

/** The events the table accepts in `state`, in table order. */
export function eventsFrom(state: NodeState): NodeEvent[] {
  return TRANSITIONS.filter(([from]) => from === state).map(([, ev]) => ev);
}

/** An event that the transition table does not allow in the node's current state. */
export class InvalidTransition extends StackctlError {
  constructor(
    readonly node: string,
    readonly state: NodeState,
    readonly event: string,
  ) {
    const allowed = isNodeState(state) ? eventsFrom(state) : [];
    super('E_INVALID_TRANSITION', `node '${node}' is in state '${state}': event '${event}' is not allowed there`, {
      hint: allowed.length
        ? `In '${state}' the allowed events are: ${allowed.join(', ')}. See docs/provisioning.md for the state diagram.`
        : `No event leads out of '${state}'.`,
      exitCode: ExitCode.USAGE,
      details: { node, state, event },
    });
  }
}

/**
 * Apply an event to a record; pure. Throws InvalidTransition when the table
 * has no `(state, event)` row.
 */
export function applyEvent(record: NodeRecord, event: NodeEvent, reason: string, now: Date): NodeRecord {
  const to = nextState(record.state, event);
  if (to === undefined) throw new InvalidTransition(record.name, record.state, event);
  return withEntry(record, { event, from: record.state, to, reason, time: now.toISOString() });
}

/** Path of the node state file that belongs to an inventory file. */
export function nodesFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.nodes.json';
}

/** When the journal is folded into the snapshot during a run (a run that wrote also folds it when it ends). */
export interface Compaction {
  /** A journal smaller than this is left to grow: one short append per transition meanwhile. */
  readonly minBytes: number;
  /**
   * A journal larger than the snapshot times this is folded in. Writing the
   * snapshot then costs at most its size once per as many bytes of journal,
   * so a transition costs a bounded number of bytes written whatever the
   * number of nodes, and the two files together stay within about twice
   * the snapshot (plus minBytes).
   */
  readonly snapshotRatio: number;
}

/** The compaction of a run. */
export const COMPACTION: Compaction = { minBytes: 1024 * 1024, snapshotRatio: 1 };

/** Largest node state file read (a guard against a mistaken path). */
const MAX_NODES_FILE = 64 * 1024 * 1024;
/** Largest journal read: compaction keeps it near the snapshot's size. */
const MAX_JOURNAL = 2 * MAX_NODES_FILE;
/** Reads of snapshot and journal before giving up on a pair that another run keeps replacing. */
const MAX_LOAD_ROUNDS = 5;

/** Options of a NodeStateStore; side effects are injectable. */
export interface NodeStateStoreOptions {
  readonly events?: EventSink;
  readonly now?: () => Date;
  /** The file operations (default: the disk); tests and benches wrap them to count or fail writes. */
  readonly files?: NodeFiles;
  readonly compaction?: Compaction;
}

/** What this store knows of the journal file. */
interface JournalView {
  /** undefined: there is no journal file. */
  readonly stamp: FileStamp | undefined;
  /** Its line 1 names the snapshot this store holds: its entries are in `#records`, appends go on. */
  readonly follows: boolean;
  /** Bytes of its complete lines: where the next append goes. */
  readonly end: number;
  /** Its complete lines, line 1 included. */
  readonly lines: number;
  /** Number of its last entry. */
  readonly seq: number;
}

const NO_JOURNAL: JournalView = { stamp: undefined, follows: false, end: 0, lines: 0, seq: 0 };

/**
 * The node records of one inventory, backed by `<inventory>.nodes.json` and
 * its journal `<inventory>.nodes.journal` (see the module comment).
 *
 * `apply()` first looks whether another store of the same files wrote since
 * this one last read or wrote them (a second store in this process, or a run
 * of a stackctl that did not hold the run lock): it compares the stamps of
 * both files (inode, size, change times: two `stat` calls, no read) and,
 * when they moved, reads the journal's new lines, or both files when the
 * snapshot was rewritten. The event applies to the node as the files have
 * it; a change made elsewhere is never overwritten, and an event that no
 * longer fits the node's state is refused (InvalidTransition). Stat, check
 * and append are synchronous, so the nodes a run works on in parallel cannot
 * interleave inside one apply. Between processes the inventory's run lock
 * (src/core/lock.ts) keeps a second writer out; the commands that run
 * outside it (`nodes list|show`, `lab status`, dry runs) only read, and
 * reading never changes the files. `get()` answers from memory, as of this
 * store's last read or write.
 *
 * NOTE: a stamp repeats only when a file is replaced by one with the same
 * inode number, size and change times (within one tick of the filesystem's
 * clock): two compactions by another store between two of this store's
 * applies, both writing a snapshot of the same size. Within one process
 * that takes two stores of one inventory both writing, which no command does;
 * between processes the run lock keeps the second writer out.
 */
export class NodeStateStore {
  readonly #records = new Map<string, NodeRecord>();
  readonly #events: EventSink;
  readonly #now: () => Date;
  readonly #files: NodeFiles;
  readonly #compaction: Compaction;
  /** The snapshot as this store last read or wrote it. */
  #snapshot: { stamp: FileStamp | undefined; digest: string; bytes: number } = {
    stamp: undefined,
    digest: snapshotDigest(undefined),
    bytes: 0,
  };
  #journal: JournalView = NO_JOURNAL;
  /** This store appended to the journal: close() folds it in. */
  #wrote = false;
  /** The journal file that goes with `file`. */
  readonly journalFile: string;

  private constructor(
    readonly file: string,
    options: NodeStateStoreOptions,
  ) {
    this.#events = options.events ?? NO_EVENTS;
    this.#now = options.now ?? (() => new Date());
    this.#files = options.files ?? DISK_NODE_FILES;
    this.#compaction = options.compaction ?? COMPACTION;
    this.journalFile = journalFileFor(file);
  }

  /** Open the store: the snapshot and its journal; no files means every node is still in enroll. */
  static open(file: string, options: NodeStateStoreOptions = {}): NodeStateStore {
    const store = new NodeStateStore(file, options);
    store.#load();
    return store;
  }

  /**
   * Read snapshot and journal. A compaction by another store between the two
   * reads would pair an old snapshot with a new journal (or none): the
   * snapshot's stamp is checked again after the journal was read, and the
   * pair read again when it moved.
   */
  #load(): void {
    for (let round = 0; round < MAX_LOAD_ROUNDS; round++) {
      const snap = this.#files.read(this.file, MAX_NODES_FILE);
      const jr = this.#files.read(this.journalFile, MAX_JOURNAL);
      if (!sameStamp(snap?.stamp, this.#files.stat(this.file))) continue;
      const records = new Map<string, NodeRecord>();
      if (snap)
        for (const r of parseNodesFile(this.file, Buffer.from(snap.data).toString('utf8'))) records.set(r.name, r);
      const digest = snapshotDigest(snap?.data);
      const journal = jr && parseJournal(this.journalFile, jr.data, digest);
      const follows = journal?.snapshot === digest;
      if (journal && follows)
        for (const [n, r] of replay(this.journalFile, records, journal.entries)) records.set(n, r);
      this.#records.clear();
      for (const [n, r] of records) this.#records.set(n, r);
      this.#snapshot = { stamp: snap?.stamp, digest, bytes: snap?.data.byteLength ?? 0 };
      this.#journal =
        jr && journal
          ? { stamp: jr.stamp, follows, end: journal.bytes, lines: journal.lines, seq: journal.entries.length }
          : NO_JOURNAL;
      return;
    }
    throw new IoError('E_NODES_STATE', `node state file ${this.file} kept changing while it was read`, {
      hint: 'Another stackctl run is writing it: run the command again once that run has ended.',
      location: { file: this.file },
    });
  }

  /** Catch up with what another store of these files wrote; cheap when nothing changed (two stats). */
  #refresh(): void {
    if (!sameStamp(this.#files.stat(this.file), this.#snapshot.stamp)) return this.#load();
    const now = this.#files.stat(this.journalFile);
    const was = this.#journal;
    if (sameStamp(now, was.stamp)) return;
    if (now && was.stamp && was.follows && now.id === was.stamp.id && now.size > was.end) {
      // the same journal, longer: read only its new lines
      const tail = this.#files.readFrom(this.journalFile, was.end, MAX_JOURNAL);
      if (tail?.stamp.id === now.id) {
        try {
          const chunk = parseEntries(this.journalFile, tail.data, was.lines + 1, was.seq + 1);
          const changed = replay(this.journalFile, this.#records, chunk.entries);
          for (const [n, r] of changed) this.#records.set(n, r);
          this.#journal = {
            stamp: tail.stamp,
            follows: true,
            end: was.end + chunk.bytes,
            lines: was.lines + chunk.lines,
            seq: was.seq + chunk.entries.length,
          };
          return;
        } catch {
          // not the continuation this store expected: read both files from the start (which names any damage)
        }
      }
    }
    this.#load();
  }

  /** The node's record (enroll with no history when it was never touched). */
  get(name: string): NodeRecord {
    return this.#records.get(name) ?? newRecord(name);
  }

  /** Every node that has a record, sorted by name. */
  list(): NodeRecord[] {
    return [...this.#records.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /**
   * Apply an event to a node, persist it (one line appended to the journal,
   * durably), then emit a `node.state` event. Refuses invalid transitions
   * (InvalidTransition) without writing anything.
   */
  apply(name: string, event: NodeEvent, reason = ''): NodeRecord {
    this.#refresh();
    const limit = Math.max(this.#compaction.minBytes, this.#snapshot.bytes * this.#compaction.snapshotRatio);
    if (this.#journal.follows && this.#journal.end > limit) this.#fold();
    const before = this.get(name);
    const after = applyEvent(before, event, reason, this.#now());
    const j = this.#journal;
    const line = entryLine({ seq: j.follows ? j.seq + 1 : 1, node: name, entry: after.history.at(-1)! });
    // NOTE: write first, then update memory: a failed write must not leave the
    // in-memory view ahead of the files
    let next: JournalView;
    if (j.follows) {
      const stamp = this.#files.append(this.journalFile, j.end, line);
      next = { stamp, follows: true, end: j.end + Buffer.byteLength(line), lines: j.lines + 1, seq: j.seq + 1 };
    } else {
      // a new journal (or one left over from a compaction, replaced): line 1 and the entry in one durable write
      const text = headerLine(this.#snapshot.digest) + line;
      const stamp = this.#files.replace(this.journalFile, text);
      next = { stamp, follows: true, end: Buffer.byteLength(text), lines: 2, seq: 1 };
    }
    this.#records.set(name, after);
    this.#journal = next;
    this.#wrote = true;
    this.#events.emit({ kind: 'node.state', node: name, from: before.state, event, to: after.state });
    return after;
  }

  /**
   * Fold the journal into the snapshot when this store wrote to it: what a
   * run does when it ends, so that the next one starts from one file. The
   * store stays usable. A store that only read leaves the files alone (it
   * may run beside a run that holds the lock).
   */
  close(): void {
    if (!this.#wrote) return;
    this.#refresh();
    if (this.#journal.stamp !== undefined) this.#fold();
  }

  /**
   * Compaction: write the snapshot of every record atomically and durably,
   * then remove the journal. A crash in between leaves a journal whose line 1
   * names the old snapshot: it is ignored (its entries are in the new one).
   */
  #fold(): void {
    if (this.#journal.follows) {
      const text = serializeNodes(this.#records);
      const data = Buffer.from(text, 'utf8');
      const stamp = this.#files.replace(this.file, text);
      this.#snapshot = { stamp, digest: snapshotDigest(data), bytes: data.byteLength };
      this.#journal = { ...this.#journal, follows: false };
    }
    this.#files.remove(this.journalFile);
    this.#journal = NO_JOURNAL;
  }
}
