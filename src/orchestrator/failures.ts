/**
 * Failure classes and the failure budget (CONVENTIONS.md 11): every failed
 * piece of work says whether a re-run will retry it, whether what it did was
 * rolled back, or whether it failed hard and left something to look at.
 */
import { StackctlError, messageOf } from '../core/errors.js';

/** How a failure ended. */
export const FailureClass = {
  /** Nothing on the node changed; `deploy --resume` (or a plain re-run) retries it. */
  RETRYABLE: 'retryable',
  /** The work had changed something and undid it (e.g. removed a container it had just created). */
  ROLLED_BACK: 'rolled-back',
  /** The work tried to undo its change and that failed too: look at the node. */
  ROLLBACK_FAILED: 'rollback-failed',
  /** Left as it is for inspection (an unhealthy container keeps running with its log). */
  HARD: 'hard',
} as const;
export type FailureClass = (typeof FailureClass)[keyof typeof FailureClass];

/** The order the summary lists classes in. */
export const FAILURE_CLASSES: readonly FailureClass[] = Object.values(FailureClass);

/** One failed piece of work. */
export interface Failure {
  readonly step: number;
  readonly node: string;
  /** Task path, e.g. `step 2/ctl-0/memcached/health`. */
  readonly path: string;
  readonly class: FailureClass;
  readonly code: string;
  readonly message: string;
  readonly hint?: string;
  /** The last lines of the container's log, when a container failed. */
  readonly log?: string;
}

/** A Failure from a thrown value. */
export function failureOf(
  err: unknown,
  where: { step: number; node: string; path: string },
  cls: FailureClass,
  log?: string,
): Failure {
  const e = err instanceof StackctlError ? err : undefined;
  return {
    ...where,
    class: cls,
    code: e?.code ?? 'E_INTERNAL',
    message: messageOf(err),
    ...(e?.hint ? { hint: e.hint } : {}),
    ...(log !== undefined ? { log } : {}),
  };
}

/** Failures counted by class, every class present. */
export function countByClass(failures: readonly Failure[]): Record<FailureClass, number> {
  const out = Object.fromEntries(FAILURE_CLASSES.map((c) => [c, 0])) as Record<FailureClass, number>;
  for (const f of failures) out[f.class]++;
  return out;
}

/** A role's nodes in a step and how many of them failed. */
export interface RoleTally {
  readonly role: string;
  readonly nodes: number;
  readonly failed: number;
}

/**
 * True when the failed share of a role's nodes *exceeds* the budget (a
 * percentage, 0-100). At the default of 0 % one failure aborts; a budget of
 * 50 % tolerates one failure in two nodes but not two in three. Integer
 * arithmetic, so 1 of 3 against 33.3 % cannot flip on rounding.
 */
export function exceedsBudget(t: RoleTally, budgetPercent: number): boolean {
  if (t.failed === 0) return false;
  return t.failed * 100 > budgetPercent * t.nodes;
}

/** Roles whose failures exceed the budget. */
export function rolesOverBudget(tallies: readonly RoleTally[], budgetPercent: number): RoleTally[] {
  return tallies.filter((t) => exceedsBudget(t, budgetPercent));
}

/** Tally failed nodes per role. */
export function tallyRoles(
  nodes: readonly { readonly node: string; readonly role: string }[],
  failedNodes: ReadonlySet<string>,
): RoleTally[] {
  const by = new Map<string, { nodes: number; failed: number }>();
  for (const n of nodes) {
    const t = by.get(n.role) ?? { nodes: 0, failed: 0 };
    t.nodes++;
    if (failedNodes.has(n.node)) t.failed++;
    by.set(n.role, t);
  }
  return [...by].map(([role, t]) => ({ role, ...t })).sort((a, b) => a.role.localeCompare(b.role));
}
