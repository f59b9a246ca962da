import type { Command } from 'commander';
import { UsageError } from '../core/errors.js';
import { loadIpamState, release, saveIpamState } from '../inventory/ipam.js';
import { loadAll } from './context.js';
import { out, table } from './output.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { withRunLock } from './run-lock.js';

/** `stackctl ipam show|release`: persisted address allocations. */
export function registerIpam(program: Command): void {
  const ipam = program.command('ipam').description('persisted address allocations (<inventory>.ipam.json)');
  inventoryOptions(ipam.command('show'))
    .description('list every allocation, including nodes no longer in the inventory')
    .option('--json', 'machine-readable output')
    .action((opts: CommonOpts & { json?: boolean }) => {
      const all = loadAll(opts);
      const state = all.allocation.state;
      if (opts.json) {
        out(JSON.stringify(state, null, 2) + '\n');
        return;
      }
      const names = new Set(all.loaded.inventory.nodes.map((n) => n.name));
      const rows = Object.entries(state.networks)
        .sort(([a], [b]) => a.localeCompare(b))
        .flatMap(([net, rec]) =>
          Object.entries(rec).map(([node, ip]) => [
            net,
            node,
            ip,
            names.has(node) ? '' : 'removed: reserved until released',
          ]),
        );
      out(table(['NETWORK', 'NODE', 'ADDRESS', 'NOTE'], rows));
      if (!all.allocation.changed) return;
      out('\n(some allocations above are new and not yet saved; `stackctl plan` saves them)\n');
    });
  inventoryOptions(ipam.command('release'))
    .description('free the addresses of a node that was removed from the inventory')
    .argument('<node>', 'node name')
    .option('--network <name>', 'only on this network')
    .action((node: string, opts: CommonOpts & { network?: string }) =>
      withRunLock(opts.inventory, () => releaseNode(node, opts)),
    );
}

/** `ipam release`: the state file is read, changed and written under the run lock. */
function releaseNode(node: string, opts: CommonOpts & { network?: string }): void {
  const all = loadAll(opts);
  const inInventory = all.loaded.inventory.nodes.some((n) => n.name === node);
  if (inInventory && !opts.network) {
    throw new UsageError('E_NODE_IN_INVENTORY', `node '${node}' is still in ${opts.inventory}`, {
      hint: 'Remove it from the inventory first, or give --network to renumber it on one network.',
    });
  }
  const { state, freed } = release(loadIpamState(all.ipamFile), node, opts.network);
  if (!freed.length) {
    out(`node '${node}' holds no saved address${opts.network ? ` on ${opts.network}` : ''}\n`);
    return;
  }
  saveIpamState(all.ipamFile, state);
  out(`freed for '${node}': ${freed.join(', ')}\n`);
}
