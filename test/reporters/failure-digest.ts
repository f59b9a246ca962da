/**
 * A short digest of every failure, printed after vitest's own summary: each failed test (or hook)
 * with the first and last lines of its error. A CI log is often read from its end only, and a
 * single lab failure prints hundreds of lines (a status report, a container log), which push the
 * earlier failures out of sight; the digest keeps all of them in the last screen.
 */
import type { Reporter, SerializedError, TestModule, Vitest } from 'vitest/node';

/** Lines kept from the start and from the end of one error. */
const HEAD = 8;
const TAIL = 16;
/** Failures shown in full; the rest are named only. */
const SHOWN = 6;

// eslint-disable-next-line no-control-regex
const plain = (s: string): string => s.replace(/\u001b\[[0-9;]*m/g, '');

/** The first HEAD and last TAIL lines of an error's message, with how many were left out. */
export function clip(message: string): string[] {
  const lines = plain(message).trimEnd().split('\n');
  if (lines.length <= HEAD + TAIL + 1) return lines;
  return [...lines.slice(0, HEAD), `… ${lines.length - HEAD - TAIL} lines left out …`, ...lines.slice(-TAIL)];
}

interface Failure {
  readonly where: string;
  readonly errors: readonly SerializedError[];
}

function failures(modules: ReadonlyArray<TestModule>, root: string): Failure[] {
  const out: Failure[] = [];
  for (const m of modules) {
    const file = m.moduleId.startsWith(`${root}/`) ? m.moduleId.slice(root.length + 1) : m.moduleId;
    if (m.errors().length) out.push({ where: `${file} (file or hook)`, errors: m.errors() });
    for (const s of m.children.allSuites())
      if (s.errors().length) out.push({ where: `${file} › ${s.fullName} (hook)`, errors: s.errors() });
    for (const t of m.children.allTests('failed'))
      out.push({ where: `${file} › ${t.fullName}`, errors: t.result().errors ?? [] });
  }
  return out;
}

/** The digest's lines (none when nothing failed). */
export function digest(list: readonly Failure[], unhandled: readonly SerializedError[] = []): string[] {
  const all = [...list, ...(unhandled.length ? [{ where: 'unhandled errors', errors: unhandled }] : [])];
  if (!all.length) return [];
  const out = ['', `== failure digest: ${all.length} failure(s), each clipped ==`];
  all.forEach((f, i) => {
    out.push('', `-- ${i + 1}. ${f.where}`);
    if (i >= SHOWN) return;
    for (const e of f.errors) out.push(...clip(`${e.name ?? 'Error'}: ${e.message}`).map((l) => `   ${l}`));
  });
  return out;
}

export default class FailureDigest implements Reporter {
  private root = process.cwd();
  private lines: string[] = [];

  onInit(vitest: Vitest): void {
    this.root = vitest.config.root;
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>, unhandled: ReadonlyArray<SerializedError>): void {
    this.lines = digest(failures(modules, this.root), unhandled);
  }

  /** Vitest's own reporter prints its summary here, after every onTestRunEnd: the digest follows it. */
  onFinished(): void {
    if (this.lines.length) process.stdout.write(`${this.lines.join('\n')}\n`);
  }
}
