/**
 * POSIX shell quoting for commands sent to a node. Every argv element is
 * wrapped in single quotes (inside which the shell interprets nothing), with
 * embedded single quotes written as `'\''`. Values are never concatenated raw
 * into a command line (DESIGN.md 5).
 */

/** Characters that never need quoting; keeps logged commands readable. */
const SAFE_WORD = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** Quote one word so that a POSIX shell reads it back byte for byte. */
export function shellQuote(word: string): string {
  if (word.includes('\0')) {
    // A NUL cannot be passed through argv at all; refusing beats silently truncating.
    throw new TypeError('a shell argument cannot contain a NUL byte');
  }
  if (word !== '' && SAFE_WORD.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/** Quote every element of an argv and join them with spaces. */
export function shellJoin(argv: readonly string[]): string {
  if (argv.length === 0) throw new TypeError('an empty argv is not a command');
  return argv.map(shellQuote).join(' ');
}

/** True when `name` is usable as a shell variable name (for environment passing). */
export function isEnvName(name: string): boolean {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(name);
}
