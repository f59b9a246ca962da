/**
 * DHCP + TFTP for network boot: dnsmasq's configuration generated from the
 * inventory and IPAM, the process supervised by stackctl, and a parser of its
 * log that tells, per MAC, what the boot services saw.
 *
 * The configuration is split in two files on purpose: dnsmasq re-reads a
 * `dhcp-hostsfile` on SIGHUP but never its main configuration file, so the
 * per-node static leases (which change as nodes are added) live in the hosts
 * file and are reloaded in place, while a change to the main file restarts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { $ } from 'zx';
import { InputError, IoError, RemoteError, TimeoutError } from '../core/errors.js';
import { writeFileAtomic } from '../core/fs.js';
import { formatIpv4, inCidr, parseCidr4, parseIpv4 } from '../core/ipv4.js';
import type { Inventory } from '../inventory/schema.js';

/** The network every node boots from (a key of `networks`). */
export const PROVISIONING = 'provisioning';

/** One node's fixed DHCP answer. */
export interface StaticLease {
  readonly node: string;
  /** Lower-case, colon-separated. */
  readonly mac: string;
  readonly ip: string;
}

/** Everything the generated configuration depends on. */
export interface DnsmasqSettings {
  /** The provisioning interface (a bridge in the lab); dnsmasq binds to it only. */
  readonly interface: string;
  /** The deploy host's address on the provisioning network: TFTP and HTTP server. */
  readonly serverAddress: string;
  /** Port of stackctl's HTTP boot server on `serverAddress`. */
  readonly httpPort: number;
  /** Holds the generated files, the pid file, the log and the lease file. */
  readonly runDir: string;
  /** TFTP root holding undionly.kpxe and ipxe.efi (Debian package `ipxe`). */
  readonly tftpRoot: string;
  /** The provisioning network, e.g. 192.168.24.0/24. */
  readonly cidr: string;
  /** Default gateway handed to the nodes; dnsmasq offers its own address when absent. */
  readonly router?: string;
  /** DHCP lease time in dnsmasq syntax (`1h`, `12h`, `infinite`). */
  readonly leaseTime: string;
  /**
   * Without it only the MACs of the inventory get an address (the others are
   * logged as "no address available"). With it, unknown MACs get an address
   * from this range: for discovering the MAC of a machine that is not in the
   * inventory yet, at the price of booting any machine on the segment.
   */
  readonly discoveryRange?: readonly [string, string];
  /**
   * IPv6 ULA prefix (e.g. `fd99::`) already on the interface with a /64: dnsmasq
   * then sends router advertisements, which spares iPXE a long wait for IPv6
   * autoconfiguration after its DHCPv4 exchange.
   */
  readonly ipv6Prefix?: string;
  readonly leases: readonly StaticLease[];
}

/** The files dnsmasq reads and writes, all in the run folder. */
export interface DnsmasqPaths {
  readonly conf: string;
  readonly hosts: string;
  readonly log: string;
  readonly pid: string;
  readonly leases: string;
}

/** Names of the files in the run folder. */
export function dnsmasqPaths(runDir: string): DnsmasqPaths {
  return {
    conf: join(runDir, 'dnsmasq.conf'),
    hosts: join(runDir, 'dnsmasq.hosts'),
    log: join(runDir, 'dnsmasq.log'),
    pid: join(runDir, 'dnsmasq.pid'),
    leases: join(runDir, 'dnsmasq.leases'),
  };
}

/** Boot files by client: firmware PXE ROMs chainload iPXE, iPXE fetches its script over HTTP. */
export const TFTP_BOOT_FILES = {
  /** Legacy BIOS PXE ROMs (Debian `ipxe`: /usr/lib/ipxe/undionly.kpxe). */
  bios: 'undionly.kpxe',
  /** UEFI x86-64 (Debian `ipxe`: /usr/lib/ipxe/ipxe.efi). */
  efi64: 'ipxe.efi',
} as const;

/** DHCP client architectures (option 93, RFC 4578) that get the UEFI build. */
export const EFI_CLIENT_ARCH: readonly number[] = [7, 9];

// Paths end up in dnsmasq's configuration, where commas and '#' are syntax.
const SAFE_PATH = /^\/[A-Za-z0-9._/-]*$/;
const SAFE_IFACE = /^[A-Za-z0-9_.-]{1,15}$/;
const SAFE_LEASE_TIME = /^(\d+[smhdw]?|infinite)$/;

function checkSettings(s: DnsmasqSettings): void {
  const bad = (what: string, hint: string): never => {
    throw new InputError('E_PXE_SETTINGS', `dnsmasq settings: ${what}`, { hint });
  };
  if (!SAFE_IFACE.test(s.interface)) bad(`invalid interface name '${s.interface}'`, 'Give a Linux interface name.');
  for (const [name, p] of [
    ['run folder', s.runDir],
    ['TFTP root', s.tftpRoot],
  ] as const) {
    if (!SAFE_PATH.test(p))
      bad(`the ${name} '${p}' is not a plain absolute path`, 'Use letters, digits, . _ - / only.');
  }
  if (!SAFE_LEASE_TIME.test(s.leaseTime)) bad(`invalid lease time '${s.leaseTime}'`, 'For example 1h, 30m, 86400.');
  const net = parseCidr4(s.cidr);
  if (!net) return bad(`invalid network '${s.cidr}'`, 'Expected a.b.c.d/prefix.');
  const inNet = (what: string, ip: string | undefined): void => {
    if (ip === undefined) return;
    const n = parseIpv4(ip);
    if (n === undefined || !inCidr(n, net)) bad(`${what} ${ip} is not in ${s.cidr}`, 'Check networks.provisioning.');
  };
  inNet('server address', s.serverAddress);
  inNet('router', s.router);
  inNet('discovery range start', s.discoveryRange?.[0]);
  inNet('discovery range end', s.discoveryRange?.[1]);
  const macs = new Set<string>();
  for (const l of s.leases) {
    inNet(`address of ${l.node}`, l.ip);
    if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/.test(l.mac)) bad(`invalid MAC '${l.mac}' of ${l.node}`, 'Lower-case hex.');
    if (macs.has(l.mac)) bad(`MAC ${l.mac} is given to two nodes`, 'Each provisioning NIC has its own MAC.');
    macs.add(l.mac);
  }
  if (s.ipv6Prefix !== undefined && !/^[0-9a-f:]+::$/i.test(s.ipv6Prefix)) {
    bad(`invalid IPv6 prefix '${s.ipv6Prefix}'`, 'Expected a /64 prefix such as fd99::');
  }
}

/** The generated files' text. */
export interface DnsmasqConfig {
  /** The main configuration file; a change needs a restart. */
  readonly conf: string;
  /** One `MAC,IP,hostname` line per node; reloaded with SIGHUP. */
  readonly hosts: string;
}

/** Render the configuration; pure. */
export function renderDnsmasq(s: DnsmasqSettings): DnsmasqConfig {
  checkSettings(s);
  const net = parseCidr4(s.cidr)!;
  const mask = formatIpv4(net.prefix === 0 ? 0 : (0xffffffff << (32 - net.prefix)) >>> 0);
  const p = dnsmasqPaths(s.runDir);
  const httpBase = `http://${s.serverAddress}:${s.httpPort}`;
  const lines = [
    '# Generated by stackctl from the inventory: edits are overwritten.',
    '# DNS off: the nodes resolve nothing during provisioning.',
    'port=0',
    'no-hosts',
    'no-resolv',
    `interface=${s.interface}`,
    'bind-interfaces',
    '',
    '# Known nodes: static leases in the hosts file (re-read on SIGHUP).',
    `dhcp-hostsfile=${p.hosts}`,
    s.discoveryRange
      ? `dhcp-range=${s.discoveryRange[0]},${s.discoveryRange[1]},${mask},${s.leaseTime}`
      : `dhcp-range=${formatIpv4(net.base)},static,${mask},${s.leaseTime}`,
    // the only DHCP server on this segment: answer REQUESTs for addresses it knows at once
    'dhcp-authoritative',
    ...(s.router ? [`dhcp-option=option:router,${s.router}`] : []),
    // NOTE: dnsmasq pings every address before offering it (+3 s per boot); addresses here are all planned
    'no-ping',
    '',
    '# Firmware PXE ROMs chainload iPXE over TFTP; iPXE fetches its script over HTTP.',
    'enable-tftp',
    `tftp-root=${s.tftpRoot}`,
    'dhcp-userclass=set:ipxe,iPXE',
    ...EFI_CLIENT_ARCH.map((a) => `dhcp-match=set:efi64,option:client-arch,${a}`),
    `dhcp-boot=tag:!ipxe,tag:efi64,${TFTP_BOOT_FILES.efi64},,${s.serverAddress}`,
    `dhcp-boot=tag:!ipxe,tag:!efi64,${TFTP_BOOT_FILES.bios},,${s.serverAddress}`,
    `dhcp-boot=tag:ipxe,${httpBase}/boot.ipxe`,
    ...(s.ipv6Prefix
      ? [
          '',
          '# Router advertisements for the ULA: iPXE otherwise waits ~13 s for IPv6 autoconfiguration.',
          'enable-ra',
          `dhcp-range=${s.ipv6Prefix},ra-only,64`,
        ]
      : []),
    '',
    'log-dhcp',
    `log-facility=${p.log}`,
    `pid-file=${p.pid}`,
    `dhcp-leasefile=${p.leases}`,
    '',
  ];
  const hosts = [...s.leases]
    .sort((a, b) => a.node.localeCompare(b.node))
    .map((l) => `${l.mac},${l.ip},${l.node}\n`)
    .join('');
  return { conf: lines.join('\n'), hosts };
}

/** Options to derive the settings from an inventory. */
export interface FromInventoryOptions {
  readonly interface: string;
  readonly runDir: string;
  readonly tftpRoot: string;
  readonly httpPort: number;
  /** Default: the provisioning network's gateway (the deploy host in the lab). */
  readonly serverAddress?: string;
  readonly leaseTime?: string;
  /** Serve `networks.provisioning.dhcp_range` to unknown MACs (see DnsmasqSettings.discoveryRange). */
  readonly discovery?: boolean;
  readonly ipv6Prefix?: string;
}

/**
 * Settings for an inventory: one static lease per node, on the MAC of its
 * provisioning NIC and its IPAM address on the provisioning network.
 */
export function dnsmasqSettingsFromInventory(
  inv: Inventory,
  addresses: ReadonlyMap<string, Readonly<Record<string, string>>>,
  opts: FromInventoryOptions,
): DnsmasqSettings {
  const net = inv.networks[PROVISIONING];
  if (!net) {
    throw new InputError('E_PXE_NO_PROVISIONING', 'the inventory has no provisioning network', {
      hint: 'Add networks.provisioning with the cidr the nodes boot on.',
    });
  }
  const serverAddress = opts.serverAddress ?? net.gateway;
  if (!serverAddress) {
    throw new InputError('E_PXE_NO_SERVER', 'no address for the boot server on the provisioning network', {
      hint: "Set networks.provisioning.gateway to the deploy host's address, or pass the server address.",
    });
  }
  if (opts.discovery && !net.dhcp_range) {
    throw new InputError('E_PXE_NO_RANGE', 'discovery needs networks.provisioning.dhcp_range', {
      hint: 'Add dhcp_range: [first, last] outside the addresses IPAM allocates.',
    });
  }
  const leases = inv.nodes.map((node): StaticLease => {
    const nic = node.nics.find((n) => n.network === PROVISIONING);
    const ip = addresses.get(node.name)?.[PROVISIONING];
    if (!nic || !ip) {
      throw new InputError('E_PXE_NODE_UNBOOTABLE', `node '${node.name}' has no NIC or no address on provisioning`, {
        hint: 'Every node needs a NIC with network: provisioning; its address comes from IPAM.',
        details: { node: node.name },
      });
    }
    return { node: node.name, mac: nic.mac.toLowerCase(), ip };
  });
  return {
    interface: opts.interface,
    serverAddress,
    httpPort: opts.httpPort,
    runDir: opts.runDir,
    tftpRoot: opts.tftpRoot,
    cidr: net.cidr,
    ...(net.gateway ? { router: net.gateway } : {}),
    leaseTime: opts.leaseTime ?? '1h',
    ...(opts.discovery && net.dhcp_range ? { discoveryRange: net.dhcp_range } : {}),
    ...(opts.ipv6Prefix ? { ipv6Prefix: opts.ipv6Prefix } : {}),
    leases,
  };
}

/* ------------------------------------------------------------------------ */
/* The log                                                                  */
/* ------------------------------------------------------------------------ */

/** Kinds of DHCP observations. */
export type DhcpObservationKind =
  'discover' | 'offer' | 'request' | 'ack' | 'nak' | 'no-address' | 'ignored' | 'release';

/** What dnsmasq logged about one client. */
export type BootObservation =
  | {
      readonly kind: DhcpObservationKind;
      readonly time: string;
      readonly ip?: string;
      readonly detail?: string;
    }
  | {
      readonly kind: 'tftp-sent' | 'tftp-not-found';
      readonly time: string;
      readonly ip: string;
      readonly file: string;
    };

/** Everything the boot services saw from one MAC, in log order. */
export interface MacReport {
  readonly mac: string;
  readonly observations: BootObservation[];
  /** Addresses acknowledged to this MAC. */
  readonly ips: string[];
  /** True when dnsmasq had no address for it: the MAC is not in the inventory (or discovery is off). */
  unknown: boolean;
}

/** DHCP message names in the log -> observation kinds (others are ignored). */
const DHCP_KIND: Readonly<Record<string, DhcpObservationKind>> = {
  DHCPDISCOVER: 'discover',
  DHCPOFFER: 'offer',
  DHCPREQUEST: 'request',
  DHCPACK: 'ack',
  DHCPNAK: 'nak',
  DHCPRELEASE: 'release',
};

const LINE = /^(?<time>\w{3} [ \d]\d \d\d:\d\d:\d\d) dnsmasq-(?<svc>dhcp|tftp)\[\d+\]: (?<msg>.*)$/;
const DHCP_MSG =
  /^(?:\d+ )?(?<type>DHCP[A-Z]+)\([^)]*\) (?:(?<ip>\d{1,3}(?:\.\d{1,3}){3}) )?(?<mac>[0-9a-f]{2}(?::[0-9a-f]{2}){5})\s*(?<rest>.*)$/i;
const TFTP_SENT = /^sent (?<file>\S+) to (?<ip>\S+)$/;
const TFTP_MISSING = /^file (?<file>\S+) not found for (?<ip>\S+)$/;

/**
 * Parse dnsmasq's log (`log-dhcp`, `log-facility`) into one report per MAC.
 * TFTP lines name only the client's address; they are attributed to the MAC
 * that address was last acknowledged to.
 */
export function parseDnsmasqLog(text: string): Map<string, MacReport> {
  const reports = new Map<string, MacReport>();
  const macOfIp = new Map<string, string>();
  const report = (mac: string): MacReport => {
    let r = reports.get(mac);
    if (!r) {
      r = { mac, observations: [], ips: [], unknown: false };
      reports.set(mac, r);
    }
    return r;
  };
  for (const line of text.split('\n')) {
    const m = LINE.exec(line.trimEnd());
    if (!m?.groups) continue;
    const { time, svc, msg } = m.groups as { time: string; svc: string; msg: string };
    if (svc === 'dhcp') {
      const d = DHCP_MSG.exec(msg);
      if (!d?.groups) continue;
      const { type, ip, mac: rawMac, rest } = d.groups as { type: string; ip?: string; mac: string; rest: string };
      const mac = rawMac.toLowerCase();
      let kind = DHCP_KIND[type];
      if (!kind) continue;
      if (/no address available/.test(rest)) kind = 'no-address';
      else if (/^ignored/.test(rest)) kind = 'ignored';
      const r = report(mac);
      r.observations.push({ kind, time, ...(ip ? { ip } : {}), ...(rest ? { detail: rest.trim() } : {}) });
      if (kind === 'no-address') r.unknown = true;
      if (kind === 'ack' && ip) {
        macOfIp.set(ip, mac);
        if (!r.ips.includes(ip)) r.ips.push(ip);
        r.unknown = false;
      }
      continue;
    }
    const sent = TFTP_SENT.exec(msg) ?? TFTP_MISSING.exec(msg);
    if (!sent?.groups) continue;
    const { file, ip } = sent.groups as { file: string; ip: string };
    const mac = macOfIp.get(ip);
    if (!mac) continue;
    report(mac).observations.push({ kind: msg.startsWith('sent') ? 'tftp-sent' : 'tftp-not-found', time, ip, file });
  }
  return reports;
}

/* ------------------------------------------------------------------------ */
/* The process                                                              */
/* ------------------------------------------------------------------------ */

/** Options of the supervisor; side effects are injectable. */
export interface DnsmasqServiceOptions {
  /** The dnsmasq binary (Debian `dnsmasq-base`). */
  readonly binary?: string;
  readonly spawn?: typeof spawn;
  readonly sleep?: (ms: number) => Promise<void>;
  /** How long to wait for dnsmasq to bind its sockets and read the hosts file. */
  readonly readyTimeoutMs?: number;
}

/** What `apply()` had to do. */
export type ApplyResult = 'unchanged' | 'reloaded' | 'restarted';

/**
 * One dnsmasq process, run in the foreground as a child of stackctl: its
 * exit is seen at once (no daemon to find through a pid file), and its
 * startup errors arrive on stderr. If stackctl itself is killed, dnsmasq
 * keeps running; the pid file in the run folder names it.
 */
export class DnsmasqService {
  #child: ChildProcess | undefined;
  #stderr = '';
  #config: DnsmasqConfig;
  #settings: DnsmasqSettings;
  readonly #binary: string;
  readonly #spawn: typeof spawn;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #readyTimeoutMs: number;

  constructor(settings: DnsmasqSettings, options: DnsmasqServiceOptions = {}) {
    this.#settings = settings;
    this.#config = renderDnsmasq(settings);
    this.#binary = options.binary ?? 'dnsmasq';
    this.#spawn = options.spawn ?? spawn;
    this.#sleep = options.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.#readyTimeoutMs = options.readyTimeoutMs ?? 5000;
  }

  /** The files of this instance. */
  get paths(): DnsmasqPaths {
    return dnsmasqPaths(this.#settings.runDir);
  }

  /** The running child's pid, if any. */
  get pid(): number | undefined {
    return this.#child?.exitCode === null ? this.#child.pid : undefined;
  }

  /** Write the files, check them with `dnsmasq --test`, start, and wait until the hosts file was read. */
  async start(): Promise<void> {
    if (this.pid !== undefined) return;
    this.#write();
    await this.#syntaxCheck();
    const p = this.paths;
    const offset = logSize(p.log);
    this.#stderr = '';
    const child = this.#spawn(this.#binary, ['--keep-in-foreground', `--conf-file=${p.conf}`], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.#child = child;
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (d: string) => {
      this.#stderr = (this.#stderr + d).slice(-4096);
    });
    await this.#waitForRead(offset, 'start');
  }

  /**
   * Bring the running dnsmasq to new settings: nothing when the files are
   * equal, SIGHUP when only the static leases changed, a restart otherwise.
   */
  async apply(settings: DnsmasqSettings): Promise<ApplyResult> {
    const next = renderDnsmasq(settings);
    const prev = this.#config;
    this.#settings = settings;
    this.#config = next;
    if (this.pid === undefined) {
      await this.start();
      return 'restarted';
    }
    if (next.conf === prev.conf && next.hosts === prev.hosts) return 'unchanged';
    if (next.conf === prev.conf) {
      const offset = logSize(this.paths.log);
      this.#write();
      this.#child!.kill('SIGHUP');
      await this.#waitForRead(offset, 'reload');
      return 'reloaded';
    }
    await this.stop();
    await this.start();
    return 'restarted';
  }

  /** Stop the child: SIGTERM, then SIGKILL if it lingers. */
  async stop(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  }

  /** The log so far ('' before the first start). */
  readLog(): string {
    return existsSync(this.paths.log) ? readFileSync(this.paths.log, 'utf8') : '';
  }

  /** What the boot services saw, per MAC (see parseDnsmasqLog). */
  report(): Map<string, MacReport> {
    return parseDnsmasqLog(this.readLog());
  }

  #write(): void {
    mkdirSync(this.#settings.runDir, { recursive: true, mode: 0o755 });
    const p = this.paths;
    writeFileAtomic(p.hosts, this.#config.hosts);
    writeFileAtomic(p.conf, this.#config.conf);
  }

  async #syntaxCheck(): Promise<void> {
    const r = await $({ nothrow: true, quiet: true })`${this.#binary} --test --conf-file=${this.paths.conf}`;
    if (r.exitCode !== 0) {
      throw new IoError(
        'E_DNSMASQ_CONFIG',
        `dnsmasq refused ${this.paths.conf}: ${r.stderr.trim() || r.stdout.trim()}`,
        {
          hint: 'This is a bug in the generated configuration unless the file was edited; run dnsmasq --test on it.',
        },
      );
    }
  }

  // NOTE: dnsmasq logs "read <hosts file>" after binding its sockets at start and
  // again after every SIGHUP: the one line that proves the new leases are live
  async #waitForRead(offset: number, what: 'start' | 'reload'): Promise<void> {
    const p = this.paths;
    const marker = `read ${p.hosts}`;
    const deadline = Date.now() + this.#readyTimeoutMs;
    for (;;) {
      const child = this.#child;
      if (!child || child.exitCode !== null || child.signalCode !== null) {
        throw new RemoteError(
          'E_DNSMASQ_EXIT',
          `dnsmasq exited during ${what}: ${this.#stderr.trim() || 'no message'}`,
          {
            hint: 'Another DHCP server on the interface (port 67 in use), a missing interface or a missing TFTP root are the usual causes.',
            details: { interface: this.#settings.interface },
          },
        );
      }
      if (readFrom(p.log, offset).includes(marker)) return;
      if (Date.now() > deadline) {
        await this.stop();
        throw new TimeoutError(
          'E_DNSMASQ_TIMEOUT',
          `dnsmasq did not confirm its ${what} within ${this.#readyTimeoutMs} ms`,
          {
            hint: `Look at ${p.log}.`,
          },
        );
      }
      await this.#sleep(50);
    }
  }
}

function logSize(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

function readFrom(file: string, offset: number): string {
  if (!existsSync(file)) return '';
  return readFileSync(file).subarray(offset).toString('utf8');
}
