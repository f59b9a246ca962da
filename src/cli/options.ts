import { Option, type Command } from 'commander';
import { UsageError } from '../core/errors.js';
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

/** `a, b or c`. */
const oneOf = (values: readonly string[]): string =>
  values.length > 1 ? `${values.slice(0, -1).join(', ')} or ${values.at(-1)}` : (values[0] ?? '');

/** A commander option taking one of `values`; anything else is refused with E_OPTION naming them. */
export function choiceOption(flags: string, description: string, values: readonly string[], def?: string): Option {
  const o = new Option(flags, `${description}: ${oneOf(values)}`);
  o.argParser((text: string) => {
    if (values.includes(text)) return text;
    const flag = o.long ?? flags;
    throw new UsageError('E_OPTION', `${flag} must be ${oneOf(values)}, not '${text}'`, {
      hint: `For example ${flag} ${def ?? values[0]}.`,
      details: { option: flag, value: text, allowed: values },
    });
  });
  return def === undefined ? o : o.default(def);
}

/**
 * Keep an old spelling of an option working: `oldFlags` (hidden from --help)
 * sets the value of `current`, parsed by its parser, after a warning naming
 * the new spelling. `current` must be added to `cmd` too.
 */
export function deprecatedAlias(
  cmd: Command,
  oldFlags: string,
  current: Option,
  warn: (line: string) => void = (line) => void process.stderr.write(line),
): Command {
  const alias = new Option(oldFlags, `old spelling of ${current.long}`).hideHelp();
  if (current.parseArg) alias.argParser(current.parseArg);
  cmd.addOption(alias);
  cmd.on(`option:${alias.name()}`, () => {
    const code = 'W_OPTION_DEPRECATED';
    warn(`warning ${code}: ${alias.long} is the old spelling of ${current.long}: use ${current.long}\n`);
    cmd.setOptionValueWithSource(current.attributeName(), cmd.getOptionValue(alias.attributeName()), 'cli');
  });
  return cmd;
}

/** The Keystone endpoint interfaces the plan registers that a client can be pointed at. */
export const OS_INTERFACES = ['public', 'internal'] as const;
export type OsInterface = (typeof OS_INTERFACES)[number];

/**
 * Add `--os-interface public|internal`: the endpoint interface `who` uses, as
 * the openstack client names it (OS_INTERFACE). `--interface` stays the
 * network interface of the machine (`deploy`, `nodes`, `pxe`); as a spelling
 * of this option it still works, with a warning.
 */
export function osInterfaceOption(cmd: Command, who: string): Command {
  const o = choiceOption(
    '--os-interface <interface>',
    `Keystone endpoint interface ${who} uses (OS_INTERFACE)`,
    OS_INTERFACES,
    'public',
  );
  return deprecatedAlias(cmd.addOption(o), '--interface <interface>', o);
}

/**
 * Add `--host-image <dir>`, the host OS image written to the nodes (`stackctl
 * images build host`); `--image` names a cloud image elsewhere (`tempest
 * config`), so here it is only the old spelling, kept with a warning.
 */
export function hostImageOption(cmd: Command, description: string, def: string): Command {
  const o = new Option('--host-image <dir>', description).default(def);
  return deprecatedAlias(cmd.addOption(o), '--image <dir>', o);
}

/** Add `--max-fail-percent <percent>`, a failure budget; `--failure-budget` is its old spelling. */
export function maxFailPercentOption(cmd: Command, description: string, def?: number): Command {
  const o = numberOption('--max-fail-percent <percent>', description, RANGE.percent, def);
  return deprecatedAlias(cmd.addOption(o), '--failure-budget <percent>', o);
}

/** Add `--dry-run`: show what the command would do and act on nothing; `--plan` is its old spelling. */
export function dryRunOption(cmd: Command, description: string): Command {
  const o = new Option('--dry-run', description);
  return deprecatedAlias(cmd.addOption(o), '--plan', o);
}
