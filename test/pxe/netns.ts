/**
 * A throw-away L2 segment for the boot-service tests: a bridge on the host
 * (the "deploy host" side) and client network namespaces behind veth pairs.
 * Every name carries the test process id, so parallel runs do not collide,
 * and `destroy()` removes namespaces, links and the iptables rule.
 * Traffic stays on this bridge: nothing is routed anywhere else.
 */
import { spawnSync } from 'node:child_process';
import { $ } from 'zx';

/** Fail (never skip) when a Debian tool the tests need is missing. */
export function requireTools(...names: string[]): void {
  for (const name of names) {
    const r = spawnSync('sh', ['-c', 'command -v "$0"', name], { encoding: 'utf8' });
    if (r.status !== 0 || !r.stdout.trim()) {
      throw new Error(`${name} is not installed: run "apt-get install dnsmasq-base busybox iproute2 iptables curl"`);
    }
  }
}

/** One client namespace with its eth0. */
export interface Client {
  readonly ns: string;
  readonly hostSide: string;
}

/** The segment. */
export class Segment {
  readonly bridge: string;
  readonly clients: Client[] = [];
  #rule = false;
  #created = false;

  constructor(
    readonly tag: string,
    /** Address of the bridge with its prefix, e.g. 10.231.77.1/24. */
    readonly hostCidr: string,
  ) {
    this.bridge = `stkbr-${tag}`;
  }

  async create(): Promise<void> {
    this.#created = true;
    await $`ip link add ${this.bridge} type bridge`;
    await $`ip addr add ${this.hostCidr} dev ${this.bridge}`;
    await $`ip link set ${this.bridge} up`;
    // dockerd loads br_netfilter and drops forwarded bridge traffic unless allowed here
    const chain = await $({ nothrow: true, quiet: true })`iptables -n -L DOCKER-USER`;
    if (chain.exitCode === 0) {
      await $`iptables -I DOCKER-USER -i ${this.bridge} -o ${this.bridge} -j ACCEPT`;
      this.#rule = true;
    }
  }

  /** Add a client namespace whose eth0 has the given MAC. */
  async addClient(mac: string): Promise<Client> {
    const i = this.clients.length + 1;
    const c: Client = { ns: `stackctl-t-${this.tag}-${i}`, hostSide: `stkv${i}-${this.tag}` };
    this.clients.push(c);
    await $`ip netns add ${c.ns}`;
    await $`ip link add ${c.hostSide} type veth peer name eth0 netns ${c.ns}`;
    await $`ip link set ${c.hostSide} master ${this.bridge} up`;
    await $`ip -n ${c.ns} link set eth0 address ${mac}`;
    await $`ip -n ${c.ns} link set eth0 up`;
    await $`ip -n ${c.ns} link set lo up`;
    return c;
  }

  /** Run a command inside a client namespace; never throws, returns output and status. */
  async exec(c: Client, argv: readonly string[]): Promise<{ code: number; out: string }> {
    const r = await $({ nothrow: true, quiet: true })`ip netns exec ${c.ns} ${argv}`;
    return { code: r.exitCode ?? -1, out: r.stdout + r.stderr };
  }

  async destroy(): Promise<void> {
    if (!this.#created) return;
    for (const c of this.clients) {
      await $({ nothrow: true, quiet: true })`ip netns del ${c.ns}`;
      await $({ nothrow: true, quiet: true })`ip link del ${c.hostSide}`;
    }
    await $({ nothrow: true, quiet: true })`ip link del ${this.bridge}`;
    if (this.#rule)
      await $({ nothrow: true, quiet: true })`iptables -D DOCKER-USER -i ${this.bridge} -o ${this.bridge} -j ACCEPT`;
  }
}
