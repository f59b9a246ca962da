/**
 * What the node lifecycle commands share: the session (inventory, node
 * states, events, one BMC driver per node), the per-node runner with
 * progress and the outcome table, and the boot services of a run.
 */
import type { Command } from 'commander';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { BmcDriver, BmcTarget } from '../bmc/driver.js';
import { IpmiTransport } from '../bmc/ipmi/transport.js';
import { createDriver } from '../bmc/registry.js';
import { UsageError } from '../core/errors.js';
import { JsonLinesLog, formatEvent, type EventSink, type StackctlEvent } from '../core/events.js';
import { sha256 } from '../core/hash.js';
import { RAMDISK_FILES, defaultRamdiskSourceDir } from '../images/ramdisk.js';
import { requireTools } from '../lab/vm/host.js';
import { vmLabBootNetwork } from '../lab/vm/lab.js';
import { NodeStateStore, nodesFileFor } from '../provision/machine.js';
import type { AgentReport } from '../pxe/http.js';
import { LAB_KERNEL_ARGS, startBootServices, type BootServices } from '../pxe/services.js';
import { loadAll, type Loaded } from './context.js';
import { RANGE, numberOption, secondsOption } from './numbers.js';
import type { CommonOpts } from './options.js';
import { fanOut, reportOutcomes, resultCell, type NodeOutcome } from './fanout.js';
import { bmcTargets, type SelectOptions } from './targets.js';
import { eventsFileFor } from './node-sessions.js';

export type LifecycleOpts = CommonOpts & SelectOptions & { json?: boolean; concurrency: number };

/** One node's outcome in a lifecycle command. */
export interface Outcome extends NodeOutcome {
  state: string;
  /** Figures for --json (phases, bytes served, ...). */
  details?: Record<string, unknown>;
}

/** What every lifecycle command opens: inventory, node states, events, BMC drivers. */
export interface Session {
  readonly all: Loaded;
  readonly store: NodeStateStore;
  readonly emit: (e: StackctlEvent) => void;
  readonly events: EventSink;
  /** The node's BMC driver, one per node for the whole command. */
  driver(node: string): BmcDriver;
  close(): Promise<void>;
}

export function openSession(opts: LifecycleOpts, quiet: boolean): Session {
  const all = loadAll(opts);
  const log = new JsonLinesLog(eventsFileFor(all.inventoryFile));
  const tty = Boolean(process.stderr.isTTY) && !opts.json;
  const emit = (e: StackctlEvent): void => {
    log.emit(e);
    if (!tty && !opts.json && !quiet) process.stderr.write(formatEvent(e) + '\n');
  };
  const events: EventSink = { emit };
  const store = NodeStateStore.open(nodesFileFor(all.inventoryFile), { events });
  const transport = new IpmiTransport();
  const drivers = new Map<string, BmcDriver>();
  let targets: Map<string, BmcTarget> | undefined;
  return {
    all,
    store,
    emit,
    events,
    driver(node) {
      let d = drivers.get(node);
      if (!d) {
        targets ??= new Map(bmcTargets(all, selectable(all)).map((t) => [t.node, t]));
        // the lab's BMCs speak plain HTTP on loopback by design; the warning is for real sites
        d = createDriver(targets.get(node)!, { ipmiTransport: transport, redfish: { warn: () => undefined } });
        drivers.set(node, d);
      }
      return d;
    },
    async close() {
      await Promise.allSettled([...drivers.values()].map((d) => d.close()));
      await transport.close();
    },
  };
}

export const selectable = (all: Loaded): string[] => all.loaded.inventory.nodes.map((n) => n.name);

/**
 * Run `work` for each node under the concurrency limit with progress
 * (src/cli/fanout.ts), then print the outcome table (or JSON) and set the
 * exit status from the failures.
 */
export async function eachLifecycle(
  s: Session,
  opts: LifecycleOpts,
  command: string,
  names: readonly string[],
  work: (node: string, update: (status: string) => void, outcome: Outcome) => Promise<string>,
): Promise<Outcome[]> {
  const outcomes = await fanOut(
    {
      command,
      outcomes: names.map((node): Outcome => ({ node, ok: false, state: s.store.get(node).state })),
      concurrency: opts.concurrency,
      visible: Boolean(process.stderr.isTTY) && !opts.json,
      emit: s.emit,
      settle: (o) => void (o.state = s.store.get(o.node).state),
    },
    (o, update) => work(o.node, update, o),
  );
  reportOutcomes(outcomes, {
    ...(opts.json ? { json: true } : {}),
    columns: [
      ['NODE', (o) => o.node],
      ['STATE', (o) => o.state],
      ['TIME', (o) => `${((o.ms ?? 0) / 1000).toFixed(1)} s`],
      ['RESULT', resultCell],
    ],
  });
  return outcomes;
}

/** Options of the commands that boot nodes from the network. */
export type BootOpts = LifecycleOpts & {
  interface?: string;
  ipv6Prefix?: string;
  serverAddress?: string;
  httpPort: number;
  tftpRoot?: string;
  /** Seconds. */
  timeout: number;
  kernelArg?: string[];
};

/** Add the boot service options to a command. */
export function withBootOptions(cmd: Command, timeoutS: number): Command {
  return cmd
    .option('--interface <name>', 'provisioning interface for dnsmasq (default: the VM lab bridge)')
    .option(
      '--ipv6-prefix <prefix>',
      'ULA /64 prefix on the interface, for router advertisements (default: the lab one)',
    )
    .option('--server-address <ip>', "this machine's address on provisioning (default: the network's gateway)")
    .addOption(
      numberOption('--http-port <port>', 'port of the HTTP boot server (0: any free port)', RANGE.listenPort, 0),
    )
    .option('--tftp-root <dir>', 'folder with undionly.kpxe/ipxe.efi (default: /usr/lib/ipxe when present)')
    .option('--kernel-arg <arg...>', 'ramdisk kernel arguments (default: console=ttyS0,115200 quiet loglevel=3)')
    .addOption(secondsOption('--timeout', 'longest wait for each node', RANGE.seconds, timeoutS));
}

/** The provisioning interface and ULA of the run: the options, else the VM lab's bridge. */
export function bootNetwork(s: Session, opts: BootOpts): { iface: string; ipv6Prefix: string | undefined } {
  const lab = vmLabBootNetwork(s.all.inventoryFile);
  const iface = opts.interface ?? lab?.interface;
  if (!iface) {
    throw new UsageError('E_PXE_INTERFACE', 'no provisioning interface: give --interface', {
      hint: 'The interface of this machine on the provisioning network (lab up --kind vm records its bridge).',
    });
  }
  requireTools({ dnsmasq: 'dnsmasq-base' }, 'booting nodes from the network');
  return { iface, ipv6Prefix: opts.ipv6Prefix ?? lab?.ipv6Prefix };
}

/** Folder of the run's dnsmasq files and boot files: `<inventory>.pxe/`. */
export const pxeDirOf = (s: Session): string => s.all.inventoryFile.replace(/\.ya?ml$/, '') + '.pxe';

/** Start the boot server and dnsmasq for a run; the caller closes them. */
export async function runBootServices(
  s: Session,
  opts: BootOpts,
  net: { iface: string; ipv6Prefix: string | undefined },
  files: { dir: string; kernel: string; initrd: string },
  onReport: (r: AgentReport) => void,
): Promise<BootServices> {
  const services = await startBootServices({
    inventory: s.all.loaded.inventory,
    addresses: s.all.allocation.addresses,
    interface: net.iface,
    ...(opts.serverAddress ? { serverAddress: opts.serverAddress } : {}),
    httpPort: opts.httpPort,
    ...(net.ipv6Prefix ? { ipv6Prefix: net.ipv6Prefix } : {}),
    runDir: pxeDirOf(s),
    ...(opts.tftpRoot ? { tftpRoot: resolve(opts.tftpRoot) } : {}),
    filesDir: files.dir,
    kernel: files.kernel,
    initrd: files.initrd,
    kernelArgs: opts.kernelArg?.length ? opts.kernelArg : LAB_KERNEL_ARGS,
    onReport,
    events: s.events,
  });
  if (!opts.json) {
    process.stderr.write(
      `boot services: ${services.server.url} on ${net.iface}, dnsmasq pid ${services.dnsmasq.pid}\n`,
    );
  }
  return services;
}

/**
 * The agent files a ramdisk was built from differ from those stackctl ships:
 * the nodes would run an older agent. Resolves to the names that differ
 * (cheap: hashes of a few small files, no apt query).
 */
export function staleRamdiskFiles(ramdiskDir: string, sourceDir = defaultRamdiskSourceDir()): string[] {
  let built: Record<string, string> = {};
  try {
    const m = JSON.parse(readFileSync(join(ramdiskDir, 'ramdisk.json'), 'utf8')) as {
      inputs?: { files?: Record<string, string> };
    };
    built = m.inputs?.files ?? {};
  } catch {
    return [];
  }
  return Object.keys(RAMDISK_FILES).filter((name) => {
    const f = join(sourceDir, name);
    return existsSync(f) && built[name] !== sha256(readFileSync(f, 'utf8'));
  });
}

/** Warn on stderr when the ramdisk is older than the agent files (see staleRamdiskFiles). */
export function warnStaleRamdisk(ramdiskDir: string): void {
  const stale = staleRamdiskFiles(ramdiskDir);
  if (stale.length) {
    process.stderr.write(
      `warning: the ramdisk in ${ramdiskDir} was built from other agent files (${stale.join(', ')}) than stackctl's: ` +
        `rebuild it with stackctl images build-ramdisk --out ${ramdiskDir}\n`,
    );
  }
}
