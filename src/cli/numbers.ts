/**
 * The one parser of the numbers on stackctl's command line. Every numeric
 * option of every command is declared with `numberOption` or `secondsOption`
 * and parsed when argv is, before any file is read or any node is asked: a
 * value that is not a plain whole number within the option's range is
 * refused with E_OPTION naming the option, the value and the range. Nothing
 * is rounded, no blank or sign or hexadecimal or exponent is taken, and no
 * bad value silently becomes a default.
 *
 * Durations are whole seconds everywhere (`--timeout`, `--task-timeout`,
 * `--provision-timeout`, `--ssh-timeout`), declared with `secondsOption`.
 */
import { Option } from 'commander';
import { UsageError } from '../core/errors.js';

/** The values an option accepts, both ends included. */
export interface Range {
  readonly min: number;
  readonly max: number;
}

/** Ranges several commands share, named once. */
export const RANGE = {
  /** Nodes, BMCs or workers handled at once. */
  concurrency: { min: 1, max: 256 },
  /** A TCP port to connect to. */
  port: { min: 1, max: 65535 },
  /** A TCP port to listen on: 0 lets the system pick a free one. */
  listenPort: { min: 0, max: 65535 },
  /** A share of nodes. */
  percent: { min: 0, max: 100 },
  /** Longest wait for one node, one task or one answer: a second to a day. */
  seconds: { min: 1, max: 86_400 },
} as const satisfies Record<string, Range>;

/** Digits only: no sign, blank, decimal point, exponent or radix prefix. */
const WHOLE = /^\d{1,15}$/;

/**
 * Parse `text`, the value given to `flag`, as a whole number within `range`;
 * throws UsageError E_OPTION (exit status 2) naming both and the range.
 */
export function parseWholeNumber(
  flag: string,
  text: string,
  range: Range,
  o: { readonly unit?: string; readonly example?: number } = {},
): number {
  const n = WHOLE.test(text) ? Number(text) : NaN;
  if (Number.isSafeInteger(n) && n >= range.min && n <= range.max) return n;
  const what = o.unit ? `a whole number of ${o.unit}` : 'a whole number';
  throw new UsageError('E_OPTION', `${flag} must be ${what} from ${range.min} to ${range.max}, not '${text}'`, {
    hint: `For example ${flag} ${o.example ?? Math.min(Math.max(range.min, 1), range.max)}.`,
    details: { option: flag, value: text, min: range.min, max: range.max },
  });
}

/** The help text of a ranged option: its description, then the range (and unit). */
const described = (description: string, range: Range, unit: string): string =>
  `${description} (${unit ? `${unit}, ` : ''}${range.min}-${range.max})`;

/**
 * A commander option taking a whole number within `range` (`flags` as for
 * `.option()`, e.g. `--concurrency <n>`); the parsed value is a number, and
 * so is `def`, the default.
 */
export function numberOption(flags: string, description: string, range: Range, def?: number): Option {
  const o = new Option(flags, described(description, range, ''));
  o.argParser((text: string) => parseWholeNumber(o.long ?? flags, text, range, { example: def }));
  return def === undefined ? o : o.default(def);
}

/**
 * A duration option in whole seconds: `secondsOption('--timeout', ...)` is
 * `--timeout <seconds>`, its help text says "seconds" and the range, and the
 * parsed value is a number of seconds.
 */
export function secondsOption(flag: string, description: string, range: Range = RANGE.seconds, def?: number): Option {
  const o = new Option(`${flag} <seconds>`, described(description, range, 'seconds'));
  o.argParser((text: string) => parseWholeNumber(flag, text, range, { unit: 'seconds', example: def }));
  return def === undefined ? o : o.default(def);
}
