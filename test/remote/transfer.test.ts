import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TimeoutError } from '../../src/core/errors.js';
import { recordHostKey } from '../../src/remote/known-hosts.js';
import { SshPool, type SshTarget } from '../../src/remote/ssh.js';
import { SftpTransfer } from '../../src/remote/transfer.js';
import { hostPublicKey, startSshd, type TestSshd } from './sshd.js';

let sshd: TestSshd;
let pool: SshPool;
let target: SshTarget;
let files: SftpTransfer;

beforeAll(async () => {
  sshd = await startSshd();
  recordHostKey(sshd.knownHostsFile, '127.0.0.1', sshd.port, hostPublicKey(sshd.hostKeyFile));
  pool = new SshPool({ knownHostsFile: sshd.knownHostsFile, privateKeyFile: sshd.clientKeyFile });
  target = { node: 'test-node', host: '127.0.0.1', port: sshd.port, user: 'root' };
  files = new SftpTransfer(pool);
});

afterAll(async () => {
  await pool?.close();
  await sshd?.stop();
});

describe('SFTP transfer', () => {
  it('fails a request sftp-server does not answer within its deadline, and the next transfer gets a new session', async () => {
    const quick = new SshPool({
      knownHostsFile: sshd.knownHostsFile,
      privateKeyFile: sshd.clientKeyFile,
      sftpRequestTimeoutMs: 1000,
    });
    const stopped: number[] = [];
    try {
      const t = new SftpTransfer(quick);
      const dest = join(sshd.dir, 'remote', 'frozen', 'f.conf');
      await t.upload(target, { data: 'one\n' }, dest);
      // Freeze the sftp-server that serves this session (a hung disk or a stopped process on a node).
      const before = new Set(stopped);
      for (const p of sshd.sessionProcesses().filter((x) => x.comm === 'sftp-server' && !before.has(x.pid))) {
        process.kill(p.pid, 'SIGSTOP');
        stopped.push(p.pid);
      }
      expect(stopped.length).toBeGreaterThan(0);
      const started = Date.now();
      const err = await t.upload(target, { data: 'two\n' }, dest).catch((e: unknown) => e);
      const elapsed = Date.now() - started;
      expect(err).toBeInstanceOf(TimeoutError);
      expect(err).toMatchObject({ code: 'E_SFTP_TIMEOUT', details: { node: 'test-node', timeoutMs: 1000 } });
      expect((err as TimeoutError).message).toMatch(/^test-node \(root@\[127\.0\.0\.1\]:\d+\): SFTP \w+ \//);
      expect((err as TimeoutError).hint).toBeTruthy();
      expect(elapsed).toBeGreaterThanOrEqual(1000);
      expect(elapsed).toBeLessThan(3000);
      // The old sftp-server is still stopped; the next upload opens a new session and goes through.
      await t.upload(target, { data: 'three\n' }, dest);
      expect(readFileSync(dest, 'utf8')).toBe('three\n');
      // Neither did the stuck session use up the connection's session slots.
      const all = await Promise.all(
        Array.from({ length: 12 }, () => quick.exec(target, ['true'], { timeoutMs: 10_000 })),
      );
      expect(all.every((r) => r.code === 0)).toBe(true);
    } finally {
      for (const pid of stopped) process.kill(pid, 'SIGCONT');
      await quick.close();
    }
  });

  it('creates parent folders and applies the mode and owner', async () => {
    const dest = join(sshd.dir, 'remote', 'a', 'b', 'secret.conf');
    const n = await files.upload(target, { data: 'password=x\n' }, dest, { mode: 0o600, owner: { uid: 0, gid: 0 } });
    expect(n).toBe(11);
    expect(readFileSync(dest, 'utf8')).toBe('password=x\n');
    expect(statSync(dest).mode & 0o777).toBe(0o600);
    expect(statSync(join(sshd.dir, 'remote', 'a')).isDirectory()).toBe(true);
    // No temporary file left behind.
    const { readdirSync } = await import('node:fs');
    expect(readdirSync(join(sshd.dir, 'remote', 'a', 'b'))).toEqual(['secret.conf']);
  });

  it('replaces a file atomically: a reader sees the old or the new content, never a part', async () => {
    const dest = join(sshd.dir, 'remote', 'big.bin');
    const oldData = Buffer.alloc(1024, 1);
    writeFileSync(dest, oldData);
    const big = randomBytes(24 * 1024 * 1024);
    const local = join(sshd.dir, 'big-local.bin');
    writeFileSync(local, big);
    let polls = 0;
    let sawOld = 0;
    let done = false;
    const poller = (async () => {
      while (!done) {
        const now = readFileSync(dest);
        polls++;
        if (now.length === oldData.length) {
          expect(now.equals(oldData)).toBe(true);
          sawOld++;
        } else {
          expect(now.length).toBe(big.length);
          expect(now.equals(big)).toBe(true);
        }
        await new Promise((r) => setImmediate(r));
      }
    })();
    await files.upload(target, { file: local }, dest, { mode: 0o640 });
    done = true;
    await poller;
    expect(polls).toBeGreaterThan(1);
    expect(sawOld).toBeGreaterThan(0); // the upload took long enough to be watched
    expect(readFileSync(dest).equals(big)).toBe(true);
    expect(statSync(dest).mode & 0o777).toBe(0o640);
  });

  it('a file absent before the upload is absent or complete while it is written', async () => {
    const dest = join(sshd.dir, 'remote', 'new', 'fresh.bin');
    const data = randomBytes(8 * 1024 * 1024);
    let done = false;
    const poller = (async () => {
      while (!done) {
        if (existsSync(dest)) expect(readFileSync(dest).equals(data)).toBe(true);
        await new Promise((r) => setImmediate(r));
      }
    })();
    await files.upload(target, { data }, dest);
    done = true;
    await poller;
    expect(readFileSync(dest).equals(data)).toBe(true);
  });

  it('downloads into a local file and reads small files into memory', async () => {
    const src = join(sshd.dir, 'remote', 'down.bin');
    const data = randomBytes(3 * 1024 * 1024 + 17);
    writeFileSync(src, data);
    const local = join(sshd.dir, 'down-local.bin');
    expect(await files.download(target, src, local, { mode: 0o600 })).toBe(data.length);
    expect(readFileSync(local).equals(data)).toBe(true);
    expect(statSync(local).mode & 0o777).toBe(0o600);
    expect((await files.readFile(target, src)).equals(data)).toBe(true);
    writeFileSync(src, '');
    expect((await files.readFile(target, src)).length).toBe(0);
  });

  it('names node and path when the remote side fails', async () => {
    await expect(files.readFile(target, '/nonexistent/stackctl-test')).rejects.toMatchObject({
      code: 'E_SFTP',
      message: expect.stringContaining('test-node'),
    });
  });

  it('shares the one SSH connection with commands', async () => {
    await pool.exec(target, ['true'], { timeoutMs: 5000 });
    expect(sshd.connections()).toBe(1);
  });
});
