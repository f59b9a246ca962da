/**
 * The report model of one deploy or upgrade run (pure): its identity from the journal, and what
 * the event log recorded while it ran, folded into spans on one time axis (ms since the epoch):
 * phases (an upgrade's compute batches among them), migrations, availability lanes and failures.
 *
 * The event log carries no run id: a run's events are those written while one of its journal
 * segments was open (from a `run.start` to its `run.end`, or to the next `run.start` of any run,
 * since a crash leaves no end). The run lock keeps two runs of an inventory from overlapping.
 *
 * Commands that keep no journal but change the cloud (REPORTED_COMMANDS: a maintenance) are runs
 * of the event log alone: from their `command.start` to their `command.end`.
 */
import { UsageError } from '../core/errors.js';
import type { StackctlEvent } from '../core/events.js';
import type { JournalRecord } from '../orchestrator/journal.js';

/** A line of the event log: an event and when it was written. */
export type LoggedEvent = StackctlEvent & { readonly time: string };

/** How a run ended, as far as its files tell. */
export const Outcome = {
  /** The journal recorded its end, successful. */
  SUCCEEDED: 'succeeded',
  /** It recorded a failed end, or stopped after a failure (`--resume` retries). */
  FAILED: 'failed',
  /** It stopped at a declared pause (`--continue` goes on). */
  PAUSED: 'paused',
  /** No end and no failure: still running, or killed. */
  UNFINISHED: 'unfinished',
} as const;
export type Outcome = (typeof Outcome)[keyof typeof Outcome];

/** Something that took time: [start, end] in ms since the epoch. */
export interface Span {
  readonly start: number;
  readonly end: number;
}

/** One attempt at a phase (a resumed run may try a phase again). */
export interface PhaseSpan extends Span {
  readonly id: string;
  readonly title: string;
  /** An upgrade's compute batch (`batch:N`). */
  readonly batch: boolean;
  /** done, failed, skipped, paused, or interrupted (its run segment ended before it). */
  readonly state: string;
  /** Actions done, failed, skipped in this attempt. */
  readonly actions: { done: number; failed: number; skipped: number };
}

export interface MigrationSpan extends Span {
  readonly server: string;
  readonly from: string;
  readonly to: string;
  readonly state: string;
}

export interface FailureRow {
  readonly time: number;
  readonly phase: string;
  readonly path: string;
  readonly code: string;
  readonly message: string;
  readonly class: string;
  readonly hint: string;
}

/** One gap an availability watcher saw. */
export interface GapSpan extends Span {
  readonly lost: number;
  readonly detail: string;
  readonly during: string;
}

/**
 * What one watcher saw: the API probe (`api`) or one server of the workload ledger
 * (`workload`, one lane per server). A new source only needs a new value here and a colour.
 */
export interface AvailabilityLane {
  readonly source: 'api' | 'workload';
  readonly subject: string;
  readonly windows: readonly (Span & { tries: number; ok: number; longestGapMs: number })[];
  readonly gaps: readonly GapSpan[];
}

/**
 * Commands reported from the event log alone (they keep no journal), and the word their run ids
 * start with. A new one needs its `command.start`/`command.end` events, `run.phase` events for
 * its steps, and a line here.
 */
export const REPORTED_COMMANDS: Readonly<Record<string, string>> = {
  'nodes maintenance on': 'maintenance-on',
  'nodes maintenance off': 'maintenance-off',
};

/** A run as the journal (or, for REPORTED_COMMANDS, the event log) lists it. */
export interface RunSummary {
  readonly id: string;
  readonly command: string;
  /** The release a deploy or upgrade converges to; the nodes of a command of the event log. */
  readonly target: string;
  /** Where the run is recorded. */
  readonly source: 'journal' | 'events';
  /** Its segments: the first start, then each resume/continue. */
  readonly segments: readonly Span[];
  /** The ended flag of its `run.end`, when recorded. */
  readonly endedOk?: boolean;
}

export interface RunReport {
  readonly run: string;
  readonly command: string;
  readonly inventory: string;
  /** The release (journal runs) or the nodes (event-log runs) of RunSummary. */
  readonly target: string;
  readonly source: RunSummary['source'];
  readonly options: Readonly<Record<string, unknown>>;
  /** How many times it was started (1 + resumptions). */
  readonly starts: number;
  readonly start: number;
  readonly end: number;
  readonly outcome: Outcome;
  readonly pause?: { readonly phase: string; readonly reason: string };
  readonly phases: readonly PhaseSpan[];
  readonly migrations: readonly MigrationSpan[];
  readonly lanes: readonly AvailabilityLane[];
  readonly failures: readonly FailureRow[];
  /** Events of the run's time span that the report counts. */
  readonly events: number;
  readonly notes: readonly string[];
}

const at = (iso: string): number => Date.parse(iso);

/** The largest of many values (a spread into Math.max overflows the stack on a long event log). */
const maxOf = (values: Iterable<number>, floor: number): number => {
  let m = floor;
  for (const v of values) if (v > m) m = v;
  return m;
};

/**
 * The runs of a journal and of the event log, oldest first (pure). A segment ends at its run's end,
 * or else just before the next start of any run (a killed run writes no end).
 */
export function listRuns(records: readonly JournalRecord[], events: readonly LoggedEvent[] = []): RunSummary[] {
  const commandStarts = events.flatMap((e) =>
    e.kind === 'command.start' && REPORTED_COMMANDS[e.command] !== undefined ? [{ e, t: at(e.time) }] : [],
  );
  const starts = [
    ...records.filter((r) => r.type === 'run.start').map((r) => at(r.time)),
    ...commandStarts.map((c) => c.t),
  ];
  const nextStart = (t: number): number => {
    const later = starts.filter((s) => s > t);
    return later.length ? Math.min(...later) - 1 : Number.POSITIVE_INFINITY;
  };
  type Mutable = { -readonly [K in keyof RunSummary]: RunSummary[K] } & { segments: Span[] };
  const runs = new Map<string, Mutable>();
  for (const r of records) {
    if (r.type === 'run.start') {
      const run = runs.get(r.run) ?? {
        id: r.run,
        command: r.command,
        target: r.target,
        source: 'journal',
        segments: [],
      };
      runs.set(r.run, run);
      const t = at(r.time);
      run.segments.push({ start: t, end: nextStart(t) });
    } else if (r.type === 'run.end') {
      const run = runs.get(r.run);
      const seg = run?.segments.at(-1);
      if (!run || !seg) continue;
      run.segments[run.segments.length - 1] = { start: seg.start, end: Math.min(seg.end, at(r.time)) };
      run.endedOk = r.ok;
    }
  }
  for (const { e, t } of commandStarts) {
    if (e.kind !== 'command.start') continue;
    const limit = nextStart(t);
    const end = events.find(
      (x) => x.kind === 'command.end' && x.command === e.command && at(x.time) >= t && at(x.time) <= limit,
    );
    const id = `${REPORTED_COMMANDS[e.command]}@${e.time}`;
    runs.set(id, {
      id,
      command: e.command,
      target: e.nodes.join(','),
      source: 'events',
      segments: [{ start: t, end: end ? at(end.time) : limit }],
      ...(end?.kind === 'command.end' ? { endedOk: end.failed === 0 && end.ok > 0 } : {}),
    });
  }
  return [...runs.values()].sort((a, b) => a.segments[0]!.start - b.segments[0]!.start);
}

/** The run `id`, or the one started last; E_REPORT_NO_RUN / E_REPORT_UNKNOWN_RUN otherwise. */
export function pickRun(runs: readonly RunSummary[], id: string | undefined, journalFile: string): RunSummary {
  if (!runs.length) {
    throw new UsageError(
      'E_REPORT_NO_RUN',
      `${journalFile} records no deploy or upgrade run, and the event log no maintenance`,
      {
        hint: "Run 'stackctl deploy', 'stackctl upgrade' or 'stackctl nodes maintenance' with this inventory first.",
      },
    );
  }
  if (id === undefined) {
    return [...runs].sort((a, b) => a.segments.at(-1)!.start - b.segments.at(-1)!.start).at(-1)!;
  }
  const run = runs.find((r) => r.id === id);
  if (!run) {
    const known = runs
      .slice(-5)
      .map((r) => `${r.id} (${r.command} ${r.target}, ${new Date(r.segments[0]!.start).toISOString()})`);
    throw new UsageError('E_REPORT_UNKNOWN_RUN', `${journalFile} records no run '${id}'`, {
      hint: `Runs recorded last: ${known.join('; ')}. Leave out --run for the latest.`,
    });
  }
  return run;
}

/** Fold the journal and the event log into the report of one run (pure). */
export function buildReport(
  records: readonly JournalRecord[],
  events: readonly LoggedEvent[],
  o: { readonly run?: string; readonly inventory: string; readonly journalFile: string; readonly notes?: string[] },
): RunReport {
  const summary = pickRun(listRuns(records, events), o.run, o.journalFile);
  const mine = summary.source === 'journal' ? records.filter((r) => r.run === summary.id) : [];
  const first = mine.find((r) => r.type === 'run.start') as Extract<JournalRecord, { type: 'run.start' }> | undefined;
  const inSegment = (t: number): number => summary.segments.findIndex((s) => t >= s.start && t <= s.end);
  const evs = events.filter((e) => inSegment(at(e.time)) >= 0);
  const start = summary.segments[0]!.start;
  const end = maxOf(
    [
      ...mine.map((r) => at(r.time)),
      ...evs.map((e) => at(e.time)),
      ...evs.flatMap((e) =>
        e.kind === 'availability.window' ? [at(e.to)] : e.kind === 'availability.gap' ? [at(e.from) + e.ms] : [],
      ),
    ],
    start,
  );

  // Phases: a start opens an attempt, done/failed closes it; a segment's end interrupts it.
  const phases: PhaseSpan[] = [];
  const open = new Map<string, { span: PhaseSpan; seg: number }>();
  // A segment's last record: an attempt its segment left open ends there (a killed run writes no end).
  const segEnd = (seg: number): number =>
    maxOf(
      [...mine.map((r) => at(r.time)), ...evs.map((e) => at(e.time))].filter((t) => inSegment(t) === seg),
      summary.segments[seg]!.start,
    );
  const close = (id: string, endAt: number, state: string): void => {
    const o = open.get(id);
    if (!o) return;
    open.delete(id);
    phases[phases.indexOf(o.span)] = { ...o.span, end: endAt, state };
  };
  const migrations: MigrationSpan[] = [];
  const lanes = new Map<
    string,
    { source: 'api' | 'workload'; subject: string; windows: AvailabilityLane['windows'][number][]; gaps: GapSpan[] }
  >();
  const lane = (source: 'api' | 'workload', subject: string) => {
    const k = `${source}\u0000${subject}`;
    const l = lanes.get(k) ?? { source, subject, windows: [], gaps: [] };
    lanes.set(k, l);
    return l;
  };
  const failures: FailureRow[] = [];
  for (const e of evs) {
    const t = at(e.time);
    for (const [id, o] of open) if (inSegment(t) !== o.seg) close(id, segEnd(o.seg), 'interrupted');
    switch (e.kind) {
      case 'run.phase': {
        const base = { id: e.phase, title: e.title, batch: e.phase.startsWith('batch:') };
        const none = { done: 0, failed: 0, skipped: 0 };
        if (e.state === 'start') {
          close(e.phase, t, 'interrupted');
          const span: PhaseSpan = { ...base, start: t, end: t, state: 'running', actions: none };
          phases.push(span);
          open.set(e.phase, { span, seg: inSegment(t) });
        } else if (e.state === 'done' || e.state === 'failed') {
          if (open.has(e.phase)) close(e.phase, t, e.state);
          else phases.push({ ...base, start: t - e.ms, end: t, state: e.state, actions: none });
        } else phases.push({ ...base, start: t, end: t, state: e.state, actions: none });
        break;
      }
      case 'run.action': {
        const o = open.get(e.phase);
        if (o) o.span.actions[e.state] += 1;
        break;
      }
      case 'run.failure':
        failures.push({
          time: t,
          phase: e.phase,
          path: e.path,
          code: e.code,
          message: e.message,
          class: e.class,
          hint: e.hint ?? '',
        });
        break;
      case 'upgrade.migration':
        if (e.state !== 'started')
          migrations.push({ server: e.server, from: e.from, to: e.to, state: e.state, start: t - e.ms, end: t });
        break;
      case 'availability.window':
        lane(e.source, e.subject).windows.push({
          start: at(e.from),
          end: at(e.to),
          tries: e.tries,
          ok: e.ok,
          longestGapMs: e.longestGapMs,
        });
        break;
      case 'availability.gap':
        lane(e.source, e.subject).gaps.push({
          start: at(e.from),
          end: at(e.from) + e.ms,
          lost: e.lost,
          detail: e.detail,
          during: e.during,
        });
        break;
      default:
        break;
    }
  }
  // Still open at the end: running when its segment is the last and has no end, else interrupted.
  const lastOpen = (seg: number): boolean =>
    seg === summary.segments.length - 1 && summary.segments[seg]!.end === Number.POSITIVE_INFINITY;
  for (const [id, o] of open) close(id, segEnd(o.seg), lastOpen(o.seg) ? 'running' : 'interrupted');

  const lastStart = summary.segments.at(-1)!.start;
  const pauseRec = mine.filter((r) => r.type === 'pause' && at(r.time) >= lastStart).at(-1) as
    Extract<JournalRecord, { type: 'pause' }> | undefined;
  const lastSegment = summary.segments.at(-1)!;
  const failedLast =
    failures.some((f) => f.time >= lastSegment.start) ||
    phases.some((p) => p.state === 'failed' && p.start >= lastSegment.start);
  const outcome: Outcome =
    summary.endedOk === true
      ? Outcome.SUCCEEDED
      : summary.endedOk === false || failedLast
        ? Outcome.FAILED
        : pauseRec
          ? Outcome.PAUSED
          : Outcome.UNFINISHED;
  const notes = [...(o.notes ?? [])];
  if (!evs.length) notes.push('the event log holds no event written while this run was open');
  return {
    run: summary.id,
    command: summary.command,
    inventory: o.inventory,
    target: summary.target,
    source: summary.source,
    options: first?.options ?? {},
    starts: summary.segments.length,
    start,
    end,
    outcome,
    ...(pauseRec && outcome === Outcome.PAUSED ? { pause: { phase: pauseRec.phase, reason: pauseRec.reason } } : {}),
    phases,
    migrations,
    lanes: [...lanes.values()],
    failures,
    events: evs.length,
    notes,
  };
}
