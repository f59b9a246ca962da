/**
 * One run at a time per inventory: the commands that change nodes or state
 * files run their work inside `withRunLock` (docs/cli.md, "One run at a
 * time", lists them and says why the others do not). The lock is the file
 * `<inventory>.lock` next to the inventory (src/core/lock.ts); it is given up
 * when the work ends, when it throws, on SIGINT/SIGTERM, and at any other
 * exit of the process; after a SIGKILL the next run takes it over.
 */
import { constants } from 'node:os';
import { resolve } from 'node:path';
import { formatIssue } from '../core/errors.js';
import { JsonLinesLog, eventsFileFor, formatEvent, type StackctlEvent } from '../core/events.js';
import { regularFile } from '../core/fs.js';
import { FileRunLock, type RunLock } from '../core/lock.js';

/** `site.yaml` -> `site.lock`: the run lock of an inventory. */
export function lockFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.lock';
}

let commandArgs: readonly string[] | undefined;

/** Remember the arguments of this run (main() does), for the holder's command line. */
export function recordCommandLine(args: readonly string[]): void {
  commandArgs = args;
}

/** Options whose value is masked in a recorded command line. */
const SECRET_OPTION = /pass|token|credential|api-?key/i;

/** Shell-quote an argument that needs it (`*` is left bare: it stands for a masked value). */
const quote = (a: string): string => (/^[\w@%+=:,./*-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);

/**
 * `stackctl ARGS` as a holder's command line: values of options named like
 * secrets and the passwords of URLs are masked (stackctl takes no secret on
 * its command line, but a lock file is readable by others), shell-quoted,
 * at most 400 characters.
 */
export function safeCommandLine(args: readonly string[]): string {
  const shown: string[] = [];
  let maskNext = false;
  for (const a of args) {
    if (maskNext) {
      shown.push('***');
      maskNext = false;
      continue;
    }
    const option = /^(--?[^=\s]+)(=.*)?$/.exec(a);
    if (option && SECRET_OPTION.test(option[1]!)) {
      if (option[2] === undefined) maskNext = true;
      shown.push(option[2] === undefined ? a : `${option[1]}=***`);
      continue;
    }
    shown.push(a.replace(/([a-z][\w+.-]*:\/\/)[^/@\s]*@/gi, '$1***@'));
  }
  const text = ['stackctl', ...shown.map(quote)].join(' ');
  return text.length > 400 ? text.slice(0, 399) + '…' : text;
}

/** Options of withRunLock; side effects are injectable (CONVENTIONS.md 8). */
export interface RunLockOptions {
  /** The command creates the inventory (lab up) or works without it (lab down): it need not exist. */
  readonly creates?: boolean;
  /** The lock of an inventory (default: the lock file next to it). */
  readonly lock?: (lockFile: string, label: string) => RunLock;
  /** Where the takeover warning goes (default: stderr). */
  readonly warn?: (line: string) => void;
}

/**
 * Run `work` holding the run lock of `inventory` (the path as the operator
 * gave it). Refuses at once with LockHeld (E_LOCKED, exit status 11) when a
 * live run holds it; takes over a dead run's lock with a warning line and a
 * `lock.taken-over` event in the inventory's event log.
 */
export async function withRunLock<T>(
  inventory: string,
  work: () => Promise<T> | T,
  o: RunLockOptions = {},
): Promise<T> {
  const inventoryFile = resolve(inventory);
  // a missing inventory, a FIFO or a device is refused before a lock file is made for it
  if (!o.creates) regularFile(inventoryFile);
  const lockFile = lockFileFor(inventoryFile);
  const lock = (o.lock ?? ((file, label) => new FileRunLock(file, label)))(lockFile, inventory);

  // The handlers are in place before the lock file is made: a signal that comes as soon as the file
  // exists finds them (without one, Node would end the process at once and leave the file behind).
  let held = false;
  const releaseAtExit = (): void => {
    if (!held) return;
    try {
      lock.releaseSync?.();
    } catch {
      // exiting anyway: the next run takes a lock left here over
    }
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    // Alone, this listener would keep the process alive: do what the signal does without one (end it,
    // releasing on the way out). With another listener (upgrade stops at the next safe point) the run
    // ends by itself and releases the lock in `finally`.
    if (process.listenerCount(signal) === 1) process.exit(128 + (constants.signals[signal] ?? 0));
  };
  process.on('exit', releaseAtExit);
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const grant = await lock.acquire(safeCommandLine(commandArgs ?? process.argv.slice(2)));
    held = true;
    if (grant.takenOver) {
      const { holder, reason } = grant.takenOver;
      const event: StackctlEvent = { kind: 'lock.taken-over', lock: lockFile, ...holder, reason };
      new JsonLinesLog(eventsFileFor(inventoryFile)).emit(event);
      const line = formatIssue({
        severity: 'warning',
        code: 'W_LOCK_STALE',
        message: formatEvent(event),
        location: { file: inventory },
      });
      (o.warn ?? ((l: string) => void process.stderr.write(l)))(line + '\n');
    }
    return await work();
  } finally {
    process.off('exit', releaseAtExit);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (held) await lock.release();
  }
}
