/**
 * What the node lifecycle commands share on the command line: the session
 * (src/provision/workflows/session.ts, opened on the loaded inventory with
 * the events going to its log and to stderr), the per-node run with the
 * outcome table, the boot options and the boot services of a run.
 */
import type { Command } from 'commander';
import { resolve } from 'node:path';
import { UsageError } from '../core/errors.js';
import { JsonLinesLog, eventsFileFor, formatEvent, type StackctlEvent } from '../core/events.js';
import { requireTools } from '../lab/vm/host.js';
import { vmLabBootNetwork } from '../lab/vm/lab.js';
import { staleRamdiskFiles, startRunBootServices, type BootFiles } from '../provision/workflows/boot.js';
import { openNodeSession, type NodeSession, type Site } from '../provision/workflows/session.js';
import type { AgentReport } from '../pxe/http.js';
import type { BootServices } from '../pxe/services.js';
import { loadAll, registryCaPem, registryOf, type Loaded } from './context.js';
import { fanOut, reportOutcomes, resultCell, type NodeOutcome } from './fanout.js';
import { RANGE, numberOption, secondsOption } from './numbers.js';
import type { CommonOpts } from './options.js';
import { bmcTargets, type SelectOptions } from './targets.js';

export type LifecycleOpts = CommonOpts & SelectOptions & { json?: boolean; concurrency: number };

/** One node's outcome in a lifecycle command. */
export interface Outcome extends NodeOutcome {
  state: string;
  /** Figures for --json (phases, bytes served, ...). */
  details?: Record<string, unknown>;
}

/** A node session on the loaded inventory the command also reads (selection, secrets). */
export interface Session extends NodeSession {
  readonly all: Loaded;
}

/**
 * Load the inventory and open a node session on it: every event goes to
 * `<inventory>.events.jsonl`, and to stderr when neither progress nor --json
 * shows it (nor `quiet`).
 */
export function openSession(opts: LifecycleOpts, quiet: boolean): Session {
  const all = loadAll(opts);
  const log = new JsonLinesLog(eventsFileFor(all.inventoryFile));
  const tty = Boolean(process.stderr.isTTY) && !opts.json;
  const emit = (e: StackctlEvent): void => {
    log.emit(e);
    if (!tty && !opts.json && !quiet) process.stderr.write(formatEvent(e) + '\n');
  };
  return { ...openNodeSession(siteOf(all), { emit, targets: () => bmcTargets(all, selectable(all)) }), all };
}

/** What the node workflows read of a loaded inventory. */
export function siteOf(all: Loaded): Site {
  const ca = registryCaPem(all);
  return {
    inventoryFile: all.inventoryFile,
    inventory: all.loaded.inventory,
    addresses: all.allocation.addresses,
    registry: registryOf(all),
    ...(ca ? { registryCa: ca } : {}),
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
    .option(
      '--kernel-arg <arg...>',
      'ramdisk kernel arguments (default: console=ttyS0,115200 quiet loglevel=3 cryptomgr.notests)',
    )
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

/** Start the boot server and dnsmasq for a run (and say where they listen); the caller closes them. */
export async function runBootServices(
  s: Session,
  opts: BootOpts,
  net: { iface: string; ipv6Prefix: string | undefined },
  files: BootFiles,
  onReport: (r: AgentReport) => void,
): Promise<BootServices> {
  const services = await startRunBootServices(
    s,
    {
      iface: net.iface,
      ipv6Prefix: net.ipv6Prefix,
      serverAddress: opts.serverAddress,
      httpPort: opts.httpPort,
      tftpRoot: opts.tftpRoot ? resolve(opts.tftpRoot) : undefined,
      kernelArgs: opts.kernelArg,
    },
    files,
    onReport,
  );
  if (!opts.json) {
    process.stderr.write(
      `boot services: ${services.server.url} on ${net.iface}, dnsmasq pid ${services.dnsmasq.pid}\n`,
    );
  }
  return services;
}

/** Warn on stderr when the ramdisk is older than the agent files (src/provision/workflows/boot.ts staleRamdiskFiles). */
export function warnStaleRamdisk(ramdiskDir: string): void {
  const stale = staleRamdiskFiles(ramdiskDir);
  if (stale.length) {
    process.stderr.write(
      `warning: the ramdisk in ${ramdiskDir} was built from other agent files (${stale.join(', ')}) than stackctl's: ` +
        `rebuild it with stackctl images build-ramdisk --out ${ramdiskDir}\n`,
    );
  }
}
