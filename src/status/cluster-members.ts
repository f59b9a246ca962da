import { Severity, ViewState, type Finding } from './model.js';

/** Records a member's problem as an unhealthy finding on the cluster. */
export type Bad = (node: string, message: string) => void;

/**
 * The findings on a cluster's members and the state of its view: a member that could not be asked
 * is unhealthy, each one that answered is judged by `judge`, and `whole` judges them together.
 */
export function judgeMembers<M extends { readonly node: string; readonly error?: string }>(
  members: readonly M[],
  judge: (m: M, bad: Bad) => void,
  whole?: (bad: Bad) => void,
): { findings: Finding[]; state: ViewState } {
  const findings: Finding[] = [];
  const bad: Bad = (node, message) =>
    void findings.push({ severity: Severity.UNHEALTHY, node, subject: 'cluster', message });
  for (const m of members) {
    if (m.error !== undefined) bad(m.node, `not queried: ${m.error}`);
    else judge(m, bad);
  }
  whole?.(bad);
  const answered = members.some((m) => m.error === undefined);
  const state = !answered ? ViewState.UNKNOWN : findings.length ? ViewState.PROBLEM : ViewState.OK;
  return { findings, state };
}
