import { Command, CommanderError } from 'commander';
import { ExitCode, StackctlError, ValidationFailed, formatIssue } from '../core/errors.js';
import { COMMANDS, commandNamed, type CommandModule } from './commands.js';
import { recordCommandLine } from './run-lock.js';

/**
 * Build the command tree; exported for tests. With `args` (argv without node and the script), only
 * the command they name is loaded and declared (src/cli/commands.ts); without, or when they name
 * none, every command.
 */
export async function buildProgram(args?: readonly string[]): Promise<Command> {
  const program = new Command('stackctl')
    .description('Install and upgrade OpenStack on bare metal')
    .version('0.1.0')
    .option('--debug', 'print stack traces of errors')
    .exitOverride()
    .showHelpAfterError();
  const named = args ? commandNamed(args) : undefined;
  const modules: readonly CommandModule[] = named ? [named] : COMMANDS;
  const registers = await Promise.all(modules.map((m) => m.load()));
  for (const register of registers) register(program);
  return program;
}

/** Print an error the way operators read it: what, where, and what to do. */
export function reportError(err: unknown, debug: boolean): number {
  if (err instanceof CommanderError) {
    return err.exitCode === 0 ? ExitCode.OK : ExitCode.USAGE;
  }
  if (err instanceof ValidationFailed) {
    for (const i of err.issues) process.stderr.write(formatIssue(i) + '\n');
    process.stderr.write(`error ${err.code}: ${err.message}\n  hint: ${err.hint}\n`);
  } else if (err instanceof StackctlError) {
    const where = StackctlError.where(err.location);
    process.stderr.write(`${where ? where + ': ' : ''}error ${err.code}: ${err.message}\n`);
    if (err.hint) process.stderr.write(`  hint: ${err.hint}\n`);
  } else {
    process.stderr.write(`internal error: ${err instanceof Error ? err.message : String(err)}\n`);
    process.stderr.write('  hint: this is a bug in stackctl; run again with --debug and report the output.\n');
  }
  if (debug && err instanceof Error && err.stack) process.stderr.write(err.stack + '\n');
  return err instanceof StackctlError ? err.exitCode : ExitCode.INTERNAL;
}

/** Run the CLI with argv; resolves to the exit status. */
export async function main(argv: readonly string[]): Promise<number> {
  recordCommandLine(argv.slice(2));
  try {
    const program = await buildProgram(argv.slice(2));
    await program.parseAsync(argv as string[]);
    return typeof process.exitCode === 'number' ? process.exitCode : ExitCode.OK;
  } catch (err) {
    return reportError(err, argv.includes('--debug'));
  }
}
