/**
 * From findings to the verdict and the exit status of `stackctl status`
 * (docs/cli.md, "stackctl status").
 */
import { ExitCode } from '../core/errors.js';
import { SEVERITY_ORDER, Severity, type Finding, type Verdict } from './model.js';

/** Exit status per verdict: scripts test `stackctl status` like any health check. */
export const STATUS_EXIT: Readonly<Record<Verdict, number>> = {
  /** Every node answered, everything runs healthy and as planned. */
  healthy: ExitCode.OK,
  /** Runs, but not as planned: another image tag, or a deploy would recreate or rewrite something. */
  [Severity.DRIFT]: 9,
  /** Something is down: a container stopped, missing or unhealthy, a cluster degraded, a service down. */
  [Severity.UNHEALTHY]: 8,
  /** At least one node could not be reached or queried (the others are still reported). */
  [Severity.UNREACHABLE]: ExitCode.REMOTE,
};

/** The worst severity among the findings, or healthy. */
export function verdictOf(findings: readonly Finding[]): Verdict {
  let worst = -1;
  for (const f of findings) worst = Math.max(worst, SEVERITY_ORDER.indexOf(f.severity));
  return worst < 0 ? 'healthy' : SEVERITY_ORDER[worst]!;
}
