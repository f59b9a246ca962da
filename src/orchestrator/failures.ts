/**
 * Failure classes (CONVENTIONS.md 11): every failed
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

/** A role's nodes in a deploy and how many of them failed (the budget's verdict, in a report). */
export interface RoleTally {
  readonly role: string;
  readonly nodes: number;
  readonly failed: number;
}
