/**
 * The host side of the VM lab: Linux bridge, tap devices, the DOCKER-USER
 * accept rule, and the checks that keep the lab from touching anything it
 * did not create. Commands run through an injectable runner (zx by default,
 * which quotes every argument: no shell ever sees an inventory value).
 */
import { spawnSync } from 'node:child_process';
import { $ } from 'zx';
import { IoError, RemoteError } from '../../core/errors.js';
import { overlaps, parseCidr4, type Cidr4 } from '../../core/ipv4.js';

/** What one command printed and how it ended. */
export interface CommandOutput {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs one command given as an argument vector; never throws for a non-zero status. */
export type RunArgv = (argv: readonly string[]) => Promise<CommandOutput>;

/** The default runner: zx, quiet, no throw. */
export const runArgv: RunArgv = async (argv) => {
  const r = await $({ nothrow: true, quiet: true })`${argv}`;
  return { code: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr };
};

/** Commands the VM lab runs, with the Debian package of each (for the install hint). */
export const VM_LAB_TOOLS: Readonly<Record<string, string>> = {
  ip: 'iproute2',
  iptables: 'iptables',
  'qemu-system-x86_64': 'qemu-system-x86',
  'qemu-img': 'qemu-utils',
};

/** The commands of `tools` that are not on the PATH. */
export function missingTools(tools: Readonly<Record<string, string>>): string[] {
  return Object.keys(tools).filter((tool) => {
    const r = spawnSync('sh', ['-c', 'command -v "$0"', tool], { encoding: 'utf8' });
    return r.status !== 0 || !r.stdout.trim();
  });
}

/** Throw IoError E_LAB_TOOLS naming the missing commands and the apt-get line that installs them. */
export function requireTools(tools: Readonly<Record<string, string>>, what: string): void {
  const missing = missingTools(tools);
  if (!missing.length) return;
  const packages = [...new Set(missing.map((t) => tools[t]!))];
  throw new IoError('E_LAB_TOOLS', `${what} needs ${missing.join(', ')}, not found on the PATH`, {
    hint: `Install them: apt-get install ${packages.join(' ')}`,
    details: { missing, packages },
  });
}

/** Fails with a clear error when not root: bridges, taps and iptables rules need it. */
export function requireRoot(what: string): void {
  if (process.getuid?.() !== 0) {
    throw new IoError('E_LAB_ROOT', `${what} creates a bridge, tap devices and an iptables rule: it needs root`, {
      hint: 'Run it as root (sudo).',
    });
  }
}

/** One IPv4 route of the host (any table). */
export interface HostRoute {
  readonly dst: string;
  readonly dev: string;
  readonly table?: string;
}

/**
 * Routes of the host that share addresses with `cidr`, except those on
 * `ownDevice` (the lab's own bridge, when it already exists). The default
 * route and routes without a destination do not count: they overlap
 * everything and mean nothing here.
 */
export function clashingRoutes(cidr: string, routes: readonly HostRoute[], ownDevice: string): HostRoute[] {
  const net = parseCidr4(cidr);
  if (!net) return [];
  return routes.filter((r) => {
    if (r.dev === ownDevice || r.dst === 'default' || !r.dst) return false;
    const dst: Cidr4 | undefined = parseCidr4(r.dst.includes('/') ? r.dst : `${r.dst}/32`);
    return dst !== undefined && dst.prefix > 0 && overlaps(dst, net);
  });
}

/** Host network operations; each takes an argument vector through `run`. */
export class HostNetwork {
  constructor(private readonly run: RunArgv = runArgv) {}

  async #must(argv: readonly string[], what: string): Promise<CommandOutput> {
    const r = await this.run(argv);
    if (r.code !== 0) {
      throw new RemoteError('E_LAB_HOST', `${what} failed: ${(r.stderr || r.stdout).trim() || `status ${r.code}`}`, {
        hint: `The command was: ${argv.join(' ')}. Run it by hand to see more.`,
        details: { argv },
      });
    }
    return r;
  }

  /** True when a network interface of that name exists. */
  async linkExists(name: string): Promise<boolean> {
    return (await this.run(['ip', 'link', 'show', 'dev', name])).code === 0;
  }

  /** The interface's kind (bridge, tun, ...) from `ip -d`, or undefined when it does not exist. */
  async linkKind(name: string): Promise<string | undefined> {
    const r = await this.run(['ip', '-j', '-d', 'link', 'show', 'dev', name]);
    if (r.code !== 0) return undefined;
    const parsed = JSON.parse(r.stdout || '[]') as { linkinfo?: { info_kind?: string } }[];
    return parsed[0]?.linkinfo?.info_kind ?? 'unknown';
  }

  /** Names of the host's interfaces. */
  async links(): Promise<string[]> {
    const r = await this.#must(['ip', '-j', 'link', 'show'], 'listing interfaces');
    return (JSON.parse(r.stdout || '[]') as { ifname: string }[]).map((l) => l.ifname);
  }

  /** Every IPv4 route in every table. */
  async routes(): Promise<HostRoute[]> {
    const r = await this.#must(['ip', '-j', '-4', 'route', 'show', 'table', 'all'], 'listing routes');
    return (JSON.parse(r.stdout || '[]') as { dst?: string; dev?: string; table?: string }[]).map((x) => ({
      dst: x.dst ?? '',
      dev: x.dev ?? '',
      ...(x.table ? { table: x.table } : {}),
    }));
  }

  /** Addresses on an interface as `address/prefix` (IPv4 and IPv6). */
  async addresses(dev: string): Promise<string[]> {
    const r = await this.#must(['ip', '-j', 'addr', 'show', 'dev', dev], `reading the addresses of ${dev}`);
    const parsed = JSON.parse(r.stdout || '[]') as { addr_info?: { local: string; prefixlen: number }[] }[];
    return (parsed[0]?.addr_info ?? []).map((a) => `${a.local}/${a.prefixlen}`);
  }

  async createBridge(name: string): Promise<void> {
    await this.#must(['ip', 'link', 'add', name, 'type', 'bridge'], `creating bridge ${name}`);
  }

  /** Add an address; IPv6 ones without duplicate detection, so dnsmasq can send router advertisements at once. */
  async addAddress(dev: string, cidr: string): Promise<void> {
    const argv = cidr.includes(':')
      ? ['ip', '-6', 'addr', 'add', cidr, 'dev', dev, 'nodad']
      : ['ip', 'addr', 'add', cidr, 'dev', dev];
    await this.#must(argv, `adding ${cidr} to ${dev}`);
  }

  async setUp(dev: string, master?: string): Promise<void> {
    const argv = ['ip', 'link', 'set', dev, ...(master ? ['master', master] : []), 'up'];
    await this.#must(argv, `bringing ${dev} up`);
  }

  /** An 802.1Q interface on top of `parent` (the lab bridge). */
  async createVlan(parent: string, name: string, vlan: number): Promise<void> {
    await this.#must(
      ['ip', 'link', 'add', 'link', parent, 'name', name, 'type', 'vlan', 'id', String(vlan)],
      `creating VLAN ${vlan} interface ${name} (the kernel needs 802.1Q: modprobe 8021q; else drop the network's vlan from the lab inventory)`,
    );
  }

  async createTap(name: string): Promise<void> {
    await this.#must(['ip', 'tuntap', 'add', 'dev', name, 'mode', 'tap'], `creating tap ${name}`);
  }

  /** Delete an interface; true when it existed. */
  async deleteLink(name: string): Promise<boolean> {
    if (!(await this.linkExists(name))) return false;
    await this.#must(['ip', 'link', 'del', name], `deleting ${name}`);
    return true;
  }

  /** True when iptables has that chain (Docker's DOCKER-USER exists only while dockerd runs or ran). */
  async chainExists(chain: string): Promise<boolean> {
    return (await this.run(['iptables', '-n', '-L', chain])).code === 0;
  }

  /** True when the rule (`iptables -C`) is present. */
  async ruleExists(rule: readonly string[]): Promise<boolean> {
    const [chain, ...spec] = rule;
    return (await this.run(['iptables', '-C', chain!, ...spec])).code === 0;
  }

  /** Insert the rule at the top of its chain. */
  async insertRule(rule: readonly string[]): Promise<void> {
    const [chain, ...spec] = rule;
    await this.#must(['iptables', '-I', chain!, ...spec], `inserting iptables rule ${rule.join(' ')}`);
  }

  /** Delete one copy of the rule; true when it was there. */
  async deleteRule(rule: readonly string[]): Promise<boolean> {
    if (!(await this.ruleExists(rule))) return false;
    const [chain, ...spec] = rule;
    await this.#must(['iptables', '-D', chain!, ...spec], `deleting iptables rule ${rule.join(' ')}`);
    return true;
  }

  /** Rules of a chain as `iptables -S` prints them ('' lines dropped). */
  async listRules(chain: string): Promise<string[]> {
    const r = await this.run(['iptables', '-S', chain]);
    return r.code === 0 ? r.stdout.split('\n').filter(Boolean) : [];
  }

  /** Create a sparse qcow2 disk (qemu-img). */
  async createDisk(file: string, sizeGiB: number): Promise<void> {
    await this.#must(['qemu-img', 'create', '-q', '-f', 'qcow2', file, `${sizeGiB}G`], `creating disk ${file}`);
  }
}
