import { formatIssue, type Issue } from '../core/errors.js';

/** Print warnings (or any issues) to stderr, one per finding. */
export function printIssues(issues: readonly Issue[]): void {
  for (const i of issues) process.stderr.write(formatIssue(i) + '\n');
}

/** A plain text table: columns padded to the widest cell. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  // a loop, not Math.max(...rows): a 10,000-node plan has 30,000 container rows, too many arguments
  // to spread safely, and spreading them once per column was a visible share of printing the plan
  const widths = header.map((h) => h.length);
  for (const r of rows)
    for (let i = 0; i < widths.length; i++) {
      const len = (r[i] ?? '').length;
      if (len > widths[i]!) widths[i] = len;
    }
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
