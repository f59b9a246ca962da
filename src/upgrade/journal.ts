/**
 * The upgrade journal: `<inventory without .yaml>.upgrade.jsonl`, apart from
 * the deploy journal and in the same style: one whole JSON line per record,
 * written before (`intent`) and after (`done`, `failed`) every action, so a
 * killed run leaves a readable record and a torn last line is ignored.
 *
 * A run stays open until it ends well: a pause, a failure or a crash leave it
 * open, and `upgrade --continue` / `--resume` go on with it. Actions recorded
 * done are skipped then (no batch, backup or migration twice); an action with
 * an intent and no outcome is done again (the handlers look at real state).
 * Only names, keys, digests and short details go in: never a secret.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { IoError, UsageError } from '../core/errors.js';
import { canonicalJson, sha256 } from '../core/hash.js';
import type { UpgradeAction, UpgradePlan } from './model.js';

/** How a run is started. */
export const RunMode = {
  /** A new run; refused while an earlier run is still open. */
  NEW: 'new',
  /** Go on with the open run after a failure or a crash; stops again at a pause not yet passed. */
  RESUME: 'resume',
  /** Go on with the open run past the pause it stopped at. */
  CONTINUE: 'continue',
} as const;
export type RunMode = (typeof RunMode)[keyof typeof RunMode];

/** The options a run was started with (what shapes its plan). */
export type RunOptions = UpgradePlan['options'];

/** A line of the upgrade journal. */
export type UpgradeRecord =
  | {
      readonly time: string;
      readonly run: string;
      readonly type: 'run.start';
      readonly mode: RunMode;
      readonly target: string;
      readonly options: RunOptions;
      /** sha256 of the plan's canonical JSON: a resumed run must perform the same plan. */
      readonly digest: string;
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
      readonly type: 'pause';
      readonly phase: string;
      readonly reason: string;
    }
  | { readonly time: string; readonly run: string; readonly type: 'continue'; readonly phase: string }
  | { readonly time: string; readonly run: string; readonly type: 'run.end'; readonly ok: boolean };

/** The subject of an action in its key: node, service on node, hook and nodes... */
const SUBJECT: { readonly [K in UpgradeAction['kind']]: (a: Extract<UpgradeAction, { kind: K }>) => string } = {
  'check-reachable': (a) => a.nodes.join(','),
  'check-healthy': (a) => `${a.service}@${a.nodes.join(',')}`,
  'check-galera': (a) => a.nodes.join(','),
  'check-rabbitmq': (a) => a.nodes.join(','),
  'check-images': (a) => `${a.images.length} image(s)`,
  'check-capacity': (a) => a.batch.join(','),
  'check-service': (a) => `${a.service}@${a.node} ${a.command.join(' ')}`,
  pull: (a) => a.node,
  hook: (a) => `${a.hook}@${a.point}:${a.nodes.join(',')}`,
  drain: (a) => a.node,
  swap: (a) => a.node,
  stop: (a) => `${a.service}@${a.node}`,
  start: (a) => a.node,
  health: (a) => `${a.services.join(',')}@${a.node}`,
  enable: (a) => a.node,
  backup: (a) => `${a.service}@${a.node}`,
  migrate: (a) => `${a.service}@${a.node} ${a.stage} ${a.command.join(' ')}`,
};

/** What an action concerns, for keys, events and the report. */
export function subjectOf(a: UpgradeAction): string {
  return (SUBJECT[a.kind] as (x: UpgradeAction) => string)(a);
}

/** The stable identity of an action within a plan: phase id, step index, kind and subject. */
export function actionKey(phase: string, step: number, a: UpgradeAction): string {
  return `${phase}#${step} ${a.kind} ${subjectOf(a)}`;
}

/**
 * The digest of what a plan does: its releases and phases (canonical JSON). The failure budget
 * is left out, so a failed run may be resumed with another `--max-fail-percent`.
 */
export function planDigest(plan: UpgradePlan): string {
  return sha256(canonicalJson({ from: plan.from, to: plan.to, phases: plan.phases }));
}

/** What the journal says about its last open run. */
export interface UpgradeReplay {
  readonly run: string | undefined;
  readonly target?: string;
  readonly options?: RunOptions;
  readonly digest?: string;
  /** True when the last run recorded its end (or there is none). */
  readonly ended: boolean;
  /** Keys of actions recorded done. */
  readonly done: ReadonlySet<string>;
  /** Keys of actions with an intent and no outcome: done again. */
  readonly pending: readonly string[];
  /** Phases recorded done. */
  readonly phasesDone: ReadonlySet<string>;
  /** Phases whose pause was passed with --continue. */
  readonly continued: ReadonlySet<string>;
  /** The details (paths) of the backups recorded done. */
  readonly backups: readonly string[];
  /** The pause the run stopped at last, when it has not been passed. */
  readonly pausedAt?: { readonly phase: string; readonly reason: string };
}

const EMPTY: UpgradeReplay = {
  run: undefined,
  ended: true,
  done: new Set(),
  pending: [],
  phasesDone: new Set(),
  continued: new Set(),
  backups: [],
};

/** Replay records (pure): the state of the last run, across its resumptions. */
export function replayUpgrade(records: readonly UpgradeRecord[]): UpgradeReplay {
  let start: Extract<UpgradeRecord, { type: 'run.start' }> | undefined;
  for (const r of records) if (r.type === 'run.start' && r.mode === RunMode.NEW) start = r;
  if (!start) return EMPTY;
  const run = start.run;
  const done = new Set<string>();
  const open = new Set<string>();
  const phasesDone = new Set<string>();
  const continued = new Set<string>();
  const backups: string[] = [];
  let pausedAt: UpgradeReplay['pausedAt'];
  let ended = false;
  let digest = start.digest;
  for (const r of records) {
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
    target: start.target,
    options: start.options,
    digest,
    ended,
    done,
    pending: [...open],
    phasesDone,
    continued,
    backups,
    ...(pausedAt ? { pausedAt } : {}),
  };
}

/** Parse journal text; a torn last line (the process died mid-write) is ignored. */
export function parseUpgradeJournal(text: string): UpgradeRecord[] {
  const out: UpgradeRecord[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line) as UpgradeRecord);
    } catch {
      // only the last line can be torn: appendFileSync writes whole lines otherwise
    }
  }
  return out;
}

/** `site.yaml` -> `site.upgrade.jsonl`. */
export function upgradeJournalFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.upgrade.jsonl';
}

/** Where the runner records (injectable for tests). */
export interface UpgradeJournalSink {
  readonly run: string;
  /** The run being continued (the empty replay for a new run). */
  readonly previous: UpgradeReplay;
  phase(phase: string, state: 'start' | 'done' | 'failed'): void;
  action(key: string, state: 'intent' | 'done' | 'failed', detail?: string): void;
  pause(phase: string, reason: string): void;
  continued(phase: string): void;
  end(ok: boolean): void;
}

/** What opening a journal needs. */
export interface OpenRun {
  readonly mode: RunMode;
  readonly target: string;
  readonly options: RunOptions;
  readonly digest: string;
  /** Names the inventory in hints. */
  readonly inventory: string;
}

/**
 * Decide from the last run whether this one may start or continue (pure):
 * a new run is refused while another is open; --resume and --continue need an
 * open run for the same target and the same plan.
 */
export function checkOpen(prev: UpgradeReplay, o: OpenRun): void {
  const cmd = `stackctl upgrade -i ${o.inventory} --to ${prev.target ?? o.target}`;
  if (o.mode === RunMode.NEW) {
    if (prev.run && !prev.ended) {
      throw new UsageError(
        'E_UPGRADE_IN_PROGRESS',
        `an upgrade to ${prev.target} (run ${prev.run}) is still open${prev.pausedAt ? `, paused before ${prev.pausedAt.phase}` : ''}`,
        {
          hint: `Go on with '${cmd} ${prev.pausedAt ? '--continue' : '--resume'}'; to abandon it, move its journal away first.`,
        },
      );
    }
    return;
  }
  const flag = o.mode === RunMode.CONTINUE ? '--continue' : '--resume';
  if (!prev.run || prev.ended) {
    throw new UsageError('E_NOTHING_TO_RESUME', `${flag}: no open upgrade run in the journal`, {
      hint: `Start one with 'stackctl upgrade -i ${o.inventory} --to ${o.target}'.`,
    });
  }
  if (prev.target !== o.target) {
    throw new UsageError(
      'E_RESUME_TARGET',
      `${flag} --to ${o.target}: the open run ${prev.run} upgrades to ${prev.target}`,
      { hint: `Run '${cmd} ${flag}'.` },
    );
  }
  if (prev.digest !== o.digest) {
    throw new UsageError(
      'E_RESUME_PLAN_CHANGED',
      `${flag}: the plan of the open run ${prev.run} differs from today's (inventory, service files, release manifests, --batch, --pause-at, --canary or --fast-forward changed)`,
      {
        hint: `Run '${cmd} ${flag}' with the options of the run (${JSON.stringify(prev.options)}), or restore the files it was planned from.`,
      },
    );
  }
}

/** The journal file, opened for one run (new or continued). */
export class UpgradeJournal implements UpgradeJournalSink {
  readonly run: string;
  readonly previous: UpgradeReplay;
  readonly #now: () => Date;
  constructor(
    readonly file: string,
    o: OpenRun & { readonly now?: () => Date },
  ) {
    this.#now = o.now ?? (() => new Date());
    const prev = UpgradeJournal.last(file);
    checkOpen(prev, o);
    this.previous = o.mode === RunMode.NEW ? EMPTY : prev;
    this.run = o.mode === RunMode.NEW ? randomBytes(6).toString('hex') : prev.run!;
    this.#append({ type: 'run.start', mode: o.mode, target: o.target, options: o.options, digest: o.digest });
  }
  /** The last run recorded in a journal file (the empty replay when there is none). */
  static last(file: string): UpgradeReplay {
    return existsSync(file) ? replayUpgrade(parseUpgradeJournal(readFileSync(file, 'utf8'))) : EMPTY;
  }
  #append(r: Record<string, unknown>): void {
    try {
      appendFileSync(this.file, JSON.stringify({ time: this.#now().toISOString(), run: this.run, ...r }) + '\n', {
        mode: 0o600,
      });
    } catch (err) {
      throw new IoError('E_JOURNAL_WRITE', `cannot append to the upgrade journal ${this.file}`, {
        hint: 'The journal must be writable before any action: check the folder of the inventory.',
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
