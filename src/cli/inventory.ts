import type { Command } from 'commander';
import { ValidationFailed } from '../core/errors.js';
import { loadAll } from './context.js';
import { out, printIssues } from './output.js';
import { inventoryOptions, type CommonOpts } from './options.js';

/** `stackctl inventory validate`: schema and semantic checks, every fault at once; writes nothing. */
export function registerInventory(program: Command): void {
  const inv = program.command('inventory').description('inventory checks');
  inventoryOptions(inv.command('validate'))
    .description('check an inventory (schema, semantics, IPAM) and report every fault at once; writes nothing')
    .option('--json', 'machine-readable result on stdout')
    .action((opts: CommonOpts & { json?: boolean }) => {
      try {
        const loaded = loadAll(opts);
        if (opts.json)
          out(JSON.stringify({ valid: true, file: opts.inventory, issues: loaded.warnings }, null, 2) + '\n');
        else {
          printIssues(loaded.warnings);
          const n = loaded.loaded.inventory.nodes.length;
          out(
            `${opts.inventory}: valid (${n} node${n === 1 ? '' : 's'}, ${loaded.warnings.length} warning${loaded.warnings.length === 1 ? '' : 's'})\n`,
          );
        }
      } catch (e) {
        if (opts.json && e instanceof ValidationFailed) {
          out(JSON.stringify({ valid: false, file: opts.inventory, issues: e.issues }, null, 2) + '\n');
          process.exitCode = e.exitCode;
          return;
        }
        throw e;
      }
    });
}
