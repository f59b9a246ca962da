/**
 * Provisioning for real, end to end: two QEMU VMs (TCG) on a bridge of their
 * own, our dnsmasq and boot server, the deploy ramdisk and the host image we
 * built. Both nodes are inspected, then deployed from power-off to active;
 * stackctl logs in by SSH with the host key each node's agent made on the
 * node and reported with its result (never trusting on first use; no private
 * key crosses the network) and runs `uname -a` and `docker info`. One
 * node is then undeployed (cleaned) and its disk must no longer boot.
 *
 * Bad input, with the real components: an image whose checksum differs from
 * the recorded one fails its deploy before the node can boot it (node off,
 * reason in the history) while the other node deploys; a node whose MAC in
 * the inventory is wrong times out and the error says what the boot services
 * saw for that MAC: nothing.
 *
 * Needs root and the Debian packages qemu-system-x86, dnsmasq-base, iproute2,
 * iptables, debootstrap, fdisk, e2fsprogs, grub-pc-bin, and apt access. It
 * fails, never skips, when they are missing. The ramdisk and host image are
 * cached across runs in /tmp (the first build of the host image takes minutes).
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, closeSync } from 'node:fs';
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { $ } from 'zx';
import type { StackctlEvent } from '../../src/core/events.js';
import type { HostBuild } from '../../src/images/host.js';
import { buildRamdisk, type RamdiskBuild } from '../../src/images/ramdisk.js';
import { QEMU_FILES, QemuMachine } from '../../src/lab/vbmc/qemu.js';
import {
  AgentResults,
  bootTrailFrom,
  stageImage,
  type DeployDeps,
  type DeployImage,
  type DeployTarget,
} from '../../src/provision/deploy.js';
import {
  IntrospectionStore,
  introspectionReportHandler,
  reconcileInspection,
  startInspection,
  type InspectDeps,
} from '../../src/provision/inspect.js';
import { NodeStateStore } from '../../src/provision/machine.js';
import { provisionNodes, undeployNodes, type ProvisionResult } from '../../src/provision/provision.js';
import { DnsmasqService } from '../../src/pxe/dnsmasq.js';
import { BootServer } from '../../src/pxe/http.js';
import { LAB_KERNEL_ARGS } from '../../src/pxe/services.js';
import { ensureClientKey } from '../../src/remote/keys.js';
import { recordedKeys } from '../../src/remote/known-hosts.js';
import { SshPool } from '../../src/remote/ssh.js';
import { machinePower } from './machine-power.js';
import { VmSegment, requireHostImageTools, requireVmTools, testHostImage } from './vm-segment.js';

const HOST = '10.231.93.1';
const PREFIX = 24;
const MEMORY_MIB = 1024;
const DISK_BYTES = 4 * 1024 ** 3;

interface Vm {
  readonly node: string;
  /** The MAC the inventory has. */
  readonly mac: string;
  /** The MAC the machine really has (differs for the wrong-MAC node). */
  readonly realMac: string;
  readonly ip: string;
  readonly serial: string;
}
const NODES: readonly Vm[] = [
  { node: 'deploy-a', mac: '52:54:00:5d:00:01', realMac: '52:54:00:5d:00:01', ip: '10.231.93.21', serial: 'STKDEPA' },
  { node: 'deploy-b', mac: '52:54:00:5d:00:02', realMac: '52:54:00:5d:00:02', ip: '10.231.93.22', serial: 'STKDEPB' },
  // the inventory's MAC is wrong: the machine's NIC has another one
  { node: 'deploy-x', mac: '52:54:00:5d:00:99', realMac: '52:54:00:5d:00:03', ip: '10.231.93.23', serial: 'STKDEPX' },
];
const [A, B, X] = NODES as [Vm, Vm, Vm];

/** Kept across runs: a rebuild with nothing changed takes milliseconds. */
const RAMDISK_DIR = join(tmpdir(), 'stackctl-test-ramdisk');

/** LAB-FACTS: ~13 s to the ramdisk, ~25 s from disk to SSH under TCG; a busy shared host needs slack. */
const DEPLOY_TIMEOUT_MS = 600_000;
const WRONG_MAC_TIMEOUT_MS = 25_000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Keeps every boot's serial console of a VM. QEMU truncates the console at
 * each start, after moving the previous boot's aside (QEMU_FILES.serialPrevious),
 * and the machine removes both when destroyed: they are read every second, and
 * a boot's last lines (printed just before the guest powered itself off) are
 * completed from the previous-boot file.
 */
class ConsoleRecorder {
  readonly #boots = new Map<string, string[]>();
  readonly #timer: NodeJS.Timeout;
  constructor(private readonly runDirs: () => ReadonlyMap<string, string>) {
    this.#timer = setInterval(() => this.poll(), 1000);
  }
  poll(): void {
    for (const [node, dir] of this.runDirs()) {
      const read = (name: string): string | undefined => {
        try {
          return readFileSync(join(dir, name), 'utf8');
        } catch {
          return undefined;
        }
      };
      // read the previous boot first: a start between the two reads moves the current one there
      const previous = read(QEMU_FILES.serialPrevious);
      const text = read(QEMU_FILES.serial);
      const boots = this.#boots.get(node) ?? this.#boots.set(node, ['']).get(node)!;
      const last = boots[boots.length - 1]!;
      if (previous !== undefined && previous.length > last.length && previous.startsWith(last)) {
        boots[boots.length - 1] = previous;
        if (text) boots.push(text);
        continue;
      }
      if (text === undefined) continue;
      if (text.startsWith(last)) boots[boots.length - 1] = text;
      else boots.push(text);
    }
  }
  /** Every boot's console, oldest first. */
  text(node: string): string {
    this.poll();
    return (this.#boots.get(node) ?? []).filter(Boolean).join('\n--- next boot ---\n');
  }
  stop(): void {
    clearInterval(this.#timer);
  }
}

describe('provisioning of PXE-booted VMs', () => {
  const tag = process.pid.toString(36).slice(-5);
  const seg = new VmSegment(tag, `${HOST}/${PREFIX}`, 'fd9a:231:93::1/64');
  const events: StackctlEvent[] = [];
  const vms = new Map<string, QemuMachine>();
  let dir: string;
  let ramdisk: RamdiskBuild;
  let host: HostBuild;
  let image: DeployImage;
  let server: BootServer | undefined;
  let dnsmasq: DnsmasqService | undefined;
  let pool: SshPool | undefined;
  let nodes: NodeStateStore;
  /** One store: the boot server's callback writes the reports the inspect workflow reads. */
  let intro: IntrospectionStore;
  let deps: DeployDeps;
  const results = new AgentResults();
  const tokens: string[] = [];
  const phases = new Map<string, ProvisionResult>();
  /** The wrong-MAC node's deploy, started while another node is undeployed. */
  let wrongMac: Promise<ProvisionResult[]> | undefined;
  const consoles = new ConsoleRecorder(() => new Map([...vms].map(([n, vm]) => [n, vm.runDir] as const)));

  const target = (v: Vm): DeployTarget => ({
    node: v.node,
    mac: v.mac,
    ip: v.ip,
    prefix: PREFIX,
    rootDevice: { serial: v.serial },
  });

  beforeAll(async () => {
    requireVmTools();
    requireHostImageTools();
    let t = Date.now();
    ramdisk = await buildRamdisk({ outDir: RAMDISK_DIR });
    console.log(`ramdisk ${ramdisk.cached ? 'from cache' : 'built'} in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    t = Date.now();
    host = await testHostImage((l) => console.log(`host image: ${l}`));
    console.log(
      `host image ${host.cached ? 'from cache' : 'built'} in ${((Date.now() - t) / 1000).toFixed(1)} s: ` +
        `${host.manifest.image.size} bytes compressed, ${host.manifest.raw.size} bytes raw`,
    );

    dir = mkdtempSync(join(tmpdir(), 'stackctl-deploy-'));
    // dnsmasq drops to an unprivileged user: its folders must be readable by others
    chmodSync(dir, 0o755);
    mkdirSync(join(dir, 'tftp'), { mode: 0o755 });
    const files = join(dir, 'files');
    mkdirSync(files, { mode: 0o755 });
    for (const f of [ramdisk.kernel, ramdisk.initrd]) writeFileSync(join(files, f.name), readFileSync(f.path));
    image = stageImage(files, {
      path: host.imagePath,
      sha256: host.manifest.image.sha256,
      rawBytes: host.manifest.raw.size,
    });
    // a valid gzip stream that is not the image: its checksum cannot match the recorded one
    writeFileSync(join(files, 'tampered.img.gz'), gzipSync(randomBytes(2 * 1024 * 1024)));

    await seg.create();
    intro = IntrospectionStore.open(join(dir, 'lab.introspection.json'));
    nodes = NodeStateStore.open(join(dir, 'lab.nodes.json'), { events: { emit: (e) => events.push(e) } });
    server = await BootServer.start({
      host: HOST,
      port: 0,
      filesDir: files,
      kernel: ramdisk.kernel.name,
      initrd: ramdisk.initrd.name,
      // quiet + loglevel=3 also keep the kernel from printing its command line (and the token) on the console
      kernelArgs: [...LAB_KERNEL_ARGS],
      nodes: NODES.map((v) => ({ name: v.node, mac: v.mac, ip: v.ip })),
      onReport: (r) => {
        introspectionReportHandler(intro)(r);
        results.handler(r);
      },
      events: { emit: (e) => events.push(e) },
      newToken: () => {
        const token = randomBytes(32).toString('base64url');
        tokens.push(token);
        return token;
      },
    });
    dnsmasq = new DnsmasqService({
      interface: seg.bridge,
      serverAddress: HOST,
      httpPort: server.port,
      runDir: join(dir, 'dnsmasq'),
      tftpRoot: join(dir, 'tftp'),
      cidr: `10.231.93.0/${PREFIX}`,
      leaseTime: '1h',
      ipv6Prefix: 'fd9a:231:93::',
      leases: NODES.map((v) => ({ node: v.node, mac: v.mac, ip: v.ip })),
    });
    await dnsmasq.start();

    for (const v of NODES) {
      const tap = await seg.addTap();
      const disk = join(dir, `${v.node}.raw`);
      // sparse: the guest sees 4 GiB, the host spends what is written
      await $`truncate -s ${DISK_BYTES} ${disk}`;
      vms.set(
        v.node,
        new QemuMachine({
          name: v.node,
          runDir: join(dir, 'vm', v.node),
          memoryMiB: MEMORY_MIB,
          cpus: 2,
          nics: [{ mac: v.realMac, tap }],
          boot: { device: 'disk', persistent: true, uefi: false },
          extraArgs: [
            '-drive',
            `file=${disk},if=none,id=disk0,format=raw,cache=unsafe`,
            '-device',
            `virtio-blk-pci,drive=disk0,serial=${v.serial}`,
          ],
        }),
      );
    }

    const key = join(dir, 'ssh', 'id_ed25519');
    const { publicKey } = ensureClientKey(key);
    pool = new SshPool({ knownHostsFile: join(dir, 'lab.known_hosts'), privateKeyFile: key });
    deps = {
      nodes,
      boot: server,
      results,
      power: (n) => machinePower(vms.get(n)!),
      image,
      authorizedKey: `${publicKey.line} stackctl-test`,
      knownHostsFile: join(dir, 'lab.known_hosts'),
      bootTrail: bootTrailFrom(dnsmasq.paths.log, server),
      events: { emit: (e) => events.push(e) },
      timeoutMs: DEPLOY_TIMEOUT_MS,
      heartbeatTimeoutMs: 60_000,
      pollMs: 500,
    };
    // verifying (the BMC check) is another workflow: the nodes start manageable here
    for (const v of NODES) {
      nodes.apply(v.node, 'manage');
      nodes.apply(v.node, 'done', 'BMC answers');
    }
  }, 900_000);

  afterAll(async () => {
    consoles.stop();
    // what to read when the test fails (kept with STACKCTL_KEEP_TEST_DIR=1)
    if (dir && existsSync(dir)) {
      for (const v of NODES) writeFileSync(join(dir, `${v.node}.console`), consoles.text(v.node));
      writeFileSync(join(dir, 'events.jsonl'), events.map((e) => JSON.stringify(e) + '\n').join(''));
    }
    await pool?.close().catch(() => undefined);
    for (const vm of vms.values()) await vm.destroy().catch(() => undefined);
    await dnsmasq?.stop().catch(() => undefined);
    await server?.close().catch(() => undefined);
    await seg.destroy();
    if (dir && !process.env.STACKCTL_KEEP_TEST_DIR) rmSync(dir, { recursive: true, force: true });
  });

  function consoleOf(node: string, lines = 40): string {
    return consoles.text(node).split('\n').slice(-lines).join('\n');
  }

  /**
   * What a node that never reported went through: the boot services' trail for its MAC, its power
   * state, QEMU's own stderr and the console's last lines (a CI log keeps only the message).
   */
  async function whyNoBoot(v: Vm): Promise<string> {
    const vm = vms.get(v.node)!;
    const power = await vm.powerState().catch((e: unknown) => `unknown (${String(e)})`);
    let stderr = '';
    try {
      stderr = readFileSync(join(vm.runDir, QEMU_FILES.stderr), 'utf8').trim();
    } catch {
      stderr = '(none)';
    }
    return (
      `boot services for ${v.mac}: ${bootTrailFrom(dnsmasq!.paths.log, server!)(target(v))}\n` +
      `power: ${power}; QEMU stderr: ${stderr || '(empty)'}\n` +
      `console:\n${consoleOf(v.node) || '(empty)'}`
    );
  }

  it('inspects both nodes', async () => {
    const deps: InspectDeps = {
      nodes,
      introspection: intro,
      boot: server!,
      power: (n) => machinePower(vms.get(n)!),
      timeoutMs: 300_000,
      pollMs: 500,
    };
    const t0 = Date.now();
    await Promise.all(
      [A, B].map(async (v) => {
        startInspection(deps, v.node, 'test');
        for (;;) {
          const step = await reconcileInspection(deps, v.node);
          if (step.error) throw new Error(`${step.error.message}\n${await whyNoBoot(v)}`);
          if (!step.dirty) return;
          await sleep(step.requeueAfterMs ?? 500);
        }
      }),
    );
    console.log(`inspection of 2 nodes: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const stored = IntrospectionStore.open(join(dir, 'lab.introspection.json'));
    for (const v of [A, B]) {
      expect(nodes.get(v.node).state).toBe('manageable');
      expect(stored.get(v.node)?.data.disks).toEqual([
        expect.objectContaining({ name: '/dev/vda', size_bytes: DISK_BYTES, serial: v.serial }),
      ]);
      // automated cleaning is skipped for these new, empty disks; undeploy below cleans for real
      nodes.apply(v.node, 'provide', 'test');
      nodes.apply(v.node, 'done', 'new disks: cleaning skipped');
      expect(nodes.get(v.node).state).toBe('available');
    }
  }, 360_000);

  it('deploys both nodes from power-off to active, refusing a tampered image first on one of them', async () => {
    const t0 = Date.now();
    const ssh = { pool: pool!, timeoutMs: 300_000 };
    const [[bad], [good]] = await Promise.all([
      (async () => {
        // node A first gets an image whose bytes do not match the recorded checksum
        const tampered: DeployDeps = { ...deps, image: { ...image, name: 'tampered.img.gz' } };
        const first = await provisionNodes({ targets: [target(A)], deps: tampered, ssh });
        if (process.env.STACKCTL_E2E_SERIAL) while (!phases.has(B.node)) await sleep(500);
        const second = await provisionNodes({ targets: [target(A)], deps, ssh });
        phases.set(A.node, second[0]!);
        return [first[0]!, second[0]!];
      })(),
      (async () => {
        const r = await provisionNodes({ targets: [target(B)], deps, ssh });
        phases.set(B.node, r[0]!);
        return [r[0]!];
      })(),
    ]);
    console.log(`deploy of 2 nodes: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    console.log('per-phase wall times (s):');
    const names = [
      'power-on-to-agent',
      'image-transfer',
      'image-verify',
      'image-write',
      'configure',
      'result-to-disk-boot',
      'reboot-to-ssh',
      'total',
    ];
    console.log(['node'.padEnd(10), ...names.map((n) => n.padStart(20)), 'MiB served'.padStart(12)].join(''));
    for (const r of [phases.get(A.node)!, phases.get(B.node)!]) {
      const p = r.phases as Record<string, number | undefined>;
      console.log(
        [
          r.node.padEnd(10),
          ...names.map((n) => (p[n] === undefined ? '-' : (p[n]! / 1000).toFixed(1)).padStart(20)),
          (r.bytesServed / 1048576).toFixed(1).padStart(12),
        ].join(''),
      );
    }

    // the tampered image: refused before boot, reason recorded, node off
    expect(bad.ok).toBe(false);
    expect(bad.error?.code).toBe('E_AGENT_VERIFY_IMAGE');
    expect(bad.error?.message).toMatch(
      /image sha256 mismatch: expected [0-9a-f]{64}, downloaded [0-9a-f]{64} \(nothing written to \/dev\/vda\)/,
    );
    const history = nodes.get(A.node).history;
    const failed = history.find((h) => h.to === 'deploy failed');
    expect(failed?.reason).toMatch(/^E_AGENT_VERIFY_IMAGE: .*nothing written to \/dev\/vda/);
    // powered off by stackctl, never booted from disk
    expect(history.slice(0, history.indexOf(failed!)).some((h) => h.to === 'active')).toBe(false);

    for (const r of [phases.get(A.node)!, phases.get(B.node)!]) {
      if (!r.ok) throw new Error(`${r.node}: ${r.error?.code}: ${r.error?.message}\n${consoleOf(r.node)}`);
      expect(r.state).toBe('active');
      expect(nodes.get(r.node).state).toBe('active');
      expect(r.uname).toMatch(/^Linux (deploy-a|deploy-b) 6\.1\.\d+.* x86_64 GNU\/Linux$/);
      expect(r.uname).toContain(r.node);
      // the whole image went to the node once (plus the ramdisk)
      expect(r.bytesServed).toBeGreaterThan(host.manifest.image.size);
      expect(r.bytesServed).toBeLessThan(host.manifest.image.size + 2 * (ramdisk.kernel.size + ramdisk.initrd.size));
    }
    expect(good.ok).toBe(true);
    // the failed attempt sent no more than the tampered file and one ramdisk
    expect(bad.bytesServed).toBeLessThan(4 * 1024 * 1024 + ramdisk.kernel.size + ramdisk.initrd.size);
  }, 1_500_000);

  it('logs in with the host key the node reported, and runs uname -a and docker info', async () => {
    for (const v of [A, B]) {
      // known before the node booted from its disk: reported by the agent, no trust on first use
      const keys = recordedKeys(join(dir, 'lab.known_hosts'), v.ip, 22);
      expect(keys).toHaveLength(1);
      // the agent printed its fingerprint on the console, for an operator to compare
      expect(consoles.text(v.node)).toContain(`SSH host key: 256 ${keys[0]!.fingerprint} root@${v.node} (ED25519)`);
      const t = { node: v.node, host: v.ip, port: 22, user: 'root' };
      const uname = await pool!.exec(t, ['uname', '-a'], { timeoutMs: 30_000 });
      expect(uname.code).toBe(0);
      const offered = await pool!.exec(t, ['cat', '/etc/ssh/ssh_host_ed25519_key.pub'], { timeoutMs: 30_000 });
      expect(offered.stdout.split(/\s+/).slice(0, 2).join(' ')).toBe(keys[0]!.line);
      let info = { code: -1, stdout: '', stderr: '' };
      const until = Date.now() + 300_000;
      // dockerd may still be starting right after the first login (a minute and more on a busy host)
      while (Date.now() < until) {
        try {
          info = await pool!.exec(t, ['docker', 'info', '--format', '{{.ServerVersion}} {{.Driver}}'], {
            timeoutMs: 60_000,
          });
          if (info.code === 0) break;
        } catch (e) {
          info = { code: -1, stdout: '', stderr: String(e) };
        }
        await sleep(2000);
      }
      console.log(`${v.node}: ${uname.stdout.trim()}; docker ${info.stdout.trim()}`);
      expect(info.code).toBe(0);
      expect(info.stdout).toMatch(/^\d+\.\d+\.\d+\S* overlay2/);
      const net = await pool!.exec(
        t,
        ['sh', '-c', 'hostname; cat /etc/machine-id; df -B1 --output=size / | tail -n 1; ip -4 -o addr show'],
        { timeoutMs: 30_000 },
      );
      const [hostname, machineId, rootSize] = net.stdout.split('\n');
      expect(hostname).toBe(v.node);
      expect(machineId).toMatch(/^[0-9a-f]{32}$/);
      // the partition was stretched to the 4 GiB disk and the file system grew into it at first boot
      expect(Number(rootSize)).toBeGreaterThan(3 * 1024 ** 3);
      expect(net.stdout).toContain(`inet ${v.ip}/${PREFIX}`);
    }
    // every node made its own machine-id at first boot
    const ids = await Promise.all(
      [A, B].map((v) =>
        pool!.exec({ node: v.node, host: v.ip, port: 22, user: 'root' }, ['cat', '/etc/machine-id'], {
          timeoutMs: 30_000,
        }),
      ),
    );
    expect(ids[0]!.stdout).not.toBe(ids[1]!.stdout);
  }, 600_000);

  it('undeploys one node: disks cleaned, back to available, and its disk no longer boots', async () => {
    await pool!.close();
    // the wrong-MAC node (next test) waits for its timeout meanwhile
    expect(nodes.get(X.node).state).toBe('manageable');
    nodes.apply(X.node, 'provide', 'test');
    nodes.apply(X.node, 'done', 'new disks: cleaning skipped');
    wrongMac = provisionNodes({ targets: [target(X)], deps: { ...deps, timeoutMs: WRONG_MAC_TIMEOUT_MS } });
    const [r] = await undeployNodes({ targets: [target(B)], deps });
    if (!r!.ok) throw new Error(`${r!.error?.code}: ${r!.error?.message}\n${consoleOf(B.node)}`);
    console.log(
      `undeploy ${B.node}: ${((r!.phases.total ?? 0) / 1000).toFixed(1)} s (clean ${((r!.phases.clean ?? 0) / 1000).toFixed(1)} s)`,
    );
    expect(nodes.get(B.node).state).toBe('available');
    expect(
      nodes
        .get(B.node)
        .history.slice(-4)
        .map((h) => `${h.from} -${h.event}-> ${h.to}`),
    ).toEqual([
      'active -undeploy-> undeploying',
      'undeploying -done-> cleaning',
      'cleaning -wait-> clean wait',
      'clean wait -done-> available',
    ]);
    const vm = vms.get(B.node)!;
    expect(await vm.powerState()).toBe('off');
    // the boot sector and partition table are gone...
    const fd = openSync(join(dir, `${B.node}.raw`), 'r');
    const head = Buffer.alloc(1024 * 1024);
    readSync(fd, head, 0, head.length, 0);
    closeSync(fd);
    expect(head.every((b) => b === 0)).toBe(true);
    // ...and booting from the disk gets nowhere: no boot loader, no kernel, no login prompt
    await vm.setBootDevice('disk', true, false);
    await vm.powerOn();
    await sleep(20_000);
    consoles.poll();
    const serial = readFileSync(join(vm.runDir, QEMU_FILES.serial), 'utf8');
    await vm.powerOff();
    expect(serial).not.toMatch(/login:|Debian GNU\/Linux|systemd/);
    // node A still runs
    expect(await vms.get(A.node)!.powerState()).toBe('on');
  }, 300_000);

  it('times out a node whose MAC in the inventory is wrong, listing what the boot services saw for it', async () => {
    const [r] = await wrongMac!;
    expect(r!.ok).toBe(false);
    expect(r!.state).toBe('deploy failed');
    expect(r!.error?.code).toBe('E_DEPLOY_TIMEOUT');
    expect(r!.error?.message).toBe(
      `node 'deploy-x' (MAC ${X.mac}): no deploy result within ${WRONG_MAC_TIMEOUT_MS / 1000} s; ` +
        'the ramdisk agent never called in; the boot services saw: DHCP: nothing; TFTP: nothing; HTTP: nothing',
    );
    expect(r!.error?.hint).toContain(`Check that ${X.mac} is the MAC`);
    expect(await vms.get(X.node)!.powerState()).toBe('off');
    // dnsmasq did see the machine, under its real MAC, and had no address for it
    expect(readFileSync(dnsmasq!.paths.log, 'utf8')).toMatch(new RegExp(`${X.realMac} no address available`));
  }, 120_000);

  it('kept every token and private key out of consoles, events and state files', () => {
    const texts = [
      JSON.stringify(events),
      // the node state file and its journal, whichever hold this run's transitions
      ...[join(dir, 'lab.nodes.json'), nodes.journalFile].filter(existsSync).map((f) => readFileSync(f, 'utf8')),
      readFileSync(dnsmasq!.paths.log, 'utf8'),
      ...NODES.map((v) => consoleOf(v.node, 100_000)),
      ...[...vms.values()].map((vm) => (vm.lastArgv ?? []).join(' ')),
    ];
    expect(tokens.length).toBeGreaterThan(4);
    for (const text of texts) {
      for (const token of tokens) expect(text).not.toContain(token);
      expect(text).not.toContain('PRIVATE KEY');
    }
    // after the deploys, no token is valid any more
    for (const v of [A, B]) expect(server!.isArmed(v.node)).toBe(false);
  });
});
