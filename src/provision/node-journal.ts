/**
 * The journal of the node state file: `<inventory>.nodes.journal` holds the
 * transitions applied since `<inventory>.nodes.json` (the snapshot) was last
 * written, one JSON line each, so that a transition costs one short append
 * whatever the number of nodes (docs/provisioning.md, "Node state files").
 *
 * Line 1 names the snapshot the entries follow, by the SHA-256 of its bytes:
 * `{"journal":1,"snapshot":"<hex>"}` (`"none"` when there was no snapshot).
 * A journal whose snapshot is not the file on disk is left over from a
 * compaction that wrote the new snapshot and was stopped before it removed
 * the journal: its entries are in the snapshot already, and it is ignored.
 * Then one line per transition, numbered from 1:
 * `{"seq":1,"node":"ctl-0","event":"manage","from":"enroll","to":"verifying","reason":"","time":"..."}`.
 *
 * A line is complete when it ends with a newline. Only the last line may be
 * incomplete: an append cut short (a crash, a full disk), which never
 * returned, so it is ignored and the next append overwrites it. Any other
 * bad line is damage, refused with E_NODES_JOURNAL naming file and line.
 */
import { createHash } from 'node:crypto';
import { InputError } from '../core/errors.js';
import { historyEntryOf } from './nodes-file.js';
import { withEntry, type HistoryEntry, type NodeRecord, newRecord } from './records.js';

/** Version of the journal format (line 1). */
const JOURNAL_VERSION = 1;

/** What line 1 names when there was no snapshot file. */
export const NO_SNAPSHOT = 'none';

/** `site.nodes.json` -> `site.nodes.journal`. */
export function journalFileFor(nodesFile: string): string {
  return nodesFile.replace(/\.json$/, '') + '.journal';
}

/** How line 1 names a snapshot: the SHA-256 of its bytes. */
export function snapshotDigest(data: Uint8Array | undefined): string {
  return data === undefined ? NO_SNAPSHOT : createHash('sha256').update(data).digest('hex');
}

/** Line 1 of a journal that follows the snapshot of this digest. */
export function headerLine(snapshot: string): string {
  return JSON.stringify({ journal: JOURNAL_VERSION, snapshot }) + '\n';
}

/** One transition of the journal. */
export interface JournalEntry {
  /** 1 for the first entry of the journal, then one more per line. */
  readonly seq: number;
  readonly node: string;
  readonly entry: HistoryEntry;
}

/** The line of an entry, newline included. */
export function entryLine(e: JournalEntry): string {
  return JSON.stringify({ seq: e.seq, node: e.node, ...e.entry }) + '\n';
}

/** What the complete lines of a stretch of the journal hold. */
export interface JournalChunk {
  readonly entries: readonly (JournalEntry & { readonly line: number })[];
  /** Bytes of the complete lines: where the next append goes. */
  readonly bytes: number;
  /** Complete lines. */
  readonly lines: number;
  /** The stretch ends with an incomplete line (ignored). */
  readonly torn: boolean;
}

/** A journal read from its start. */
export interface Journal extends JournalChunk {
  /** The digest of the snapshot it follows; undefined when not even line 1 is complete. */
  readonly snapshot: string | undefined;
}

/** A damaged journal line (not an append cut short). */
export function badJournalLine(file: string, line: number, what: string): InputError {
  return new InputError('E_NODES_JOURNAL', `node state journal ${file} line ${line}: ${what}`, {
    hint:
      `Line ${line} is damaged, and it is not the last append of a run that was killed (that one has no newline ` +
      `and is ignored). Restore the journal from a backup, or cut it before line ${line} (the transitions from there ` +
      'on are lost: check those nodes with stackctl nodes show); removing the journal goes back to the node state file alone.',
    location: { file, line },
    details: { file, line },
  });
}

/** The complete lines of `data` (from byte 0) with their 1-based numbers, counted from `firstLine`. */
function* lines(data: Uint8Array, firstLine: number): Generator<{ text: string; line: number; end: number }> {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  let start = 0;
  let line = firstLine;
  for (let nl = buf.indexOf(10, start); nl !== -1; nl = buf.indexOf(10, start)) {
    yield { text: buf.toString('utf8', start, nl), line, end: nl + 1 };
    start = nl + 1;
    line++;
  }
}

function parseJson(file: string, line: number, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw badJournalLine(file, line, 'not a JSON line');
  }
}

/**
 * The entries of `data`, a stretch of the journal that starts at a line
 * boundary: line `firstLine`, entry `firstSeq`. Throws E_NODES_JOURNAL for a
 * complete line that is no entry or is out of sequence.
 */
export function parseEntries(file: string, data: Uint8Array, firstLine: number, firstSeq: number): JournalChunk {
  const entries: (JournalEntry & { line: number })[] = [];
  let bytes = 0;
  for (const l of lines(data, firstLine)) {
    const raw = parseJson(file, l.line, l.text) as { seq?: unknown; node?: unknown } | null;
    const entry = historyEntryOf(raw);
    if (!entry || typeof raw?.node !== 'string' || raw.node === '') {
      throw badJournalLine(file, l.line, 'not a transition (node, event, from, to, reason, time)');
    }
    const seq = firstSeq + entries.length;
    if (raw.seq !== seq) throw badJournalLine(file, l.line, `entry number ${String(raw.seq)} where ${seq} was due`);
    entries.push({ seq, node: raw.node, entry, line: l.line });
    bytes = l.end;
  }
  return { entries, bytes, lines: entries.length, torn: bytes < data.byteLength };
}

/**
 * A whole journal: line 1, then, when it follows the snapshot of digest
 * `snapshot`, its entries (a journal that follows another snapshot is left
 * over from a compaction, and what it holds is not read).
 */
export function parseJournal(file: string, data: Uint8Array, snapshot: string): Journal {
  const first = lines(data, 1).next();
  if (first.done) return { snapshot: undefined, entries: [], bytes: 0, lines: 0, torn: data.byteLength > 0 };
  const header = parseJson(file, 1, first.value.text) as { journal?: unknown; snapshot?: unknown } | null;
  if (header?.journal !== JOURNAL_VERSION || typeof header.snapshot !== 'string') {
    throw badJournalLine(file, 1, `unknown format (expected {"journal": ${JOURNAL_VERSION}, "snapshot": ...})`);
  }
  if (header.snapshot !== snapshot) return { snapshot: header.snapshot, entries: [], bytes: 0, lines: 0, torn: false };
  const rest = parseEntries(file, data.subarray(first.value.end), 2, 1);
  return { ...rest, snapshot: header.snapshot, bytes: first.value.end + rest.bytes, lines: rest.lines + 1 };
}

/**
 * The records journal entries change, applied in order to `records` (which
 * is not changed). Each entry must start where the node stands (its `from`
 * is the node's state): anything else means the journal does not follow
 * these records, and is refused as damage.
 */
export function replay(
  file: string,
  records: ReadonlyMap<string, NodeRecord>,
  entries: JournalChunk['entries'],
): Map<string, NodeRecord> {
  const changed = new Map<string, NodeRecord>();
  for (const e of entries) {
    const rec = changed.get(e.node) ?? records.get(e.node) ?? newRecord(e.node);
    if (rec.state !== e.entry.from) {
      throw badJournalLine(
        file,
        e.line,
        `node '${e.node}' is in state '${rec.state}' there, but the entry moves it from '${e.entry.from}'`,
      );
    }
    changed.set(e.node, withEntry(rec, e.entry));
  }
  return changed;
}
