/**
 * `stackctl nodes enroll|inspect|list|show`: the node lifecycle (Ironic-like
 * states; the workflows are src/provision/workflows/lifecycle.ts) driven from
 * the command line. Each command works node by node in parallel under a
 * limit, shows listr2 progress on a terminal, appends JSON-lines events to
 * `<inventory>.events.jsonl`, and is re-entrant: run again after a crash, it
 * carries on from each node's persisted state.
 */
import type { Command } from 'commander';
import { resolve } from 'node:path';
import { mapLimit } from '../core/concurrency.js';
import { UsageError, summarizeFailure } from '../core/errors.js';
import {
  IntrospectionStore,
  introspectionFileFor,
  introspectionReportHandler,
  INSPECT_DEFAULTS,
} from '../provision/inspect.js';
import { ramdiskFiles } from '../provision/workflows/boot.js';
import {
  checkInspectable,
  enrollNode,
  inspectDepsOf,
  inspectNode,
  lastError,
} from '../provision/workflows/lifecycle.js';
import {
  bootNetwork,
  eachLifecycle,
  openSession,
  runBootServices,
  selectable,
  warnStaleRamdisk,
  withBootOptions,
  type BootOpts,
  type LifecycleOpts,
  type Session,
} from './nodes-session.js';
import { RANGE, numberOption } from './numbers.js';
import { inventoryOptions, selectionOptions } from './options.js';
import { out, table } from './output.js';
import { DEFAULT_RAMDISK_DIR } from './ramdisk.js';
import { selectNodes } from './targets.js';
import { withRunLock } from './run-lock.js';

type InspectOpts = BootOpts & { ramdisk?: string };

/** `nodes inspect`: boot services for the run, then the inspect workflow on each node. */
async function runInspect(opts: InspectOpts): Promise<void> {
  const timeoutMs = opts.timeout * 1000;
  const s = openSession(opts, false);
  try {
    const names = selectNodes(s.all, opts);
    for (const n of names) checkInspectable(s.store.get(n));
    const net = bootNetwork(s, opts);
    const ramdiskDir = resolve(opts.ramdisk ?? DEFAULT_RAMDISK_DIR);
    const files = ramdiskFiles(ramdiskDir);
    warnStaleRamdisk(ramdiskDir);
    const introspection = IntrospectionStore.open(introspectionFileFor(s.all.inventoryFile));
    const services = await runBootServices(s, opts, net, files, introspectionReportHandler(introspection));
    const deps = inspectDepsOf(s, services, introspection, timeoutMs);
    try {
      await eachLifecycle(s, opts, 'inspect', names, (node, update) =>
        inspectNode(s, deps, services, node, update, 'operator: nodes inspect'),
      );
    } finally {
      await services.close();
    }
  } finally {
    await s.close();
  }
}

/** Power of each node through its BMC; a failure reads `error: CODE`. */
async function powers(s: Session, names: readonly string[], concurrency: number): Promise<Map<string, string>> {
  const states = await mapLimit(names, concurrency, (n) =>
    s
      .driver(n)
      .powerState()
      .catch((e: unknown) => `error: ${summarizeFailure(e).code}`),
  );
  return new Map(names.map((n, i) => [n, states[i]!]));
}

type ListOpts = LifecycleOpts & { power: boolean };

async function runList(opts: ListOpts): Promise<void> {
  const s = openSession(opts, true);
  try {
    const any = Boolean(opts.node?.length || opts.role || opts.all);
    const names = any ? selectNodes(s.all, opts) : selectable(s.all);
    const power = opts.power && s.all.secrets ? await powers(s, names, opts.concurrency) : undefined;
    const introspection = IntrospectionStore.open(introspectionFileFor(s.all.inventoryFile));
    const rows = names.map((name) => {
      const n = s.all.loaded.inventory.nodes.find((x) => x.name === name)!;
      const rec = s.store.get(name);
      return {
        node: name,
        role: n.role,
        state: rec.state,
        power: power?.get(name) ?? 'unknown',
        lastError: lastError(rec),
        since: rec.history.at(-1)?.time ?? '',
        inspected: introspection.get(name)?.receivedAt ?? null,
      };
    });
    if (opts.json) out(JSON.stringify(rows, null, 2) + '\n');
    else
      out(
        table(
          ['NODE', 'ROLE', 'STATE', 'POWER', 'SINCE', 'LAST ERROR'],
          rows.map((r) => [r.node, r.role, r.state, r.power, r.since || '-', r.lastError || '-']),
        ),
      );
  } finally {
    await s.close();
  }
}

async function runShow(name: string, opts: LifecycleOpts): Promise<void> {
  const s = openSession(opts, true);
  try {
    const n = s.all.loaded.inventory.nodes.find((x) => x.name === name);
    if (!n) {
      throw new UsageError('E_UNKNOWN_NODE', `no node named '${name}' in the inventory`, {
        hint: `Nodes: ${selectable(s.all).join(', ')}.`,
      });
    }
    const rec = s.store.get(name);
    const intro = IntrospectionStore.open(introspectionFileFor(s.all.inventoryFile)).get(name);
    if (opts.json) {
      out(
        JSON.stringify(
          {
            node: name,
            role: n.role,
            bmc: n.bmc.address,
            nics: n.nics,
            state: rec.state,
            lastError: lastError(rec) || null,
            history: rec.history,
            introspection: intro ?? null,
          },
          null,
          2,
        ) + '\n',
      );
      return;
    }
    const lines = [
      `node:   ${name} (${n.role})`,
      `bmc:    ${n.bmc.address}`,
      `nics:   ${n.nics.map((x) => `${x.mac} on ${x.network}`).join(', ')}`,
      `state:  ${rec.state}${lastError(rec) ? ` (last error: ${lastError(rec)})` : ''}`,
      '',
    ];
    out(lines.join('\n'));
    if (intro) {
      const d = intro.data;
      out(`introspection (received ${intro.receivedAt}):\n`);
      out(`  cpu:     ${d.cpu.count} x ${d.cpu.arch}${d.cpu.model ? ` (${d.cpu.model})` : ''}\n`);
      out(`  memory:  ${d.memory_mib} MiB\n`);
      if (d.system)
        out(`  system:  ${[d.system.vendor, d.system.product, d.system.serial].filter(Boolean).join(' ')}\n`);
      if (d.boot_mode) out(`  boot:    ${d.boot_mode}\n`);
      out(
        table(
          ['  DISK', 'SIZE', 'SERIAL', 'MODEL', 'ROTATIONAL'],
          d.disks.map((x) => [
            `  ${x.name}`,
            String(x.size_bytes),
            x.serial ?? '-',
            x.model ?? '-',
            x.rotational === undefined ? '-' : String(x.rotational),
          ]),
        ),
      );
      out(
        table(
          ['  NIC', 'MAC', 'IPV4', 'LINK'],
          d.interfaces.map((x) => [`  ${x.name}`, x.mac, x.ipv4 ?? '-', x.link ?? '-']),
        ),
      );
    } else out('introspection: none yet (stackctl nodes inspect)\n');
    out('\nhistory:\n');
    out(
      table(
        ['  TIME', 'EVENT', 'FROM', 'TO', 'REASON'],
        rec.history.map((h) => [`  ${h.time}`, h.event, h.from, h.to, h.reason]),
      ),
    );
  } finally {
    await s.close();
  }
}

/** Add enroll, inspect, list and show to `stackctl nodes`. */
export function registerLifecycle(nodes: Command): void {
  selectionOptions(nodes.command('enroll'), 32)
    .description("check each node's BMC (address, credentials, power) and move it from enroll to manageable")
    .action((opts: LifecycleOpts) =>
      withRunLock(opts.inventory, async () => {
        const s = openSession(opts, false);
        try {
          await eachLifecycle(s, opts, 'enroll', selectNodes(s.all, opts), (node, update) =>
            enrollNode(s, node, update),
          );
        } finally {
          await s.close();
        }
      }),
    );

  withBootOptions(
    selectionOptions(nodes.command('inspect'), 4).description(
      'boot each node into the ramdisk over the network and store what its agent reports (dnsmasq and the HTTP boot server run for the command)',
    ),
    INSPECT_DEFAULTS.timeoutMs / 1000,
  )
    .option('--ramdisk <dir>', 'the deploy ramdisk (stackctl images build-ramdisk)', DEFAULT_RAMDISK_DIR)
    .action((opts: InspectOpts) => withRunLock(opts.inventory, () => runInspect(opts)));

  inventoryOptions(nodes.command('list'))
    .description('every node with its provisioning state, power (through its BMC) and last error')
    .option('--node <name...>', 'only these nodes')
    .option('--role <role>', 'only the nodes of this role')
    .option('--all', 'every node (the default)')
    .option('--no-power', 'do not ask the BMCs')
    .addOption(numberOption('--concurrency <n>', 'BMCs asked at once', RANGE.concurrency, 32))
    .option('--json', 'machine-readable output')
    .action(async (opts: ListOpts) => runList(opts));

  inventoryOptions(nodes.command('show'))
    .description('one node: state, last error, history and the hardware its inspection reported')
    .argument('<node>', 'node name')
    .option('--json', 'machine-readable output')
    .action(async (name: string, opts: LifecycleOpts) => runShow(name, { ...opts, concurrency: 1 }));
}
