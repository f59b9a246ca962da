/**
 * The operator's word before a command does what cannot be undone: `--yes`
 * on the command line, or "y" at a prompt on a terminal. Without a terminal
 * and without `--yes` the command refuses (E_CONFIRM): a script that wipes
 * disks says so on its command line.
 */
import { createInterface } from 'node:readline/promises';
import { UsageError } from '../core/errors.js';

/** How the operator is asked; injectable for tests (CONVENTIONS.md 8). */
export interface ConfirmDeps {
  /** Asks on the terminal; resolves to true for "y" or "yes". Only called when `interactive()`. */
  readonly confirm?: (question: string) => Promise<boolean>;
  /** Whether stdin and stderr are a terminal. */
  readonly interactive?: () => boolean;
}

/** Ask on stderr, read stdin: "y" or "yes" (any case) is a yes, anything else a no. */
export async function askTerminal(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(question)).trim());
  } finally {
    rl.close();
  }
}

/** stdin and stderr are a terminal: someone can answer a prompt. */
export const onTerminal = (): boolean => Boolean(process.stdin.isTTY && process.stderr.isTTY);

/**
 * Resolve when the operator agreed to `action` (`--yes`, or "y" to
 * `question` on a terminal); throw E_CONFIRM otherwise, before anything was
 * done. `again` is the command line that would go on without asking.
 */
export async function requireConfirmation(
  o: { readonly yes?: boolean; readonly action: string; readonly question: string; readonly again: string },
  deps: ConfirmDeps = {},
): Promise<void> {
  if (o.yes) return;
  const interactive = (deps.interactive ?? onTerminal)();
  if (interactive && (await (deps.confirm ?? askTerminal)(o.question))) return;
  throw new UsageError(
    'E_CONFIRM',
    interactive ? `not confirmed: ${o.action} was not done` : `${o.action} needs --yes when no terminal can confirm it`,
    {
      hint: `Nothing was done. To go on without a prompt: ${o.again}`,
      details: { action: o.action },
    },
  );
}
