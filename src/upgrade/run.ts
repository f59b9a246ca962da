/**
 * An upgrade run on the converge engine: its phases performed by the engine
 * (src/orchestrator/engine.ts) with the upgrade's handlers, then, when every
 * phase is done, the inventory's `cloud.release` set to the target and the
 * run closed. A run refused by its prechecks changed nothing and is closed
 * too, so the next one starts afresh.
 */
import { StackctlError, messageOf } from '../core/errors.js';
import { RunOutcome, runPhases, type RunFailure, type StepRunner } from '../orchestrator/engine.js';
import { FailureClass } from '../orchestrator/failures.js';
import type { JournalSink, RunMode } from '../orchestrator/journal.js';
import type { ActionHandlers, UpgradeContext } from './context.js';
import { UPGRADE_SUBJECTS } from './journal.js';
import { setInventoryRelease } from './release-file.js';
import { BATCH_GROUP, upgradeReport, type UpgradeReport } from './report.js';

/** What the run needs besides the context (CONVENTIONS.md 8). */
export interface UpgradeRunDeps {
  readonly handlers: ActionHandlers;
  readonly journal: JournalSink;
  readonly mode: RunMode;
  /** Progress display of a step's lanes (default: none). */
  readonly runner?: StepRunner;
  /** Set `cloud.release` at the end (default: rewrite ctx.inventoryFile). */
  readonly setRelease?: (release: string) => void;
}

/** Perform the plan in ctx. Never throws for a failed action: it is in the report. */
export async function runUpgrade(ctx: UpgradeContext, deps: UpgradeRunDeps): Promise<UpgradeReport> {
  const { plan } = ctx;
  const batchNodes = plan.phases
    .filter((p) => p.kind === 'batches')
    .flatMap((p) => p.steps.flatMap((st) => st.actions.flatMap((a) => ('node' in a ? [a.node] : []))));
  const run = await runPhases(plan.phases, ctx, {
    handlers: deps.handlers,
    subjects: UPGRADE_SUBJECTS,
    journal: deps.journal,
    mode: deps.mode,
    ...(deps.runner ? { runner: deps.runner } : {}),
    budget: { percent: plan.options.maxFailPercent, groupOf: new Map(batchNodes.map((n) => [n, BATCH_GROUP])) },
  });
  // Refused by the prechecks, nothing changed: the run is closed, the next one starts afresh.
  const failedKind = run.phases.find((p) => p.state === 'failed')?.kind;
  if (run.outcome === RunOutcome.FAILED && failedKind === 'precheck') deps.journal.end(false);
  let releaseWritten = false;
  const failures: RunFailure[] = [];
  if (run.outcome === RunOutcome.DONE) {
    try {
      (deps.setRelease ?? ((r: string) => setInventoryRelease(ctx.inventoryFile, r)))(plan.to.release);
      releaseWritten = true;
      // NOTE: a kill between these two lines leaves the run open with the inventory naming its
      // target; the next upgrade command closes it (src/cli/upgrade.ts closeFinished).
      deps.journal.end(true);
    } catch (err) {
      const e = err instanceof StackctlError ? err : undefined;
      failures.push({
        phase: 'end',
        key: 'release',
        action: 'run',
        subject: ctx.inventoryFile,
        step: 0,
        node: '',
        path: 'end/release',
        class: FailureClass.RETRYABLE,
        code: e?.code ?? 'E_INTERNAL',
        message: messageOf(err),
        ...(e?.hint ? { hint: e.hint } : {}),
      });
    }
  }
  return upgradeReport(run, plan, { releaseWritten, failures });
}
