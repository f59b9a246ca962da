import { Command, CommanderError } from 'commander';
import { ExitCode, StackctlError, ValidationFailed, formatIssue } from '../core/errors.js';
import { registerCerts } from './certs.js';
import { registerInventory } from './inventory.js';
import { registerDeploy } from './deploy.js';
import { registerImages } from './images.js';
import { registerIpam } from './ipam.js';
import { registerLab } from './lab.js';
import { registerLabUp } from './lab-up.js';
import { registerNodes } from './nodes.js';
import { registerOpenrc } from './openrc.js';
import { registerPlan } from './plan.js';
import { registerPxe } from './pxe.js';
import { registerRamdisk } from './ramdisk.js';
import { registerRecover } from './recover.js';
import { registerSchema } from './schema.js';
import { registerSecrets } from './secrets.js';
import { registerStatus } from './status.js';
import { registerTempest } from './tempest.js';
import { registerUpgrade } from './upgrade.js';
import { recordCommandLine } from './run-lock.js';

/** Build the command tree; exported for tests. */
export function buildProgram(): Command {
  const program = new Command('stackctl')
    .description('Install and upgrade OpenStack on bare metal')
    .version('0.1.0')
    .option('--debug', 'print stack traces of errors')
    .exitOverride()
    .showHelpAfterError();
  registerInventory(program);
  registerSecrets(program);
  registerCerts(program);
  registerPlan(program);
  registerIpam(program);
  registerSchema(program);
  registerNodes(program);
  registerRamdisk(registerImages(program));
  registerDeploy(program);
  registerRecover(program);
  registerUpgrade(program);
  registerOpenrc(program);
  registerStatus(program);
  registerTempest(program);
  registerPxe(program);
  registerLabUp(registerLab(program));
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
  const program = buildProgram();
  recordCommandLine(argv.slice(2));
  try {
    await program.parseAsync(argv as string[]);
    return typeof process.exitCode === 'number' ? process.exitCode : ExitCode.OK;
  } catch (err) {
    return reportError(err, argv.includes('--debug'));
  }
}
