/**
 * `stackctl nodes enroll|inspect|list|show`: the node lifecycle (Ironic-like
 * states, src/provision/) driven from the command line. Each command works
 * node by node in parallel under a limit, shows listr2 progress on a
 * terminal, appends JSON-lines events to `<inventory>.events.jsonl`, and is
 * re-entrant: run again after a crash, it carries on from each node's
 * persisted state.
 */
import type { Command } from 'commander';
import { resolve } from 'node:path';
import { mapLimit } from '../core/concurrency.js';
import { StackctlError, UsageError, summarizeFailure } from '../core/errors.js';
import {
  IntrospectionStore,
  introspectionFileFor,
  introspectionReportHandler,
  reconcileInspection,
  startInspection,
  INSPECT_DEFAULTS,
  type InspectDeps,
} from '../provision/inspect.js';
import type { NodeRecord } from '../provision/machine.js';
import { FAILURE, NodeEvent, NodeState } from '../provision/states.js';
import { PROVISIONING } from '../pxe/dnsmasq.js';
import type { Introspection } from '../pxe/http.js';
import { readRamdiskManifest, type BootServices } from '../pxe/services.js';
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

/** enroll -> verifying -> manageable: the BMC must answer with the configured credentials. */
export async function enrollNode(s: Session, node: string, update: (status: string) => void): Promise<string> {
  let rec = s.store.get(node);
  if (rec.state === NodeState.ENROLL) rec = s.store.apply(node, NodeEvent.MANAGE, 'operator: enroll');
  if (rec.state !== NodeState.VERIFYING) return `already enrolled (${rec.state})`;
  update('verifying the BMC');
  const d = s.driver(node);
  try {
    d.validate();
    const id = await d.identify();
    const power = await d.powerState();
    const detail = `${d.kind} BMC answers, power ${power}${id.manufacturer ? `, ${id.manufacturer}` : ''}`;
    s.store.apply(node, NodeEvent.DONE, detail);
    s.emit({ kind: 'node.validated', node, driver: d.kind, detail });
    return `manageable (${detail})`;
  } catch (e) {
    const { code, message } = summarizeFailure(e);
    s.store.apply(node, NodeEvent.FAIL, `${code}: ${message}`);
    throw e;
  }
}

/** States an inspection can start or resume from. */
const INSPECTABLE: ReadonlySet<NodeState> = new Set([
  NodeState.MANAGEABLE,
  NodeState.INSPECT_FAILED,
  NodeState.INSPECTING,
  NodeState.INSPECT_WAIT,
]);

/** Refuse a node the inspection cannot take, with what to do instead. */
export function checkInspectable(rec: NodeRecord): void {
  if (INSPECTABLE.has(rec.state)) return;
  throw new UsageError('E_NODE_STATE', `node '${rec.name}' is in state '${rec.state}': it cannot be inspected`, {
    hint:
      rec.state === NodeState.ENROLL
        ? `Enroll it first: stackctl nodes enroll --node ${rec.name}`
        : 'Inspection starts from manageable or inspect failed; an available or active node must go back to manageable first.',
    details: { node: rec.name, state: rec.state },
  });
}

/** One line about a report: what the ramdisk found. */
export function introspectionSummary(d: Introspection): string {
  const gib = (b: number): string => `${(b / 1024 ** 3).toFixed(1)} GiB`;
  return (
    `${d.cpu.count} CPU ${d.cpu.arch}, ${d.memory_mib} MiB, ` +
    `disks ${d.disks.map((x) => `${x.name} ${gib(x.size_bytes)}${x.serial ? ` (${x.serial})` : ''}`).join(', ') || 'none'}, ` +
    `NICs ${d.interfaces.map((x) => `${x.name} ${x.mac}`).join(', ')}`
  );
}

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
    const ramdisk = readRamdiskManifest(ramdiskDir);
    warnStaleRamdisk(ramdiskDir);
    const introspection = IntrospectionStore.open(introspectionFileFor(s.all.inventoryFile));
    const services = await runBootServices(
      s,
      opts,
      net,
      { dir: ramdiskDir, ...ramdisk },
      introspectionReportHandler(introspection),
    );
    const deps: InspectDeps = {
      nodes: s.store,
      introspection,
      boot: services.server,
      power: (node) => s.driver(node),
      timeoutMs,
      pollMs: 1000,
    };
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

/**
 * Inspect one node (from manageable or inspect failed, or carry on with an
 * inspection in progress) until its agent reported; throws the failure with
 * what the boot services saw of the node. Resolves to a one-line summary.
 */
export async function inspectNode(
  s: Session,
  deps: InspectDeps,
  services: Pick<BootServices, 'observed'>,
  node: string,
  update: (status: string) => void,
  reason: string,
): Promise<string> {
  const mac =
    s.all.loaded.inventory.nodes.find((n) => n.name === node)!.nics.find((n) => n.network === PROVISIONING)?.mac ?? '';
  const rec = s.store.get(node);
  if (rec.state === NodeState.MANAGEABLE || rec.state === NodeState.INSPECT_FAILED) {
    startInspection(deps, node, reason);
  }
  const t0 = Date.now();
  for (;;) {
    const step = await reconcileInspection(deps, node);
    if (step.error) {
      // what the boot services saw says whether the node booted at all
      const seen = services.observed(mac);
      throw new StackctlError(step.error.code, `${step.error.message} (boot services for ${mac}: ${seen})`, {
        ...(step.error.hint ? { hint: step.error.hint } : {}),
        cause: step.error,
        exitCode: step.error.exitCode,
        details: { ...step.error.details, observed: seen },
      });
    }
    if (!step.dirty) {
      const d = step.introspection?.data ?? deps.introspection.get(node)?.data;
      return d ? `${introspectionSummary(d)}` : step.state;
    }
    update(`${step.state} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
    await new Promise((r) => setTimeout(r, step.requeueAfterMs ?? INSPECT_DEFAULTS.pollMs));
  }
}

/** The reason of the node's latest failure, when it still stands (the last step failed or it sits in a failure state). */
export function lastError(rec: NodeRecord): string {
  const last = rec.history.at(-1);
  if (!last) return '';
  if (last.event === NodeEvent.FAIL) return last.reason;
  if (FAILURE.has(rec.state)) return [...rec.history].reverse().find((h) => h.event === NodeEvent.FAIL)?.reason ?? '';
  return '';
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
