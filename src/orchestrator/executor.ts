/**
 * `deploy` on the converge engine: observe what the nodes run, turn the
 * difference with the deploy plan into phases (converge.ts), run them
 * (engine.ts). The dry run observes the same way and prints the same phases.
 *
 * - Observation reads every node in parallel (containers and their labels,
 *   config files' sha256, images present, run-once markers) and changes
 *   nothing. A node that cannot be read fails alone (retryable) and counts
 *   against its role's failure budget.
 * - Every side effect is journaled; the real state decides what to do, so
 *   re-runs and `--resume` do only what is left.
 */
import type { GuestImageData } from './identity.js';
import type { StackctlEvent } from '../core/events.js';
import { mapLimit } from '../core/concurrency.js';
import type { Secret } from '../core/secret.js';
import type { ContainerWork, DeployPlan } from './planner.js';
import type { DeployGuard, EngineContext, NodeAccess } from './context.js';
import {
  planConverge,
  predictions,
  runOnceKey,
  type ConvergeCatalog,
  type ConvergePlan,
  type Observation,
  type Prediction,
} from './converge.js';
import {
  exceeds,
  plainRunner,
  runPhases,
  type GroupTally,
  type Handler,
  type RunFailure,
  type StepRunner,
} from './engine.js';
import { FailureClass, failureOf, type Failure, type RoleTally } from './failures.js';
import { NODE_SUBJECTS } from './format.js';
import { NODE_HANDLERS, markerOf, oneOffRunner, workHash } from './handlers.js';
import { RunMode, type Effect, type JournalSink } from './journal.js';
import { runHealthcheck } from './health.js';
import { listWorkloads, workloadsStopped } from './workloads.js';
import type { NodeAction } from './model.js';
import {
  ContainerAction,
  diffConfig,
  diffContainer,
  parseSha256sum,
  type ConfigDiff,
  type ContainerDiff,
} from './state.js';

export type { NodeAccess } from './context.js';
export type { Prediction } from './converge.js';
export { plainRunner, type StepRunner, type StepTask } from './engine.js';

/** Tuning of the deploy. */
export const EXECUTOR_DEFAULTS = {
  concurrency: 8,
  /** Percent of a role's nodes that may fail before the deploy aborts (exceeds = abort). */
  failureBudgetPercent: 0,
  /** Deadline of SSH commands that only read state. */
  commandTimeoutMs: 30_000,
} as const;

/** Side effects of the deploy (CONVENTIONS.md 8). */
export interface ExecutorDeps {
  /** A node's shell, files and Docker engine (one SSH connection). */
  readonly connect: (node: string) => NodeAccess;
  /** node -> dest -> rendered content (holds secrets; only uploaded). */
  readonly rendered: ReadonlyMap<string, ReadonlyMap<string, string>>;
  readonly journal: JournalSink;
  readonly emit: (e: StackctlEvent) => void;
  /** What the converge planner reads of roles and services. */
  readonly catalog: ConvergeCatalog;
  /** The cluster-check action's handler (src/status/cluster-check.ts: it asks what status asks). */
  readonly clusterCheck: Handler<Extract<NodeAction, { kind: 'cluster-check' }>, EngineContext>;
  /** Service secrets by name (database passwords). */
  readonly secret?: (name: string) => Secret | undefined;
  /** The guest image of `build: guest` starter images (read when step 5 needs it). */
  readonly guestImage?: () => GuestImageData;
  readonly runner?: StepRunner;
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
  readonly signal?: AbortSignal;
  /** How long a run-once task may go without a new log line before it is reported stuck. */
  readonly quietTimeoutMs?: number;
  /** Checks beyond Docker's health (src/recover/guard.ts: the Galera cluster's). */
  readonly guard?: DeployGuard;
}

/** Options of a deploy. */
export interface ExecutorOptions {
  readonly concurrency?: number;
  readonly failureBudgetPercent?: number;
  /** Recreate containers whose workloads still run (EngineContext.allowWorkloadStop). */
  readonly allowWorkloadStop?: boolean;
}

/** What a deploy did. */
export interface DeployReport {
  readonly ok: boolean;
  readonly run: string;
  readonly ms: number;
  readonly steps: { readonly step: number; readonly ms: number; readonly nodes: number; readonly failed: number }[];
  /** Side effects performed (not counting ones found already in place). */
  readonly changes: number;
  readonly failures: Failure[];
  /**
   * Set when the deploy stopped early: the failure budget exceeded (`roles`), in the host
   * preparation or the observation (`host`: before step 1), or a phase that stops at its first
   * failure (a rolling restart, run-once work) failed (`reason`).
   */
  readonly aborted?: {
    readonly step: number;
    readonly roles: RoleTally[];
    readonly host?: true;
    /** Before step 1: nodes whose state could not be read exceed the budget. */
    readonly observe?: true;
    readonly reason?: string;
  };
  /** The services whose APIs this deploy took down, and why (a service on one node, or not rolling). */
  readonly outages: ConvergePlan['outages'];
}

/** The container's healthcheck, run once now (Docker's first check waits a whole interval). */
async function passesHealthcheck(access: NodeAccess, w: ContainerWork): Promise<boolean> {
  return !w.definition.healthcheck || (await runHealthcheck(access.docker, w)) === 0;
}

/** Read a node's state for every item of the plan on it; changes nothing. */
async function observeNode(
  plan: DeployPlan,
  node: string,
  access: NodeAccess,
  secret: (name: string) => Secret | undefined,
): Promise<{
  containers: ContainerDiff[];
  configs: ConfigDiff[];
  images: [string, boolean][];
  done: string[];
  unwell: [string, string][];
  workloads: [string, string][];
}> {
  const works: ContainerWork[] = [];
  const configs = [];
  const taskImages: string[] = [];
  for (const st of plan.steps)
    for (const n of st.nodes)
      if (n.node === node) {
        works.push(...n.containers);
        configs.push(...n.configs);
        taskImages.push(...n.images);
      }
  const containers: ContainerDiff[] = [];
  const unwell: [string, string][] = [];
  const workloads: [string, string][] = [];
  for (const w of works) {
    const info = await access.docker.inspectContainer(w.name);
    const d = diffContainer(w, info);
    containers.push(d);
    if (d.action === ContainerAction.RECREATE && w.definition.workloads) {
      const stopped = workloadsStopped(w, await listWorkloads(access.docker, w));
      if (stopped) workloads.push([w.name, stopped]);
    }
    if (d.action === ContainerAction.UNCHANGED && info) {
      if (info.state.status === 'restarting') unwell.push([w.name, `restarting (${info.restartCount} restart(s))`]);
      else if (info.state.health === 'unhealthy') unwell.push([w.name, 'health check failing']);
      else if (info.state.health === 'starting' && !(await passesHealthcheck(access, w)))
        // NOTE: a node that just came back (a Galera member waiting for the others) is in its start period
        unwell.push([w.name, 'health check not passed yet']);
      // files it re-reads in place, on disk but not served: a run killed after their upload, or refused
      else if (w.reloads && info.state.running && !(await passesHealthcheck(access, w)))
        unwell.push([w.name, 'does not serve the files it reloads yet (a reload under way, or refused: see its log)']);
    }
  }
  let sums = new Map<string, string>();
  if (configs.length) {
    const r = await access.exec(['sha256sum', '--', ...configs.map((c) => c.dest)], {
      timeoutMs: EXECUTOR_DEFAULTS.commandTimeoutMs,
    });
    sums = parseSha256sum(r.stdout); // missing files only go to stderr
  }
  const images: [string, boolean][] = [];
  for (const image of new Set([...works.map((w) => w.image), ...taskImages]))
    images.push([image, await access.docker.imageExists(image)]);
  const done: string[] = [];
  for (const st of plan.steps)
    for (const w of st.runOnce)
      if (w.node === node && (await markerOf(access, w)) === workHash(w, secret)) done.push(runOnceKey(w));
  return {
    containers,
    configs: configs.map((c) => diffConfig(c, sums.get(c.dest))),
    images,
    done,
    unwell,
    workloads,
  };
}

/** Look at every node of the plan (at most `concurrency` at once); a node that cannot be read is noted. */
export async function observe(
  plan: DeployPlan,
  deps: Pick<ExecutorDeps, 'connect' | 'secret'>,
  concurrency: number = EXECUTOR_DEFAULTS.concurrency,
): Promise<Observation> {
  const nodes = [
    ...new Set([
      ...plan.steps.flatMap((st) => st.nodes.map((n) => n.node)),
      ...plan.steps.flatMap((st) => st.runOnce.map((w) => w.node)),
    ]),
  ];
  const containers = new Map<string, ContainerDiff>();
  const configs = new Map<string, ConfigDiff>();
  const images = new Map<string, boolean>();
  const done = new Set<string>();
  const unreachable = new Map<string, unknown>();
  const unwell = new Map<string, string>();
  const workloads = new Map<string, string>();
  const secret = deps.secret ?? (() => undefined);
  await mapLimit(nodes, concurrency, async (node) => {
    try {
      const o = await observeNode(plan, node, deps.connect(node), secret);
      for (const c of o.containers) containers.set(`${node}/${c.work.name}`, c);
      for (const c of o.configs) configs.set(`${node}/${c.work.dest}`, c);
      for (const [i, present] of o.images) images.set(`${node}/${i}`, present);
      for (const k of o.done) done.add(k);
      for (const [c, why] of o.unwell) unwell.set(`${node}/${c}`, why);
      for (const [c, what] of o.workloads) workloads.set(`${node}/${c}`, what);
    } catch (err) {
      unreachable.set(node, err);
    }
  });
  return { containers, configs, images, done, unreachable, unwell, workloads };
}

/** What a deploy would do, from real state; no side effects. */
export async function predict(
  plan: DeployPlan,
  deps: Pick<ExecutorDeps, 'connect' | 'secret' | 'catalog'>,
  concurrency?: number,
  opts: Pick<ExecutorOptions, 'allowWorkloadStop'> = {},
): Promise<{ rows: Prediction[]; plan: ConvergePlan; unreachable: ReadonlyMap<string, unknown> }> {
  const obs = await observe(plan, deps, concurrency);
  return {
    rows: predictions(plan, obs, opts),
    plan: planConverge(plan, obs, deps.catalog),
    unreachable: obs.unreachable,
  };
}

/** The deploy as an engine context: the plan converged to is the plan the cloud runs. */
function contextOf(
  plan: DeployPlan,
  deps: ExecutorDeps,
  journalRun: string,
  opts: Pick<ExecutorOptions, 'allowWorkloadStop'> = {},
): EngineContext {
  const now = deps.now ?? Date.now;
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const works = new Map(
    plan.steps.flatMap((st) => st.nodes.flatMap((n) => n.containers.map((c) => [`${c.node}/${c.name}`, c]))),
  );
  return {
    services: deps.catalog.provides,
    currentDeploy: plan,
    targetDeploy: plan,
    targetRendered: deps.rendered,
    connect: deps.connect,
    secret: (n) => deps.secret?.(n),
    ...(deps.guestImage ? { guestImage: deps.guestImage } : {}),
    targetWork: (node, c) => works.get(`${node}/${c}`),
    currentWork: (node, c) => works.get(`${node}/${c}`),
    oneOff: oneOffRunner({
      cloud: plan.cloud,
      run: journalRun,
      connect: deps.connect,
      now,
      sleep,
      ...(deps.quietTimeoutMs ? { quietTimeoutMs: deps.quietTimeoutMs } : {}),
    }),
    ...(deps.quietTimeoutMs ? { quietTimeoutMs: deps.quietTimeoutMs } : {}),
    emit: deps.emit,
    now,
    sleep,
    ...(deps.signal ? { signal: deps.signal } : {}),
    run: journalRun,
    backups: new Map(),
    ...(deps.guard ? { guard: deps.guard } : {}),
    ...(opts.allowWorkloadStop ? { allowWorkloadStop: true } : {}),
  };
}

/** Perform the deploy. Never throws for node failures: they are in the report. */
export async function executeDeploy(
  plan: DeployPlan,
  deps: ExecutorDeps,
  opts: ExecutorOptions = {},
): Promise<DeployReport> {
  const now = deps.now ?? Date.now;
  const concurrency = opts.concurrency ?? EXECUTOR_DEFAULTS.concurrency;
  const budget = opts.failureBudgetPercent ?? EXECUTOR_DEFAULTS.failureBudgetPercent;
  const { journal, emit } = deps;
  const t0 = now();
  const roleOf = new Map(plan.steps.flatMap((st) => st.nodes.map((n) => [n.node, n.role] as const)));

  // Look first: nothing changes until every node was read.
  const obs = await observe(plan, deps, concurrency);
  const firstStep = (node: string): number =>
    plan.steps.find((st) => st.nodes.some((n) => n.node === node) || st.runOnce.some((w) => w.node === node))?.step ??
    0;
  const observeFailures: Failure[] = [...obs.unreachable].map(([node, err]) => {
    const step = firstStep(node);
    const f = failureOf(err, { step, node, path: `step ${step}/${node}/observe` }, FailureClass.RETRYABLE);
    emit({
      kind: 'run.failure',
      phase: 'observe',
      path: f.path,
      code: f.code,
      message: f.message,
      class: f.class,
      ...(f.hint ? { hint: f.hint } : {}),
    });
    return f;
  });
  const tallyAll = (failed: ReadonlySet<string>): GroupTally[] => {
    const by = new Map<string, { nodes: number; failed: number }>();
    for (const [node, role] of roleOf) {
      const t = by.get(role) ?? { nodes: 0, failed: 0 };
      t.nodes++;
      if (failed.has(node)) t.failed++;
      by.set(role, t);
    }
    return [...by].map(([group, t]) => ({ group, ...t })).sort((a, b) => a.group.localeCompare(b.group));
  };
  const asRoles = (ts: readonly GroupTally[]): RoleTally[] =>
    ts.map((t) => ({ role: t.group, nodes: t.nodes, failed: t.failed }));
  const converge = planConverge(plan, obs, deps.catalog);
  const unreached = tallyAll(new Set(obs.unreachable.keys())).filter((t) => exceeds(t, budget));
  if (unreached.length) {
    journal.end(false);
    return {
      ok: false,
      run: journal.run,
      ms: now() - t0,
      steps: [],
      changes: 0,
      failures: observeFailures,
      aborted: { step: 0, roles: asRoles(unreached), observe: true },
      outages: converge.outages,
    };
  }

  // What is in place and stays so, as the deploy's events say.
  for (const st of plan.steps)
    for (const n of st.nodes)
      for (const c of n.containers)
        if (obs.containers.get(`${n.node}/${c.name}`)?.action === ContainerAction.UNCHANGED)
          emit({
            kind: 'deploy.change',
            step: st.step,
            node: n.node,
            object: 'container',
            name: c.name,
            action: 'unchanged',
            detail: obs.unwell?.get(`${n.node}/${c.name}`) ?? '',
            ms: 0,
          });
  const ctx = contextOf(plan, deps, journal.run, opts);
  const report = await runPhases(converge.phases, ctx, {
    handlers: { ...NODE_HANDLERS, 'cluster-check': deps.clusterCheck },
    subjects: NODE_SUBJECTS,
    journal: verifyObserved(plan, obs, journal, deps.secret ?? (() => undefined)),
    mode: RunMode.RESUME,
    runner: deps.runner ?? plainRunner,
    budget: {
      percent: budget,
      groupOf: roleOf,
    },
    title: (phase, step, lane) =>
      `${phase.deployStep !== undefined ? `step ${phase.deployStep} ` : ''}${phase.kind}${step !== phase.kind ? ` ${step}` : ''}${lane ? ` ${lane}` : ''}`,
  });
  journal.end(report.ok && observeFailures.length === 0);

  const steps = new Map<number, { step: number; ms: number; nodes: number; failed: number }>();
  for (const p of report.phases) {
    if (p.deployStep === undefined || p.state === 'not-run') continue;
    const s = steps.get(p.deployStep) ?? { step: p.deployStep, ms: 0, nodes: 0, failed: 0 };
    s.ms += p.ms;
    s.nodes = Math.max(s.nodes, p.nodes);
    s.failed += p.failed;
    steps.set(p.deployStep, s);
  }
  const failed = report.phases.find((p) => p.state === 'failed');
  const stopped =
    failed &&
    report.outcome === 'failed' &&
    (report.overBudget || failed.kind === 'roll' || failed.kind === 'run-once');
  const failures: Failure[] = [...observeFailures, ...report.failures.map(stripRun)];
  return {
    ok: report.ok && observeFailures.length === 0,
    run: report.run,
    ms: now() - t0,
    steps: [...steps.values()].sort((a, b) => a.step - b.step),
    changes: report.changes,
    failures,
    ...(stopped
      ? {
          aborted: {
            step: failed.deployStep ?? 0,
            roles: report.overBudget ? asRoles(report.overBudget.groups) : [],
            ...(failed.kind === 'host' ? { host: true as const } : {}),
            ...(report.overBudget
              ? {}
              : {
                  reason: failed.kind === 'roll' ? `the rolling restart ${failed.id} failed` : 'run-once work failed',
                }),
          },
        }
      : {}),
    outages: converge.outages,
  };
}

/**
 * Effects a killed run had announced and never recorded done, found in place by the observation
 * (a file with its content, a container with its hash, running, an image, a run-once marker):
 * recorded done (`verified`) now, since nothing will act on them again. The journal returned
 * holds only the pending effects still to look at.
 */
function verifyObserved(
  plan: DeployPlan,
  obs: Observation,
  journal: JournalSink,
  secret: (name: string) => Secret | undefined,
): JournalSink {
  const pending = journal.previous.effectsPending;
  if (!pending.length) return journal;
  const inPlace = new Set<string>();
  for (const [k, d] of obs.configs) if (d.action === 'unchanged') inPlace.add(`upload ${k} ${d.work.sha256}`);
  for (const [k, d] of obs.containers) {
    if (d.action === ContainerAction.UNCHANGED || d.action === ContainerAction.START)
      inPlace.add(`create ${k} ${d.work.hash}`);
    if (d.action === ContainerAction.UNCHANGED) inPlace.add(`start ${k} ${d.work.hash}`);
  }
  for (const [k, present] of obs.images) if (present) inPlace.add(`pull ${k} ${k.slice(k.indexOf('/') + 1)}`);
  for (const st of plan.steps)
    for (const w of st.runOnce)
      if (obs.done.has(runOnceKey(w)))
        inPlace.add(
          `${w.kind === 'task' ? 'task' : w.kind === 'database' ? 'database' : 'register'} ${w.node}/${w.service}/${w.name} ${workHash(w, secret)}`,
        );
  const keyOf = (e: Effect): string => `${e.kind} ${e.node}/${e.target} ${e.hash}`;
  const remaining: Effect[] = [];
  for (const e of pending) {
    if (inPlace.has(keyOf(e))) journal.effect('done', e, true);
    else remaining.push(e);
  }
  const previous = { ...journal.previous, effectsPending: remaining };
  return {
    run: journal.run,
    previous,
    phase: (p, state) => journal.phase(p, state),
    action: (k, state, detail) => journal.action(k, state, detail),
    effect: (state, e, verified) => journal.effect(state, e, verified),
    pause: (p, reason) => journal.pause(p, reason),
    continued: (p) => journal.continued(p),
    end: (ok) => journal.end(ok),
  };
}

/** A run failure as the deploy report's failure. */
function stripRun(f: RunFailure): Failure {
  return {
    step: f.step,
    node: f.node,
    path: f.path,
    class: f.class,
    code: f.code,
    message: f.message,
    ...(f.hint ? { hint: f.hint } : {}),
    ...(f.log ? { log: f.log } : {}),
  };
}
