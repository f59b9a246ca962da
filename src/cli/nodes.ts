import { registerMaintenance } from './maintenance.js';
import type { Command } from 'commander';
import { UsageError } from '../core/errors.js';
import { JsonLinesLog, eventsFileFor, formatEvent, type StackctlEvent } from '../core/events.js';
import type { BmcDriver, BootDevice } from '../bmc/driver.js';
import { IpmiTransport } from '../bmc/ipmi/transport.js';
import { createDriver } from '../bmc/registry.js';
import { loadAll } from './context.js';
import { selectionOptions, type CommonOpts } from './options.js';
import { fanOut, reportOutcomes, resultCell, type NodeOutcome } from './fanout.js';
import { bmcTargets, selectNodes, type SelectOptions } from './targets.js';
import { registerLifecycle } from './nodes-lifecycle.js';
import { registerProvision } from './nodes-provision.js';
import { registerTrust } from './trust.js';
import { withRunLock } from './run-lock.js';

/** Actions of `nodes power`, each a driver call that resolves to the state to report. */
const POWER_ACTIONS: Readonly<Record<string, (d: BmcDriver) => Promise<string>>> = {
  status: (d) => d.powerState(),
  on: async (d) => (await d.powerOn(), d.powerState()),
  off: async (d) => (await d.powerOff(), d.powerState()),
  'soft-off': async (d) => (await d.softOff(), d.powerState()),
  cycle: async (d) => (await d.powerCycle(), d.powerState()),
};

type NodeOpts = CommonOpts & SelectOptions & { json?: boolean; concurrency: number };

/** One node's line: its BMC address besides the outcome. */
interface NodeResult extends NodeOutcome {
  readonly address: string;
}

const withSelection = (cmd: Command): Command => selectionOptions(cmd, 32, 'BMCs handled at once');

/**
 * Run one BMC operation on every selected node (src/cli/fanout.ts): in
 * parallel under a limit, each failure reported and the others carried on.
 * Events go to `<inventory>.events.jsonl`; progress to the terminal.
 */
async function eachNode(
  opts: NodeOpts,
  command: string,
  op: (d: BmcDriver) => Promise<string>,
  event: (node: string, result: string) => StackctlEvent,
): Promise<void> {
  const all = loadAll(opts);
  const names = selectNodes(all, opts);
  const targets = bmcTargets(all, names);
  const log = new JsonLinesLog(eventsFileFor(all.inventoryFile));
  const tty = Boolean(process.stderr.isTTY) && !opts.json;
  const emit = (e: StackctlEvent): void => {
    log.emit(e);
    if (!tty && !opts.json) process.stderr.write(formatEvent(e) + '\n');
  };
  const transport = new IpmiTransport();
  const warned = new Set<string>();
  const results: NodeResult[] = targets.map((t) => ({ node: t.node, address: t.address, ok: false }));
  try {
    await fanOut(
      {
        command,
        outcomes: results,
        concurrency: opts.concurrency,
        visible: tty,
        emit,
        title: (r) => `${r.node} (${r.address})`,
      },
      async (r) => {
        const driver = createDriver(
          targets.find((t) => t.node === r.node)!,
          {
            ipmiTransport: transport,
            redfish: {
              warn: (line) => {
                if (!warned.has(line)) process.stderr.write(`warning: ${line}\n`);
                warned.add(line);
              },
            },
          },
        );
        try {
          driver.validate();
          const result = await op(driver);
          emit(event(r.node, result));
          return result;
        } finally {
          await driver.close().catch(() => undefined);
        }
      },
    );
  } finally {
    await transport.close();
  }
  reportOutcomes(results, {
    ...(opts.json ? { json: true } : {}),
    columns: [
      ['NODE', (r) => r.node],
      ['BMC', (r) => r.address],
      ['RESULT', resultCell],
    ],
  });
}

/** `stackctl nodes power|bootdev|validate|trust` (BMC operations), `enroll|inspect|provision|undeploy|list|show` (lifecycle). */
export function registerNodes(program: Command): void {
  const nodes = program.command('nodes').description('drive the nodes through their BMCs (IPMI or Redfish)');
  registerMaintenance(nodes);
  withSelection(nodes.command('power'))
    .description('power status, on, off (hard), soft-off (ACPI) or cycle')
    .argument('<action>', Object.keys(POWER_ACTIONS).join('|'))
    .action(async (action: string, opts: NodeOpts) => {
      const op = POWER_ACTIONS[action];
      if (!op) {
        throw new UsageError('E_USAGE', `unknown power action '${action}'`, {
          hint: `Use one of: ${Object.keys(POWER_ACTIONS).join(', ')}.`,
        });
      }
      const run = (): Promise<void> =>
        eachNode(opts, `power ${action}`, op, (node, state) => ({ kind: 'node.power', node, action, state }));
      // reading the power state changes nothing: it runs beside a run in progress
      await (action === 'status' ? run() : withRunLock(opts.inventory, run));
    });
  withSelection(nodes.command('bootdev'))
    .description('set the boot device: pxe or disk, for the next boot or persistently')
    .argument('<device>', 'pxe|disk')
    .option('--persistent', 'keep it for every boot (default: next boot only)')
    .option('--uefi', 'boot in UEFI mode (default: legacy BIOS)')
    .action(async (device: string, opts: NodeOpts & { persistent?: boolean; uefi?: boolean }) => {
      if (device !== 'pxe' && device !== 'disk') {
        throw new UsageError('E_USAGE', `unknown boot device '${device}'`, { hint: 'Use pxe or disk.' });
      }
      const persistent = Boolean(opts.persistent);
      const uefi = Boolean(opts.uefi);
      await withRunLock(opts.inventory, () =>
        eachNode(
          opts,
          `bootdev ${device}`,
          async (d) => {
            await d.setBootDevice(device as BootDevice, { persistent, uefi });
            const b = await d.getBootDevice();
            return `${b.device} (${b.persistent ? 'persistent' : 'next boot'}, ${b.uefi ? 'UEFI' : 'legacy'})`;
          },
          (node) => ({ kind: 'node.bootdev', node, device, persistent, uefi }),
        ),
      );
    });
  registerTrust(nodes);
  registerLifecycle(nodes);
  registerProvision(nodes);
  withSelection(nodes.command('validate'))
    .description(
      "check every selected node's BMC: address, reachability and credentials; reports each failure and goes on",
    )
    .action(async (opts: NodeOpts) => {
      await eachNode(
        opts,
        'validate',
        async (d) => {
          const id = await d.identify();
          const power = await d.powerState();
          return `${d.kind} ok, power ${power}${id.manufacturer ? `, ${id.manufacturer}` : ''}${id.model ? ` ${id.model}` : ''}`;
        },
        (node, detail) => ({ kind: 'node.validated', node, driver: detail.split(' ')[0] ?? '', detail }),
      );
    });
}
