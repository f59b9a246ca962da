/**
 * The engine of the node state machine: applies an event to a node record by
 * looking it up in TRANSITIONS, and persists every node's state and history
 * in `<inventory>.nodes.json` (atomic writes: a crash leaves the old or the
 * new file). Workflows call `apply()` before and after each side effect, so
 * after a crash the file says where each node stood.
 */
import { ExitCode, InputError, StackctlError } from '../core/errors.js';
import { type EventSink, NO_EVENTS } from '../core/events.js';
import { readTextFileIfExists, writeFileAtomic } from '../core/fs.js';
import { NodeState, TRANSITIONS, isNodeEvent, isNodeState, type NodeEvent } from './states.js';

/** One applied event, as kept in a node's history. */
export interface HistoryEntry {
  readonly event: NodeEvent;
  readonly from: NodeState;
  readonly to: NodeState;
  /** Why, in words: an error code and message, an operator's note. Never a secret. */
  readonly reason: string;
  /** ISO 8601 time. */
  readonly time: string;
}

/** What stackctl knows about one node's lifecycle. */
export interface NodeRecord {
  readonly name: string;
  readonly state: NodeState;
  /** Oldest first; capped at MAX_HISTORY entries. */
  readonly history: readonly HistoryEntry[];
}

/** History entries kept per node: enough for every step of many deploys, bounded so the file stays small. */
export const MAX_HISTORY = 200;

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

/** A fresh record: every node starts in enroll. */
export function newRecord(name: string): NodeRecord {
  return { name, state: NodeState.ENROLL, history: [] };
}

/**
 * Apply an event to a record; pure. Throws InvalidTransition when the table
 * has no `(state, event)` row.
 */
export function applyEvent(record: NodeRecord, event: NodeEvent, reason: string, now: Date): NodeRecord {
  const to = nextState(record.state, event);
  if (to === undefined) throw new InvalidTransition(record.name, record.state, event);
  const entry: HistoryEntry = { event, from: record.state, to, reason, time: now.toISOString() };
  const history = [...record.history, entry].slice(-MAX_HISTORY);
  return { name: record.name, state: to, history };
}

/** Path of the node state file that belongs to an inventory file. */
export function nodesFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.nodes.json';
}

/** The persisted file. */
interface NodesFile {
  readonly version: 1;
  readonly nodes: Record<string, { state: NodeState; history: HistoryEntry[] }>;
}

/** Largest node state file read (a guard against a mistaken path). */
const MAX_NODES_FILE = 64 * 1024 * 1024;

/** Options of a NodeStateStore; side effects are injectable. */
export interface NodeStateStoreOptions {
  readonly events?: EventSink;
  readonly now?: () => Date;
  /** Where the file is written; tests may count or fail writes (and then pass `read` from the same place). */
  readonly write?: (file: string, text: string) => void;
  /** How the file is read: its text, or undefined when there is none. */
  readonly read?: (file: string) => string | undefined;
}

/**
 * The node records of one inventory, backed by `<inventory>.nodes.json`.
 * Every `apply()` writes the whole file atomically before it returns, so the
 * caller may take its next side effect knowing the state is on disk.
 *
 * `apply()` is a read-modify-write of the file: it reads the file first and,
 * when it is no longer what this store last read or wrote (another store of
 * the same file wrote it: a second store in this process, or a run of a
 * stackctl that did not hold the run lock), takes the file's records and
 * applies the event to the node as the file has it; a change made
 * elsewhere is never overwritten, and an event that no longer fits the
 * node's state is refused (InvalidTransition). Read, check and write are
 * synchronous, so the nodes a run works on in parallel cannot interleave
 * inside one apply. Between processes the inventory's run lock
 * (src/core/lock.ts) keeps a second writer out; `get()` answers from memory,
 * as of this store's last read or write.
 */
export class NodeStateStore {
  readonly #records = new Map<string, NodeRecord>();
  readonly #events: EventSink;
  readonly #now: () => Date;
  readonly #write: (file: string, text: string) => void;
  readonly #read: (file: string) => string | undefined;
  /** The file's text as this store last read or wrote it (undefined: no file). */
  #seen: string | undefined;

  private constructor(
    readonly file: string,
    options: NodeStateStoreOptions,
  ) {
    this.#events = options.events ?? NO_EVENTS;
    this.#now = options.now ?? (() => new Date());
    this.#write = options.write ?? ((f, t) => writeFileAtomic(f, t));
    this.#read = options.read ?? ((f) => readTextFileIfExists(f, MAX_NODES_FILE));
  }

  /** Open the store; a missing file means every node is still in enroll. */
  static open(file: string, options: NodeStateStoreOptions = {}): NodeStateStore {
    const store = new NodeStateStore(file, options);
    store.#load(store.#read(file));
    return store;
  }

  /** Take the records of the file's text (undefined: no file, every node in enroll). */
  #load(text: string | undefined): void {
    const records = text === undefined ? [] : parseNodesFile(this.file, text);
    this.#records.clear();
    for (const rec of records) this.#records.set(rec.name, rec);
    this.#seen = text;
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
   * Apply an event to a node, persist, then emit a `node.state` event.
   * Refuses invalid transitions (InvalidTransition) without writing anything.
   */
  apply(name: string, event: NodeEvent, reason = ''): NodeRecord {
    const current = this.#read(this.file);
    if (current !== this.#seen) this.#load(current);
    const before = this.get(name);
    const after = applyEvent(before, event, reason, this.#now());
    const next = new Map(this.#records).set(name, after);
    const text = serialize(next);
    // NOTE: write first, then update memory: a failed write must not leave the
    // in-memory view ahead of the file
    this.#write(this.file, text);
    this.#records.set(name, after);
    this.#seen = text;
    this.#events.emit({ kind: 'node.state', node: name, from: before.state, event, to: after.state });
    return after;
  }
}

function serialize(records: ReadonlyMap<string, NodeRecord>): string {
  const nodes: NodesFile['nodes'] = {};
  for (const name of [...records.keys()].sort()) {
    const r = records.get(name)!;
    nodes[name] = { state: r.state, history: [...r.history] };
  }
  const file: NodesFile = { version: 1, nodes };
  return JSON.stringify(file, null, 2) + '\n';
}

function badFile(file: string, what: string): InputError {
  return new InputError('E_NODES_STATE', `node state file ${file}: ${what}`, {
    hint: 'Restore it from a backup, or fix the entry by hand; removing the file sends every node back to enroll.',
    location: { file },
  });
}

/** Parse and check the persisted file; every state and event must be known. */
export function parseNodesFile(file: string, text: string): NodeRecord[] {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw badFile(file, 'not valid JSON');
  }
  const obj = data as Partial<NodesFile> | null;
  if (typeof obj !== 'object' || obj === null || obj.version !== 1 || typeof obj.nodes !== 'object' || !obj.nodes) {
    throw badFile(file, 'unknown format (expected {"version": 1, "nodes": {...}})');
  }
  const out: NodeRecord[] = [];
  for (const [name, raw] of Object.entries(obj.nodes as Record<string, unknown>)) {
    const rec = raw as { state?: unknown; history?: unknown } | null;
    if (typeof rec !== 'object' || rec === null || !isNodeState(rec.state) || !Array.isArray(rec.history)) {
      throw badFile(file, `node '${name}' has no valid state`);
    }
    const history: HistoryEntry[] = [];
    for (const h of rec.history as unknown[]) {
      const e = h as Partial<Record<keyof HistoryEntry, unknown>> | null;
      if (
        typeof e !== 'object' ||
        e === null ||
        !isNodeEvent(e.event) ||
        !isNodeState(e.from) ||
        !isNodeState(e.to) ||
        typeof e.reason !== 'string' ||
        typeof e.time !== 'string'
      ) {
        throw badFile(file, `node '${name}' has a malformed history entry`);
      }
      history.push({ event: e.event, from: e.from, to: e.to, reason: e.reason, time: e.time });
    }
    out.push({ name, state: rec.state, history });
  }
  return out;
}
