import type { Command } from 'commander';
import { isLoopbackHost, parseBmcAddress } from '../core/bmc-address.js';
import { generateSecrets } from '../inventory/secrets.js';
import { secretSpecs } from '../roles/catalog.js';
import { loadAll } from './context.js';
import { out, printIssues } from './output.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { withRunLock } from './run-lock.js';

/** `stackctl secrets generate`: create every missing service secret; never overwrite, never print a value. */
export function registerSecrets(program: Command): void {
  const sec = program.command('secrets').description('service passwords, keys and BMC credentials');
  inventoryOptions(sec.command('generate'))
    .description('create the secrets file (mode 0600) or add what it lacks; existing values are never changed')
    .action((opts: CommonOpts) => withRunLock(opts.inventory, () => generate(opts)));
}

/** Create or complete the secrets file (under the run lock: it is read, completed and written). */
function generate(opts: CommonOpts): void {
  const all = loadAll(opts);
  printIssues(all.warnings.filter((w) => w.code !== 'W_NO_SECRETS'));
  const inv = all.loaded.inventory;
  const used = new Set(inv.nodes.flatMap((n) => all.catalog.roles.get(n.role)!.services));
  const bmcRefs = new Map<string, { lab: boolean; nodes: string[] }>();
  for (const n of inv.nodes) {
    const lab = isLoopbackHost(parseBmcAddress(n.bmc.address).host);
    const ref = bmcRefs.get(n.bmc.credentials) ?? { lab: true, nodes: [] };
    ref.lab &&= lab;
    ref.nodes.push(n.name);
    bmcRefs.set(n.bmc.credentials, ref);
  }
  const report = generateSecrets(all.secretsFile, secretSpecs(all.catalog, used), bmcRefs);
  const verb = report.created ? 'created' : report.added.length ? 'updated' : 'unchanged';
  out(`${report.file}: ${verb}; ${report.added.length} secret(s) added, ${report.kept} kept\n`);
  for (const name of report.added) out(`  + ${name}\n`);
}
