import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthError, RemoteError, StackctlError, TimeoutError } from '../../src/core/errors.js';
import { Secret } from '../../src/core/secret.js';
import { fetchHostKey, SshPool, type SshTarget } from '../../src/remote/ssh.js';
import { recordHostKey } from '../../src/remote/known-hosts.js';
import { hostPublicKey, makeHostKey, sshKeygenFingerprint, startSshd, type TestSshd } from './sshd.js';

let sshd: TestSshd;
let pool: SshPool;
let target: SshTarget;

beforeAll(async () => {
  sshd = await startSshd();
  recordHostKey(sshd.knownHostsFile, '127.0.0.1', sshd.port, hostPublicKey(sshd.hostKeyFile));
  pool = new SshPool({ knownHostsFile: sshd.knownHostsFile, privateKeyFile: sshd.clientKeyFile });
  target = { node: 'test-node', host: '127.0.0.1', port: sshd.port, user: 'root' };
});

afterAll(async () => {
  await pool?.close();
  await sshd?.stop();
});

/** Run `fn`, expecting it to throw; returns the error. */
async function failure(fn: () => Promise<unknown>): Promise<StackctlError> {
  try {
    await fn();
  } catch (err) {
    expect(err).toBeInstanceOf(StackctlError);
    return err as StackctlError;
  }
  throw new Error('expected a failure');
}

describe('SshPool exec', () => {
  it('runs many concurrent commands over one TCP connection', async () => {
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        pool.exec(target, ['sh', '-c', 'echo $0', String(i)], { timeoutMs: 20_000 }),
      ),
    );
    expect(results.map((r) => r.stdout.trim())).toEqual(Array.from({ length: 40 }, (_, i) => String(i)));
    expect(pool.size).toBe(1);
    // Counted on the server side: one established connection to sshd's port.
    expect(sshd.connections()).toBe(1);
  });

  it('reports exit codes and captures stderr', async () => {
    const r = await pool.exec(target, 'echo out; echo err >&2; exit 3', { timeoutMs: 10_000 });
    expect(r).toEqual({ code: 3, stdout: 'out\n', stderr: 'err\n' });
  });

  it('passes argv with spaces, quotes and $(...) through literally', async () => {
    const args = ['a b', "it's", '"dq"', '$(touch /tmp/stackctl-test-pwned)', '`id`', '*', '', 'new\nline', '\\'];
    const r = await pool.exec(target, ['printf', '%s|', ...args], { timeoutMs: 10_000 });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(args.map((a) => `${a}|`).join(''));
    const probe = await pool.exec(target, ['test', '-e', '/tmp/stackctl-test-pwned'], { timeoutMs: 10_000 });
    expect(probe.code).toBe(1);
  });

  it('feeds stdin and sets environment variables, secrets included, without putting them in argv', async () => {
    const r = await pool.exec(
      target,
      'cat; printf "%s|%s" "$GREETING" "$TOKEN"; cat /proc/$$/cmdline | tr "\\0" " " >&2',
      {
        timeoutMs: 10_000,
        stdin: 'line 1\nline 2\n',
        env: { GREETING: "it's a\nmulti-line $value", TOKEN: new Secret('s3cr3t-token') },
      },
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("line 1\nline 2\nit's a\nmulti-line $value|s3cr3t-token");
    expect(r.stderr).not.toContain('s3cr3t');
  });

  it('kills a command past its deadline and reports a TimeoutError naming host and command', async () => {
    const pidFile = `/tmp/stackctl-test-sleep-${process.pid}.pid`;
    const started = Date.now();
    // A child in the background: killing only the shell would leave it running.
    const err = await failure(() => pool.exec(target, `sleep 30 & echo $! > ${pidFile}; wait`, { timeoutMs: 500 }));
    expect(Date.now() - started).toBeLessThan(5000);
    expect(err).toBeInstanceOf(TimeoutError);
    expect(err.code).toBe('E_SSH_COMMAND_TIMEOUT');
    expect(err.message).toContain('test-node');
    expect(err.message).toContain('127.0.0.1');
    expect(err.message).toContain('sleep 30');
    // The whole process group died on the node, not just the channel.
    const alive = await pool.exec(
      target,
      `pid=$(cat ${pidFile}); rm -f ${pidFile}; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do kill -0 $pid 2>/dev/null || exit 0; sleep 0.1; done; exit 1`,
      { timeoutMs: 5000 },
    );
    expect(alive.code).toBe(0);
    // The pool still works after a kill.
    expect((await pool.exec(target, ['true'], { timeoutMs: 5000 })).code).toBe(0);
  });

  it('gives up on a channel sshd does not open within its deadline, and the connection serves again once sshd does', async () => {
    const quick = new SshPool({
      knownHostsFile: sshd.knownHostsFile,
      privateKeyFile: sshd.clientKeyFile,
      channelOpenTimeoutMs: 1000,
      keepAliveMs: 600_000,
    });
    const stopped: number[] = [];
    try {
      expect((await quick.exec(target, ['true'], { timeoutMs: 5000 })).code).toBe(0);
      // Stop the sshd processes serving the connections (the listener keeps running): a hung sshd.
      for (const p of sshd.sessionProcesses()) {
        process.kill(p.pid, 'SIGSTOP');
        stopped.push(p.pid);
      }
      const started = Date.now();
      const err = await failure(() => quick.exec(target, ['true'], { timeoutMs: 5000 }));
      const elapsed = Date.now() - started;
      expect(err).toBeInstanceOf(TimeoutError);
      expect(err).toMatchObject({ code: 'E_SSH_CHANNEL_TIMEOUT', details: { node: 'test-node', timeoutMs: 1000 } });
      expect(err.message).toMatch(/^test-node \(root@\[127\.0\.0\.1\]:\d+\): sshd did not open a command channel/);
      expect(elapsed).toBeGreaterThanOrEqual(1000);
      expect(elapsed).toBeLessThan(3000);
      for (const pid of stopped.splice(0)) process.kill(pid, 'SIGCONT');
      // The channel sshd opens late is closed; no session slot was lost: more commands than MaxSessions go through.
      const all = await Promise.all(
        Array.from({ length: 12 }, () => quick.exec(target, 'sleep 0.1; echo ok', { timeoutMs: 10_000 })),
      );
      expect(all.every((r) => r.stdout === 'ok\n')).toBe(true);
      expect(quick.size).toBe(1);
    } finally {
      for (const pid of stopped) process.kill(pid, 'SIGCONT');
      await quick.close();
    }
  });

  it('waits for a session slot rather than exceeding sshd MaxSessions', async () => {
    const r = await Promise.all(
      Array.from({ length: 25 }, () => pool.exec(target, 'sleep 0.2; echo ok', { timeoutMs: 20_000 })),
    );
    expect(r.every((x) => x.stdout === 'ok\n')).toBe(true);
  });
});

describe('errors become ours at the boundary', () => {
  it('an unreachable port is a RemoteError naming node and address, with a hint', async () => {
    const err = await failure(() => pool.exec({ ...target, port: 1 }, ['true'], { timeoutMs: 1000 }));
    expect(err).toBeInstanceOf(RemoteError);
    expect(err.code).toBe('E_SSH_UNREACHABLE');
    expect(err.message).toContain('test-node');
    expect(err.message).toContain('127.0.0.1');
    expect(err.hint).toBeTruthy();
  });

  it('a refused key is an AuthError', async () => {
    const other = new SshPool({ knownHostsFile: sshd.knownHostsFile, privateKeyFile: join(sshd.dir, 'other', 'id') });
    const { ensureClientKey } = await import('../../src/remote/keys.js');
    ensureClientKey(join(sshd.dir, 'other', 'id'));
    const err = await failure(() => other.exec(target, ['true'], { timeoutMs: 1000 }));
    await other.close();
    expect(err).toBeInstanceOf(AuthError);
    expect(err.code).toBe('E_SSH_AUTH');
  });

  it('a silent peer is a TimeoutError within the connect timeout', async () => {
    const { createServer } = await import('node:net');
    const silent = createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const port = (silent.address() as { port: number }).port;
    const quick = new SshPool({
      knownHostsFile: sshd.knownHostsFile,
      privateKeyFile: sshd.clientKeyFile,
      connectTimeoutMs: 300,
    });
    const err = await failure(() => quick.exec({ ...target, port }, ['true'], { timeoutMs: 1000 }));
    await quick.close();
    silent.close();
    expect(err).toBeInstanceOf(TimeoutError);
    expect(err.code).toBe('E_SSH_CONNECT_TIMEOUT');
  });
});

describe('strict host-key checking', () => {
  it('refuses an unknown host, naming its SHA256 fingerprint and `nodes trust`', async () => {
    const fresh = new SshPool({
      knownHostsFile: join(sshd.dir, 'empty_known_hosts'),
      privateKeyFile: sshd.clientKeyFile,
    });
    const err = await failure(() => fresh.exec(target, ['true'], { timeoutMs: 5000 }));
    await fresh.close();
    expect(err).toBeInstanceOf(AuthError);
    expect(err.code).toBe('E_HOST_KEY_UNKNOWN');
    expect(err.message).toContain(sshKeygenFingerprint(sshd.hostKeyFile));
    expect(err.hint).toContain('stackctl nodes trust');
  });

  it('accepts the host once its key is recorded', async () => {
    const file = join(sshd.dir, 'recorded_known_hosts');
    const key = await fetchHostKey(target);
    expect(key.fingerprint).toBe(sshKeygenFingerprint(sshd.hostKeyFile));
    recordHostKey(file, target.host, target.port, key.line);
    const p = new SshPool({ knownHostsFile: file, privateKeyFile: sshd.clientKeyFile });
    expect((await p.exec(target, ['echo', 'hi'], { timeoutMs: 5000 })).stdout).toBe('hi\n');
    await p.close();
  });

  it('refuses a host whose key changed, showing both fingerprints', async () => {
    const second = await startSshd();
    try {
      const t2 = { ...target, port: second.port };
      const file = join(second.dir, 'kh');
      recordHostKey(file, '127.0.0.1', second.port, hostPublicKey(second.hostKeyFile));
      const p = new SshPool({ knownHostsFile: file, privateKeyFile: second.clientKeyFile });
      expect((await p.exec(t2, ['true'], { timeoutMs: 5000 })).code).toBe(0);
      await p.close();
      const oldPrint = sshKeygenFingerprint(second.hostKeyFile);
      const newKey = makeHostKey(second.dir, 'host_ed25519_new');
      await second.restart(newKey);
      const p2 = new SshPool({ knownHostsFile: file, privateKeyFile: second.clientKeyFile });
      const err = await failure(() => p2.exec(t2, ['true'], { timeoutMs: 5000 }));
      await p2.close();
      expect(err.code).toBe('E_HOST_KEY_CHANGED');
      expect(err.message).toContain(oldPrint);
      expect(err.message).toContain(sshKeygenFingerprint(newKey));
      expect(err.details).toMatchObject({ offered: sshKeygenFingerprint(newKey), recorded: [oldPrint] });
      // the way out names the node and the one flag that replaces a changed key, never --yes
      expect(err.hint).toContain(
        `run 'stackctl nodes trust -i INVENTORY --node ${t2.node} --ssh-port ${second.port} --replace-changed-key ${t2.node}'`,
      );
      expect(err.hint).not.toMatch(/run '[^']*--yes'/);
    } finally {
      await second.stop();
    }
  });
});
