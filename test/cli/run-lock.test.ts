/**
 * The inventory's run lock as operators meet it: every command that changes
 * nodes or state files refuses to run beside another, read-only ones run
 * anyway; real stackctl processes refuse each other at once, a SIGKILLed
 * holder's lock is taken over by the next run, SIGINT/SIGTERM release it.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import type { Command } from 'commander';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { ExitCode } from '../../src/core/errors.js';
import { FileRunLock } from '../../src/core/lock.js';
import { packageRoot } from '../../src/core/paths.js';
import { loadSecrets } from '../../src/inventory/secrets.js';
import { startFleet, type RunningVbmc } from '../../src/lab/vbmc/fleet.js';
import { buildProgram } from '../../src/cli/main.js';
import { loadAll, planOf } from '../../src/cli/context.js';
import { PinSource, savePins, withPins } from '../../src/images/pins.js';
import { lockFileFor, safeCommandLine, withRunLock } from '../../src/cli/run-lock.js';
import { copyInventory, runCli, tempDir } from '../helpers/cli.js';

const bin = join(packageRoot(), 'dist', 'src', 'cli', 'bin.js');

beforeAll(() => {
  expect(existsSync(bin), 'build first: npm run build').toBe(true);
});

/** A UDP and a TCP port nothing listens on (the kernel's pick, then let go). */
async function freePorts(): Promise<{ udp: number; tcp: number }> {
  const udp = await new Promise<number>((resolve) => {
    const s = createSocket('udp4');
    s.bind(0, '127.0.0.1', () => {
      const port = s.address().port;
      s.close(() => resolve(port));
    });
  });
  const tcp = await new Promise<number>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
  return { udp, tcp };
}

/** The lab inventory in a fresh folder, its BMCs at these ports. */
function inventoryAt(ports: { ipmi: number; redfish: number }): string {
  const inv = copyInventory('lab.yaml');
  writeFileSync(
    inv,
    readFileSync(inv, 'utf8')
      .replace('127.0.0.1:6230', `127.0.0.1:${ports.ipmi}`)
      .replace('127.0.0.1:8230', `127.0.0.1:${ports.redfish}`),
  );
  return inv;
}

/** Pin every image of the inventory's plan to a made-up digest, as `images push -i` would have. */
function pinEveryImage(inv: string): void {
  const all = loadAll({ inventory: inv });
  const refs = planOf(all).plan.images.map((i) => i.ref);
  const digest = `sha256:${'0'.repeat(64)}`;
  savePins(all.imagesFile, withPins(all.pins, new Map(refs.map((r) => [r, digest])), PinSource.PUSH, new Date()).state);
}

/** A Redfish "BMC" that accepts connections and never answers: a command asking it waits its full timeout. */
async function silentBmc(): Promise<{ port: number; close: () => Promise<void> }> {
  const sockets: Socket[] = [];
  const server: Server = createServer((s) => void sockets.push(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** A stackctl process (the built CLI). */
interface Proc {
  readonly child: ChildProcess;
  readonly pid: number;
  stdout: string;
  stderr: string;
  readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const running: Proc[] = [];
afterEach(() => {
  for (const p of running.splice(0))
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
});

function start(...args: string[]): Proc {
  const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const p: Proc = {
    child,
    pid: child.pid!,
    stdout: '',
    stderr: '',
    exit: new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal }))),
  };
  child.stdout!.on('data', (d: Buffer) => (p.stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (p.stderr += d.toString()));
  running.push(p);
  return p;
}

/** Run stackctl to its end, killing it after `limitMs` (a hang fails the test instead of stalling it). */
async function run(
  limitMs: number,
  ...args: string[]
): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> {
  const t0 = Date.now();
  const p = start(...args);
  const timer = setTimeout(() => p.child.kill('SIGKILL'), limitMs);
  const { code } = await p.exit;
  clearTimeout(timer);
  return { code, stdout: p.stdout, stderr: p.stderr, ms: Date.now() - t0 };
}

async function waitFor(what: string, ok: () => boolean, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const holderOf = (lockFile: string): { pid: number; since: string; command: string } =>
  JSON.parse(readFileSync(lockFile, 'utf8'));

/** The lab inventory with its secrets, cmp-0's Redfish BMC silent: `nodes power on --node cmp-0` holds the lock ~15 s. */
async function withSilentCmp0(): Promise<{ inv: string; lockFile: string; bmc: { close: () => Promise<void> } }> {
  const bmc = await silentBmc();
  const inv = inventoryAt({ ipmi: (await freePorts()).udp, redfish: bmc.port });
  expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
  return { inv, lockFile: lockFileFor(inv), bmc };
}

describe('two stackctl runs on one inventory', () => {
  it('refuses the second at once, naming the first; read-only commands run beside it', async () => {
    const { inv, lockFile, bmc } = await withSilentCmp0();
    try {
      const first = start('nodes', 'power', 'on', '--node', 'cmp-0', '-i', inv);
      await waitFor('the first run to take the lock', () => existsSync(lockFile));
      const holder = holderOf(lockFile);
      expect(holder).toMatchObject({ pid: first.pid, command: `stackctl nodes power on --node cmp-0 -i ${inv}` });

      const second = await run(10_000, 'nodes', 'power', 'off', '--node', 'cmp-0', '-i', inv);
      expect(second.code, second.stderr).toBe(ExitCode.LOCKED);
      expect(second.code).toBe(11);
      expect(second.stderr).toMatch(
        new RegExp(
          `^error E_LOCKED: ${inv.replace(/[.]/g, '\\.')} is locked by another stackctl run: ` +
            `'stackctl nodes power on --node cmp-0 -i ${inv.replace(/[.]/g, '\\.')}' ` +
            `\\(pid ${first.pid} on host ${hostname()}, since ${holder.since.replace(/[.]/g, '\\.')}, \\d+ s ago\\)\n` +
            `  hint: Wait for that run to end, or stop it \\(Ctrl-C in its terminal, or kill ${first.pid}\\)`,
        ),
      );
      expect(second.stderr).toContain(`Lock file: ${lockFile}.`);
      // "at once": refused while the first still holds the lock (~15 s), not after waiting for it
      expect(first.child.exitCode).toBeNull();

      // read-only commands are not blocked by the run in progress
      const plan = await run(10_000, 'plan', '--no-save', '-i', inv);
      expect(plan.code, plan.stderr).toBe(0);
      const dry = await run(10_000, 'deploy', '--dry-run', '-i', inv);
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.stdout).toContain('dry run: 2 node(s) would be provisioned first');

      // the first was still running (and holding the lock) all along; it ends and releases it
      expect(first.child.exitCode).toBeNull();
      expect(holderOf(lockFile).pid).toBe(first.pid);
      first.child.kill('SIGTERM');
      await first.exit;
      expect(existsSync(lockFile)).toBe(false);
    } finally {
      await bmc.close();
    }
  });

  it('lets exactly one of four runs started together hold the lock', async () => {
    const { inv, lockFile, bmc } = await withSilentCmp0();
    try {
      const procs = [0, 1, 2, 3].map(() => start('nodes', 'power', 'on', '--node', 'cmp-0', '-i', inv));
      await waitFor('three runs to be refused', () => procs.filter((p) => p.child.exitCode !== null).length >= 3);
      const refused = procs.filter((p) => p.child.exitCode !== null);
      const holders = procs.filter((p) => p.child.exitCode === null);
      expect(refused.map((p) => p.child.exitCode)).toEqual([11, 11, 11]);
      expect(holders).toHaveLength(1);
      expect(holderOf(lockFile).pid).toBe(holders[0]!.pid);
      for (const p of refused) expect(p.stderr).toContain(`(pid ${holders[0]!.pid} on host ${hostname()}`);
    } finally {
      await bmc.close();
    }
  });

  it("takes a SIGKILLed holder's lock over on the next run (deploy --resume), with a warning and an event", async () => {
    const { inv, lockFile, bmc } = await withSilentCmp0();
    try {
      const killed = start('nodes', 'power', 'on', '--node', 'cmp-0', '-i', inv);
      await waitFor('the run to take the lock', () => existsSync(lockFile));
      const since = holderOf(lockFile).since;
      killed.child.kill('SIGKILL');
      expect((await killed.exit).signal).toBe('SIGKILL');
      expect(existsSync(lockFile)).toBe(true); // nothing could clean up after a SIGKILL

      // every image pinned: the deploy asks no registry (there is none here) and goes on to its nodes
      pinEveryImage(inv);
      const resume = await run(20_000, 'deploy', '--resume', '-i', inv);
      const warning =
        `${inv}: warning W_LOCK_STALE: took over the run lock ${lockFile} left by ` +
        `'stackctl nodes power on --node cmp-0 -i ${inv}' (pid ${killed.pid} on host ${hostname()}, since ${since}): ` +
        `process ${killed.pid} is gone\n`;
      expect(resume.stderr.startsWith(warning), resume.stderr).toBe(true);
      expect(resume.stderr).not.toContain('E_LOCKED');
      // past the lock, the deploy went on with its work: here it needs a provisioning interface (no lab)
      expect(resume.stderr).toContain('error E_PXE_INTERFACE');
      expect(existsSync(lockFile)).toBe(false);
      const events = readFileSync(inv.replace('.yaml', '.events.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(events.filter((e) => e.kind === 'lock.taken-over')).toEqual([
        expect.objectContaining({ lock: lockFile, pid: killed.pid, since, reason: `process ${killed.pid} is gone` }),
      ]);
    } finally {
      await bmc.close();
    }
  });

  it.each([
    ['SIGTERM', 143],
    // NOTE: 127, not 130: while a progress display runs, listr2's own SIGINT handler ends the process
    ['SIGINT', 127],
  ] as const)('releases the lock on %s (exit status %i)', async (signal, status) => {
    const { inv, lockFile, bmc } = await withSilentCmp0();
    try {
      const p = start('nodes', 'power', 'on', '--node', 'cmp-0', '-i', inv);
      await waitFor('the run to take the lock', () => existsSync(lockFile));
      p.child.kill(signal);
      expect(await p.exit).toEqual({ code: status, signal: null });
      expect(existsSync(lockFile)).toBe(false);
    } finally {
      await bmc.close();
    }
  });

  it('runs lab bmc serve while another run holds the lock (it serves for the whole life of the lab)', async () => {
    const ports = await freePorts();
    const inv = inventoryAt({ ipmi: ports.udp, redfish: ports.tcp });
    expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
    const lock = new FileRunLock(lockFileFor(inv), inv);
    await lock.acquire('stackctl deploy -i lab.yaml');
    try {
      const serve = start('lab', 'bmc', 'serve', '-i', inv);
      await waitFor(
        'the BMCs to serve',
        () => serve.stderr.includes('serving 2 virtual BMC(s)') || serve.child.exitCode !== null,
      );
      expect(serve.stderr).toContain('serving 2 virtual BMC(s)');
      serve.child.kill('SIGTERM');
      await serve.exit;
      expect(lock.held).toBe(true);
    } finally {
      await lock.release();
    }
  });
});

describe('an inventory that is not a regular file', () => {
  it.each([
    ['inventory validate', ['inventory', 'validate']],
    ['plan', ['plan']],
    ['deploy', ['deploy']],
    ['secrets generate', ['secrets', 'generate']],
  ])('is refused at once by %s: a FIFO', async (_name, args) => {
    const fifo = join(tempDir(), 'site.yaml');
    expect(spawnSync('mkfifo', [fifo]).status, 'mkfifo (coreutils) is needed').toBe(0);
    const r = await run(10_000, ...args, '-i', fifo);
    expect(r.code, r.stderr).toBe(ExitCode.IO);
    expect(r.stderr).toContain(`error E_FILE_TYPE: ${fifo} is a FIFO (named pipe), not a regular file`);
    // (a hang would have been killed at 10 s, with no exit code)
    expect(existsSync(join(dirname(fifo), 'site.lock'))).toBe(false);
  });

  it('is refused for a device and a directory, and as --secrets', async () => {
    let r = await runCli('plan', '-i', '/dev/zero');
    expect(r.code).toBe(ExitCode.IO);
    expect(r.stderr).toContain('error E_FILE_TYPE: /dev/zero is a character device, not a regular file');
    const dir = tempDir();
    r = await runCli('inventory', 'validate', '-i', dir);
    expect(r.stderr).toContain(`error E_FILE_TYPE: ${dir} is a directory, not a regular file`);
    const inv = copyInventory('lab.yaml');
    const fifo = join(dirname(inv), 'fifo.secrets.yaml');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    chmodSync(fifo, 0o600);
    r = await runCli('plan', '--no-save', '-i', inv, '--secrets', fifo);
    expect(r.code).toBe(ExitCode.IO);
    expect(r.stderr).toContain(`error E_FILE_TYPE: ${fifo} is a FIFO (named pipe), not a regular file`);
  });
});

/**
 * Every command, by what it does with the lock. A new command fails the
 * last test below until it is listed here (and in docs/cli.md).
 */
const LOCKING: readonly (readonly string[])[] = [
  ['secrets', 'generate'],
  ['certs', 'generate'],
  ['certs', 'renew'],
  ['rotate', 'keystone-keys'],
  ['rotate', 'keystone-credential-keys'],
  ['plan'], // a fresh inventory: new IPAM allocations to save
  ['ipam', 'release', 'gone-0'],
  ['nodes', 'power', 'on', '--all'],
  ['nodes', 'bootdev', 'pxe', '--all'],
  ['nodes', 'trust', '--all', '--yes'],
  ['nodes', 'enroll', '--all'],
  ['nodes', 'inspect', '--all'],
  ['nodes', 'provision', '--all'],
  ['nodes', 'undeploy', '--all'],
  ['nodes', 'maintenance', 'on', '--node', 'cmp-0'],
  ['deploy'],
  ['deploy', '--resume'],
  ['images', 'push'], // with -i: pins what it pushed
  ['images', 'pin'],
  ['upgrade', '--to', 'zed-update'],
  ['recover', 'galera'],
  ['lab', 'bmc', 'start'],
  ['lab', 'bmc', 'stop'],
  ['lab', 'up'],
  ['lab', 'down'],
];

/** Read-only: they run while another run holds the lock (with the lab's BMCs served by the test). */
const READ_ONLY: readonly (readonly string[])[] = [
  ['inventory', 'validate'],
  ['certs', 'list'],
  ['plan', '--no-save'],
  ['ipam', 'show'],
  ['nodes', 'power', 'status', '--all'],
  ['nodes', 'validate', '--all'],
  ['nodes', 'list'],
  ['nodes', 'show', 'ctl-0'],
  ['deploy', '--dry-run'],
  ['upgrade', '--to', 'zed-update', '--dry-run'],
  ['recover', 'galera', '--dry-run'], // stops at its own check (one MariaDB node): no node is asked
  ['status'],
  ['openrc'],
  ['report'], // stops at its own check (no event log yet): nothing is written
  ['tempest', 'config', '--os-interface', 'none'], // stops at its own option check: no cloud is asked
  ['pxe', 'config'],
  ['lab', 'bmc', 'list'],
  ['lab', 'status', '--kind', 'vm'],
];

/** Not tied to an inventory (no -i): machine-wide, or a workspace; they take no inventory lock. */
const NO_INVENTORY = ['schema', 'images build', 'images list', 'images build-ramdisk', 'tempest run'];

/** Runs until interrupted, beside the runs that need it (tested above with real processes). */
const SERVING = ['lab bmc serve'];

describe('which commands take the run lock', () => {
  let fleet: RunningVbmc[] = [];
  afterEach(async () => {
    await Promise.allSettled(fleet.map((b) => b.close()));
    fleet = [];
  });

  /** A lab inventory with secrets, its two virtual BMCs served in this process. */
  async function servedLab(): Promise<string> {
    const ports = await freePorts();
    const inv = inventoryAt({ ipmi: ports.udp, redfish: ports.tcp });
    expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
    const cred = loadSecrets(inv.replace('.yaml', '.secrets.yaml'))!.bmc.get('lab-bmc')!;
    fleet = await startFleet([
      { node: 'ctl-0', address: `ipmi://127.0.0.1:${ports.udp}`, username: cred.username, password: cred.password },
      {
        node: 'cmp-0',
        address: `redfish+http://127.0.0.1:${ports.tcp}/redfish/v1/Systems/cmp-0`,
        username: cred.username,
        password: cred.password,
      },
    ]);
    return inv;
  }

  it.each(LOCKING.map((a) => [a.join(' '), a]))('%s is refused while another run holds the lock', async (_n, args) => {
    const inv = copyInventory('lab.yaml');
    const lock = new FileRunLock(lockFileFor(inv), inv);
    await lock.acquire('stackctl deploy -i lab.yaml');
    try {
      const r = await runCli(...args, '-i', inv);
      expect(r.code, r.stderr).toBe(ExitCode.LOCKED);
      expect(r.stderr).toContain(
        `error E_LOCKED: ${inv} is locked by another stackctl run: 'stackctl deploy -i lab.yaml'`,
      );
      // refused before anything: no secrets, IPAM state, image pins or node state appeared
      for (const ext of ['.secrets.yaml', '.ipam.json', '.images.json', '.nodes.json', '.nodes.journal', '.certs']) {
        expect(existsSync(inv.replace('.yaml', ext))).toBe(false);
      }
    } finally {
      await lock.release();
    }
  });

  it.each(READ_ONLY.map((a) => [a.join(' '), a]))('%s runs while another run holds the lock', async (_n, args) => {
    const inv = await servedLab();
    const lock = new FileRunLock(lockFileFor(inv), inv);
    await lock.acquire('stackctl deploy -i lab.yaml');
    try {
      const r = await runCli(...args, '-i', inv);
      expect(r.stderr).not.toContain('E_LOCKED');
      expect(r.code, r.stderr).not.toBe(ExitCode.LOCKED);
    } finally {
      await lock.release();
    }
  });

  it('leaves no command unclassified', async () => {
    const leaves = (c: Command, path: string[]): { name: string; inventory: boolean }[] =>
      c.commands.length
        ? c.commands.flatMap((s) => leaves(s, [...path, s.name()]))
        : [{ name: path.join(' '), inventory: c.options.some((o) => o.long === '--inventory') }];
    const all = leaves(await buildProgram(), []);
    const classified = new Set<string>();
    for (const args of [...LOCKING, ...READ_ONLY]) {
      const name = all.map((l) => l.name).find((n) => args.join(' ').startsWith(n + ' ') || args.join(' ') === n);
      expect(name, args.join(' ')).toBeDefined();
      classified.add(name!);
    }
    for (const n of [...NO_INVENTORY, ...SERVING]) classified.add(n);
    expect(all.map((l) => l.name).filter((n) => !classified.has(n))).toEqual([]);
    expect(all.filter((l) => l.inventory && NO_INVENTORY.includes(l.name))).toEqual([]);
  });
});

describe('withRunLock', () => {
  it('releases the lock when the work throws', async () => {
    const inv = copyInventory('lab.yaml');
    await expect(
      withRunLock(inv, () => {
        expect(existsSync(lockFileFor(inv))).toBe(true);
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(existsSync(lockFileFor(inv))).toBe(false);
    expect(process.listenerCount('SIGINT')).toBe(0);
    expect(await withRunLock(inv, async () => 42)).toBe(42);
    expect(existsSync(lockFileFor(inv))).toBe(false);
  });
});

describe('safeCommandLine', () => {
  it.each([
    [['deploy', '-i', 'site.yaml', '--resume'], 'stackctl deploy -i site.yaml --resume'],
    [['plan', '-i', 'my site.yaml'], "stackctl plan -i 'my site.yaml'"],
    [['x', '--password', 'hunter2', '--api-key=abc'], 'stackctl x --password *** --api-key=***'],
    [
      ['upgrade', '--check-images', 'https://bob:s3cret@reg:5000'],
      'stackctl upgrade --check-images https://***@reg:5000',
    ],
    [['lab', 'bmc', 'start', '--secrets', 'site.secrets.yaml'], 'stackctl lab bmc start --secrets site.secrets.yaml'],
  ])('records %j as %s', (args, text) => {
    expect(safeCommandLine(args)).toBe(text);
  });

  it('keeps a recorded command line short', () => {
    expect(safeCommandLine(['plan', '-i', 'x'.repeat(1000)])).toHaveLength(400);
  });
});

describe('withRunLock on SIGINT and SIGTERM', () => {
  it('ends the process with 128 + the signal number when nothing else handles the signal', async () => {
    const inv = copyInventory('lab.yaml');
    const exit = vi.spyOn(process, 'exit').mockImplementation((() => undefined) as never);
    try {
      await withRunLock(inv, () => {
        process.emit('SIGINT', 'SIGINT');
        expect(exit).toHaveBeenLastCalledWith(130);
        process.emit('SIGTERM', 'SIGTERM');
        expect(exit).toHaveBeenLastCalledWith(143);
        // a command with its own handler (upgrade stops at the next safe point) keeps the process running
        let stopping = false;
        process.once('SIGINT', () => (stopping = true));
        process.emit('SIGINT', 'SIGINT');
        expect(stopping).toBe(true);
        expect(exit).toHaveBeenCalledTimes(2);
      });
    } finally {
      exit.mockRestore();
    }
    expect(process.listenerCount('SIGINT') + process.listenerCount('SIGTERM')).toBe(0);
    expect(existsSync(lockFileFor(inv))).toBe(false);
  });
});

describe('withRunLock and a signal as soon as the lock file exists', () => {
  it('has its handlers in place while the lock is taken, and leaves none when the lock is refused', async () => {
    const inv = copyInventory('lab.yaml');
    const listeners = (): number[] => ['SIGTERM', 'SIGINT', 'exit'].map((e) => process.listenerCount(e));
    const before = listeners();
    const seen: number[] = [];
    const lock = (file: string, label: string) => {
      const real = new FileRunLock(file, label);
      return {
        label,
        acquire: async (command: string) => {
          const grant = await real.acquire(command);
          // the file exists now: a SIGTERM here must find the run's handler, not end the process
          seen.push(process.listenerCount('SIGTERM'));
          return grant;
        },
        release: () => real.release(),
        releaseSync: () => real.releaseSync(),
      };
    };
    expect(await withRunLock(inv, () => 'done', { lock })).toBe('done');
    expect(seen).toEqual([before[0]! + 1]);
    expect(existsSync(lockFileFor(inv))).toBe(false);
    const holder = new FileRunLock(lockFileFor(inv), inv);
    await holder.acquire('stackctl deploy -i lab.yaml');
    try {
      await expect(withRunLock(inv, () => 'never')).rejects.toMatchObject({ code: 'E_LOCKED' });
      // refused: its handlers are gone, and the holder's lock file is left alone
      expect(listeners()).toEqual(before);
      expect(existsSync(lockFileFor(inv))).toBe(true);
    } finally {
      await holder.release();
    }
  });
});
