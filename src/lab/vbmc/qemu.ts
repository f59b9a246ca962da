/**
 * A simulated bare-metal machine that is a QEMU VM, controlled the way a BMC
 * controls hardware: power on spawns QEMU, power off ends it, reset and the
 * ACPI power button go through QMP. The boot device lives here (and in a small
 * JSON file), and becomes QEMU's `-boot` option at the next power-on.
 *
 * QEMU runs detached in its own process group with its output in files, so it
 * outlives the virtual BMC process; a later process adopts it from the pid
 * file instead of starting a second one.
 */
import { spawn as nodeSpawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { IoError, InputError, RemoteError, TimeoutError, messageOf } from '../../core/errors.js';
import type { BootDevice, BootSetting, PowerState } from '../../bmc/driver.js';
import type { MachineBackend } from './machine.js';
import { QmpClosedError, QmpUnreachableError, withQmp, type QmpClient, type QmpConnectOptions } from './qmp.js';

/**
 * QEMU boot order letters for each boot setting (`-boot order=…`): `n` is the
 * first NIC's option ROM (iPXE), `c` the first disk. "none" and "other" mean
 * no override, which is firmware order: disk, then network.
 */
export const QEMU_BOOT_ORDER: Readonly<Record<BootSetting['device'], string>> = {
  pxe: 'n',
  disk: 'c',
  none: 'cn',
  other: 'cn',
};

/** Files a QEMU machine keeps in its run folder. */
export const QEMU_FILES = {
  /** QMP unix socket. */
  qmp: 'qmp.sock',
  /** Written by QEMU (`-pidfile`); how a later process finds a running VM. */
  pid: 'qemu.pid',
  /** The guest's first serial port, this boot (QEMU truncates it at each start). */
  serial: 'serial.log',
  /** The previous boot's serial console, moved aside at each start so a reboot does not erase its last lines. */
  serialPrevious: 'serial.previous.log',
  /** QEMU's own stderr, quoted when it fails to start. */
  stderr: 'qemu.stderr.log',
  /** The boot device setting, kept across virtual BMC restarts. */
  boot: 'boot.json',
} as const;

/** Defaults of a QEMU machine. */
export const QEMU_DEFAULTS = {
  binary: 'qemu-system-x86_64',
  memoryMiB: 512,
  cpus: 1,
  /** Spawn until QMP says running (ms); generous because TCG on a busy 2-core host is slow. */
  startTimeoutMs: 30_000,
  /** QMP `quit` until the process is gone, before SIGKILL (ms). */
  stopTimeoutMs: 10_000,
  /** How often process and socket are polled while waiting (ms). */
  pollMs: 50,
  /**
   * TCG translation cache size (MiB). QEMU's default cache makes each VM use
   * 1.5-1.75 GiB whatever `-m` says; 128 cuts that to ~580 MiB with no slowdown.
   */
  tbSizeMiB: 128,
} as const;

/** Longest unix socket path the kernel accepts (sun_path is 108 bytes with its NUL). */
const MAX_SOCKET_PATH = 107;
/** Longest network interface name (IFNAMSIZ 16 with its NUL). */
const MAX_IFNAME = 15;
/** Lines of QEMU's stderr quoted in a start failure. */
const STDERR_TAIL_LINES = 12;

/** One virtio NIC attached to an existing tap device. */
export interface QemuNic {
  /** Unicast MAC address, `52:54:00:…` by convention. */
  readonly mac: string;
  /** Name of a tap device that already exists (stackctl lab creates it); QEMU runs no scripts. */
  readonly tap: string;
}

/** Starts a process; the shape of node's `child_process.spawn`. */
export type SpawnProcess = (command: string, args: readonly string[], options: SpawnOptions) => ChildProcess;

/** Options of a QEMU machine; side effects are injectable (CONVENTIONS.md 8). */
export interface QemuMachineOptions {
  readonly name: string;
  /** Folder for the QMP socket, pid file, serial log and boot setting; created when missing. */
  readonly runDir: string;
  /** Guest memory; default 512. */
  readonly memoryMiB?: number;
  /** Virtual CPUs (1 or 2 make sense under TCG on a small host); default 1. */
  readonly cpus?: number;
  /** A qcow2 image, attached as the first (virtio) disk. */
  readonly disk?: string;
  /** Serial number the virtio disk reports (root device hints match it); up to 20 of A-Z a-z 0-9 _ -. */
  readonly diskSerial?: string;
  readonly nics?: readonly QemuNic[];
  /** Boot setting when the run folder holds none yet; default disk, persistent, legacy. */
  readonly boot?: BootSetting;
  readonly qemuBinary?: string;
  /** Appended to the generated arguments as they are (no shell involved). */
  readonly extraArgs?: readonly string[];
  readonly startTimeoutMs?: number;
  readonly stopTimeoutMs?: number;
  readonly pollMs?: number;
  readonly spawn?: SpawnProcess;
  readonly kill?: (pid: number, signal: NodeJS.Signals | 0) => void;
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
}

/** What the boot file holds. */
interface BootState {
  /** The setting for the next boot. */
  readonly current: BootSetting;
  /** What a one-time setting falls back to after it was used. */
  readonly persistent: BootSetting;
}

/** Everything `qemuArgv` needs. */
export interface QemuArgvSpec {
  readonly name: string;
  readonly runDir: string;
  readonly memoryMiB: number;
  readonly cpus: number;
  readonly disk?: string;
  readonly diskSerial?: string;
  readonly nics: readonly QemuNic[];
  readonly extraArgs: readonly string[];
  /** The setting for this boot. */
  readonly boot: BootSetting;
  /** The setting later boots (after a reset) use. */
  readonly persistent: BootSetting;
}

/**
 * Check a machine's options without touching anything (CONVENTIONS.md 3).
 * Throws InputError naming the machine and the faulty option.
 */
export function validateQemuOptions(options: QemuMachineOptions): void {
  const name = options.name;
  const bad = (what: string, hint: string): never => {
    throw new InputError('E_QEMU_OPTIONS', `QEMU machine ${JSON.stringify(name)}: ${what}`, {
      hint,
      details: { machine: name },
    });
  };
  if (!name || /[\s\0]/.test(name)) bad('the name must be non-empty, without blanks', 'Use the node name.');
  const runDir = resolve(options.runDir);
  // -qmp unix:PATH,server=on parses PATH up to the first comma; a comma in the folder would be cut there.
  if (runDir.includes(',')) bad(`run folder ${runDir} contains a comma`, 'Use a folder without commas.');
  const sock = join(runDir, QEMU_FILES.qmp);
  if (Buffer.byteLength(sock) > MAX_SOCKET_PATH) {
    bad(`QMP socket path ${sock} is longer than ${MAX_SOCKET_PATH} bytes`, 'Use a shorter run folder.');
  }
  const memory = options.memoryMiB ?? QEMU_DEFAULTS.memoryMiB;
  if (!Number.isInteger(memory) || memory < 16) bad(`memoryMiB ${memory} is not a whole number ≥ 16`, 'Give MiB.');
  const cpus = options.cpus ?? QEMU_DEFAULTS.cpus;
  if (!Number.isInteger(cpus) || cpus < 1 || cpus > 16) bad(`cpus ${cpus} is not 1-16`, 'Use 1 or 2 under TCG.');
  if (options.disk !== undefined && options.disk.length === 0) {
    bad('disk is empty', 'Give the path of a qcow2 image or leave disk out.');
  }
  // virtio-blk keeps at most 20 bytes of serial; commas would end QEMU's option value
  if (options.diskSerial !== undefined && !/^[A-Za-z0-9_-]{1,20}$/.test(options.diskSerial)) {
    bad(
      `diskSerial ${JSON.stringify(options.diskSerial)} is not 1-20 of A-Z a-z 0-9 _ -`,
      'Use a short serial such as SVM0.',
    );
  }
  for (const [i, nic] of (options.nics ?? []).entries()) {
    if (!/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(nic.mac) || (parseInt(nic.mac.slice(0, 2), 16) & 1) === 1) {
      bad(`nics[${i}].mac ${nic.mac} is not a unicast MAC address`, 'Use 52:54:00:xx:xx:xx.');
    }
    if (!/^[A-Za-z0-9_.-]+$/.test(nic.tap) || nic.tap.length > MAX_IFNAME) {
      bad(
        `nics[${i}].tap ${JSON.stringify(nic.tap)} is not an interface name`,
        `Up to ${MAX_IFNAME} of A-Z a-z 0-9 _ . -`,
      );
    }
  }
}

/** Double commas: QEMU's option parser reads `,,` as a literal comma inside a value. */
function optionValue(value: string): string {
  return value.replaceAll(',', ',,');
}

/** The `-boot` value: a one-time device goes first once, QEMU restores `order` at the next reset. */
export function bootArgument(boot: BootSetting, persistent: BootSetting): string {
  if (boot.persistent) return `order=${QEMU_BOOT_ORDER[boot.device]}`;
  return `once=${QEMU_BOOT_ORDER[boot.device]},order=${QEMU_BOOT_ORDER[persistent.device]}`;
}

/**
 * QEMU's argument vector for one power-on (an array: no shell ever sees it).
 * UEFI requests are remembered but not acted upon: the lab VMs boot SeaBIOS.
 */
export function qemuArgv(spec: QemuArgvSpec): string[] {
  const dir = resolve(spec.runDir);
  const argv = [
    '-name',
    `guest=${optionValue(spec.name)}`,
    '-nodefaults',
    '-display',
    'none',
    // Nested KVM does not work on the lab hosts; TCG with a bounded code cache does.
    '-accel',
    `tcg,tb-size=${QEMU_DEFAULTS.tbSizeMiB}`,
    '-m',
    String(spec.memoryMiB),
    '-smp',
    String(spec.cpus),
    '-boot',
    bootArgument(spec.boot, spec.persistent),
    '-serial',
    `file:${join(dir, QEMU_FILES.serial)}`,
    '-qmp',
    `unix:${join(dir, QEMU_FILES.qmp)},server=on,wait=off`,
    '-pidfile',
    join(dir, QEMU_FILES.pid),
  ];
  if (spec.disk !== undefined && spec.diskSerial !== undefined) {
    // the same virtio disk, as a device of its own so that it can carry a serial number
    argv.push(
      '-drive',
      `file=${optionValue(resolve(spec.disk))},if=none,id=disk0,format=qcow2`,
      '-device',
      `virtio-blk-pci,drive=disk0,serial=${spec.diskSerial}`,
    );
  } else if (spec.disk !== undefined) {
    argv.push('-drive', `file=${optionValue(resolve(spec.disk))},if=virtio,format=qcow2`);
  }
  for (const [i, nic] of spec.nics.entries()) {
    argv.push(
      '-netdev',
      `tap,id=net${i},ifname=${nic.tap},script=no,downscript=no`,
      '-device',
      `virtio-net-pci,netdev=net${i},mac=${nic.mac.toLowerCase()}`,
    );
  }
  argv.push(...spec.extraArgs);
  return argv;
}

/**
 * A QEMU VM behind a virtual BMC. Operations on one machine run one at a
 * time; `powerState` and `getBootDevice` may run alongside them.
 */
export class QemuMachine implements MachineBackend {
  readonly name: string;
  /** Absolute run folder. */
  readonly runDir: string;
  /** Milliseconds from spawn until QMP said running, at the last start. */
  lastStartMs: number | undefined;
  /** The arguments of the last QEMU this object started. */
  lastArgv: readonly string[] | undefined;
  readonly #o: QemuMachineOptions;
  readonly #spawn: SpawnProcess;
  readonly #kill: (pid: number, signal: NodeJS.Signals | 0) => void;
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  #ready: Promise<void> | undefined;
  #createdRunDir = false;
  #boot: BootState;
  #pid: number | undefined;
  /** `order=` of the running process: what a QMP system_reset boots from. */
  #runningOrder: string | undefined;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(options: QemuMachineOptions) {
    validateQemuOptions(options);
    this.#o = options;
    this.name = options.name;
    this.runDir = resolve(options.runDir);
    this.#spawn = options.spawn ?? ((command, args, o) => nodeSpawn(command, args, o));
    this.#kill = options.kill ?? ((pid, signal) => process.kill(pid, signal));
    this.#now = options.now ?? Date.now;
    this.#sleep = options.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    const boot = options.boot ?? { device: 'disk', persistent: true, uefi: false };
    this.#boot = {
      current: boot,
      persistent: boot.persistent ? boot : { device: 'disk', persistent: true, uefi: false },
    };
  }

  /** Process id of the running QEMU, if any (started here or adopted). */
  get pid(): number | undefined {
    return this.#pid !== undefined && this.#alive(this.#pid) ? this.#pid : undefined;
  }

  #file(name: keyof typeof QEMU_FILES): string {
    return join(this.runDir, QEMU_FILES[name]);
  }

  #qmpOptions(connectTimeoutMs = 1_000): QmpConnectOptions {
    return { path: this.#file('qmp'), label: `machine ${this.name}`, connectTimeoutMs };
  }

  /** Run `fn` after every operation queued before it. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(async () => {
      await this.#init();
      return fn();
    });
    this.#queue = run.catch(() => undefined);
    return run;
  }

  /** Once: create the run folder, read the boot setting, adopt a QEMU left running by an earlier process. */
  #init(): Promise<void> {
    this.#ready ??= (async () => {
      try {
        this.#createdRunDir = (await mkdir(this.runDir, { recursive: true })) !== undefined;
      } catch (e) {
        throw new IoError('E_QEMU_RUNDIR', `machine ${this.name}: cannot create ${this.runDir}: ${messageOf(e)}`, {
          hint: 'Choose a writable run folder.',
          cause: e,
        });
      }
      const saved = await this.#loadBoot();
      if (saved) this.#boot = saved;
      await this.#adopt();
    })();
    const ready = this.#ready;
    // A failure is not remembered: the next call tries again (the folder or file may have been fixed).
    ready.catch(() => {
      if (this.#ready === ready) this.#ready = undefined;
    });
    return ready;
  }

  async #loadBoot(): Promise<BootState | undefined> {
    const path = this.#file('boot');
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new IoError('E_QEMU_BOOT_FILE', `machine ${this.name}: cannot read ${path}: ${messageOf(e)}`, {
        hint: 'Fix the file permissions.',
        cause: e,
      });
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const state = asBootState(parsed);
    if (!state) {
      throw new IoError('E_QEMU_BOOT_FILE', `machine ${this.name}: ${path} does not hold a boot setting`, {
        hint: 'Delete the file; the machine then boots from disk until a boot device is set again.',
        details: { machine: this.name, path },
      });
    }
    return state;
  }

  async #saveBoot(): Promise<void> {
    const path = this.#file('boot');
    const tmp = `${path}.tmp`;
    // Write and rename, so a crash leaves the old setting or the new one, never half a file.
    await writeFile(tmp, `${JSON.stringify(this.#boot, null, 2)}\n`);
    await rename(tmp, path);
  }

  /** Take over a QEMU an earlier process started for this run folder. */
  async #adopt(): Promise<void> {
    const pid = await this.#readPidFile();
    if (pid === undefined) return;
    const argv = await readCmdline(pid);
    // The pid must still be our QEMU (pids are reused): its arguments name our QMP socket.
    if (this.#alive(pid) && argv?.some((a) => a.includes(this.#file('qmp')))) {
      this.#pid = pid;
      this.#runningOrder = runningOrderOf(argv);
      return;
    }
    await this.#removeRunFiles();
  }

  async #readPidFile(): Promise<number | undefined> {
    try {
      const pid = Number.parseInt(await readFile(this.#file('pid'), 'utf8'), 10);
      return Number.isInteger(pid) && pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  }

  /** Alive and not a zombie (an exited child nobody reaped yet still answers kill 0). */
  #alive(pid: number): boolean {
    try {
      this.#kill(pid, 0);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
    }
    return !isZombie(pid);
  }

  /** QMP answers and the VM has not shut down (QEMU only lingers after shutdown with -no-shutdown in extraArgs). */
  async #qmpAnswers(): Promise<boolean> {
    try {
      const status = await withQmp(this.#qmpOptions(), (q) => q.queryStatus());
      return status.status !== 'shutdown';
    } catch {
      return false;
    }
  }

  /** On when the QEMU process is alive and its QMP socket answers. */
  async powerState(): Promise<PowerState> {
    await this.#init();
    if (this.#pid === undefined || !this.#alive(this.#pid)) return 'off';
    return (await this.#qmpAnswers()) ? 'on' : 'off';
  }

  /** Start QEMU with the boot order of the current setting and wait until it runs. Already on: nothing. */
  powerOn(): Promise<void> {
    return this.#serial(async () => {
      if (this.#pid !== undefined && this.#alive(this.#pid)) {
        if (await this.#qmpAnswers()) return;
        throw new RemoteError(
          'E_QEMU_HUNG',
          `machine ${this.name}: QEMU (pid ${this.#pid}) runs but its QMP socket does not answer`,
          {
            hint: 'Power the machine off (hard): that kills the process. Then power it on again.',
            details: { machine: this.name, pid: this.#pid },
          },
        );
      }
      await this.#start();
    });
  }

  /** Hard power off: QMP quit, SIGKILL if QEMU is still there after the deadline. */
  powerOff(): Promise<void> {
    return this.#serial(() => this.#stop());
  }

  /**
   * Press the ACPI power button (QMP system_powerdown). The guest decides:
   * an OS shuts down and QEMU exits (the state becomes off); firmware alone
   * ignores it, as a PC without an OS does.
   */
  softOff(): Promise<void> {
    return this.#serial(async () => {
      if (this.#pid === undefined || !this.#alive(this.#pid)) return;
      await withQmp(this.#qmpOptions(), (q) => q.execute('system_powerdown'));
    });
  }

  /**
   * Hard reset of a running machine (nothing when off). QEMU's `-boot`
   * order cannot change in a running process, so when the next boot wants
   * another device than the process was started with, QEMU is restarted.
   */
  reset(): Promise<void> {
    return this.#serial(async () => {
      if (this.#pid === undefined || !this.#alive(this.#pid)) return;
      if (QEMU_BOOT_ORDER[this.#boot.current.device] === this.#runningOrder) {
        await withQmp(this.#qmpOptions(), (q) => q.execute('system_reset'));
        await this.#consumeOnce();
        return;
      }
      await this.#stop();
      await this.#start();
    });
  }

  /** Remember the boot device for the next power-on or reset (and in the run folder). */
  setBootDevice(device: BootDevice | 'none', persistent: boolean, uefi: boolean): Promise<void> {
    return this.#serial(async () => {
      const setting: BootSetting = { device, persistent, uefi };
      this.#boot = { current: setting, persistent: persistent ? setting : this.#boot.persistent };
      await this.#saveBoot();
    });
  }

  /** The setting for the next boot. */
  async getBootDevice(): Promise<BootSetting> {
    await this.#init();
    return this.#boot.current;
  }

  /** Run a QMP command on the running machine (tests and diagnostics). */
  qmp<T>(fn: (client: QmpClient) => Promise<T>): Promise<T> {
    return withQmp(this.#qmpOptions(), fn);
  }

  /** Kill QEMU (no grace) and remove the files this machine created in its run folder. Safe to call twice. */
  destroy(): Promise<void> {
    return this.#serial(async () => {
      const pid = this.#pid;
      if (pid !== undefined && this.#alive(pid)) {
        this.#signal(pid, 'SIGKILL');
        await this.#waitExit(pid, this.#o.stopTimeoutMs ?? QEMU_DEFAULTS.stopTimeoutMs);
      }
      this.#forget();
      await this.#removeRunFiles();
      await Promise.all(
        [this.#file('serial'), this.#file('serialPrevious'), this.#file('stderr'), this.#file('boot')].map((f) =>
          rm(f, { force: true }),
        ),
      );
      if (this.#createdRunDir) await rmdir(this.runDir).catch(() => undefined); // only when empty
      this.#ready = undefined;
    });
  }

  async #start(): Promise<void> {
    await this.#removeRunFiles();
    // what the guest printed just before it powered off is often the one line that matters
    await rename(this.#file('serial'), this.#file('serialPrevious')).catch(() => undefined);
    const argv = qemuArgv({
      name: this.name,
      runDir: this.runDir,
      memoryMiB: this.#o.memoryMiB ?? QEMU_DEFAULTS.memoryMiB,
      cpus: this.#o.cpus ?? QEMU_DEFAULTS.cpus,
      ...(this.#o.disk !== undefined ? { disk: this.#o.disk } : {}),
      ...(this.#o.diskSerial !== undefined ? { diskSerial: this.#o.diskSerial } : {}),
      nics: this.#o.nics ?? [],
      extraArgs: this.#o.extraArgs ?? [],
      boot: this.#boot.current,
      persistent: this.#boot.persistent,
    });
    const binary = this.#o.qemuBinary ?? QEMU_DEFAULTS.binary;
    const stderr = await open(this.#file('stderr'), 'w');
    let child: ChildProcess;
    let spawnError: Error | undefined;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    try {
      // Own session and process group, no pipes to us: QEMU outlives this process and is adopted later.
      child = this.#spawn(binary, argv, { detached: true, stdio: ['ignore', 'ignore', stderr.fd] });
      // Listen before any await: a failed spawn reports 'error' on the next tick.
      child.once('error', (e) => (spawnError = e));
      child.once('exit', (code, signal) => (exit = { code, signal }));
      child.unref();
    } finally {
      await stderr.close();
    }
    const started = this.#now();
    this.lastArgv = argv;
    const deadline = started + (this.#o.startTimeoutMs ?? QEMU_DEFAULTS.startTimeoutMs);
    const poll = this.#o.pollMs ?? QEMU_DEFAULTS.pollMs;
    for (;;) {
      // A failed spawn has no pid and reports 'error' on the next tick: let that tick pass.
      if (child.pid === undefined) await new Promise((r) => setImmediate(r));
      if (spawnError) {
        const code = (spawnError as NodeJS.ErrnoException).code;
        throw new IoError('E_QEMU_MISSING', `machine ${this.name}: cannot run ${binary}: ${spawnError.message}`, {
          hint:
            code === 'ENOENT'
              ? 'Install QEMU: apt-get install qemu-system-x86 (Debian package), or set qemuBinary.'
              : 'Check that the QEMU binary is executable.',
          details: { machine: this.name, binary },
          cause: spawnError,
        });
      }
      const pid = child.pid;
      if (exit || pid === undefined || !this.#alive(pid)) {
        const tail = await this.#stderrTail();
        const how = exit?.signal ? `signal ${exit.signal}` : `status ${exit?.code ?? '?'}`;
        throw new RemoteError('E_QEMU_START', `machine ${this.name}: QEMU exited during start (${how})\n${tail}`, {
          hint: "QEMU's last stderr lines are quoted above; they usually name a bad option, a missing tap device or a locked disk image.",
          details: { machine: this.name, exitCode: exit?.code, signal: exit?.signal, stderr: tail, argv },
        });
      }
      try {
        const status = await withQmp(this.#qmpOptions(500), (q) => q.queryStatus());
        if (status.running) {
          this.lastStartMs = this.#now() - started;
          this.#pid = pid;
          this.#runningOrder = runningOrderOf(argv);
          break;
        }
      } catch (e) {
        if (!(e instanceof QmpUnreachableError)) throw e;
      }
      if (this.#now() >= deadline) {
        this.#signal(pid, 'SIGKILL');
        const tail = await this.#stderrTail();
        throw new TimeoutError(
          'E_QEMU_START_TIMEOUT',
          `machine ${this.name}: QEMU (pid ${pid}) did not report running within ${deadline - started} ms\n${tail}`,
          {
            hint: 'The host may be overloaded; retry, or raise startTimeoutMs. The process was killed.',
            details: { machine: this.name, pid, stderr: tail, argv },
          },
        );
      }
      await this.#sleep(poll);
    }
    await this.#consumeOnce();
  }

  /** A one-time setting was used by the boot that just started: fall back to the persistent one. */
  async #consumeOnce(): Promise<void> {
    if (this.#boot.current.persistent) return;
    this.#boot = { current: this.#boot.persistent, persistent: this.#boot.persistent };
    await this.#saveBoot();
  }

  async #stop(): Promise<void> {
    const pid = this.#pid;
    if (pid === undefined || !this.#alive(pid)) {
      this.#forget();
      await this.#removeRunFiles();
      return;
    }
    try {
      await withQmp(this.#qmpOptions(), async (q) => {
        // QEMU may close the connection before its answer to quit gets out: that is success too.
        await q.execute('quit').catch((e: unknown) => {
          if (!(e instanceof QmpClosedError)) throw e;
        });
      });
    } catch {
      // QMP unreachable or refusing: the deadline below ends in SIGKILL.
    }
    if (!(await this.#waitExit(pid, this.#o.stopTimeoutMs ?? QEMU_DEFAULTS.stopTimeoutMs))) {
      this.#signal(pid, 'SIGKILL');
      if (!(await this.#waitExit(pid, QEMU_DEFAULTS.stopTimeoutMs))) {
        throw new RemoteError('E_QEMU_STOP', `machine ${this.name}: QEMU (pid ${pid}) survives SIGKILL`, {
          hint: 'The process is stuck in the kernel (uninterruptible sleep); look at /proc/PID/stack.',
          details: { machine: this.name, pid },
        });
      }
    }
    this.#forget();
    await this.#removeRunFiles();
  }

  #forget(): void {
    this.#pid = undefined;
    this.#runningOrder = undefined;
  }

  #signal(pid: number, signal: NodeJS.Signals): void {
    try {
      this.#kill(pid, signal);
    } catch {
      // already gone
    }
  }

  async #waitExit(pid: number, timeoutMs: number): Promise<boolean> {
    const deadline = this.#now() + timeoutMs;
    const poll = this.#o.pollMs ?? QEMU_DEFAULTS.pollMs;
    while (this.#alive(pid)) {
      if (this.#now() >= deadline) return false;
      await this.#sleep(poll);
    }
    return true;
  }

  /** Socket and pid file: they describe a running QEMU and are stale once it is gone. */
  async #removeRunFiles(): Promise<void> {
    await Promise.all([this.#file('qmp'), this.#file('pid')].map((f) => rm(f, { force: true })));
  }

  async #stderrTail(): Promise<string> {
    try {
      const text = await readFile(this.#file('stderr'), 'utf8');
      const lines = text.trimEnd().split('\n');
      return lines.slice(-STDERR_TAIL_LINES).join('\n') || '(QEMU wrote nothing to stderr)';
    } catch {
      return '(no stderr log)';
    }
  }
}

/** `order=` of the `-boot` argument in an argument vector. */
function runningOrderOf(argv: readonly string[]): string | undefined {
  const i = argv.indexOf('-boot');
  const value = i >= 0 ? argv[i + 1] : undefined;
  return value ? /(?:^|,)order=([^,]+)/.exec(value)?.[1] : undefined;
}

/** A process's arguments from /proc (Linux), or undefined when it is gone or unreadable. */
export async function readCmdline(pid: number): Promise<string[] | undefined> {
  try {
    const raw = await readFile(`/proc/${pid}/cmdline`, 'utf8');
    return raw.split('\0').filter((a, i, all) => a !== '' || i < all.length - 1);
  } catch {
    return undefined;
  }
}

function isZombie(pid: number): boolean {
  try {
    // Field 3 of /proc/PID/stat, after the parenthesised command name (which may hold blanks).
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state === 'Z' || state === 'X';
  } catch {
    return false;
  }
}

function asBootState(v: unknown): BootState | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const r = v as Record<string, unknown>;
  const current = asBootSetting(r['current']);
  const persistent = asBootSetting(r['persistent']);
  return current && persistent ? { current, persistent } : undefined;
}

function asBootSetting(v: unknown): BootSetting | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const r = v as Record<string, unknown>;
  const device = r['device'];
  if (typeof device !== 'string' || !(device in QEMU_BOOT_ORDER)) return undefined;
  if (typeof r['persistent'] !== 'boolean' || typeof r['uefi'] !== 'boolean') return undefined;
  return { device: device as BootSetting['device'], persistent: r['persistent'], uefi: r['uefi'] };
}
