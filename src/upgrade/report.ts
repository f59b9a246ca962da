/**
 * What an upgrade run tells the operator: the engine's report (phases,
 * failures, the failure budget) in the upgrade's words: the nodes of a batch
 * left on their old containers, the budget of the compute batches, the
 * backups, whether the inventory names the target now.
 */
import { RunOutcome, type PhaseState, type RunFailure, type RunReport } from '../orchestrator/engine.js';
import type { UpgradePlan } from './model.js';

export { RunOutcome, type PhaseState } from '../orchestrator/engine.js';

/** The group of the failure budget: every node of the compute batches. */
export const BATCH_GROUP = 'compute batches';

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
  readonly failures: readonly RunFailure[];
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

/** The engine's report of an upgrade run, in the upgrade's words. */
export function upgradeReport(
  r: RunReport,
  plan: UpgradePlan,
  extra: { readonly releaseWritten: boolean; readonly failures?: readonly RunFailure[] },
): UpgradeReport {
  const kindOf = new Map(plan.phases.map((p) => [p.id, p.kind]));
  const failures = [...r.failures, ...(extra.failures ?? [])];
  const failedPhase = r.phases.find((p) => p.state === 'failed');
  const refused = r.outcome === RunOutcome.FAILED && failedPhase?.kind === 'precheck';
  const batch = r.tally.find((t) => t.group === BATCH_GROUP);
  const failedNodes = [
    ...new Set(r.leftOut.filter((x) => kindOf.get(x.phase) === 'batches').map((x) => x.node)),
  ].sort();
  const outcome = extra.failures?.length ? RunOutcome.FAILED : r.outcome;
  return {
    ok: outcome === RunOutcome.DONE,
    outcome,
    run: r.run,
    target: plan.to.release,
    ms: r.ms,
    phases: r.phases.map((p) => ({ id: p.id, title: p.title, state: p.state, ms: p.ms })),
    ...(r.pause ? { pause: r.pause } : {}),
    failures,
    notSwapped: r.leftOut.filter((x) => kindOf.get(x.phase) === 'batches'),
    backups: r.backups,
    ...(batch && failedNodes.length
      ? {
          budget: {
            failedNodes,
            batchNodes: batch.nodes,
            maxFailPercent: plan.options.maxFailPercent,
            exceeded: r.overBudget !== undefined,
          },
        }
      : {}),
    releaseWritten: extra.releaseWritten,
    ...(refused ? { refused: true } : {}),
  };
}

/** The end-of-run report: phase durations, the pause, failures with hints and logs, backups. */
export function formatUpgradeReport(r: UpgradeReport, command: string): string {
  let s = '\nPHASES\n';
  for (const p of r.phases) {
    if (p.state === 'not-run') continue;
    s += `  ${p.id.padEnd(40)} ${p.state.padEnd(8)} ${p.ms ? `${(p.ms / 1000).toFixed(1)} s` : ''}\n`;
  }
  for (const f of r.failures) {
    s += `FAILED ${f.phase} ${f.action} ${f.subject} [${f.class}]: ${f.code}: ${f.message}\n`;
    if (f.hint) s += `  hint: ${f.hint}\n`;
    if (f.log) s += `  last log lines:\n${f.log.replace(/^/gm, '    | ')}\n`;
  }
  for (const n of r.notSwapped) s += `not upgraded: ${n.node} (${n.phase}): ${n.reason}\n`;
  if (r.budget) {
    s +=
      `failure budget: ${r.budget.failedNodes.length}/${r.budget.batchNodes} batch node(s) failed ` +
      `(${r.budget.failedNodes.join(', ')}), allowed ${r.budget.maxFailPercent}%: ` +
      `${r.budget.exceeded ? 'exceeded, the remaining batches were not run' : 'within budget'}\n`;
  }
  for (const b of r.backups) s += `backup: ${b}\n`;
  const took = `${(r.ms / 1000).toFixed(1)} s; run ${r.run}`;
  if (r.outcome === RunOutcome.PAUSED && r.pause) {
    s += `upgrade to ${r.target} PAUSED before ${r.pause.phase}: ${r.pause.reason} (${took})\n`;
    s += `  run '${command} --continue' to go on\n`;
  } else if (r.outcome === RunOutcome.FAILED && r.refused) {
    s += `upgrade to ${r.target} REFUSED by the prechecks, nothing was changed (${took})\n  fix the cause above, then run the upgrade again\n`;
  } else if (r.outcome === RunOutcome.FAILED) {
    s += `upgrade to ${r.target} FAILED (${took})\n  fix the cause above, then run '${command} --resume'\n`;
  } else {
    s += `upgrade to ${r.target} done in ${took}; cloud.release is now ${r.target}\n`;
  }
  return s;
}
