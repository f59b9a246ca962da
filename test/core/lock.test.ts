import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/core/errors.js';
import { FileRunLock, LOCAL_PROBE, LockHeld, formatAge, procStartTime, type LocalProbe } from '../../src/core/lock.js';

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'stackctl-lock-'));
  file = join(dir, 'site.lock');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The pid of a process that has exited (and was reaped): no process has it now. */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', '']);
  expect(r.status).toBe(0);
  expect(LOCAL_PROBE.alive(r.pid)).toBe(false);
  return r.pid;
}

/** This machine as seen by another process or from another boot or host. */
const probe = (over: Partial<LocalProbe>): LocalProbe => ({ ...LOCAL_PROBE, ...over });

/** Whatever the lock, the refusal as the operator reads it. */
function refusal(fn: () => unknown): LockHeld {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(LockHeld);
    return e as LockHeld;
  }
  throw new Error('the lock was not refused');
}

describe('FileRunLock', () => {
  it('creates the lock file naming its holder, and removes it on release', async () => {
    const lock = new FileRunLock(file, 'site.yaml');
    expect(await lock.acquire('stackctl deploy -i site.yaml')).toEqual({});
    expect(lock.held).toBe(true);
    const record = JSON.parse(readFileSync(file, 'utf8'));
    expect(record).toMatchObject({
      version: 1,
      pid: process.pid,
      host: hostname(),
      command: 'stackctl deploy -i site.yaml',
      start: LOCAL_PROBE.startTime(process.pid),
      boot: LOCAL_PROBE.bootId(),
    });
    expect(Date.now() - Date.parse(record.since)).toBeLessThan(5_000);
    await lock.release();
    expect(existsSync(file)).toBe(false);
    expect(lock.held).toBe(false);
    await lock.release(); // again: nothing to do
  });

  it('refuses a second holder at once, naming the first: command, pid, host, since when', async () => {
    const first = new FileRunLock(file, 'site.yaml', probe({ now: () => new Date('2026-01-01T10:00:00.000Z') }));
    await first.acquire('stackctl deploy -i site.yaml --resume');
    const second = new FileRunLock(file, 'site.yaml', probe({ now: () => new Date('2026-01-01T10:03:00.000Z') }));
    const e = refusal(() => second.acquireSync('stackctl nodes provision --all -i site.yaml'));
    expect(e.code).toBe('E_LOCKED');
    expect(e.exitCode).toBe(ExitCode.LOCKED);
    expect(e.message).toBe(
      `site.yaml is locked by another stackctl run: 'stackctl deploy -i site.yaml --resume' ` +
        `(pid ${process.pid} on host ${hostname()}, since 2026-01-01T10:00:00.000Z, 3 min ago)`,
    );
    expect(e.hint).toContain(`kill ${process.pid}`);
    expect(e.hint).toContain(file);
    expect(e.details).toMatchObject({ pid: process.pid, host: hostname(), lock: file });
    // the refused run changed nothing: the first still holds the lock and releases it
    expect(JSON.parse(readFileSync(file, 'utf8')).command).toBe('stackctl deploy -i site.yaml --resume');
    expect(second.held).toBe(false);
    await first.release();
    expect(existsSync(file)).toBe(false);
    expect(await second.acquire('stackctl nodes provision --all -i site.yaml')).toEqual({});
    await second.release();
  });

  it('takes over the lock of a process that is gone, saying whose it was and why', async () => {
    const pid = deadPid();
    const dead = new FileRunLock(file, 'site.yaml', probe({ pid, startTime: () => '12345' }));
    await dead.acquire('stackctl deploy -i site.yaml');
    const next = new FileRunLock(file, 'site.yaml');
    const grant = await next.acquire('stackctl deploy -i site.yaml --resume');
    expect(grant.takenOver).toEqual({
      holder: expect.objectContaining({ pid, host: hostname(), command: 'stackctl deploy -i site.yaml' }),
      reason: `process ${pid} is gone`,
    });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({
      pid: process.pid,
      command: 'stackctl deploy -i site.yaml --resume',
    });
    // the dead run's object cannot release the new holder's lock
    await dead.release();
    expect(existsSync(file)).toBe(true);
    await next.release();
    expect(existsSync(file)).toBe(false);
  });

  it('takes over a lock taken before this machine last booted, even if its pid runs now', async () => {
    const old = new FileRunLock(file, 'site.yaml', probe({ bootId: () => 'a-boot-before-this-one' }));
    await old.acquire('stackctl upgrade -i site.yaml --to epoxy');
    const grant = await new FileRunLock(file, 'site.yaml').acquire('stackctl upgrade -i site.yaml --to epoxy --resume');
    expect(LOCAL_PROBE.bootId()).toBeDefined();
    expect(grant.takenOver?.reason).toBe('it was taken before this machine last booted');
  });

  it('takes over a lock whose pid now belongs to another program (another start time)', async () => {
    const other = new FileRunLock(file, 'site.yaml', probe({ startTime: () => '1' }));
    await other.acquire('stackctl deploy -i site.yaml');
    const grant = await new FileRunLock(file, 'site.yaml').acquire('stackctl deploy -i site.yaml');
    expect(grant.takenOver?.reason).toBe(`process ${process.pid} is gone (that number now belongs to another program)`);
  });

  it('puts back a live lock that replaced the stale one while it was being judged, and is refused', async () => {
    const pid = deadPid();
    await new FileRunLock(file, 'site.yaml', probe({ pid })).acquire('stackctl deploy -i site.yaml');
    const winner = new FileRunLock(file, 'site.yaml');
    let raced = false;
    const loser = new FileRunLock(
      file,
      'site.yaml',
      probe({
        // between this run's judging the dead lock and moving it aside, another run takes it over
        alive: (p) => {
          if (p === pid && !raced) {
            raced = true;
            expect(winner.acquireSync('stackctl deploy -i site.yaml --resume').takenOver?.holder.pid).toBe(pid);
          }
          return LOCAL_PROBE.alive(p);
        },
      }),
    );
    const e = refusal(() => loser.acquireSync('stackctl nodes enroll --all -i site.yaml'));
    expect(raced).toBe(true);
    expect(e.message).toContain("'stackctl deploy -i site.yaml --resume'");
    expect(winner.held).toBe(true);
    expect(JSON.parse(readFileSync(file, 'utf8')).command).toBe('stackctl deploy -i site.yaml --resume');
    await winner.release();
    expect(existsSync(file)).toBe(false);
  });

  it('never judges a lock held from another host: refused, with what to do if that host is gone', async () => {
    const pid = deadPid();
    await new FileRunLock(file, 'site.yaml', probe({ pid, hostname: () => 'deploy-2' })).acquire(
      'stackctl deploy -i site.yaml',
    );
    const e = refusal(() => new FileRunLock(file, 'site.yaml').acquireSync('stackctl deploy -i site.yaml'));
    expect(e.message).toContain(`(pid ${pid} on host deploy-2, since `);
    expect(e.foreign).toBe(true);
    expect(e.hint).toBe(
      `That run is on another host: wait for it to end or stop it there. If host deploy-2 is gone for good, remove ${file}.`,
    );
  });

  it('refuses a recent lock file it cannot read, and takes over one older than this boot', async () => {
    writeFileSync(file, 'not a lock\n');
    expect(() => new FileRunLock(file, 'site.yaml').acquireSync('stackctl deploy')).toThrow(
      expect.objectContaining({ code: 'E_LOCK_FILE', exitCode: ExitCode.IO }),
    );
    utimesSync(file, new Date(LOCAL_PROBE.bootTimeMs() - 60_000), new Date(LOCAL_PROBE.bootTimeMs() - 60_000));
    const grant = await new FileRunLock(file, 'site.yaml').acquire('stackctl deploy');
    expect(grant.takenOver?.reason).toBe('an unreadable lock file from before this machine last booted');
  });

  it('never opens a FIFO found at the lock path (it would wait for a writer): refused as unreadable', () => {
    expect(spawnSync('mkfifo', [file]).status, 'mkfifo (coreutils) is needed').toBe(0);
    expect(() => new FileRunLock(file, 'site.yaml').acquireSync('stackctl deploy')).toThrow(
      expect.objectContaining({ code: 'E_LOCK_FILE' }),
    );
  });

  it('says why it cannot create the lock file', () => {
    expect(() => new FileRunLock(join(dir, 'no', 'site.lock'), 'site.yaml').acquireSync('x')).toThrow(
      expect.objectContaining({ code: 'E_FILE_WRITE', message: expect.stringContaining('ENOENT') }),
    );
  });

  it('leaves no temporary or moved-aside files behind', async () => {
    const pid = deadPid();
    await new FileRunLock(file, 'site.yaml', probe({ pid })).acquire('a');
    const lock = new FileRunLock(file, 'site.yaml');
    await lock.acquire('b');
    refusal(() => new FileRunLock(file, 'site.yaml').acquireSync('c'));
    await lock.release();
    expect(spawnSync('ls', ['-A', dir], { encoding: 'utf8' }).stdout).toBe('');
  });
});

describe('lock helpers', () => {
  it('reads the start time from /proc/PID/stat, whatever the command name holds', () => {
    const rest = 'S 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 424242 1000 10';
    expect(procStartTime(`77 (node) ${rest}`)).toBe('424242');
    expect(procStartTime(`77 (a) b (c) ${rest}`)).toBe('424242');
    expect(LOCAL_PROBE.startTime(process.pid)).toMatch(/^\d+$/);
  });

  it.each([
    [4_000, '4 s'],
    [119_000, '119 s'],
    [180_000, '3 min'],
    [2 * 3600_000 + 5 * 60_000, '2 h 5 min'],
  ])('says %i ms ago as %s', (ms, text) => {
    expect(formatAge(ms)).toBe(text);
  });
});
