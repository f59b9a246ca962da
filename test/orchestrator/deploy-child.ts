/**
 * `stackctl deploy` in a process of its own, so a test can kill it with
 * SIGKILL mid-run: `vite-node test/orchestrator/deploy-child.ts -- -i INV ...`.
 */
import { Command } from 'commander';
import { registerDeploy } from '../../src/cli/deploy.js';
import { reportError } from '../../src/cli/main.js';

const program = new Command('stackctl').exitOverride();
registerDeploy(program);
const args = process.argv.slice(2).filter((a) => a !== '--');
program.parseAsync(['node', 'stackctl', 'deploy', ...args]).then(
  () => process.exit(process.exitCode ?? 0),
  (err: unknown) => process.exit(reportError(err, false)),
);
