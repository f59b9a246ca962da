/**
 * The QEMU machine backend with Debian's qemu-system-x86, for real: VMs with
 * no disk and no NIC sit in the firmware (SeaBIOS), which is enough to see
 * power, reset, the ACPI button and the boot order QEMU was given. Then the
 * virtual IPMI BMC in front of a QEMU machine, driven by Debian's ipmitool.
 * Every QEMU started here is killed in afterEach.
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Secret } from '../../../src/core/secret.js';
import { IpmiBmcServer } from '../../../src/lab/vbmc/ipmi/server.js';
import {
  QEMU_BOOT_ORDER,
  QEMU_FILES,
  QemuMachine,
  bootArgument,
  qemuArgv,
  readCmdline,
  type QemuMachineOptions,
} from '../../../src/lab/vbmc/qemu.js';
import { QmpClient } from '../../../src/lab/vbmc/qmp.js';
import { PASSWORD, USER, ipmitool, requireTool } from '../../bmc/ipmi/lab.js';

/** Small guests: 2 shared host cores, and the firmware needs little. */
const MEMORY_MIB = 64;

let root: string;
const machines: QemuMachine[] = [];
const servers: IpmiBmcServer[] = [];

beforeAll(async () => {
  const found = spawnSync('sh', ['-c', 'command -v qemu-system-x86_64'], { encoding: 'utf8' });
  if (found.status !== 0 || !found.stdout.trim()) {
    throw new Error(
      'qemu-system-x86_64 is not installed: run "apt-get install qemu-system-x86" (Debian package) and retry',
    );
  }
  root = await mkdtemp(join(tmpdir(), 'stackctl-qemu-'));
});

afterEach(async () => {
  while (servers.length) await servers.pop()?.close();
  // destroy() kills with SIGKILL and waits: no QEMU outlives a test
  while (machines.length) await machines.pop()?.destroy();
});

afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

let counter = 0;
function machine(options: Partial<QemuMachineOptions> = {}): QemuMachine {
  counter += 1;
  const m = new QemuMachine({
    name: `vm-${counter}`,
    runDir: join(root, `vm-${counter}`),
    memoryMiB: MEMORY_MIB,
    ...options,
  });
  machines.push(m);
  return m;
}

/** The `-boot` value of a running process, read from the kernel rather than from our own bookkeeping. */
async function bootOf(pid: number | undefined): Promise<string | undefined> {
  expect(pid).toBeDefined();
  const argv = await readCmdline(pid ?? 0);
  const i = argv?.indexOf('-boot') ?? -1;
  return i >= 0 ? argv?.[i + 1] : undefined;
}

/** True once the process is gone from the process table (exited and reaped). */
async function gone(pid: number, withinMs = 3_000): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    if (!existsSync(`/proc/${pid}`)) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

describe('QemuMachine (a VM with no disk and no NIC, sitting in its firmware)', () => {
  it('powers on: a live QEMU process whose QMP says running; a second power-on changes nothing', async () => {
    const m = machine();
    expect(await m.powerState()).toBe('off');
    await m.powerOn();
    const pid = m.pid;
    expect(pid).toBeDefined();
    expect(readFileSync(`/proc/${pid}/stat`, 'utf8')).not.toMatch(/\) Z /);
    const status = await m.qmp((q) => q.queryStatus());
    expect(status).toEqual({ status: 'running', running: true });
    expect(await m.powerState()).toBe('on');
    // NOTE: the measured start time goes to the log so slow hosts can be compared
    console.log(`QEMU spawn -> QMP running: ${m.lastStartMs} ms`);

    // the argv the kernel holds is the one we meant, as an array (no shell)
    const argv = await readCmdline(pid ?? 0);
    expect(argv).toEqual(['qemu-system-x86_64', ...(m.lastArgv ?? [])]);
    expect(argv).toEqual(expect.arrayContaining(['-accel', 'tcg,tb-size=128', '-nodefaults', '-display', 'none']));
    expect(readFileSync(join(m.runDir, QEMU_FILES.pid), 'utf8').trim()).toBe(String(pid));

    await m.powerOn();
    expect(m.pid).toBe(pid);
  });

  it('reset goes through QMP and keeps the process while the boot device is unchanged', async () => {
    const m = machine();
    await m.powerOn();
    const pid = m.pid;
    await m.reset();
    expect(m.pid).toBe(pid);
    expect(await m.powerState()).toBe('on');
    expect((await m.qmp((q) => q.queryStatus())).running).toBe(true);
  });

  it('hard power off ends the process and removes its socket and pid file', async () => {
    const m = machine();
    await m.powerOn();
    const pid = m.pid ?? 0;
    await m.powerOff();
    expect(await gone(pid)).toBe(true);
    expect(await m.powerState()).toBe('off');
    expect(m.pid).toBeUndefined();
    expect(existsSync(join(m.runDir, QEMU_FILES.qmp))).toBe(false);
    expect(existsSync(join(m.runDir, QEMU_FILES.pid))).toBe(false);
    await m.powerOff(); // off already: nothing to do, no error
  });

  it("a power-on keeps the previous boot's console aside: what a guest printed before it powered off survives", async () => {
    const m = machine();
    await m.powerOn();
    await m.powerOff();
    // what the guest printed last, as QEMU left it
    appendFileSync(join(m.runDir, QEMU_FILES.serial), 'agent: done, powering off\n');
    await m.powerOn();
    expect(readFileSync(join(m.runDir, QEMU_FILES.serialPrevious), 'utf8')).toContain('agent: done, powering off');
    expect(readFileSync(join(m.runDir, QEMU_FILES.serial), 'utf8')).not.toContain('agent: done');
    await m.destroy();
    expect(existsSync(join(m.runDir, QEMU_FILES.serialPrevious))).toBe(false);
  });

  it('soft off presses the ACPI button; with no OS nobody answers it, so the machine stays on until a hard off', async () => {
    // A second QMP monitor lets the test watch events while the machine uses its own socket.
    const observer = join(root, 'observer.sock');
    const m = machine({
      extraArgs: [
        '-chardev',
        `socket,id=observer,path=${observer},server=on,wait=off`,
        '-mon',
        'chardev=observer,mode=control',
      ],
    });
    await m.powerOn();
    const watch = await QmpClient.connect({ path: observer, label: 'observer' });
    try {
      await m.softOff();
      const event = await watch.waitForEvent('POWERDOWN', 5_000);
      expect(event.event).toBe('POWERDOWN');
      // SeaBIOS has no ACPI handler for the power button: QEMU keeps running
      await new Promise((r) => setTimeout(r, 1_000));
      expect(await m.powerState()).toBe('on');
      expect(watch.events.some((e) => e.event === 'SHUTDOWN')).toBe(false);
    } finally {
      await watch.close();
    }
    const pid = m.pid ?? 0;
    await m.powerOff();
    expect(await gone(pid)).toBe(true);
  });

  it('a one-time PXE boot is used by the next power-on only; then the persistent disk setting is back', async () => {
    const m = machine();
    await m.setBootDevice('disk', true, false);
    await m.setBootDevice('pxe', false, false);
    expect(await m.getBootDevice()).toEqual({ device: 'pxe', persistent: false, uefi: false });

    await m.powerOn();
    // QEMU boots the network once and restores disk order on its own at a reset, as firmware does
    expect(await bootOf(m.pid)).toBe('once=n,order=c');
    expect(await m.getBootDevice()).toEqual({ device: 'disk', persistent: true, uefi: false });
    const saved = JSON.parse(await readFile(join(m.runDir, QEMU_FILES.boot), 'utf8')) as unknown;
    expect(saved).toMatchObject({ current: { device: 'disk', persistent: true } });

    await m.powerOff();
    await m.powerOn();
    expect(await bootOf(m.pid)).toBe('order=c');
  });

  it('a persistent PXE setting applies at the next power-on', async () => {
    const m = machine();
    await m.setBootDevice('pxe', true, false);
    await m.powerOn();
    expect(await bootOf(m.pid)).toBe(`order=${QEMU_BOOT_ORDER.pxe}`);
    expect(await m.getBootDevice()).toEqual({ device: 'pxe', persistent: true, uefi: false });
  });

  it('a boot device changed while running applies at reset: QEMU is restarted with the new order', async () => {
    const m = machine();
    await m.powerOn();
    const first = m.pid;
    expect(await bootOf(first)).toBe('order=c');

    await m.setBootDevice('pxe', true, false);
    await m.reset();
    const second = m.pid;
    expect(second).not.toBe(first);
    expect(await gone(first ?? 0)).toBe(true);
    expect(await bootOf(second)).toBe('order=n');

    // same device again: a plain QMP reset, same process
    await m.reset();
    expect(m.pid).toBe(second);
  });

  it('a later process adopts the running QEMU (and the saved boot setting) instead of starting another', async () => {
    const first = machine();
    await first.setBootDevice('pxe', true, false);
    await first.powerOn();
    const pid = first.pid;

    // a new object on the same run folder stands for a restarted virtual BMC process
    const second = new QemuMachine({ name: first.name, runDir: first.runDir, memoryMiB: MEMORY_MIB });
    machines.push(second);
    expect(await second.powerState()).toBe('on');
    expect(second.pid).toBe(pid);
    expect(await second.getBootDevice()).toEqual({ device: 'pxe', persistent: true, uefi: false });
    await second.powerOn();
    expect(second.pid).toBe(pid);

    await second.powerOff();
    expect(await gone(pid ?? 0)).toBe(true);
    expect(await first.powerState()).toBe('off');
  });

  it('a QEMU that refuses its arguments fails the power-on with the machine name and its stderr', async () => {
    const m = machine({ extraArgs: ['-no-such-option'] });
    const err = await m.powerOn().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: 'E_QEMU_START' });
    expect(String((err as Error).message)).toMatch(/machine vm-\d+: QEMU exited during start/);
    expect(String((err as Error).message)).toContain('-no-such-option');
    expect(await m.powerState()).toBe('off');
  });

  it('a missing QEMU binary says which package to install', async () => {
    const m = machine({ qemuBinary: join(root, 'no-qemu-here') });
    await expect(m.powerOn()).rejects.toMatchObject({
      code: 'E_QEMU_MISSING',
      hint: expect.stringContaining('apt-get install qemu-system-x86'),
    });
  });
});

describe('QEMU arguments', () => {
  it('attach a qcow2 disk and tap NICs without scripts; a once-setting falls back to the persistent order', () => {
    const argv = qemuArgv({
      name: 'node,1',
      runDir: '/run/lab/node1',
      memoryMiB: 512,
      cpus: 2,
      disk: '/var/lib/lab/node1.qcow2',
      nics: [{ mac: '52:54:00:99:00:01', tap: 'labtap1' }],
      extraArgs: ['-no-reboot'],
      boot: { device: 'pxe', persistent: false, uefi: false },
      persistent: { device: 'disk', persistent: true, uefi: false },
    });
    expect(argv).toEqual([
      '-name',
      'guest=node,,1',
      '-nodefaults',
      '-display',
      'none',
      '-accel',
      'tcg,tb-size=128',
      '-m',
      '512',
      '-smp',
      '2',
      '-boot',
      'once=n,order=c',
      '-serial',
      'file:/run/lab/node1/serial.log',
      '-qmp',
      'unix:/run/lab/node1/qmp.sock,server=on,wait=off',
      '-pidfile',
      '/run/lab/node1/qemu.pid',
      '-drive',
      'file=/var/lib/lab/node1.qcow2,if=virtio,format=qcow2',
      '-netdev',
      'tap,id=net0,ifname=labtap1,script=no,downscript=no',
      '-device',
      'virtio-net-pci,netdev=net0,mac=52:54:00:99:00:01',
      '-no-reboot',
    ]);
  });

  it('map every boot device to a QEMU order', () => {
    for (const [device, order] of Object.entries(QEMU_BOOT_ORDER)) {
      const setting = { device: device as keyof typeof QEMU_BOOT_ORDER, persistent: true, uefi: false };
      expect(bootArgument(setting, setting)).toBe(`order=${order}`);
    }
  });

  it('are checked before anything starts', () => {
    const base = { name: 'n1', runDir: join(tmpdir(), 'n1') };
    expect(() => new QemuMachine({ ...base, nics: [{ mac: '01:00:5e:00:00:01', tap: 'tap0' }] })).toThrow(/unicast/);
    expect(
      () => new QemuMachine({ ...base, nics: [{ mac: '52:54:00:00:00:01', tap: 'a-very-long-tap-name' }] }),
    ).toThrow(/interface name/);
    expect(() => new QemuMachine({ ...base, runDir: '/tmp/a,b' })).toThrow(/comma/);
    expect(() => new QemuMachine({ ...base, runDir: `/tmp/${'x'.repeat(120)}` })).toThrow(/longer than 107 bytes/);
    expect(() => new QemuMachine({ ...base, memoryMiB: 1.5 })).toThrow(/memoryMiB/);
    expect(() => new QemuMachine({ ...base, cpus: 0 })).toThrow(/cpus/);
  });
});

describe('the virtual IPMI BMC in front of a QEMU machine, driven by ipmitool -C 17', () => {
  beforeAll(() => {
    requireTool('ipmitool');
  });

  it('chassis power on starts a real QEMU, status reports it, power off stops it', async () => {
    const m = machine();
    const server = new IpmiBmcServer({ backend: m, username: USER, password: new Secret(PASSWORD) });
    servers.push(server);
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });

    expect((await ipmitool(port, 17, ['chassis', 'power', 'status'])).stdout).toContain('Chassis Power is off');
    expect((await ipmitool(port, 17, ['chassis', 'bootdev', 'pxe'])).code).toBe(0);

    const on = await ipmitool(port, 17, ['chassis', 'power', 'on']);
    expect(on.code).toBe(0);
    const pid = m.pid;
    expect((await readCmdline(pid ?? 0))?.[0]).toBe('qemu-system-x86_64');
    expect(await bootOf(pid)).toBe('once=n,order=c'); // the BMC's one-time PXE reached QEMU
    expect((await ipmitool(port, 17, ['chassis', 'power', 'status'])).stdout).toContain('Chassis Power is on');

    const off = await ipmitool(port, 17, ['chassis', 'power', 'off']);
    expect(off.code).toBe(0);
    expect(await gone(pid ?? 0)).toBe(true);
    expect((await ipmitool(port, 17, ['chassis', 'power', 'status'])).stdout).toContain('Chassis Power is off');
  });
});
