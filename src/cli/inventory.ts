import type { Command } from 'commander';
import { StackctlError, ValidationFailed, type Issue } from '../core/errors.js';
import { createDriver } from '../bmc/registry.js';
import { loadAll, type Loaded } from './context.js';
import { bmcTargets } from './targets.js';
import { out, printIssues } from './output.js';
import { inventoryOptions, type CommonOpts } from './options.js';

/** `stackctl inventory validate`: schema and semantic checks, every fault at once; writes nothing. */
export function registerInventory(program: Command): void {
  const inv = program.command('inventory').description('inventory checks');
  inventoryOptions(inv.command('validate'))
    .description('check an inventory (schema, semantics, IPAM) and report every fault at once; writes nothing')
    .option('--json', 'machine-readable result on stdout')
    .action(async (opts: CommonOpts & { json?: boolean }) => {
      try {
        const loaded = loadAll(opts);
        const driverIssues = [...checkDrivers(loaded), ...(await operatorTlsIssues(loaded))];
        if (driverIssues.length) throw new ValidationFailed(opts.inventory, [...driverIssues, ...loaded.warnings]);
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

/**
 * The faults of the operator's TLS files. The X.509 library they need takes a noticeable share of a
 * run's start-up, so it is loaded only for an inventory that has a `tls:` section (without one
 * there is nothing to check).
 */
async function operatorTlsIssues(all: Loaded): Promise<Issue[]> {
  if (!all.loaded.inventory.tls) return [];
  const { tlsIssues } = await import('./certs.js');
  return tlsIssues(all);
}

/**
 * Each node's BMC driver checks its own needs offline (CONVENTIONS.md 3): an
 * IPMI password longer than 20 bytes fails here, before any BMC is touched.
 * Needs the secrets file; without it there are no credentials to check.
 */
function checkDrivers(all: Loaded): Issue[] {
  if (!all.secrets) return [];
  const names = all.loaded.inventory.nodes.map((n) => n.name);
  const issues: Issue[] = [];
  bmcTargets(all, names).forEach((target, i) => {
    try {
      createDriver(target).validate();
    } catch (e) {
      if (!(e instanceof StackctlError)) throw e;
      issues.push({
        severity: 'error',
        code: e.code,
        message: e.message,
        ...(e.hint ? { hint: e.hint } : {}),
        location: all.loaded.source.locate(['nodes', i, 'bmc']),
      });
    }
  });
  return issues;
}
