/**
 * `stackctl upgrade` in a process of its own, so a test can kill it with
 * SIGKILL mid-run: `vite-node test/upgrade/upgrade-child.ts -- -i INV --to R ...`.
 */
import { Command } from 'commander';
import { reportError } from '../../src/cli/main.js';
import { registerUpgrade } from '../../src/cli/upgrade.js';

const program = new Command('stackctl').exitOverride();
registerUpgrade(program);
const args = process.argv.slice(2).filter((a) => a !== '--');
program.parseAsync(['node', 'stackctl', 'upgrade', ...args]).then(
  () => process.exit(process.exitCode ?? 0),
  (err: unknown) => process.exit(reportError(err, false)),
);
