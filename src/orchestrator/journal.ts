/**
 * The deploy journal: `<inventory without .yaml>.journal.jsonl`. Every side
 * effect on a node is written before it happens (`intent`) and after it
 * happened (`done`, or `failed`), one whole JSON line each, so a killed run
 * leaves a readable record. `deploy --resume` replays it: effects with an
 * intent and no outcome are checked against the node's real state before
 * anything is repeated. Only names and hashes go in: never a secret.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { IoError } from '../core/errors.js';

/** Kinds of side effect the executor performs. */
export const EffectKind = {
  /** A config file written to a node (atomic upload). */
  UPLOAD: 'upload',
  /** An image pulled by a node's dockerd. */
  PULL: 'pull',
  /** A container removed (stop + remove) before being recreated. */
  REMOVE: 'remove',
  /** A container created with its labels. */
  CREATE: 'create',
  /** A container started. */
  START: 'start',
  /** A run-once task run on the bootstrap node. */
  TASK: 'task',
  /** Keystone users, endpoints, flavours or images registered at step 5. */
  REGISTER: 'register',
  /** A database and its user created. */
  DATABASE: 'database',
} as const;
export type EffectKind = (typeof EffectKind)[keyof typeof EffectKind];

/** One side effect: what, where, and the hash of what it puts in place. */
export interface Effect {
  readonly kind: EffectKind;
  readonly node: string;
  /** Container name, file path, image reference, `service/task` or database. */
  readonly target: string;
  /** sha256 of what the effect puts in place (container hash, file sha256, ...). */
  readonly hash: string;
}

/** A line of the journal. */
export type JournalRecord =
  | { readonly time: string; readonly run: string; readonly type: 'run.start'; readonly resumed: boolean }
  | { readonly time: string; readonly run: string; readonly type: 'run.end'; readonly ok: boolean }
  | {
      readonly time: string;
      readonly run: string;
      readonly type: 'intent' | 'done' | 'failed';
      readonly effect: Effect;
      /** On `done`: the effect was found already in place on the node (not performed again). */
      readonly verified?: boolean;
    };

/** The identity of an effect. */
export function effectKey(e: Effect): string {
  return `${e.kind} ${e.node} ${e.target} ${e.hash}`;
}

/** What a journal says about its last run. */
export interface Replay {
  /** The last run's id, when there is one. */
  readonly run: string | undefined;
  /** True when the last run recorded its end. */
  readonly ended: boolean;
  /** Effects recorded done in the last run (across its resumptions). */
  readonly done: ReadonlySet<string>;
  /** Effects with an intent and neither done nor failed: they may or may not have happened. */
  readonly pending: readonly Effect[];
}

/** Replay records (pure): the state of the last run. */
export function replay(records: readonly JournalRecord[]): Replay {
  let run: string | undefined;
  for (const r of records) if (r.type === 'run.start' && !r.resumed) run = r.run;
  const done = new Set<string>();
  const open = new Map<string, Effect>();
  let ended = false;
  for (const r of records) {
    if (r.run !== run) continue;
    if (r.type === 'run.start') ended = false;
    else if (r.type === 'run.end') ended = true;
    else {
      const k = effectKey(r.effect);
      if (r.type === 'intent') open.set(k, r.effect);
      else {
        open.delete(k);
        if (r.type === 'done') done.add(k);
      }
    }
  }
  return { run, ended, done, pending: [...open.values()] };
}

/** Parse journal text; a torn last line (the process died mid-write) is ignored. */
export function parseJournal(text: string): JournalRecord[] {
  const out: JournalRecord[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line) as JournalRecord);
    } catch {
      // only the last line can be torn: appendFileSync writes whole lines otherwise
    }
  }
  return out;
}

/** `site.yaml` -> `site.journal.jsonl`. */
export function journalFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.journal.jsonl';
}

/** Where journal records go (injectable for tests). */
export interface JournalSink {
  readonly run: string;
  readonly previous: Replay;
  record(type: 'intent' | 'done' | 'failed', effect: Effect, verified?: boolean): void;
  end(ok: boolean): void;
}

/**
 * The journal file. A new run gets a fresh id; `resume` continues the last
 * run (its done effects stay done) unless that run ended.
 */
export class JournalFile implements JournalSink {
  readonly run: string;
  readonly previous: Replay;
  constructor(
    readonly file: string,
    opts: { resume: boolean; now?: () => Date },
  ) {
    this.#now = opts.now ?? (() => new Date());
    const records = existsSync(file) ? parseJournal(readFileSync(file, 'utf8')) : [];
    this.previous = replay(records);
    const resumed = opts.resume && this.previous.run !== undefined && !this.previous.ended;
    this.run = resumed ? this.previous.run! : randomBytes(6).toString('hex');
    if (!resumed) this.previous = { run: undefined, ended: false, done: new Set(), pending: [] };
    this.#append({ time: this.#stamp(), run: this.run, type: 'run.start', resumed });
  }
  readonly #now: () => Date;
  #stamp(): string {
    return this.#now().toISOString();
  }
  #append(r: JournalRecord): void {
    try {
      appendFileSync(this.file, JSON.stringify(r) + '\n', { mode: 0o600 });
    } catch (err) {
      throw new IoError('E_JOURNAL_WRITE', `cannot append to the deploy journal ${this.file}`, {
        hint: 'The journal must be writable before any side effect: check the folder of the inventory.',
        cause: err,
      });
    }
  }
  record(type: 'intent' | 'done' | 'failed', effect: Effect, verified?: boolean): void {
    this.#append({ time: this.#stamp(), run: this.run, type, effect, ...(verified ? { verified } : {}) });
  }
  end(ok: boolean): void {
    this.#append({ time: this.#stamp(), run: this.run, type: 'run.end', ok });
  }
}

/** A journal kept in memory (dry runs, tests). */
export class MemoryJournal implements JournalSink {
  readonly run = 'memory';
  readonly previous: Replay = { run: undefined, ended: false, done: new Set(), pending: [] };
  readonly records: JournalRecord[] = [];
  record(type: 'intent' | 'done' | 'failed', effect: Effect, verified?: boolean): void {
    this.records.push({ time: '', run: this.run, type, effect, ...(verified ? { verified } : {}) });
  }
  end(ok: boolean): void {
    this.records.push({ time: '', run: this.run, type: 'run.end', ok });
  }
}
