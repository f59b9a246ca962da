/**
 * The upgrade runner: performs an UpgradePlan phase by phase, step by step.
 *
 * - A step is a barrier: its actions on different nodes run in parallel, the
 *   actions of one node in plan order; the next step starts when all ended.
 * - Every action is journaled before and after (journal.ts); a continued run
 *   skips what is recorded done and does again what has an intent only.
 * - A phase with `pauseBefore` stops the run (outcome `paused`) until
 *   `upgrade --continue` passes that pause.
 * - Control phases stop the run at their first failure. Compute batches do
 *   not: a failed node is left out of the rest of its batch (a node whose
 *   pre-batch hook failed is not swapped) and the failure budget over the
 *   batches' nodes decides whether the next batch runs.
 * - A `contract` migration is refused while a container of its service still
 *   runs an image other than the target's.
 * - When every phase is done, the inventory's `cloud.release` becomes the
 *   target (comments and layout kept), so status and deploy see the new release.
 */
import { chmodSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { isScalar, parseDocument } from 'yaml';
import { IoError, RemoteError, StackctlError, messageOf } from '../core/errors.js';
import { mapLimit } from '../core/concurrency.js';
import type { StepRunner } from '../orchestrator/executor.js';
import type { ContainerWork, DeployPlan } from '../orchestrator/planner.js';
import type { ActionHandlers, UpgradeContext } from './context.js';
import { RunMode, actionKey, subjectOf, type UpgradeJournalSink } from './journal.js';
import type { UpgradeAction, UpgradePhase } from './model.js';

/** How a run ended. */
export const RunOutcome = {
  /** Every phase done; the inventory names the target release. */
  DONE: 'done',
  /** Stopped before a declared pause; `upgrade --continue` goes on. */
  PAUSED: 'paused',
  /** An action failed (or the batches' failure budget was exceeded); `upgrade --resume` retries. */
  FAILED: 'failed',
} as const;
export type RunOutcome = (typeof RunOutcome)[keyof typeof RunOutcome];

/** How a phase fared in this run. */
export type PhaseState = 'done' | 'failed' | 'skipped' | 'paused' | 'not-run';

/** One failed action. */
export interface UpgradeFailure {
  readonly phase: string;
  readonly key: string;
  /** The action's kind; `run` for what concerns the run itself (an interruption, the inventory's release). */
  readonly action: UpgradeAction['kind'] | 'run';
  readonly subject: string;
  readonly code: string;
  readonly message: string;
  readonly hint?: string;
  /** The end of a container's or command's log, when there is one. */
  readonly log?: string;
}

/** What a run did. */
export interface UpgradeReport {
  readonly ok: boolean;
  readonly outcome: RunOutcome;
  readonly run: string;
  readonly target: string;
  readonly ms: number;
  readonly phases: readonly {
    readonly id: string;
    readonly title: string;
    readonly state: PhaseState;
    readonly ms: number;
  }[];
  /** Where the run stopped to wait for --continue. */
  readonly pause?: { readonly phase: string; readonly reason: string };
  readonly failures: readonly UpgradeFailure[];
  /** Nodes of a batch left on their old containers, and why. */
  readonly notSwapped: readonly { readonly phase: string; readonly node: string; readonly reason: string }[];
  /** Details of the backups taken (their paths), in this run and the ones it continues. */
  readonly backups: readonly string[];
  /** The compute batches' failure budget, when a batch failed. */
  readonly budget?: {
    readonly failedNodes: readonly string[];
    readonly batchNodes: number;
    readonly maxFailPercent: number;
    readonly exceeded: boolean;
  };
  /** Whether the inventory's cloud.release was set to the target. */
  readonly releaseWritten: boolean;
  /**
   * True when the run failed in its prechecks: nothing was changed, so the run is closed
   * and the next one starts afresh (with this target or another), not with --resume.
   */
  readonly refused?: boolean;
}

/** What the runner needs besides the context (CONVENTIONS.md 8). */
export interface RunnerDeps {
  readonly handlers: ActionHandlers;
  readonly journal: UpgradeJournalSink;
  readonly mode: RunMode;
  /** Progress display of a step's lanes (default: none). */
  readonly runner?: StepRunner;
  /** Set `cloud.release` at the end (default: rewrite ctx.inventoryFile). */
  readonly setRelease?: (release: string) => void;
}

/** Container work of a service on every node of a deploy plan. */
export function containersOf(plan: DeployPlan, service: string): ContainerWork[] {
  return plan.steps.flatMap((st) => st.nodes.flatMap((n) => n.containers.filter((c) => c.service === service)));
}

/**
 * Refuse a contract migration while any container of the service runs an image
 * other than the target's: old code would lose the columns it still reads.
 */
export async function assertContractSafe(ctx: UpgradeContext, service: string): Promise<void> {
  const old: string[] = [];
  for (const w of containersOf(ctx.targetDeploy, service)) {
    const info = await ctx.connect(w.node).docker.inspectContainer(w.name);
    if (info?.state.running && info.image !== w.image) old.push(`${w.node}/${w.name} (${info.image})`);
  }
  if (old.length) {
    throw new RemoteError(
      'E_CONTRACT_REFUSED',
      `${service}: contract migration refused: ${old.length} container(s) still run an old image: ${old.join(', ')}`,
      {
        hint: `Every ${service} container must run the target image before its database is contracted; look at why they were not replaced, then 'stackctl upgrade --resume'.`,
        details: { service, containers: old },
      },
    );
  }
}

/** Set `cloud.release` in an inventory file, keeping its comments and layout; written atomically. */
export function setInventoryRelease(file: string, release: string): void {
  try {
    const text = readFileSync(file, 'utf8');
    const doc = parseDocument(text);
    const node = doc.getIn(['cloud', 'release'], true);
    let out: string;
    if (isScalar(node) && node.range) {
      // Replace the value's characters only: every other byte of the file stays as it was.
      const value = /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(release) ? release : JSON.stringify(release);
      out = text.slice(0, node.range[0]) + value + text.slice(node.range[1]);
    } else {
      doc.setIn(['cloud', 'release'], release);
      out = doc.toString();
    }
    const mode = statSync(file).mode & 0o777;
    const tmp = `${file}.tmp-${process.pid}`;
    writeFileSync(tmp, out, { mode });
    chmodSync(tmp, mode);
    renameSync(tmp, file);
  } catch (err) {
    throw new IoError('E_INVENTORY_WRITE', `cannot set cloud.release: ${release} in ${file}: ${messageOf(err)}`, {
      hint: `The upgrade itself is done: set 'cloud.release: ${release}' in ${file} by hand.`,
      cause: err,
    });
  }
}

/** The node an action is ordered on (actions of one node run in order); undefined: a lane of its own. */
function laneOf(a: UpgradeAction): string | undefined {
  return 'node' in a ? a.node : undefined;
}

/** Nodes an action concerns (for the batches' failure accounting). */
function nodesOf(a: UpgradeAction): readonly string[] {
  if ('node' in a) return [a.node];
  if ('nodes' in a) return a.nodes;
  if (a.kind === 'check-capacity') return a.batch;
  return [];
}

/** Nodes a failed action leaves out of the rest of its batch: those the error names, else all it concerned. */
function failedNodesOf(a: UpgradeAction, err: unknown): readonly string[] {
  const named = err instanceof StackctlError ? err.details['nodes'] : undefined;
  if (Array.isArray(named) && named.every((n) => typeof n === 'string') && named.length) return named as string[];
  return nodesOf(a);
}

/** Perform the plan in ctx. Never throws for a failed action: it is in the report. */
export async function runUpgrade(ctx: UpgradeContext, deps: RunnerDeps): Promise<UpgradeReport> {
  const { plan, now, emit } = ctx;
  const { journal, handlers } = deps;
  const runner: StepRunner =
    deps.runner ?? (async (tasks, n) => void (await mapLimit(tasks, n, (t) => t.run().catch(() => ''))));
  const prev = journal.previous;
  const done = new Set(prev.done);
  const t0 = now();
  const failures: UpgradeFailure[] = [];
  const notSwapped: { phase: string; node: string; reason: string }[] = [];
  const backups: string[] = [...prev.backups];
  const phases: { id: string; title: string; state: PhaseState; ms: number }[] = plan.phases.map((p) => ({
    id: p.id,
    title: p.title,
    state: 'not-run',
    ms: 0,
  }));
  const batchNodes = new Set(plan.phases.filter((p) => p.kind === 'batches').flatMap((p) => phaseNodes(p)));
  const failedBatchNodes = new Set<string>();
  let budget: UpgradeReport['budget'];
  let pause: UpgradeReport['pause'];
  let outcome: RunOutcome = RunOutcome.DONE;
  let refused = false;

  /** Run one action with its journal records and events; rejects when it failed. */
  const perform = async (phase: UpgradePhase, step: number, a: UpgradeAction): Promise<void> => {
    const key = actionKey(phase.id, step, a);
    const subject = subjectOf(a);
    if (done.has(key)) {
      emit({
        kind: 'upgrade.action',
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
    try {
      if (a.kind === 'migrate' && a.stage === 'contract') await assertContractSafe(ctx, a.service);
      const detail = await (handlers[a.kind] as (x: UpgradeAction, c: UpgradeContext) => Promise<string>)(a, ctx);
      journal.action(key, 'done', detail);
      done.add(key);
      if (a.kind === 'backup') backups.push(detail);
      emit({ kind: 'upgrade.action', phase: phase.id, action: a.kind, subject, state: 'done', detail, ms: now() - t });
    } catch (err) {
      const e = err instanceof StackctlError ? err : undefined;
      const log = e?.details['log'];
      failures.push({
        phase: phase.id,
        key,
        action: a.kind,
        subject,
        code: e?.code ?? 'E_INTERNAL',
        message: messageOf(err),
        ...(e?.hint ? { hint: e.hint } : {}),
        ...(typeof log === 'string' && log ? { log } : {}),
      });
      journal.action(key, 'failed', `${e?.code ?? 'E_INTERNAL'}: ${messageOf(err)}`);
      emit({
        kind: 'upgrade.action',
        phase: phase.id,
        action: a.kind,
        subject,
        state: 'failed',
        detail: `${e?.code ?? 'E_INTERNAL'}: ${messageOf(err)}`,
        ms: now() - t,
      });
      throw err;
    }
  };

  /** One phase; resolves with whether it succeeded. */
  const runPhase = async (phase: UpgradePhase): Promise<boolean> => {
    const batch = phase.kind === 'batches';
    const failedHere = new Set<string>(); // nodes of this batch left out of its later steps
    let ok = true;
    for (const [i, st] of phase.steps.entries()) {
      if (ctx.signal?.aborted) {
        failures.push({
          phase: phase.id,
          key: `${phase.id}#${i}`,
          action: 'run',
          subject: st.title,
          code: 'E_INTERRUPTED',
          message: `interrupted before step ${i + 1} of ${phase.id} (${st.title})`,
          hint: "Run 'stackctl upgrade --resume' to go on.",
        });
        return false;
      }
      const lanes = new Map<string, UpgradeAction[]>();
      st.actions.forEach((a, j) => {
        if (batch) {
          const ns = nodesOf(a);
          if (ns.length && ns.every((n) => failedHere.has(n))) {
            emit({
              kind: 'upgrade.action',
              phase: phase.id,
              action: a.kind,
              subject: subjectOf(a),
              state: 'skipped',
              detail: 'the node failed earlier in this batch',
              ms: 0,
            });
            return;
          }
        }
        const lane = laneOf(a) ?? `#${j}`;
        lanes.set(lane, [...(lanes.get(lane) ?? []), a]);
      });
      let stepOk = true;
      await runner(
        [...lanes.entries()].map(([lane, actions]) => ({
          title: `${phase.id} ${st.title}${lane.startsWith('#') ? '' : ` ${lane}`}`,
          run: async () => {
            for (const [k, a] of actions.entries()) {
              try {
                await perform(phase, i, a);
              } catch (err) {
                stepOk = false;
                for (const n of failedNodesOf(a, err)) failedHere.add(n);
                // the rest of this node's actions in the step are not done
                for (const rest of actions.slice(k + 1)) {
                  if (rest.kind === 'swap') {
                    notSwapped.push({ phase: phase.id, node: rest.node, reason: `${a.kind} failed on ${rest.node}` });
                  }
                }
                throw err;
              }
            }
            return 'done';
          },
        })),
        Math.max(1, Math.min(lanes.size, st.concurrency ?? lanes.size)),
      );
      // A batch's hook that failed before the swap: its nodes are not swapped (reported above or here).
      if (batch && !stepOk) {
        for (const later of phase.steps.slice(i + 1)) {
          for (const a of later.actions) {
            if (
              a.kind === 'swap' &&
              failedHere.has(a.node) &&
              !notSwapped.some((x) => x.node === a.node && x.phase === phase.id)
            ) {
              const why = st.actions.find((x) => x.kind === 'hook');
              notSwapped.push({
                phase: phase.id,
                node: a.node,
                reason: why?.kind === 'hook' ? `pre-batch hook ${why.hook} failed` : `step '${st.title}' failed`,
              });
            }
          }
        }
      }
      if (!stepOk) {
        ok = false;
        if (!batch) return false;
      }
    }
    if (batch) for (const n of failedHere) failedBatchNodes.add(n);
    return ok;
  };

  for (const [pi, phase] of plan.phases.entries()) {
    const row = phases[pi]!;
    if (prev.phasesDone.has(phase.id)) {
      row.state = 'skipped';
      emit({ kind: 'upgrade.phase', phase: phase.id, title: phase.title, state: 'skipped', ms: 0 });
      continue;
    }
    if (phase.pauseBefore && !prev.continued.has(phase.id)) {
      if (deps.mode === RunMode.CONTINUE && prev.pausedAt?.phase === phase.id) {
        journal.continued(phase.id);
      } else {
        row.state = 'paused';
        pause = { phase: phase.id, reason: phase.pauseBefore.reason };
        journal.pause(phase.id, phase.pauseBefore.reason);
        emit({ kind: 'upgrade.phase', phase: phase.id, title: phase.title, state: 'paused', ms: 0 });
        outcome = RunOutcome.PAUSED;
        break;
      }
    }
    const tp = now();
    journal.phase(phase.id, 'start');
    emit({ kind: 'upgrade.phase', phase: phase.id, title: phase.title, state: 'start', ms: 0 });
    const ok = await runPhase(phase);
    row.ms = now() - tp;
    row.state = ok ? 'done' : 'failed';
    journal.phase(phase.id, ok ? 'done' : 'failed');
    emit({ kind: 'upgrade.phase', phase: phase.id, title: phase.title, state: row.state, ms: row.ms });
    if (!ok && (phase.kind !== 'batches' || ctx.signal?.aborted)) {
      outcome = RunOutcome.FAILED;
      // Refused before anything changed: close the run, so that the next one is a new one.
      if (phase.kind === 'precheck') {
        refused = true;
        journal.end(false);
      }
      break;
    }
    if (!ok) {
      const exceeded = (failedBatchNodes.size * 100) / Math.max(1, batchNodes.size) > plan.options.maxFailPercent;
      budget = {
        failedNodes: [...failedBatchNodes].sort(),
        batchNodes: batchNodes.size,
        maxFailPercent: plan.options.maxFailPercent,
        exceeded,
      };
      if (exceeded) {
        outcome = RunOutcome.FAILED;
        break;
      }
    }
  }
  if (outcome === RunOutcome.DONE && failures.length) outcome = RunOutcome.FAILED;
  let releaseWritten = false;
  if (outcome === RunOutcome.DONE) {
    try {
      (deps.setRelease ?? ((r: string) => setInventoryRelease(ctx.inventoryFile, r)))(plan.to.release);
      releaseWritten = true;
      journal.end(true);
    } catch (err) {
      const e = err instanceof StackctlError ? err : undefined;
      failures.push({
        phase: 'end',
        key: 'release',
        action: 'run',
        subject: ctx.inventoryFile,
        code: e?.code ?? 'E_INTERNAL',
        message: messageOf(err),
        ...(e?.hint ? { hint: e.hint } : {}),
      });
      outcome = RunOutcome.FAILED;
    }
  }
  return {
    ok: outcome === RunOutcome.DONE,
    outcome,
    run: journal.run,
    target: plan.to.release,
    ms: now() - t0,
    phases,
    ...(pause ? { pause } : {}),
    failures,
    notSwapped,
    backups,
    ...(budget ? { budget } : {}),
    releaseWritten,
    ...(refused ? { refused: true } : {}),
  };
}

/** Nodes a phase's actions concern. */
function phaseNodes(p: UpgradePhase): string[] {
  return [...new Set(p.steps.flatMap((s) => s.actions.flatMap((a) => nodesOf(a))))];
}
