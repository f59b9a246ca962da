import { formatIssue, type Issue } from '../core/errors.js';

/** Print warnings (or any issues) to stderr, one per finding. */
export function printIssues(issues: readonly Issue[]): void {
  for (const i of issues) process.stderr.write(formatIssue(i) + '\n');
}

/** A plain text table: columns padded to the widest cell. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}

/** Write to stdout. */
export function out(text: string): void {
  process.stdout.write(text);
}
