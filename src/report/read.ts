/**
 * Reading the two files a run report is built from: the journal (`<inventory>.journal.jsonl`)
 * and the event log (`<inventory>.events.jsonl`). Both are JSON lines written whole by
 * appendFileSync, so only the last line can be torn (the process died mid-write): that one is
 * left out and noted. Any other line that is not a record of the file's kind is an error
 * naming the file and the line: a report built around a hole would show a wrong timeline.
 */
import { existsSync, readFileSync } from 'node:fs';
import { InputError, IoError } from '../core/errors.js';
import type { JournalRecord } from '../orchestrator/journal.js';
import type { LoggedEvent } from './model.js';

/** The records of a file, and what was left out of it. */
export interface Lines<T> {
  readonly records: readonly T[];
  /** Human notes for the page (a torn last line). */
  readonly notes: readonly string[];
}

/** What a line must hold to count as a record of each kind of file. */
const IS_RECORD = {
  journal: (o: Record<string, unknown>) => typeof o.run === 'string' && typeof o.type === 'string',
  events: (o: Record<string, unknown>) => typeof o.kind === 'string',
} as const;

/** The command that writes each kind of file, for hints. */
const WRITTEN_BY = {
  journal: "'stackctl deploy' or 'stackctl upgrade'",
  events: "'stackctl deploy', 'stackctl upgrade' and the node commands",
} as const;

/**
 * Parse JSON-lines text (pure): every line an object with a valid `time` and the fields of its
 * kind of file. Throws E_REPORT_EMPTY when there is no record, E_REPORT_CORRUPT at the first bad line.
 */
export function parseLines<T>(text: string, file: string, kind: keyof typeof IS_RECORD): Lines<T> {
  const lines = text.split('\n');
  const torn = !text.endsWith('\n') ? lines.length : 0;
  const records: T[] = [];
  const notes: string[] = [];
  for (const [i, line] of lines.entries()) {
    if (!line.trim()) continue;
    const n = i + 1;
    let o: unknown;
    try {
      o = JSON.parse(line);
    } catch {
      o = undefined;
    }
    const obj = typeof o === 'object' && o !== null && !Array.isArray(o) ? (o as Record<string, unknown>) : undefined;
    const ok =
      obj !== undefined && typeof obj.time === 'string' && !Number.isNaN(Date.parse(obj.time)) && IS_RECORD[kind](obj);
    if (ok) {
      records.push(obj as T);
      continue;
    }
    if (n === torn) {
      notes.push(`${file}:${n}: the last line is torn (the writing process died mid-line) and was left out`);
      continue;
    }
    throw new InputError('E_REPORT_CORRUPT', `${file}:${n}: not a record of the ${kind} file: ${clip(line)}`, {
      hint: `The file is written by ${WRITTEN_BY[kind]}, one JSON object per line; restore it from a copy, or cut the damaged line out with an editor.`,
    });
  }
  if (!records.length) {
    throw new InputError('E_REPORT_EMPTY', `${file} holds no ${kind} record`, {
      hint: `It is filled by ${WRITTEN_BY[kind]}: run one first, or pass the inventory the run was made with.`,
    });
  }
  return { records, notes };
}

/** Read and parse a file; a missing file is E_REPORT_NO_FILE. */
export function readLines<T>(file: string, kind: keyof typeof IS_RECORD): Lines<T> {
  if (!existsSync(file)) {
    throw new IoError('E_REPORT_NO_FILE', `no ${kind} file ${file}`, {
      hint: `It is written next to the inventory by ${WRITTEN_BY[kind]}: check -i names the inventory the run was made with.`,
    });
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new IoError('E_REPORT_NO_FILE', `cannot read the ${kind} file ${file}`, {
      hint: 'Check its permissions (it is mode 0600: run as the user who ran the command).',
      cause: err,
    });
  }
  return parseLines<T>(text, file, kind);
}

/** The journal of an inventory's runs. */
export const readJournal = (file: string): Lines<JournalRecord> => readLines<JournalRecord>(file, 'journal');

/** The event log of an inventory. */
export const readEvents = (file: string): Lines<LoggedEvent> => readLines<LoggedEvent>(file, 'events');

/** A line shortened for a message. */
function clip(line: string): string {
  return JSON.stringify(line.length > 80 ? `${line.slice(0, 80)}...` : line);
}
