/**
 * A throw-away provisioning segment for VM tests: a bridge on the host with
 * the deploy host's IPv4 address and an IPv6 ULA (dnsmasq's router
 * advertisements spare iPXE a ~13 s wait), and tap devices for QEMU NICs.
 * Names carry a tag from the test process id, so runs do not collide, and
 * `destroy()` removes taps, bridge and the iptables rule. Traffic stays on
 * this bridge: nothing is routed anywhere else. A segment left by a killed
 * run (its tag's process is gone) that holds the same address is removed
 * first: its link-down route would otherwise take the host's replies.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmdirSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HOST_BUILD_TOOLS, TCG_HOST_KERNEL_ARGS, buildHostImage, type HostBuild } from '../../src/images/host.js';
import { $ } from 'zx';

/** A Debian package for each tool the VM tests run. */
export const VM_TEST_TOOLS: Readonly<Record<string, string>> = {
  'qemu-system-x86_64': 'qemu-system-x86',
  dnsmasq: 'dnsmasq-base',
  ip: 'iproute2',
  iptables: 'iptables',
  'apt-get': 'apt',
  'dpkg-deb': 'dpkg',
};

/** Fail (never skip) when a tool is missing, naming the packages to install. */
export function requireVmTools(): void {
  const missing = Object.entries(VM_TEST_TOOLS).filter(([tool]) => {
    const r = spawnSync('sh', ['-c', 'command -v "$0"', tool], { encoding: 'utf8' });
    return r.status !== 0 || !r.stdout.trim();
  });
  if (missing.length) {
    throw new Error(
      `missing ${missing.map(([t]) => t).join(', ')}: run "apt-get install ${[...new Set(missing.map(([, p]) => p))].join(' ')}"`,
    );
  }
  if (process.getuid?.() !== 0) throw new Error('the VM tests create bridges and taps: run them as root');
}

/** Fail (never skip) when a tool of the host image build is missing, naming the packages to install. */
export function requireHostImageTools(): void {
  const missing = Object.entries(HOST_BUILD_TOOLS).filter(([tool]) => {
    const r = spawnSync('sh', ['-c', 'command -v "$0"', tool], { encoding: 'utf8' });
    return r.status !== 0 || !r.stdout.trim();
  });
  if (!existsSync('/usr/lib/grub/i386-pc/boot.img')) missing.push(['grub-mkimage', 'grub-pc-bin']);
  if (missing.length) {
    throw new Error(
      `the host image build needs ${missing.map(([t]) => t).join(', ')}: run "apt-get install ${[...new Set(missing.map(([, p]) => p))].join(' ')}"`,
    );
  }
}

/** The segment. */
export class VmSegment {
  readonly bridge: string;
  readonly taps: string[] = [];
  #rule = false;
  #created = false;

  constructor(
    readonly tag: string,
    /** Bridge address with prefix, e.g. 10.231.91.1/24. */
    readonly hostCidr: string,
    /** ULA address of the bridge with its /64, e.g. fd9a:231:91::1/64. */
    readonly hostCidr6: string,
  ) {
    this.bridge = `stkib-${tag}`;
  }

  async create(): Promise<void> {
    await removeStaleHolders(this.hostCidr.split('/')[0]!, this.bridge);
    this.#created = true;
    await $`ip link add ${this.bridge} type bridge`;
    await $`ip addr add ${this.hostCidr} dev ${this.bridge}`;
    // nodad: the address is usable at once (duplicate detection would delay dnsmasq's RAs)
    await $`ip -6 addr add ${this.hostCidr6} dev ${this.bridge} nodad`;
    await $`ip link set ${this.bridge} up`;
    // dockerd loads br_netfilter and drops forwarded bridge traffic unless allowed here
    const chain = await $({ nothrow: true, quiet: true })`iptables -n -L DOCKER-USER`;
    if (chain.exitCode === 0) {
      await $`iptables -I DOCKER-USER -i ${this.bridge} -o ${this.bridge} -j ACCEPT`;
      this.#rule = true;
    }
  }

  /** A new tap device on the bridge, for one QEMU NIC. */
  async addTap(): Promise<string> {
    const tap = `stkit${this.taps.length}-${this.tag}`;
    this.taps.push(tap);
    await $`ip tuntap add dev ${tap} mode tap`;
    await $`ip link set ${tap} master ${this.bridge} up`;
    return tap;
  }

  async destroy(): Promise<void> {
    if (!this.#created) return;
    for (const tap of this.taps) await $({ nothrow: true, quiet: true })`ip link del ${tap}`;
    await $({ nothrow: true, quiet: true })`ip link del ${this.bridge}`;
    if (this.#rule)
      await $({ nothrow: true, quiet: true })`iptables -D DOCKER-USER -i ${this.bridge} -o ${this.bridge} -j ACCEPT`;
  }
}

/** The process id a segment tag stands for (see the tests: the pid in base 36, last 5 digits). */
export function tagPid(tag: string): number | undefined {
  return /^[0-9a-z]{1,5}$/.test(tag) ? parseInt(tag, 36) : undefined;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Before a segment takes `address`: a test bridge of a dead run that holds it
 * is deleted with its taps and iptables rule; any other holder is an error
 * that names it. Two interfaces with one prefix give the kernel one route,
 * the older one: a killed run's link-down bridge silently swallowed every
 * reply to the VMs (DHCP, sent raw, still worked).
 */
export async function removeStaleHolders(address: string, self: string): Promise<string[]> {
  const out = await $({ quiet: true })`ip -j -4 addr show`;
  const links = JSON.parse(out.stdout) as { ifname: string; addr_info?: { local: string }[] }[];
  const removed: string[] = [];
  for (const link of links) {
    if (link.ifname === self || !(link.addr_info ?? []).some((a) => a.local === address)) continue;
    const tag = /^stkib-(.+)$/.exec(link.ifname)?.[1];
    const pid = tag === undefined ? undefined : tagPid(tag);
    if (pid === undefined || alive(pid)) {
      throw new Error(
        `${link.ifname} already holds ${address}` +
          (pid === undefined ? '' : ` for a running test (pid ${pid})`) +
          `: remove it ("ip link del ${link.ifname}") or wait for that run`,
      );
    }
    const taps = (
      JSON.parse((await $({ quiet: true })`ip -j link show master ${link.ifname}`).stdout) as { ifname: string }[]
    ).map((l) => l.ifname);
    for (const tap of taps) await $({ nothrow: true, quiet: true })`ip link del ${tap}`;
    await $({ quiet: true })`ip link del ${link.ifname}`;
    for (;;) {
      const r = await $({
        nothrow: true,
        quiet: true,
      })`iptables -D DOCKER-USER -i ${link.ifname} -o ${link.ifname} -j ACCEPT`;
      if (r.exitCode !== 0) break;
    }
    removed.push(link.ifname);
  }
  return removed;
}

/** The host image the VM tests deploy (with TCG_HOST_KERNEL_ARGS); kept across runs (a rebuild with nothing changed takes milliseconds). */
export const TEST_HOST_IMAGE_DIR = join(tmpdir(), 'stackctl-test-host');
const HOST_IMAGE_LOCK = `${TEST_HOST_IMAGE_DIR}.lock`;

/**
 * Build (or find) the test host image under a lock: test files run in
 * parallel, and two builds into one folder could pair one build's image with
 * the other's recorded checksum.
 */
export async function testHostImage(log: (line: string) => void = () => undefined): Promise<HostBuild> {
  for (;;) {
    try {
      mkdirSync(HOST_IMAGE_LOCK);
      break;
    } catch {
      // a lock older than 30 minutes was left by a killed run
      try {
        if (Date.now() - statSync(HOST_IMAGE_LOCK).mtimeMs > 30 * 60_000) rmdirSync(HOST_IMAGE_LOCK);
      } catch {
        // gone meanwhile
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  try {
    // the VMs run under TCG: the image boots without the kernel's crypto self-tests
    return await buildHostImage({ outDir: TEST_HOST_IMAGE_DIR, log, extraKernelArgs: TCG_HOST_KERNEL_ARGS });
  } finally {
    rmdirSync(HOST_IMAGE_LOCK);
  }
}
