/**
 * The converge engine: performs a list of phases for `deploy` and `upgrade`
 * alike (DESIGN.md 6), with one handler per action kind, one journal, one
 * failure type and one failure budget.
 *
 * - A phase is a list of steps; a step is a barrier: its actions on different
 *   nodes run in parallel (lanes, at most `concurrency` at once), the actions
 *   of one node in plan order; the next step starts when all lanes ended.
 * - Every action is journaled before and after; a continued run skips what is
 *   recorded done and does again what has an intent only (handlers look at real
 *   state first). Handlers journal their side effects through the run scope.
 * - A phase that `stop`s on failure (a rolling restart, a migration, run-once
 *   work) ends the run at its first failed step. A `budget` phase leaves a failed
 *   node out of the rest of the run and goes on; at the phase's end the failed
 *   share of each group of nodes (a role, the compute batches) is held against
 *   the failure budget.
 * - A phase with `pauseBefore` stops the run (outcome `paused`) until
 *   `--continue` passes that pause.
 */
import { RemoteError, StackctlError, messageOf } from '../core/errors.js';
import type { StackctlEvent } from '../core/events.js';
import { mapLimit } from '../core/concurrency.js';
import { FailureClass, type Failure } from './failures.js';
import { RunMode, effectKey, type Effect, type JournalSink } from './journal.js';
import { laneOf, nodesOfAction, type AnyAction, type Phase } from './model.js';

/** How a run ended. */
export const RunOutcome = {
  /** Every phase done. */
  DONE: 'done',
  /** Stopped before a declared pause; `--continue` goes on. */
  PAUSED: 'paused',
  /** An action failed (or the failure budget was exceeded); `--resume` retries. */
  FAILED: 'failed',
} as const;
export type RunOutcome = (typeof RunOutcome)[keyof typeof RunOutcome];

/** How a phase fared in this run. */
export type PhaseState = 'done' | 'failed' | 'skipped' | 'paused' | 'not-run';

/**
 * An action failed with a known class, log or set of nodes. Handlers throw it (or any
 * StackctlError, which counts as `hard`) so that the report says whether a re-run retries.
 */
export class ActionFailed extends StackctlError {
  constructor(
    readonly cause_: unknown,
    readonly failureClass: FailureClass,
    opts: { readonly log?: string; readonly nodes?: readonly string[]; readonly path?: string } = {},
  ) {
    const e = cause_ instanceof StackctlError ? cause_ : undefined;
    super(e?.code ?? 'E_INTERNAL', messageOf(cause_), {
      ...(e?.hint ? { hint: e.hint } : {}),
      exitCode: e?.exitCode ?? 1,
      cause: cause_,
      details: {
        ...(e?.details ?? {}),
        ...(opts.log !== undefined ? { log: opts.log } : {}),
        ...(opts.nodes ? { nodes: opts.nodes } : {}),
        ...(opts.path ? { path: opts.path } : {}),
      },
    });
  }
}

/** Change events of a run: what an action did to one object on a node. */
export interface Change {
  readonly node: string;
  /** container, config, image, host module, task, database, register... */
  readonly object: string;
  readonly name: string;
  /** created, recreated, started, uploaded, pulled, ran, unchanged, waited... */
  readonly action: string;
  readonly detail?: string;
  readonly ms?: number;
}

/** A one-way latch within a step: `opened` resolves once `open()` was called. */
export class Gate {
  open!: () => void;
  readonly opened = new Promise<void>((resolve) => (this.open = resolve));
}

/** What the engine gives a handler besides the context: the journal of effects, events, the step's gates. */
export interface RunScope {
  /** The phase being run. */
  readonly phase: Phase<AnyAction>;
  /**
   * A failure's task path: `step 2/ctl-0/memcached/health` in a deploy step, `control:keystone/ctl-0/...`
   * elsewhere.
   */
  where(node: string, what: string): string;
  /** Journal a side effect around `act` (intent, then done or failed); counts as a change. */
  effect<T>(e: Effect, act: () => Promise<T>): Promise<T>;
  /** An effect found already in place: recorded done (`verified`) when a killed run had only announced it. */
  verify(e: Effect): void;
  /** Emit a change event (and count it when it changed something). */
  change(c: Change): void;
  /**
   * The step's gate of `node/container` (a cluster's bootstrap node first): present when that
   * container is ensured in this step; opened when its lane ends, well or not.
   */
  gate(node: string, container: string): Gate | undefined;
}

/** The part of a context the engine itself reads. */
export interface EngineBase {
  readonly emit: (e: StackctlEvent) => void;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  /** Set once the operator asked to stop (SIGINT): long waits end early, no new step starts. */
  readonly signal?: AbortSignal;
}

/**
 * Performs one action; resolves with a short text for the progress line and the report,
 * rejects with a StackctlError (code, message naming node and service, hint) or ActionFailed.
 */
export type Handler<A extends AnyAction, C> = (action: A, ctx: C, run: RunScope) => Promise<string>;

/** One handler per kind of action (a new kind fails to compile until it has one). */
export type Handlers<A extends AnyAction, C> = {
  readonly [K in A['kind']]: Handler<Extract<A, { kind: K }>, C>;
};

/** What the runner knows of each action kind: its journal subject. */
export type Subjects<A extends AnyAction> = {
  readonly [K in A['kind']]: (a: Extract<A, { kind: K }>) => string;
};

/** The stable identity of an action within a plan: phase id, step index, kind and subject. */
export function actionKey(phase: string, step: number, kind: string, subject: string): string {
  return `${phase}#${step} ${kind} ${subject}`;
}

/** One unit of lane work, as a progress line. */
export interface StepTask {
  readonly title: string;
  run(): Promise<string>;
}

/** Runs a step's lanes with at most `concurrency` at once; must not throw. */
export type StepRunner = (tasks: readonly StepTask[], concurrency: number) => Promise<void>;

/** The default runner: no display. */
export const plainRunner: StepRunner = async (tasks, concurrency) => {
  await mapLimit(tasks, concurrency, (t) => t.run().catch(() => ''));
};

/** The failure budget: the share of a group's nodes that may fail before the run stops. */
export interface Budget {
  /** Percent (0-100); exceeded = the failed share is strictly greater. */
  readonly percent: number;
  /** node -> group (a role for a deploy; the compute batches for an upgrade). */
  readonly groupOf: ReadonlyMap<string, string>;
}

/** A group's failed nodes against its nodes in the run. */
export interface GroupTally {
  readonly group: string;
  readonly nodes: number;
  readonly failed: number;
}

/** The failed share exceeds the budget (integer arithmetic: 1 of 3 against 33 % cannot flip on rounding). */
export function exceeds(t: GroupTally, percent: number): boolean {
  return t.failed > 0 && t.failed * 100 > percent * t.nodes;
}

/** One failed action, in the run's report. */
export interface RunFailure extends Failure {
  readonly phase: string;
  readonly key: string;
  /** The action's kind; `run` for what concerns the run itself (an interruption). */
  readonly action: string;
  readonly subject: string;
}

/** What a run did. */
export interface RunReport {
  readonly ok: boolean;
  readonly outcome: RunOutcome;
  readonly run: string;
  readonly ms: number;
  readonly phases: readonly {
    readonly id: string;
    readonly title: string;
    readonly kind: string;
    readonly deployStep?: number;
    readonly state: PhaseState;
    readonly ms: number;
    /** Nodes the phase concerned and how many of them failed. */
    readonly nodes: number;
    readonly failed: number;
  }[];
  /** Side effects performed (not counting ones found already in place). */
  readonly changes: number;
  readonly failures: readonly RunFailure[];
  /** Where the run stopped to wait for --continue. */
  readonly pause?: { readonly phase: string; readonly reason: string };
  /** Nodes left out of the rest of a `budget` phase (and of the run) after they failed, and why. */
  readonly leftOut: readonly { readonly phase: string; readonly node: string; readonly reason: string }[];
  /** Groups whose failures exceeded the budget (the run stopped after that phase). */
  readonly overBudget?: { readonly phase: string; readonly groups: readonly GroupTally[] };
  /** Every group's tally at the end, when any node failed. */
  readonly tally: readonly GroupTally[];
  /** The details (paths) of the backups taken, in this run and the runs it continues. */
  readonly backups: readonly string[];
}

/** What the runner needs besides the context (CONVENTIONS.md 8). */
export interface RunDeps<A extends AnyAction, C> {
  readonly handlers: Handlers<A, C>;
  readonly subjects: Subjects<A>;
  readonly journal: JournalSink;
  readonly mode: RunMode;
  /** Progress display of a step's lanes (default: none). */
  readonly runner?: StepRunner;
  readonly budget?: Budget;
  /**
   * The step title of each lane on the progress display (default: phase, step and node).
   */
  readonly title?: (phase: Phase<A>, step: string, lane: string | undefined) => string;
}

/** Perform the phases. Never throws for a failed action: it is in the report. */
export async function runPhases<A extends AnyAction, C extends EngineBase>(
  phases: readonly Phase<A>[],
  ctx: C,
  deps: RunDeps<A, C>,
): Promise<RunReport> {
  const { now, emit } = ctx;
  const { journal, handlers, subjects } = deps;
  const runner = deps.runner ?? plainRunner;
  const prev = journal.previous;
  const done = new Set(prev.done);
  const pendingEffects = new Map(prev.effectsPending.map((e) => [effectKey(e), e]));
  const t0 = now();
  const failures: RunFailure[] = [];
  const leftOut: RunReport['leftOut'][number][] = [];
  const backups: string[] = [...prev.backups];
  const dead = new Set<string>(); // failed nodes, out of the rest of the run
  const everyNode = new Set(phases.flatMap((p) => p.steps.flatMap((s) => s.actions.flatMap((a) => nodesOfAction(a)))));
  const rows: { -readonly [K in keyof RunReport['phases'][number]]: RunReport['phases'][number][K] }[] = phases.map(
    (p) => ({
      id: p.id,
      title: p.title,
      kind: p.kind,
      ...(p.deployStep !== undefined ? { deployStep: p.deployStep } : {}),
      state: 'not-run' as PhaseState,
      ms: 0,
      nodes: 0,
      failed: 0,
    }),
  );
  let changes = 0;
  let pause: RunReport['pause'];
  let overBudget: RunReport['overBudget'];
  let outcome: RunOutcome = RunOutcome.DONE;
  const subjectOf = (a: A): string => (subjects[a.kind as A['kind']] as (x: A) => string)(a);

  const effect = async <T>(e: Effect, act: () => Promise<T>): Promise<T> => {
    pendingEffects.delete(effectKey(e));
    journal.effect('intent', e);
    try {
      const r = await act();
      journal.effect('done', e);
      changes++;
      return r;
    } catch (err) {
      journal.effect('failed', e);
      throw err;
    }
  };
  const verify = (e: Effect): void => {
    const k = effectKey(e);
    if (!pendingEffects.has(k)) return;
    pendingEffects.delete(k);
    journal.effect('done', e, true);
  };

  /** The budget's tally of every group, over every node of the run. */
  const tally = (): GroupTally[] => {
    const g = deps.budget?.groupOf;
    const by = new Map<string, { nodes: number; failed: number }>();
    for (const n of everyNode) {
      const group = g?.get(n);
      if (group === undefined) continue;
      const t = by.get(group) ?? { nodes: 0, failed: 0 };
      t.nodes++;
      if (dead.has(n)) t.failed++;
      by.set(group, t);
    }
    return [...by].map(([group, t]) => ({ group, ...t })).sort((a, b) => a.group.localeCompare(b.group));
  };

  /** Run one action with its journal records and events; rejects when it failed. */
  const perform = async (phase: Phase<A>, step: number, a: A, gates: Map<string, Gate>): Promise<void> => {
    const subject = subjectOf(a);
    const key = actionKey(phase.id, step, a.kind, subject);
    if (done.has(key)) {
      emit({
        kind: 'run.action',
        phase: phase.id,
        action: a.kind,
        subject,
        state: 'skipped',
        detail: 'done by an earlier run',
        ms: 0,
      });
      return;
    }
    const t = now();
    journal.action(key, 'intent');
    const scope: RunScope = {
      phase: phase as Phase<AnyAction>,
      where: (node, what) => `${pathPrefix(phase)}/${node}/${what}`,
      effect,
      verify,
      change: (c) => {
        emit({
          kind: 'deploy.change',
          step: phase.deployStep ?? 0,
          node: c.node,
          object: c.object,
          name: c.name,
          action: c.action,
          detail: c.detail ?? '',
          ms: c.ms ?? 0,
        });
      },
      gate: (node, container) => gates.get(`${node}/${container}`),
    };
    try {
      const handler = handlers[a.kind as A['kind']] as Handler<A, C>;
      const detail = await handler(a, ctx, scope);
      journal.action(key, 'done', detail);
      done.add(key);
      if (a.kind === 'backup') backups.push(detail);
      emit({ kind: 'run.action', phase: phase.id, action: a.kind, subject, state: 'done', detail, ms: now() - t });
    } catch (err) {
      const f = failureOf(phase, key, a.kind, subject, nodesOfAction(a), err);
      failures.push(f);
      journal.action(key, 'failed', `${f.code}: ${f.message}`);
      emit({
        kind: 'run.action',
        phase: phase.id,
        action: a.kind,
        subject,
        state: 'failed',
        detail: `${f.code}: ${f.message}`,
        ms: now() - t,
      });
      emit({
        kind: 'run.failure',
        phase: phase.id,
        path: f.path,
        code: f.code,
        message: f.message,
        class: f.class,
        ...(f.hint ? { hint: f.hint } : {}),
      });
      throw err;
    }
  };

  /** One phase; resolves with whether it succeeded. */
  const runPhase = async (phase: Phase<A>, row: (typeof rows)[number]): Promise<boolean> => {
    const failedHere = new Set<string>();
    const phaseNodes = new Set(phase.steps.flatMap((s) => s.actions.flatMap((a) => nodesOfAction(a))));
    row.nodes = [...phaseNodes].filter((n) => !dead.has(n)).length;
    let ok = true;
    for (const [i, st] of phase.steps.entries()) {
      if (ctx.signal?.aborted) {
        failures.push({
          phase: phase.id,
          key: `${phase.id}#${i}`,
          action: 'run',
          subject: st.title,
          step: phase.deployStep ?? 0,
          node: '',
          path: `${pathPrefix(phase)}/${st.title}`,
          class: FailureClass.RETRYABLE,
          code: 'E_INTERRUPTED',
          message: `interrupted before step ${i + 1} of ${phase.id} (${st.title})`,
          hint: "Run the command again with '--resume' to go on.",
        });
        return false;
      }
      const lanes = new Map<string, A[]>();
      st.actions.forEach((a, j) => {
        const ns = nodesOfAction(a);
        if (ns.length && ns.every((n) => dead.has(n))) {
          emit({
            kind: 'run.action',
            phase: phase.id,
            action: a.kind,
            subject: subjectOf(a),
            state: 'skipped',
            detail: failedHere.size ? 'the node failed earlier in this phase' : 'the node failed earlier in this run',
            ms: 0,
          });
          return;
        }
        const lane = laneOf(a) ?? `#${j}`;
        lanes.set(lane, [...(lanes.get(lane) ?? []), a]);
      });
      // Containers others wait for within this step (a cluster's bootstrap node first).
      const gates = new Map<string, Gate>();
      for (const [lane, actions] of lanes)
        for (const a of actions) {
          const cs = (a as { containers?: unknown }).containers;
          if (a.kind === 'ensure' && Array.isArray(cs))
            for (const c of cs as { name: string }[]) gates.set(`${lane}/${c.name}`, new Gate());
        }
      const openGates = (lane: string, a: A): void => {
        const cs = (a as { containers?: unknown }).containers;
        if (Array.isArray(cs)) for (const c of cs as { name: string }[]) gates.get(`${lane}/${c.name}`)?.open();
      };
      let stepOk = true;
      await runner(
        [...lanes.entries()].map(([lane, actions]) => ({
          title: deps.title
            ? deps.title(phase, st.title, lane.startsWith('#') ? undefined : lane)
            : `${phase.id} ${st.title}${lane.startsWith('#') ? '' : ` ${lane}`}`,
          run: async () => {
            try {
              for (const a of actions) {
                try {
                  await perform(phase, i, a, gates);
                  openGates(lane, a);
                } catch (err) {
                  openGates(lane, a);
                  stepOk = false;
                  const nodes = failedNodesOf(a, err);
                  for (const n of nodes) failedHere.add(n);
                  if (phase.onFailure === 'budget') {
                    for (const n of nodes) {
                      if (dead.has(n)) continue;
                      dead.add(n);
                      leftOut.push({
                        phase: phase.id,
                        node: n,
                        reason: `${a.kind} ${subjectOf(a)} failed (${errorCode(err)})`,
                      });
                    }
                  }
                  throw err; // the rest of this lane's actions in the step are not done
                }
              }
              return 'done';
            } finally {
              // A failed lane opens its gates too: the waiting ones then succeed or fail on their own.
              for (const a of actions) openGates(lane, a);
            }
          },
        })),
        Math.max(1, Math.min(lanes.size, st.concurrency ?? lanes.size)),
      );
      if (!stepOk) {
        ok = false;
        if (phase.onFailure === 'stop') break;
      }
    }
    row.failed = failedHere.size;
    return ok;
  };

  for (const [pi, phase] of phases.entries()) {
    const row = rows[pi]!;
    if (prev.phasesDone.has(phase.id)) {
      row.state = 'skipped';
      emit({ kind: 'run.phase', phase: phase.id, title: phase.title, state: 'skipped', ms: 0 });
      continue;
    }
    if (phase.pauseBefore && !prev.continued.has(phase.id)) {
      if (deps.mode === RunMode.CONTINUE && prev.pausedAt?.phase === phase.id) {
        journal.continued(phase.id);
      } else {
        row.state = 'paused';
        pause = { phase: phase.id, reason: phase.pauseBefore.reason };
        journal.pause(phase.id, phase.pauseBefore.reason);
        emit({ kind: 'run.phase', phase: phase.id, title: phase.title, state: 'paused', ms: 0 });
        outcome = RunOutcome.PAUSED;
        break;
      }
    }
    const tp = now();
    journal.phase(phase.id, 'start');
    emit({ kind: 'run.phase', phase: phase.id, title: phase.title, state: 'start', ms: 0 });
    const ok = await runPhase(phase, row);
    row.ms = now() - tp;
    row.state = ok ? 'done' : 'failed';
    journal.phase(phase.id, ok ? 'done' : 'failed');
    emit({ kind: 'run.phase', phase: phase.id, title: phase.title, state: row.state, ms: row.ms });
    if (ok) continue;
    if (phase.onFailure === 'stop' || ctx.signal?.aborted) {
      outcome = RunOutcome.FAILED;
      break;
    }
    const over = tally().filter((t) => exceeds(t, deps.budget?.percent ?? 0));
    if (over.length || !deps.budget) {
      overBudget = { phase: phase.id, groups: over.length ? over : tally() };
      outcome = RunOutcome.FAILED;
      break;
    }
  }
  if (outcome === RunOutcome.DONE && failures.length) outcome = RunOutcome.FAILED;
  return {
    ok: outcome === RunOutcome.DONE,
    outcome,
    run: journal.run,
    ms: now() - t0,
    phases: rows,
    changes,
    failures,
    ...(pause ? { pause } : {}),
    leftOut,
    ...(overBudget ? { overBudget } : {}),
    tally: dead.size ? tally() : [],
    backups,
  };
}

/** The start of a task path: the deploy step of a deploy's phase, else the phase. */
function pathPrefix(phase: Phase<AnyAction>): string {
  return phase.deployStep !== undefined ? `step ${phase.deployStep}` : phase.id;
}

/** The code of a thrown value. */
function errorCode(err: unknown): string {
  return err instanceof StackctlError ? err.code : 'E_INTERNAL';
}

/** Nodes a failed action leaves out: those the error names, else all it concerned. */
function failedNodesOf(a: AnyAction, err: unknown): readonly string[] {
  const named = err instanceof StackctlError ? err.details['nodes'] : undefined;
  if (Array.isArray(named) && named.every((n) => typeof n === 'string') && named.length) return named as string[];
  return nodesOfAction(a);
}

/** The report's record of a failed action. */
function failureOf(
  phase: Phase<AnyAction>,
  key: string,
  kind: string,
  subject: string,
  nodes: readonly string[],
  err: unknown,
): RunFailure {
  const e = err instanceof StackctlError ? err : undefined;
  const log = e?.details['log'];
  const path = e?.details['path'];
  return {
    phase: phase.id,
    key,
    action: kind,
    subject,
    step: phase.deployStep ?? 0,
    node: nodes.join(','),
    path: typeof path === 'string' ? path : `${pathPrefix(phase)}/${nodes.join(',') || '-'}/${kind} ${subject}`,
    class: err instanceof ActionFailed ? err.failureClass : FailureClass.HARD,
    code: e?.code ?? 'E_INTERNAL',
    message: messageOf(err),
    ...(e?.hint ? { hint: e.hint } : {}),
    ...(typeof log === 'string' && log ? { log } : {}),
  };
}

/** A RemoteError for "this is a bug: the plan and the target disagree". */
export function planMismatch(node: string, what: string): RemoteError {
  return new RemoteError('E_TARGET_MISSING', `${node}: ${what}`, {
    hint: 'This is a bug: the converge plan and the target deploy plan disagree.',
  });
}

/**
 * A run scope outside a run (tests, a handler called on its own): effects are performed
 * without a journal, changes are dropped, no gates.
 */
export function detachedScope(phase: Partial<Phase<AnyAction>> = {}): RunScope {
  return {
    phase: { id: 'detached', kind: 'detached', title: '', services: [], onFailure: 'stop', steps: [], ...phase },
    where: (node, what) => `detached/${node}/${what}`,
    effect: (_e, act) => act(),
    verify: () => undefined,
    change: () => undefined,
    gate: () => undefined,
  };
}
