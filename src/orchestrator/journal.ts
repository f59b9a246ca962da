/**
 * The journal of converge runs, deploy and upgrade alike: `<inventory without
 * .yaml>.journal.jsonl` (mode 0600). One whole JSON line per record, written
 * before (`intent`) and after (`done`, `failed`) every action, and around every
 * side effect an action has on a node, so a killed run leaves a readable record
 * (a torn last line is ignored).
 *
 * A run stays open until it ends: a pause, a failure or a crash leave it open.
 * `--resume` / `--continue` go on with it: actions recorded done are skipped (no
 * batch, backup or migration twice); an action with an intent and no outcome is
 * done again (handlers look at real state first); a side effect announced but
 * not recorded done is checked on its node and, when found in place, recorded
 * `done` with `verified: true` instead of being done again.
 *
 * Only names, keys, hashes and short details go in: never a secret.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { IoError, UsageError } from '../core/errors.js';

/** The format of the records written here (journals of earlier versions have none). */
export const JOURNAL_FORMAT = 2;

/** Kinds of side effect an action has on a node. */
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
  /** Keystone users, endpoints, flavours or images registered. */
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

/** The identity of an effect. */
export function effectKey(e: Effect): string {
  return `${e.kind} ${e.node} ${e.target} ${e.hash}`;
}

/** Which command a run converges for. */
export type RunCommand = 'deploy' | 'upgrade';

/** How a run is started. */
export const RunMode = {
  /** A new run; an upgrade is refused while another upgrade run is open. */
  NEW: 'new',
  /** Go on with the open run after a failure or a crash; stops again at a pause not yet passed. */
  RESUME: 'resume',
  /** Go on with the open run past the pause it stopped at. */
  CONTINUE: 'continue',
} as const;
export type RunMode = (typeof RunMode)[keyof typeof RunMode];

/** A line of the journal. */
export type JournalRecord =
  | {
      readonly time: string;
      readonly run: string;
      readonly type: 'run.start';
      readonly format: typeof JOURNAL_FORMAT;
      readonly command: RunCommand;
      readonly mode: RunMode;
      /** The release the run converges to. */
      readonly target: string;
      /** The options that shaped the run's plan (an upgrade's batch, pause point...). */
      readonly options?: Readonly<Record<string, unknown>>;
      /** sha256 of the plan's canonical JSON: a continued upgrade must perform the same plan. */
      readonly digest?: string;
    }
  | {
      readonly time: string;
      readonly run: string;
      readonly type: 'phase';
      readonly phase: string;
      readonly state: 'start' | 'done' | 'failed';
    }
  | {
      readonly time: string;
      readonly run: string;
      readonly type: 'action';
      readonly key: string;
      readonly state: 'intent' | 'done' | 'failed';
      /** The handler's short result, or the error's code and message. Never a secret. */
      readonly detail?: string;
    }
  | {
      readonly time: string;
      readonly run: string;
      readonly type: 'effect';
      readonly state: 'intent' | 'done' | 'failed';
      readonly effect: Effect;
      /** On `done`: found already in place on the node after a kill (not performed again). */
      readonly verified?: boolean;
    }
  | {
      readonly time: string;
      readonly run: string;
      readonly type: 'pause';
      readonly phase: string;
      readonly reason: string;
    }
  | { readonly time: string; readonly run: string; readonly type: 'continue'; readonly phase: string }
  | { readonly time: string; readonly run: string; readonly type: 'run.end'; readonly ok: boolean };

/** What the journal says about its last run. */
export interface Replay {
  readonly run: string | undefined;
  readonly command?: RunCommand;
  readonly target?: string;
  readonly options?: Readonly<Record<string, unknown>>;
  readonly digest?: string;
  /** True when the last run recorded its end (or there is none). */
  readonly ended: boolean;
  /** The last run was journaled by an earlier version of stackctl (no `format`): it is not continued. */
  readonly legacy?: boolean;
  /** Keys of actions recorded done. */
  readonly done: ReadonlySet<string>;
  /** Keys of actions with an intent and no outcome: done again. */
  readonly pending: readonly string[];
  /** Effect keys recorded done. */
  readonly effectsDone: ReadonlySet<string>;
  /** Effects announced and neither done nor failed: they may or may not have happened. */
  readonly effectsPending: readonly Effect[];
  /** Phases recorded done. */
  readonly phasesDone: ReadonlySet<string>;
  /** Phases whose pause was passed with --continue. */
  readonly continued: ReadonlySet<string>;
  /** The details (paths) of the backups recorded done. */
  readonly backups: readonly string[];
  /** The pause the run stopped at last, when it has not been passed. */
  readonly pausedAt?: { readonly phase: string; readonly reason: string };
}

/** The replay of an empty journal. */
export const EMPTY_REPLAY: Replay = {
  run: undefined,
  ended: true,
  done: new Set(),
  pending: [],
  effectsDone: new Set(),
  effectsPending: [],
  phasesDone: new Set(),
  continued: new Set(),
  backups: [],
};

/** Loose view of a line of any version, for telling old from new. */
interface AnyRecord {
  readonly run?: string;
  readonly type?: string;
  readonly format?: number;
  readonly mode?: string;
  readonly resumed?: boolean;
}

/** Replay records (pure): the state of the last run, across its resumptions. */
export function replay(records: readonly JournalRecord[]): Replay {
  const any = records as readonly AnyRecord[];
  // The last run started afresh: new format (mode new) or an earlier version's (resumed false / mode new).
  let startAt = -1;
  any.forEach((r, i) => {
    if (r.type !== 'run.start') return;
    if (r.format === JOURNAL_FORMAT ? r.mode === RunMode.NEW : r.resumed === false || r.mode === RunMode.NEW)
      startAt = i;
  });
  if (startAt < 0) return EMPTY_REPLAY;
  const first = any[startAt]!;
  const run = first.run!;
  if (first.format !== JOURNAL_FORMAT) {
    const ended = any.slice(startAt).some((r) => r.run === run && r.type === 'run.end');
    return { ...EMPTY_REPLAY, run, ended, legacy: true };
  }
  const start = first as Extract<JournalRecord, { type: 'run.start' }>;
  const done = new Set<string>();
  const open = new Set<string>();
  const effectsDone = new Set<string>();
  const effectsOpen = new Map<string, Effect>();
  const phasesDone = new Set<string>();
  const continued = new Set<string>();
  const backups: string[] = [];
  let pausedAt: Replay['pausedAt'];
  let ended = false;
  let digest = start.digest;
  for (const r of records.slice(startAt)) {
    if (r.run !== run) continue;
    switch (r.type) {
      case 'run.start':
        ended = false;
        digest = r.digest;
        break;
      case 'run.end':
        ended = true;
        break;
      case 'phase':
        if (r.state === 'done') phasesDone.add(r.phase);
        break;
      case 'action':
        if (r.state === 'intent') open.add(r.key);
        else {
          open.delete(r.key);
          if (r.state === 'done') done.add(r.key);
          else done.delete(r.key);
          if (r.state === 'done' && r.detail && r.key.split(' ')[1] === 'backup') backups.push(r.detail);
        }
        break;
      case 'effect': {
        const k = effectKey(r.effect);
        if (r.state === 'intent') effectsOpen.set(k, r.effect);
        else {
          effectsOpen.delete(k);
          if (r.state === 'done') effectsDone.add(k);
        }
        break;
      }
      case 'pause':
        pausedAt = { phase: r.phase, reason: r.reason };
        break;
      case 'continue':
        continued.add(r.phase);
        if (pausedAt?.phase === r.phase) pausedAt = undefined;
        break;
    }
  }
  return {
    run,
    command: start.command,
    target: start.target,
    ...(start.options ? { options: start.options } : {}),
    ...(digest ? { digest } : {}),
    ended,
    done,
    pending: [...open],
    effectsDone,
    effectsPending: [...effectsOpen.values()],
    phasesDone,
    continued,
    backups,
    ...(pausedAt ? { pausedAt } : {}),
  };
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

/** `site.yaml` -> `site.upgrade.jsonl`: where versions before the one engine journaled upgrades. */
export function legacyUpgradeJournalFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.upgrade.jsonl';
}

/** Where the engine records (injectable for tests). */
export interface JournalSink {
  readonly run: string;
  /** The run being continued (the empty replay for a new run). */
  readonly previous: Replay;
  phase(phase: string, state: 'start' | 'done' | 'failed'): void;
  action(key: string, state: 'intent' | 'done' | 'failed', detail?: string): void;
  effect(state: 'intent' | 'done' | 'failed', effect: Effect, verified?: boolean): void;
  pause(phase: string, reason: string): void;
  continued(phase: string): void;
  end(ok: boolean): void;
}

/** What opening a run needs. */
export interface OpenRun {
  readonly command: RunCommand;
  readonly mode: RunMode;
  readonly target: string;
  readonly options?: Readonly<Record<string, unknown>>;
  readonly digest?: string;
  /** Names the inventory in hints. */
  readonly inventory: string;
}

/** The command line that goes on with a replayed run. */
function goOn(prev: Replay, inventory: string, flag: string): string {
  return prev.command === 'upgrade'
    ? `stackctl upgrade -i ${inventory} --to ${prev.target} ${flag}`
    : `stackctl deploy -i ${inventory} ${flag}`;
}

/**
 * Whether this run may start or go on (pure): an open upgrade blocks every new run (a deploy
 * would converge its half-upgraded services back to the old release); an upgrade's --resume
 * and --continue need an open upgrade run for the same target and the same plan. A deploy's
 * --resume goes on with an open deploy run; with none, it deploys afresh. A run journaled by
 * an earlier version of stackctl is never continued: an open deploy run of one is superseded
 * (a deploy converges from the nodes' real state), an open upgrade run of one is refused.
 */
export function checkOpen(prev: Replay, o: OpenRun): void {
  const openUpgrade = prev.run !== undefined && !prev.ended && prev.command === 'upgrade';
  if (o.mode === RunMode.NEW || o.command === 'deploy') {
    if (openUpgrade) {
      const flag = prev.pausedAt ? '--continue' : '--resume';
      throw new UsageError(
        'E_UPGRADE_IN_PROGRESS',
        `an upgrade to ${prev.target} (run ${prev.run}) is still open${prev.pausedAt ? `, paused before ${prev.pausedAt.phase}` : ''}`,
        {
          hint:
            `Go on with '${goOn(prev, o.inventory, flag)}'` +
            (o.command === 'deploy' ? ': a deploy now would move its services back to the old release' : '') +
            '; to abandon it, move the journal away first.',
        },
      );
    }
    return;
  }
  const flag = o.mode === RunMode.CONTINUE ? '--continue' : '--resume';
  if (!openUpgrade) {
    throw new UsageError('E_NOTHING_TO_RESUME', `${flag}: no open upgrade run in the journal`, {
      hint: `Start one with 'stackctl upgrade -i ${o.inventory} --to ${o.target}'.`,
    });
  }
  if (prev.target !== o.target) {
    throw new UsageError(
      'E_RESUME_TARGET',
      `${flag} --to ${o.target}: the open run ${prev.run} upgrades to ${prev.target}`,
      { hint: `Run '${goOn(prev, o.inventory, flag)}'.` },
    );
  }
  if (prev.digest !== o.digest) {
    throw new UsageError(
      'E_RESUME_PLAN_CHANGED',
      `${flag}: the plan of the open run ${prev.run} differs from today's (inventory, service files, release manifests, --batch, --pause-at, --canary or --fast-forward changed)`,
      {
        hint: `Run '${goOn(prev, o.inventory, flag)}' with the options of the run (${JSON.stringify(prev.options)}), or restore the files it was planned from.`,
      },
    );
  }
}

/**
 * Refuse an upgrade while a journal of an earlier version holds an open upgrade run: its
 * format cannot be continued by this version, and a new run would not know what it did.
 */
export function checkLegacyUpgrade(file: string, inventory: string): void {
  if (!existsSync(file)) return;
  const records = parseJournal(readFileSync(file, 'utf8')) as readonly AnyRecord[];
  let run: string | undefined;
  for (const r of records) if (r.type === 'run.start' && r.mode === RunMode.NEW) run = r.run;
  if (run === undefined || records.some((r) => r.run === run && r.type === 'run.end')) return;
  throw new UsageError(
    'E_JOURNAL_LEGACY',
    `${file} holds upgrade run ${run}, still open, journaled by an earlier version of stackctl`,
    {
      hint:
        `Finish it with the stackctl version that started it ('stackctl upgrade -i ${inventory} ... --resume'), ` +
        `or, to abandon it, move ${file} away; this version journals in ${journalFileFor(file.replace(/\.upgrade\.jsonl$/, '.yaml'))}.`,
    },
  );
}

/** The journal file, opened for one run (new or continued). */
export class JournalFile implements JournalSink {
  readonly run: string;
  readonly previous: Replay;
  /** A deploy --resume found an open deploy run and continues it. */
  readonly resumed: boolean;
  readonly #now: () => Date;
  constructor(
    readonly file: string,
    o: OpenRun & { readonly now?: () => Date },
  ) {
    this.#now = o.now ?? (() => new Date());
    const prev = JournalFile.last(file);
    checkOpen(prev, o);
    const goOnWith =
      o.mode !== RunMode.NEW && prev.run !== undefined && !prev.ended && !prev.legacy && prev.command === o.command;
    this.resumed = goOnWith;
    this.previous = goOnWith ? prev : EMPTY_REPLAY;
    this.run = goOnWith ? prev.run! : randomBytes(6).toString('hex');
    this.#append({
      type: 'run.start',
      format: JOURNAL_FORMAT,
      command: o.command,
      mode: goOnWith ? o.mode : RunMode.NEW,
      target: o.target,
      ...(o.options ? { options: o.options } : {}),
      ...(o.digest ? { digest: o.digest } : {}),
    });
  }
  /** Close an open run without going on with it (its `run.end`). */
  static close(file: string, run: string, ok: boolean, now: () => Date = () => new Date()): void {
    try {
      appendFileSync(file, JSON.stringify({ time: now().toISOString(), run, type: 'run.end', ok }) + '\n', {
        mode: 0o600,
      });
    } catch (err) {
      throw new IoError('E_JOURNAL_WRITE', `cannot append to the journal ${file}`, {
        hint: 'Check the folder of the inventory.',
        cause: err,
      });
    }
  }
  /** The last run recorded in a journal file (the empty replay when there is none). */
  static last(file: string): Replay {
    return existsSync(file) ? replay(parseJournal(readFileSync(file, 'utf8'))) : EMPTY_REPLAY;
  }
  #append(r: Record<string, unknown>): void {
    try {
      appendFileSync(this.file, JSON.stringify({ time: this.#now().toISOString(), run: this.run, ...r }) + '\n', {
        mode: 0o600,
      });
    } catch (err) {
      throw new IoError('E_JOURNAL_WRITE', `cannot append to the journal ${this.file}`, {
        hint: 'The journal must be writable before any side effect: check the folder of the inventory.',
        cause: err,
      });
    }
  }
  phase(phase: string, state: 'start' | 'done' | 'failed'): void {
    this.#append({ type: 'phase', phase, state });
  }
  action(key: string, state: 'intent' | 'done' | 'failed', detail?: string): void {
    this.#append({ type: 'action', key, state, ...(detail ? { detail } : {}) });
  }
  effect(state: 'intent' | 'done' | 'failed', effect: Effect, verified?: boolean): void {
    this.#append({ type: 'effect', state, effect, ...(verified ? { verified } : {}) });
  }
  pause(phase: string, reason: string): void {
    this.#append({ type: 'pause', phase, reason });
  }
  continued(phase: string): void {
    this.#append({ type: 'continue', phase });
  }
  end(ok: boolean): void {
    this.#append({ type: 'run.end', ok });
  }
}

/** A journal kept in memory (tests, one-off runs). */
export class MemoryJournal implements JournalSink {
  readonly run: string;
  readonly previous: Replay;
  readonly records: JournalRecord[] = [];
  constructor(previous: Replay = EMPTY_REPLAY, run = 'memory') {
    this.previous = previous;
    this.run = run;
  }
  #push(r: Record<string, unknown>): void {
    this.records.push({ time: '', run: this.run, ...r } as unknown as JournalRecord);
  }
  phase(phase: string, state: 'start' | 'done' | 'failed'): void {
    this.#push({ type: 'phase', phase, state });
  }
  action(key: string, state: 'intent' | 'done' | 'failed', detail?: string): void {
    this.#push({ type: 'action', key, state, ...(detail ? { detail } : {}) });
  }
  effect(state: 'intent' | 'done' | 'failed', effect: Effect, verified?: boolean): void {
    this.#push({ type: 'effect', state, effect, ...(verified ? { verified } : {}) });
  }
  pause(phase: string, reason: string): void {
    this.#push({ type: 'pause', phase, reason });
  }
  continued(phase: string): void {
    this.#push({ type: 'continue', phase });
  }
  end(ok: boolean): void {
    this.#push({ type: 'run.end', ok });
  }
}
