/**
 * The boot services of one provisioning run, started together and stopped
 * together: stackctl's HTTP boot server on the deploy host's provisioning
 * address, then dnsmasq (DHCP + TFTP) bound to the provisioning interface
 * and pointing iPXE at that server. A command that boots nodes (inspect,
 * and later deploy) starts them for its run and stops them at its end.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { IoError } from '../core/errors.js';
import type { EventSink } from '../core/events.js';
import { readTextFile } from '../core/fs.js';
import type { Inventory } from '../inventory/schema.js';
import {
  DnsmasqService,
  dnsmasqPaths,
  dnsmasqSettingsFromInventory,
  PROVISIONING,
  type BootObservation,
} from './dnsmasq.js';
import { BootServer, type AgentReport } from './http.js';

/** Where Debian's `ipxe` package puts the PXE ROM chainloaders that firmware fetches over TFTP. */
export const DEBIAN_IPXE_DIR = '/usr/lib/ipxe';

/**
 * Kernel arguments of the ramdisk in the lab: serial console, quiet (the command line holds the token), and no
 * crypto self-tests. Under QEMU's TCG a vCPU sat in the kernel's `cryptomgr_test` for over 100 s ("soft lockup")
 * and the node missed its inspection deadline; the ramdisk verifies images by SHA-256 in user space and needs
 * none of the algorithms those tests cover.
 */
export const LAB_KERNEL_ARGS: readonly string[] = ['console=ttyS0,115200', 'quiet', 'loglevel=3', 'cryptomgr.notests'];

/** Names of the ramdisk's files, from the manifest `stackctl images build-ramdisk` writes. */
export function readRamdiskManifest(dir: string): { kernel: string; initrd: string } {
  const file = join(dir, 'ramdisk.json');
  if (!existsSync(file)) {
    throw new IoError('E_RAMDISK_MISSING', `no deploy ramdisk in ${dir} (${file} is missing)`, {
      hint: `Build it: stackctl images build-ramdisk --out ${dir}`,
    });
  }
  const m = JSON.parse(readTextFile(file, 1024 * 1024)) as { kernel?: { name?: string }; initrd?: { name?: string } };
  if (!m.kernel?.name || !m.initrd?.name) {
    throw new IoError('E_RAMDISK_MISSING', `${file} names no kernel or initrd`, {
      hint: `Build the ramdisk again: stackctl images build-ramdisk --force --out ${dir}`,
    });
  }
  return { kernel: m.kernel.name, initrd: m.initrd.name };
}

/** Options of a run's boot services. */
export interface BootServicesOptions {
  readonly inventory: Inventory;
  readonly addresses: ReadonlyMap<string, Readonly<Record<string, string>>>;
  /** The provisioning interface (the lab bridge). */
  readonly interface: string;
  /** Default: the provisioning network's gateway. */
  readonly serverAddress?: string;
  /** 0: any free port. */
  readonly httpPort: number;
  /** IPv6 ULA prefix already on the interface (router advertisements for iPXE). */
  readonly ipv6Prefix?: string;
  /** Folder of dnsmasq's files; created readable by others (dnsmasq drops privileges). */
  readonly runDir: string;
  /** Default: Debian's ipxe folder when present, else an empty folder in runDir (enough for iPXE ROMs). */
  readonly tftpRoot?: string;
  /** Ramdisk (and image) files the boot server serves. */
  readonly filesDir: string;
  readonly kernel: string;
  readonly initrd: string;
  readonly kernelArgs?: readonly string[];
  readonly onReport: (report: AgentReport) => void | Promise<void>;
  readonly events?: EventSink;
}

/** Running boot services. */
export interface BootServices {
  readonly server: BootServer;
  readonly dnsmasq: DnsmasqService;
  /** What DHCP and TFTP saw from a MAC, in a line (for "the node never booted" errors). */
  observed(mac: string): string;
  /** Stop dnsmasq, then the HTTP server; safe to call twice. */
  close(): Promise<void>;
}

/**
 * Stop a dnsmasq that an earlier run left behind in this run folder (the
 * run was killed before it could stop its child): its pid file names it, and
 * its command line must name this folder's configuration (pids are reused).
 * Resolves to the pid stopped, if any.
 */
export async function stopStaleDnsmasq(runDir: string): Promise<number | undefined> {
  const p = dnsmasqPaths(runDir);
  let pid: number;
  try {
    pid = Number.parseInt(readFileSync(p.pid, 'utf8'), 10);
    if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(p.conf)) return undefined;
    process.kill(pid, 'SIGTERM');
  } catch {
    return undefined;
  }
  for (let i = 0; i < 60 && existsSync(`/proc/${pid}`); i++) await new Promise((r) => setTimeout(r, 50));
  if (existsSync(`/proc/${pid}`)) process.kill(pid, 'SIGKILL');
  return pid;
}

/** Start the HTTP boot server, then dnsmasq; if dnsmasq fails, the server is stopped again. */
export async function startBootServices(o: BootServicesOptions): Promise<BootServices> {
  const prov = o.inventory.networks[PROVISIONING];
  const host = o.serverAddress ?? prov?.gateway;
  mkdirSync(o.runDir, { recursive: true, mode: 0o755 });
  await stopStaleDnsmasq(o.runDir);
  let tftpRoot = o.tftpRoot;
  if (tftpRoot === undefined) {
    tftpRoot = existsSync(join(DEBIAN_IPXE_DIR, 'undionly.kpxe')) ? DEBIAN_IPXE_DIR : join(o.runDir, 'tftp');
    mkdirSync(tftpRoot, { recursive: true, mode: 0o755 });
  }
  // validates the inventory's side before anything listens
  const settings = (port: number) =>
    dnsmasqSettingsFromInventory(o.inventory, o.addresses, {
      interface: o.interface,
      runDir: o.runDir,
      tftpRoot: tftpRoot!,
      httpPort: port,
      ...(host ? { serverAddress: host } : {}),
      ...(o.ipv6Prefix ? { ipv6Prefix: o.ipv6Prefix } : {}),
    });
  const { leases } = settings(o.httpPort || 8080);
  const server = await BootServer.start({
    host: host!,
    port: o.httpPort,
    filesDir: o.filesDir,
    kernel: o.kernel,
    initrd: o.initrd,
    kernelArgs: o.kernelArgs ?? LAB_KERNEL_ARGS,
    // dnsmasq's static leases, MAC -> address: the server answers a node's boot script and agent
    // calls from the address its lease gives it, and counts the bytes each node fetched
    nodes: leases.map((l) => ({ name: l.node, mac: l.mac, ip: l.ip })),
    onReport: o.onReport,
    ...(o.events ? { events: o.events } : {}),
  });
  const dnsmasq = new DnsmasqService(settings(server.port));
  try {
    await dnsmasq.start();
  } catch (e) {
    await server.close();
    throw e;
  }
  let closed = false;
  return {
    server,
    dnsmasq,
    observed: (mac) => describeObservations(dnsmasq.report().get(mac.toLowerCase())?.observations ?? []),
    close: async () => {
      if (closed) return;
      closed = true;
      await dnsmasq.stop();
      await server.close();
    },
  };
}

/** One line of what the boot services saw, e.g. `DHCP discover, offer, request, ack 10.0.0.5; TFTP nothing`. */
export function describeObservations(obs: readonly BootObservation[]): string {
  const dhcp = obs.filter((o) => !o.kind.startsWith('tftp'));
  const tftp = obs.filter((o) => o.kind.startsWith('tftp'));
  const kinds = (list: readonly BootObservation[]): string =>
    list.length
      ? [...new Set(list.map((o) => `${o.kind}${'ip' in o && o.ip && o.kind === 'ack' ? ` ${o.ip}` : ''}`))].join(', ')
      : 'nothing';
  return `DHCP ${kinds(dhcp)}; TFTP ${kinds(tftp)}`;
}
