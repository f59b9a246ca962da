import type { Command } from 'commander';

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
