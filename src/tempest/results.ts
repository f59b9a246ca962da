/**
 * The outcome of a Tempest run, read from the per-test lines `tempest run`
 * (stestr's subunit-trace) prints:
 *
 *   {0} tempest.api.identity.v3.test_tokens.TokensV3Test.test_create_token[id-…,smoke] [1.2s] ... ok
 *   {1} tempest.api.compute.x.Y.test_z[id-…] ... SKIPPED: Resize is not available.
 *   {0} setUpClass (tempest.api.compute.x.Y) ... SKIPPED: Neutron support is required
 *   {0} tempest.api.image.v2.test_images.T.test_u[id-…] [3.0s] ... FAILED
 */

/** What became of one test. */
export const TestStatus = {
  /** Ran and passed. */
  PASS: 'pass',
  /** Ran and failed (or its class failed to set up). */
  FAIL: 'fail',
  /** Not run: Tempest skipped it, with a reason. */
  SKIP: 'skip',
} as const;
export type TestStatus = (typeof TestStatus)[keyof typeof TestStatus];

/** subunit-trace's words for an outcome, mapped to ours. */
export const TRACE_STATUS: Readonly<Record<string, TestStatus>> = {
  ok: TestStatus.PASS,
  FAILED: TestStatus.FAIL,
  SKIPPED: TestStatus.SKIP,
};

/** One test's outcome. */
export interface TestResult {
  /** Test id without its attribute brackets, or `setUpClass (module.Class)`. */
  readonly id: string;
  readonly status: TestStatus;
  /** Why it was skipped. */
  readonly reason?: string;
}

/** Counts and the detail a report needs. */
export interface RunSummary {
  readonly passed: number;
  readonly failed: number;
  readonly skipped: number;
  readonly results: readonly TestResult[];
  /** Failed test ids. */
  readonly failures: readonly string[];
  /** Skipped test ids with their reasons. */
  readonly skips: readonly { id: string; reason: string }[];
}

const LINE = /^\{\d+\}\s+(.+?)(?:\s+\[[\d.]+s\])?\s+\.\.\.\s+(ok|FAILED|SKIPPED)(?::\s*(.*))?\s*$/;

/** Drop Tempest's `[id-…,smoke]` attribute suffix from a test id. */
export function bareTestId(id: string): string {
  return id.replace(/\[[^\]]*\]$/, '');
}

/** Every test outcome in a subunit-trace text, in order; other lines are ignored. */
export function parseTrace(text: string): TestResult[] {
  const out: TestResult[] = [];
  for (const raw of text.split('\n')) {
    const m = LINE.exec(raw.replace(/\r$/, ''));
    if (!m) continue;
    const [, id, word, reason] = m as unknown as [string, string, string, string | undefined];
    const status = TRACE_STATUS[word]!;
    out.push({
      id: bareTestId(id),
      status,
      ...(status === TestStatus.SKIP ? { reason: reason?.trim() || '(no reason given)' } : {}),
    });
  }
  return out;
}

/** Counts, failures and skips of parsed results. */
export function summarize(results: readonly TestResult[]): RunSummary {
  const count = (s: TestStatus) => results.filter((r) => r.status === s).length;
  return {
    passed: count(TestStatus.PASS),
    failed: count(TestStatus.FAIL),
    skipped: count(TestStatus.SKIP),
    results,
    failures: results.filter((r) => r.status === TestStatus.FAIL).map((r) => r.id),
    skips: results.filter((r) => r.status === TestStatus.SKIP).map((r) => ({ id: r.id, reason: r.reason ?? '' })),
  };
}

/** The human report: counts, then failures, then skips with reasons. */
export function formatSummary(s: RunSummary): string {
  const lines = [`tempest: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`];
  if (s.failures.length) lines.push('failed:', ...s.failures.map((id) => `  ${id}`));
  if (s.skips.length) lines.push('skipped:', ...s.skips.map((x) => `  ${x.id}: ${x.reason}`));
  return lines.join('\n') + '\n';
}
