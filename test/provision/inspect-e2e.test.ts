/**
 * Inspection for real, end to end: a QEMU VM (TCG) PXE-boots from our
 * dnsmasq on a bridge of its own, QEMU's iPXE fetches the node's script from
 * our boot server, boots the ramdisk we built from Debian's kernel, and the
 * agent in it reports the hardware with its one-time token. The report must
 * describe the VM, the token replayed from this machine (not the node's lease
 * address) must be refused, and the token must not show up in the serial
 * console, QEMU's arguments, dnsmasq's log or our events.
 *
 * Needs root and the Debian packages qemu-system-x86, dnsmasq-base,
 * iproute2, iptables, and apt access to linux-image-amd64 and busybox-static
 * (downloaded, not installed). It fails, never skips, when they are missing.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { $ } from 'zx';
import type { StackctlEvent } from '../../src/core/events.js';
import { buildRamdisk, type RamdiskBuild } from '../../src/images/ramdisk.js';
import { QEMU_FILES, QemuMachine } from '../../src/lab/vbmc/qemu.js';
import {
  IntrospectionStore,
  introspectionReportHandler,
  reconcileInspection,
  startInspection,
  type InspectDeps,
  type InspectStep,
} from '../../src/provision/inspect.js';
import { NodeStateStore } from '../../src/provision/machine.js';
import { DnsmasqService, parseDnsmasqLog } from '../../src/pxe/dnsmasq.js';
import { BootServer, type AgentReport, type Introspection } from '../../src/pxe/http.js';
import { LAB_KERNEL_ARGS } from '../../src/pxe/services.js';
import { machinePower } from './machine-power.js';
import { VmSegment, requireVmTools } from './vm-segment.js';

const NODE = 'inspect-vm';
const MAC = '52:54:00:5b:00:01';
const HOST = '10.231.91.1';
const NODE_IP = '10.231.91.21';
const DISK_SERIAL = 'STKTEST1';
const MEMORY_MIB = 384;
/** LAB-FACTS: ~13 s from power-on to the initramfs under TCG; a busy 2-core host needs slack. */
const REPORT_TIMEOUT_MS = 90_000;
/** Kept across runs: a rebuild with nothing changed takes milliseconds. */
const RAMDISK_DIR = join(tmpdir(), 'stackctl-test-ramdisk');

describe('inspection of a PXE-booted VM', () => {
  const tag = process.pid.toString(36).slice(-5);
  const seg = new VmSegment(tag, `${HOST}/24`, 'fd9a:231:91::1/64');
  const events: StackctlEvent[] = [];
  let dir: string | undefined;
  let ramdisk: RamdiskBuild;
  let server: BootServer | undefined;
  let dnsmasq: DnsmasqService | undefined;
  let vm: QemuMachine | undefined;
  /** The token the boot server issued; the test sees it through the injected generator, only to replay it. */
  let token: string | undefined;
  /** Called with the next accepted report (set by a test before it powers on). */
  let onNextReport: ((r: AgentReport) => void) | undefined;
  /** Where the workflow test keeps its reports; the boot server's callback writes them. */
  let introspection: IntrospectionStore | undefined;

  beforeAll(async () => {
    requireVmTools();
    const built = Date.now();
    ramdisk = await buildRamdisk({ outDir: RAMDISK_DIR });
    console.log(
      `ramdisk ${ramdisk.cached ? 'from cache' : 'built'} in ${((Date.now() - built) / 1000).toFixed(1)} s ` +
        `(kernel ${ramdisk.inputs.kernel.release}, initrd ${ramdisk.initrd.size} bytes)`,
    );

    dir = mkdtempSync(join(tmpdir(), 'stackctl-inspect-'));
    // dnsmasq drops to an unprivileged user: its folders must be readable by others
    chmodSync(dir, 0o755);
    mkdirSync(join(dir, 'tftp'), { mode: 0o755 });
    await seg.create();
    const tap = await seg.addTap();

    server = await BootServer.start({
      host: HOST,
      port: 0,
      filesDir: RAMDISK_DIR,
      kernel: ramdisk.kernel.name,
      initrd: ramdisk.initrd.name,
      // quiet + loglevel=3 also keep the kernel from printing its command line (and the token) on the console
      kernelArgs: [...LAB_KERNEL_ARGS],
      nodes: [{ name: NODE, mac: MAC, ip: NODE_IP }],
      onReport: (r) => {
        if (introspection) introspectionReportHandler(introspection)(r);
        onNextReport?.(r);
      },
      events: { emit: (e) => events.push(e) },
      newToken: () => (token = randomBytes(32).toString('base64url')),
    });
    dnsmasq = new DnsmasqService({
      interface: seg.bridge,
      serverAddress: HOST,
      httpPort: server.port,
      runDir: join(dir, 'dnsmasq'),
      tftpRoot: join(dir, 'tftp'),
      cidr: '10.231.91.0/24',
      leaseTime: '1h',
      ipv6Prefix: 'fd9a:231:91::',
      leases: [{ node: NODE, mac: MAC, ip: NODE_IP }],
    });
    await dnsmasq.start();

    // a sparse raw file: the guest sees a 1 GiB disk, the host spends nothing (no qemu-img needed)
    const disk = join(dir, 'disk.raw');
    await $`truncate -s 1G ${disk}`;
    vm = new QemuMachine({
      name: NODE,
      runDir: join(dir, 'vm'),
      memoryMiB: MEMORY_MIB,
      nics: [{ mac: MAC, tap }],
      boot: { device: 'pxe', persistent: true, uefi: false },
      // the disk goes through extraArgs: QemuMachine's own disk option has no serial number
      extraArgs: [
        '-drive',
        `file=${disk},if=none,id=disk0,format=raw`,
        '-device',
        `virtio-blk-pci,drive=disk0,serial=${DISK_SERIAL}`,
      ],
    });
  }, 240_000);

  afterAll(async () => {
    await vm?.destroy().catch(() => undefined);
    await dnsmasq?.stop().catch(() => undefined);
    await server?.close().catch(() => undefined);
    await seg.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** What to look at when the report does not come: the console and what DHCP saw. */
  function diagnostics(): string {
    const serial = vm ? join(vm.runDir, QEMU_FILES.serial) : undefined;
    const console = serial && existsSync(serial) ? readFileSync(serial, 'utf8').split('\n').slice(-25).join('\n') : '';
    const log = dnsmasq && existsSync(dnsmasq.paths.log) ? readFileSync(dnsmasq.paths.log, 'utf8') : '';
    const dhcp = parseDnsmasqLog(log).get(MAC);
    return `serial console (last lines):\n${console}\nDHCP for ${MAC}: ${JSON.stringify(dhcp?.observations.map((o) => o.kind) ?? [])}`;
  }

  it('gets a report that describes the VM, and refuses the token replayed from another address', async () => {
    const machine = vm!;
    const boot = server!;
    const reported = new Promise<AgentReport>((resolve) => (onNextReport = resolve));
    boot.arm(NODE, 'inspect');
    const t0 = Date.now();
    await machine.powerOn();
    let waiting = true;
    const report = await Promise.race([
      reported.finally(() => (waiting = false)),
      (async (): Promise<never> => {
        // fail as soon as the VM is off without a report (agent refused, kernel panic), else at the deadline
        while (waiting && Date.now() - t0 < REPORT_TIMEOUT_MS && (await machine.powerState()) === 'on') {
          await new Promise((r) => setTimeout(r, 500));
        }
        if (!waiting) return new Promise<never>(() => undefined);
        throw new Error(
          `no introspection after ${((Date.now() - t0) / 1000).toFixed(1)} s (VM ${await machine.powerState()})\n${diagnostics()}`,
        );
      })(),
    ]);
    const elapsed = Date.now() - t0;
    console.log(`power-on -> introspection: ${(elapsed / 1000).toFixed(1)} s`);
    console.log(`report: ${JSON.stringify(report.body)}`);

    expect(report.node).toBe(NODE);
    expect(report.endpoint).toBe('introspection');
    const body = report.body as Introspection;
    expect(body.cpu).toMatchObject({ count: 1, arch: 'x86_64' });
    expect(body.cpu.model).toMatch(/QEMU|Virtual CPU/);
    // memory blocks count what the machine has; MemTotal would be some 40 MiB short
    expect(body.memory_mib).toBeGreaterThan(MEMORY_MIB - 48);
    expect(body.memory_mib).toBeLessThanOrEqual(MEMORY_MIB);
    expect(body.disks).toHaveLength(1);
    expect(body.disks[0]).toMatchObject({ name: '/dev/vda', size_bytes: 1024 ** 3, serial: DISK_SERIAL });
    // NOTE: the kernel's operstate is reported as is; under QEMU TCG it has read "down" for a
    // NIC that had just leased its address, so only its presence is asserted here.
    expect(body.interfaces).toEqual([
      { name: 'eth0', mac: MAC, ipv4: NODE_IP, link: expect.stringMatching(/^[a-z]+$/) },
    ]);
    expect(body.boot_mode).toBe('bios');
    expect(body.system?.vendor).toBe('QEMU');

    // the agent's report spent the token: /init powers the machine off
    const offBy = Date.now() + 20_000;
    while ((await machine.powerState()) !== 'off') {
      if (Date.now() > offBy) throw new Error(`the VM did not power off after its report\n${diagnostics()}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    console.log(`power-on -> powered off: ${((Date.now() - t0) / 1000).toFixed(1)} s`);

    expect(token).toBeDefined();
    // from this machine, not from the VM's lease address: refused whatever the token (spent, here);
    // a replay from the node's own address is refused as "token already used" (test/pxe/http.test.ts)
    const replay = await fetch(`${boot.url}/v1/agent/${NODE}/introspection`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(replay.status).toBe(403);
    expect(events).toContainEqual({
      kind: 'pxe.refused',
      node: NODE,
      mac: MAC,
      client: HOST,
      asked: 'introspection',
      reason: "not from the node's address",
    });
    expect(boot.suspicion(NODE)).toBeUndefined();

    // the token went to the VM only through its iPXE script
    const serial = readFileSync(join(machine.runDir, QEMU_FILES.serial), 'utf8');
    expect(serial).toContain('stackctl-agent: introspection accepted');
    expect(serial).not.toContain(token);
    expect(machine.lastArgv?.join(' ')).not.toContain(token);
    expect(readFileSync(dnsmasq!.paths.log, 'utf8')).not.toContain(token);
    expect(JSON.stringify(events)).not.toContain(token);
  }, 180_000);

  it('runs the inspect workflow: manageable -> inspecting -> inspect wait -> manageable, report stored', async () => {
    const files = join(dir!, 'lab');
    const nodes = NodeStateStore.open(`${files}.nodes.json`);
    introspection = IntrospectionStore.open(`${files}.introspection.json`);
    // verifying (the BMC check) is another workflow: the node starts manageable here
    nodes.apply(NODE, 'manage');
    nodes.apply(NODE, 'done', 'BMC answers');
    const deps: InspectDeps = {
      nodes,
      introspection,
      boot: server!,
      power: () => machinePower(vm!),
      timeoutMs: REPORT_TIMEOUT_MS,
      pollMs: 500,
    };
    const t0 = Date.now();
    startInspection(deps, NODE, 'test');
    let step: InspectStep;
    // the orchestrator's part: call again while dirty (the deadline inside the workflow bounds this)
    for (;;) {
      step = await reconcileInspection(deps, NODE);
      if (!step.dirty) break;
      await new Promise((r) => setTimeout(r, step.requeueAfterMs));
    }
    console.log(`inspect workflow: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    if (step.error) throw new Error(`${step.error.message}\n${diagnostics()}`);

    expect(step.state).toBe('manageable');
    expect(nodes.get(NODE).history.map((h) => `${h.from} -${h.event}-> ${h.to}`)).toEqual([
      'enroll -manage-> verifying',
      'verifying -done-> manageable',
      'manageable -inspect-> inspecting',
      'inspecting -wait-> inspect wait',
      'inspect wait -done-> manageable',
    ]);
    const stored = IntrospectionStore.open(`${files}.introspection.json`).get(NODE);
    expect(stored?.data.disks[0]).toMatchObject({ serial: DISK_SERIAL, size_bytes: 1024 ** 3 });
    expect(stored?.data.interfaces[0]?.mac).toBe(MAC);
    expect(await vm!.powerState()).toBe('off');
    expect(server!.isArmed(NODE)).toBe(false);
    // state files hold no token: the journal of this run's transitions, then the node state file it is folded into
    expect(readFileSync(nodes.journalFile, 'utf8')).not.toContain(token);
    nodes.close();
    expect(existsSync(nodes.journalFile)).toBe(false);
    expect(readFileSync(`${files}.nodes.json`, 'utf8')).not.toContain(token);
    expect(readFileSync(`${files}.introspection.json`, 'utf8')).not.toContain(token);
  }, 180_000);
});
