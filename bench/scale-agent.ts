/**
 * The simulated side of `bench:scale`: machines behind virtual BMCs whose
 * network boot runs a simulated ramdisk agent against the real boot server,
 * as images/ramdisk/agent.sh does on a real node: fetch the boot script from
 * the node's own address, take the token and purpose from its kernel
 * arguments, then report the hardware (inspect), or fetch the command, send
 * heartbeats, download the image and check its SHA-256, and post the result
 * (clean, deploy), and power the machine off. What a real boot spends in
 * firmware, PXE and the kernel is a fixed delay. And the inventory of the
 * simulated site.
 */
import { createHash, generateKeyPairSync } from 'node:crypto';
import { request } from 'node:http';
import { generateInventoryYaml } from '../src/inventory/generate.js';
import { InMemoryMachine } from '../src/lab/vbmc/machine.js';
import { macHexhyp } from '../src/pxe/ipxe.js';

/** BMC i listens on UDP (IPMI) or TCP (Redfish) port BASE_PORT + i. */
export const BASE_PORT = 20000;
/** The deploy host's address on the loopback provisioning network 127.20.0.0/16. */
export const GATEWAY = '127.20.0.1';

/** The inventory text: the generator's, on a loopback provisioning network, BMCs on this machine's ports. */
export function scaleInventory(count: number, basePort: number = BASE_PORT): string {
  const text = generateInventoryYaml({
    name: 'scale',
    controllers: Math.min(3, count),
    computes: count - Math.min(3, count),
  }).replace(
    'cidr: 10.128.0.0/16, gateway: 10.128.0.1, dhcp_range: [10.128.255.0, 10.128.255.254]',
    `cidr: 127.20.0.0/16, gateway: ${GATEWAY}`,
  );
  let i = 0;
  return text.replace(/bmc: \{ address: '[^']*'/g, () => {
    const port = basePort + i;
    const address = i % 2 === 0 ? `ipmi://127.0.0.1:${port}` : `redfish+http://127.0.0.1:${port}/redfish/v1/Systems/1`;
    i += 1;
    return `bmc: { address: '${address}'`;
  });
}

/** What the boot script told the ramdisk: absent when it boots the disk. */
export interface RamdiskArgs {
  readonly node: string;
  readonly api: string;
  readonly token: string;
  readonly purpose: string;
}

/** Read the kernel arguments of a node's boot script (src/pxe/ipxe.ts kernelArgs); undefined for a disk boot. */
export function parseBootScript(script: string): RamdiskArgs | undefined {
  const arg = (name: string): string | undefined => new RegExp(`(?:^|\\s)${name}=(\\S+)`).exec(script)?.[1];
  const node = arg('stackctl\\.node');
  const api = arg('stackctl\\.api');
  const token = arg('stackctl\\.token');
  const purpose = arg('stackctl\\.purpose');
  return node && api && token && purpose ? { node, api, token, purpose } : undefined;
}

/** The agent's command, as the boot server renders it (renderAgentCommand). */
export type SimCommand =
  | { readonly kind: 'wait' }
  | { readonly kind: 'clean' }
  | { readonly kind: 'poweroff' }
  | {
      readonly kind: 'deploy';
      readonly url: string;
      readonly sha256: string;
      readonly bytes: number;
      readonly hostKeyComment: string | undefined;
    };

/** Parse a command answer; undefined when it is cut short (no `end` line) or unknown. */
export function parseCommand(text: string): SimCommand | undefined {
  const lines = text.split('\n').filter((l) => l.length > 0);
  if (lines.at(-1) !== 'end') return undefined;
  const kind = lines[0];
  if (kind === 'wait' || kind === 'clean' || kind === 'poweroff') return { kind };
  if (kind !== 'deploy') return undefined;
  const image = lines.find((l) => l.startsWith('image '))?.split(' ');
  if (!image || image.length < 5) return undefined;
  const hostKey = lines.find((l) => l.startsWith('hostkey '))?.split(' ');
  return {
    kind,
    url: image[1]!,
    sha256: image[2]!,
    bytes: Number(image[4]),
    hostKeyComment: hostKey?.[2],
  };
}

/** An ed25519 public key as an OpenSSH line (a fresh key per deploy, as the real agent makes). */
export function ed25519PublicLine(comment: string): string {
  const { publicKey } = generateKeyPairSync('ed25519');
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url');
  const str = (b: Buffer): Buffer => Buffer.concat([Buffer.from([0, 0, 0, b.length]), b]);
  const blob = Buffer.concat([str(Buffer.from('ssh-ed25519')), str(raw)]);
  return `ssh-ed25519 ${blob.toString('base64')} ${comment}`;
}

/** The hardware a simulated node reports: 2 CPUs, 4 GiB, one 100 GB disk, its provisioning NIC. */
export function introspectionOf(node: { readonly name: string; readonly mac: string; readonly ip: string }): object {
  return {
    cpu: { count: 2, arch: 'x86_64', model: 'simulated' },
    memory_mib: 4096,
    disks: [{ name: '/dev/sda', size_bytes: 100e9, serial: `SIM-${node.name}`, rotational: false }],
    interfaces: [{ name: 'eth0', mac: node.mac, ipv4: node.ip, link: 'up' }],
    boot_mode: 'bios',
  };
}

/** One HTTP exchange from `localAddress` (the node's own address: the boot server checks it). */
export function httpCall(
  url: string,
  o: {
    readonly localAddress: string;
    readonly method?: string;
    readonly token?: string;
    readonly json?: unknown;
  },
): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const body = o.json === undefined ? undefined : Buffer.from(JSON.stringify(o.json));
    const req = request(
      url,
      {
        method: o.method ?? (body ? 'POST' : 'GET'),
        localAddress: o.localAddress,
        agent: false,
        headers: {
          ...(o.token ? { authorization: `Bearer ${o.token}` } : {}),
          ...(body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Timing of a simulated node. */
export interface SimTiming {
  /** Power-on to the first HTTP request of iPXE (firmware, PXE, DHCP, TFTP). */
  readonly bootMs: number;
  /** Wait between two command polls when told `wait`. */
  readonly waitMs: number;
}

/** What the simulated agents did, for the report. */
export interface SimCounters {
  boots: number;
  diskBoots: number;
  calls: number;
  failures: number;
  bytes: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * A machine whose power-on from the network boots a simulated ramdisk agent
 * against `bootUrl`; from the disk, nothing (the deployed system).
 */
export class SimulatedNode extends InMemoryMachine {
  constructor(
    readonly node: { readonly name: string; readonly mac: string; readonly ip: string },
    readonly bootUrl: string,
    readonly timing: SimTiming,
    readonly counters: SimCounters,
  ) {
    super({ name: node.name, power: 'off' });
  }

  override async powerOn(): Promise<void> {
    const wasOff = (await this.powerState()) === 'off';
    await super.powerOn();
    if (wasOff) this.#booted();
  }

  override async reset(): Promise<void> {
    const wasOn = (await this.powerState()) === 'on';
    await super.reset();
    if (wasOn) this.#booted();
  }

  #booted(): void {
    this.counters.boots += 1;
    if (this.lastBootDevice !== 'pxe') {
      this.counters.diskBoots += 1;
      return;
    }
    const boots = this.boots;
    void sleep(this.timing.bootMs)
      .then(() => (this.boots === boots ? this.#ramdisk() : undefined))
      .catch(() => void (this.counters.failures += 1));
  }

  async #call(url: string, o: Omit<Parameters<typeof httpCall>[1], 'localAddress'> = {}): Promise<Buffer> {
    this.counters.calls += 1;
    const r = await httpCall(url, { ...o, localAddress: this.node.ip });
    if (r.status >= 300) throw new Error(`${o.method ?? 'GET'} ${url}: HTTP ${r.status}`);
    this.counters.bytes += r.body.length;
    return r.body;
  }

  /** What iPXE and the ramdisk agent do after a network boot. */
  async #ramdisk(): Promise<void> {
    const script = (await this.#call(`${this.bootUrl}/boot/${macHexhyp(this.node.mac)}.ipxe`)).toString();
    const args = parseBootScript(script);
    if (!args) return; // not armed: iPXE boots the disk
    const kernel = /^kernel --name kernel (\S+)/m.exec(script)?.[1];
    const initrd = /^initrd --name initrd (\S+)/m.exec(script)?.[1];
    for (const f of [kernel, initrd]) if (f) await this.#call(f);
    const api = `${args.api}/v1/agent/${args.node}`;
    const token = args.token;
    if (args.purpose === 'inspect') {
      await this.#call(`${api}/introspection`, { token, json: introspectionOf(this.node) });
      await this.powerOff();
      return;
    }
    let cmd: SimCommand | undefined;
    for (;;) {
      cmd = parseCommand((await this.#call(`${api}/command`, { token })).toString());
      if (cmd?.kind !== 'wait') break;
      await sleep(this.timing.waitMs);
    }
    if (!cmd || cmd.kind === 'poweroff') {
      await this.powerOff();
      return;
    }
    const beat = (step: string): Promise<Buffer> => this.#call(`${api}/heartbeat`, { token, json: { step } });
    if (cmd.kind === 'clean') {
      await beat('clean');
      await this.#call(`${api}/result`, {
        token,
        json: { status: 'ok', step: 'clean', message: 'wiped the partition tables and ends of: /dev/sda' },
      });
      await this.powerOff();
      return;
    }
    await beat('image-transfer');
    const t0 = performance.now();
    const image = await this.#call(cmd.url);
    const t1 = performance.now();
    await beat('verify-image');
    const sum = createHash('sha256').update(image).digest('hex');
    const t2 = performance.now();
    const ok = sum === cmd.sha256 && image.length === cmd.bytes;
    await beat('configure');
    await this.#call(`${api}/result`, {
      token,
      json: ok
        ? {
            status: 'ok',
            step: 'deploy',
            message: 'image written to /dev/sda',
            root_device: '/dev/sda',
            image_sha256: sum,
            ...(cmd.hostKeyComment ? { host_key: ed25519PublicLine(cmd.hostKeyComment) } : {}),
            timings: { 'image-transfer': (t1 - t0) / 1000, 'verify-image': (t2 - t1) / 1000 },
          }
        : { status: 'failed', step: 'verify-image', message: `checksum ${sum} differs` },
    });
    await this.powerOff();
  }
}
