import type { Command } from 'commander';
import { RANGE, numberOption } from './numbers.js';

/** Options of every command that reads an inventory. */
export interface CommonOpts {
  inventory: string;
  secrets?: string;
  roles?: string;
  releases?: string;
}

/** Add -i/--inventory, --secrets, --roles and --releases to a command. */
export function inventoryOptions(cmd: Command): Command {
  return cmd
    .requiredOption('-i, --inventory <file>', 'inventory YAML file')
    .option('--secrets <file>', 'secrets file (default: <inventory>.secrets.yaml next to the inventory)')
    .option('--roles <dir>', 'roles folder (default: the roles shipped with stackctl)')
    .option('--releases <dir>', 'release manifests folder (default: images/releases shipped with stackctl)');
}

/**
 * Add the inventory options and the node selection (--node, --role, --all;
 * src/cli/targets.ts selectNodes), --concurrency with its default, and --json.
 */
export function selectionOptions(cmd: Command, concurrency: number, handled = 'nodes handled at once'): Command {
  return inventoryOptions(cmd)
    .option('--node <name...>', 'these nodes (repeatable)')
    .option('--role <role>', 'every node of this role')
    .option('--all', 'every node of the inventory')
    .addOption(numberOption('--concurrency <n>', handled, RANGE.concurrency, concurrency))
    .option('--json', 'results as JSON on stdout');
}
