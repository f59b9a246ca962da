/**
 * The one way the per-node commands work on their nodes (`nodes power`,
 * `nodes enroll|inspect|provision|undeploy`, `nodes trust`, the nodes `deploy`
 * provisions first): in parallel under `--concurrency`, a listr2 line per node
 * on a terminal, one outcome per node in the order the nodes were given (a
 * failure is recorded and never stops the others), the `command.start`,
 * `node.failed` and `command.end` events; then the outcomes as a table or
 * JSON, the failures' hints on stderr, and the exit status from the failures.
 */
import { ExitCode, summarizeFailure, type ExitCode as Exit } from '../core/errors.js';
import type { StackctlEvent } from '../core/events.js';
import { out, table } from './output.js';
import { runWithProgress } from './progress.js';

/** What a failed node reports: code, message and hint of its error. */
export interface NodeError {
  readonly code: string;
  readonly message: string;
  readonly hint?: string;
}

/** One node's outcome; commands add their own fields (address, state, figures). */
export interface NodeOutcome {
  readonly node: string;
  ok: boolean;
  /** The work's one-line result. */
  result?: string;
  error?: NodeError;
  /** Exit status of the error (not printed with --json). */
  exit?: Exit;
  /** Wall time of the node's work. */
  ms?: number;
}

/** How a command fans out. */
export interface FanOut<O extends NodeOutcome> {
  /** The command, as events name it (`power on`, `inspect`, `deploy: provision`). */
  readonly command: string;
  /** One outcome per node, made by the command (with its own fields), in the order to report. */
  readonly outcomes: O[];
  readonly concurrency: number;
  /** Draw listr2 progress (a terminal and not --json). */
  readonly visible: boolean;
  /** Where the events go; none when the command keeps no event log. */
  readonly emit?: (e: StackctlEvent) => void;
  /** The progress line's title (default: the node's name). */
  readonly title?: (o: O) => string;
  /** Runs after each node's work, done or failed (e.g. to read the node's state). */
  readonly settle?: (o: O) => void;
}

/** The error of a failed node, as its outcome and the `node.failed` event carry it. */
export function recordFailure(o: NodeOutcome, e: unknown): NodeError {
  const { exit, ...error } = summarizeFailure(e);
  o.ok = false;
  o.error = error;
  o.exit = exit;
  return error;
}

/**
 * Run `work` for every node of `f.outcomes` under the concurrency limit; a
 * node's result is its outcome's `result`, a throw its `error`. Resolves to
 * the outcomes once every node is done; never throws for a node.
 */
export async function fanOut<O extends NodeOutcome>(
  f: FanOut<O>,
  work: (o: O, update: (status: string) => void) => Promise<string>,
): Promise<O[]> {
  f.emit?.({ kind: 'command.start', command: f.command, nodes: f.outcomes.map((o) => o.node) });
  await runWithProgress(
    f.outcomes.map((o) => ({
      title: f.title?.(o) ?? o.node,
      run: async (update) => {
        const t0 = Date.now();
        try {
          o.result = await work(o, update);
          o.ok = true;
          return o.result;
        } catch (e) {
          const error = recordFailure(o, e);
          f.emit?.({ kind: 'node.failed', node: o.node, action: f.command, code: error.code, message: error.message });
          throw e;
        } finally {
          o.ms = Date.now() - t0;
          f.settle?.(o);
        }
      },
    })),
    f.concurrency,
    f.visible,
  );
  const failed = f.outcomes.filter((o) => !o.ok).length;
  f.emit?.({ kind: 'command.end', command: f.command, ok: f.outcomes.length - failed, failed });
  return f.outcomes;
}

/** The exit status of a command's failed nodes: theirs when they share one, else REMOTE; undefined when none failed. */
export function failureExit(outcomes: readonly Pick<NodeOutcome, 'exit'>[]): Exit | undefined {
  const failed = outcomes.filter((o) => o.exit !== undefined);
  if (!failed.length) return undefined;
  const codes = new Set(failed.map((o) => o.exit));
  return codes.size === 1 ? [...codes][0]! : ExitCode.REMOTE;
}

/** Set process.exitCode from the failed nodes (left alone when none failed). */
export function setFailureExit(outcomes: readonly Pick<NodeOutcome, 'exit'>[]): void {
  const exit = failureExit(outcomes);
  if (exit !== undefined) process.exitCode = exit;
}

/** The result cell of an outcome: its result, or `FAILED CODE: message`. */
export const resultCell = (o: NodeOutcome): string =>
  o.ok ? (o.result ?? '') : `FAILED ${o.error?.code ?? 'E_INTERNAL'}: ${o.error?.message ?? ''}`;

/** The outcomes without their exit status, as `--json` prints them. */
export const outcomesJson = (outcomes: readonly NodeOutcome[]): string =>
  JSON.stringify(
    outcomes.map(({ exit: _exit, ...o }) => o),
    null,
    2,
  ) + '\n';

/**
 * Print the outcomes (JSON with --json, else a table of `columns` and each
 * failure's hint on stderr) and set the exit status from the failures.
 */
export function reportOutcomes<O extends NodeOutcome>(
  outcomes: readonly O[],
  o: { readonly json?: boolean; readonly columns: readonly (readonly [string, (o: O) => string])[] },
): void {
  if (o.json) out(outcomesJson(outcomes));
  else {
    out(
      table(
        o.columns.map(([h]) => h),
        outcomes.map((x) => o.columns.map(([, cell]) => cell(x))),
      ),
    );
    for (const x of outcomes) if (!x.ok && x.error?.hint) process.stderr.write(`${x.node}: hint: ${x.error.hint}\n`);
  }
  setFailureExit(outcomes);
}
