import { appendFileSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { reportError } from '../../src/cli/main.js';
import { registerTrust, type TrustDeps } from '../../src/cli/trust.js';
import { openPool, parsePublicKey, remoteFor, sshFilesFor } from '../../src/remote/index.js';
import { copyInventory } from '../helpers/cli.js';
import { sshKeygenFingerprint, startSshd, type TestSshd } from './sshd.js';

let sshd: TestSshd;

/** The base64 of the test sshd's host key, as known_hosts holds it. */
function hostKeyBase64(): string {
  return readFileSync(sshd.hostKeyFile + '.pub', 'utf8').split(' ')[1]!;
}

beforeAll(async () => {
  sshd = await startSshd();
});

afterAll(async () => {
  await sshd?.stop();
});

/**
 * The lab inventory with its provisioning network moved to loopback, so that
 * ctl-0 gets 127.0.0.1 (where the test sshd listens) and cmp-0 127.0.0.2 (where nothing does).
 */
function loopbackInventory(): string {
  const inv = copyInventory('lab.yaml');
  writeFileSync(
    inv,
    readFileSync(inv, 'utf8')
      .replace('cidr: 192.168.24.0/24', 'cidr: 127.0.0.0/24')
      .replace('gateway: 192.168.24.1', 'gateway: 127.0.0.254')
      .replace('dhcp_range: [192.168.24.100, 192.168.24.199]', 'dhcp_range: [127.0.0.100, 127.0.0.199]')
      .replace('allocation_range: [192.168.24.10, 192.168.24.99]', 'allocation_range: [127.0.0.1, 127.0.0.99]')
      .replace('registry: 192.168.24.1:5000', 'registry: 127.0.0.254:5000'),
  );
  return inv;
}

/** Run `stackctl nodes trust ARGS` in-process with registerTrust wired into a `nodes` group. */
async function trust(deps: TrustDeps, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const program = new Command('stackctl').exitOverride();
  registerTrust(program.command('nodes'), { interactive: () => false, err: (t) => (stderr += t), ...deps });
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    return true;
  });
  const errSpy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  const saved = process.exitCode;
  process.exitCode = undefined;
  try {
    await program.parseAsync(['node', 'stackctl', 'nodes', 'trust', ...args]);
    return { code: typeof process.exitCode === 'number' ? process.exitCode : 0, stdout, stderr };
  } catch (err) {
    return { code: reportError(err, false), stdout, stderr };
  } finally {
    spy.mockRestore();
    errSpy.mockRestore();
    process.exitCode = saved;
  }
}

describe('stackctl nodes trust', () => {
  it('shows the fingerprint without recording it, records it with --yes, and then exec works', async () => {
    const inv = loopbackInventory();
    const files = sshFilesFor(inv);
    const port = String(sshd.port);
    const print = sshKeygenFingerprint(sshd.hostKeyFile);

    const shown = await trust({}, '-i', inv, '--node', 'ctl-0', '--ssh-port', port);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain(print);
    expect(shown.stdout).toMatch(/ctl-0\s+\[127\.0\.0\.1\]:\d+\s+ssh-ed25519\s+SHA256:\S+\s+new/);
    expect(shown.stderr).toContain('not recorded');
    expect(existsSync(files.knownHostsFile)).toBe(false);
    // The client key was created on first use, owner-only.
    expect(statSync(files.privateKeyFile).mode & 0o777).toBe(0o600);
    expect(shown.stderr).toContain(`${files.privateKeyFile}.pub`);

    const recorded = await trust({}, '-i', inv, '--node', 'ctl-0', '--ssh-port', port, '--yes', '--json');
    expect(recorded.code, recorded.stderr).toBe(0);
    expect(JSON.parse(recorded.stdout)).toEqual([
      {
        node: 'ctl-0',
        address: '127.0.0.1',
        port: sshd.port,
        status: 'new',
        keyType: 'ssh-ed25519',
        fingerprint: print,
        recorded: true,
      },
    ]);
    expect(readFileSync(files.knownHostsFile, 'utf8')).toContain(`[127.0.0.1]:${sshd.port} ssh-ed25519 `);

    // The node authorizes stackctl's key (done at provisioning time in real life); then commands run.
    appendFileSync(join(sshd.dir, 'authorized_keys'), readFileSync(`${files.privateKeyFile}.pub`, 'utf8'));
    const pool = openPool(inv);
    try {
      const node = remoteFor(pool, { name: 'ctl-0', address: '127.0.0.1', port: sshd.port });
      expect((await node.run(['echo', 'trusted'], { timeoutMs: 10_000 })).stdout).toBe('trusted\n');
      await expect(node.run(['false'], { timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'E_REMOTE_COMMAND' });
    } finally {
      await pool.close();
    }

    const again = await trust({}, '-i', inv, '--node', 'ctl-0', '--ssh-port', port);
    expect(again.stdout).toMatch(/\bknown\b/);
  });

  it('reports an unreachable node and carries on with the others', async () => {
    const inv = loopbackInventory();
    const r = await trust({}, '-i', inv, '--all', '--ssh-port', String(sshd.port), '--yes', '--timeout', '3');
    expect(r.code).toBe(5);
    expect(r.stdout).toMatch(/cmp-0\s+\[127\.0\.0\.2\]:\d+.*FAILED E_SSH_UNREACHABLE/);
    expect(r.stdout).toContain(sshKeygenFingerprint(sshd.hostKeyFile));
    const kh = readFileSync(sshFilesFor(inv).knownHostsFile, 'utf8');
    expect(kh).toContain('[127.0.0.1]');
    expect(kh).not.toContain('[127.0.0.2]');
  });

  it('asks on a terminal and records a new key on "y"', async () => {
    const inv = loopbackInventory();
    const questions: string[] = [];
    const r = await trust(
      { interactive: () => true, confirm: async (q) => (questions.push(q), true) },
      '-i',
      inv,
      '--node',
      'ctl-0',
      '--ssh-port',
      String(sshd.port),
    );
    expect(r.code, r.stderr).toBe(0);
    expect(questions).toEqual([`Record 1 new host key(s) in ${sshFilesFor(inv).knownHostsFile}? [y/N] `]);
    expect(readFileSync(sshFilesFor(inv).knownHostsFile, 'utf8')).toContain(hostKeyBase64());
  });

  describe('a changed key', () => {
    /** The inventory with another key recorded for ctl-0, and that key's fingerprint. */
    function changedInventory(): { inv: string; old: string; knownHosts: string } {
      const inv = loopbackInventory();
      const knownHosts = sshFilesFor(inv).knownHostsFile;
      const blob = Buffer.concat([
        Buffer.from([0, 0, 0, 11]),
        Buffer.from('ssh-ed25519'),
        Buffer.from([0, 0, 0, 32]),
        Buffer.alloc(32, 7),
      ]);
      writeFileSync(knownHosts, `[127.0.0.1]:${sshd.port} ssh-ed25519 ${blob.toString('base64')}\n`);
      return { inv, old: parsePublicKey(`ssh-ed25519 ${blob.toString('base64')}`).fingerprint, knownHosts };
    }

    it('is refused with --yes alone: both fingerprints and the exact flag in the error, nothing recorded', async () => {
      const { inv, old, knownHosts } = changedInventory();
      const before = readFileSync(knownHosts, 'utf8');
      const print = sshKeygenFingerprint(sshd.hostKeyFile);
      const port = String(sshd.port);
      const r = await trust({}, '-i', inv, '--node', 'ctl-0', '--ssh-port', port, '--yes');
      expect(r.code).toBe(7);
      expect(r.stdout).toContain(`CHANGED (recorded ${old})`);
      expect(r.stdout).toContain(print);
      expect(r.stderr).toContain(
        `ctl-0: E_HOST_KEY_CHANGED: ctl-0 ([127.0.0.1]:${port}): HOST KEY CHANGED: recorded ssh-ed25519 ${old}; offered ssh-ed25519 ${print}`,
      );
      expect(r.stderr).toContain(
        `run 'stackctl nodes trust -i ${inv} --node ctl-0 --ssh-port ${port} --replace-changed-key ctl-0'`,
      );
      expect(readFileSync(knownHosts, 'utf8')).toBe(before);

      const json = await trust({}, '-i', inv, '--node', 'ctl-0', '--ssh-port', port, '--yes', '--json');
      expect(json.code).toBe(7);
      expect(JSON.parse(json.stdout)).toEqual([
        expect.objectContaining({
          node: 'ctl-0',
          status: 'changed',
          fingerprint: print,
          previous: [old],
          recorded: false,
          error: expect.objectContaining({ code: 'E_HOST_KEY_CHANGED' }),
        }),
      ]);
    });

    it('is not taken by "y" at the prompt either', async () => {
      const { inv, knownHosts } = changedInventory();
      const before = readFileSync(knownHosts, 'utf8');
      const questions: string[] = [];
      const r = await trust(
        { interactive: () => true, confirm: async (q) => (questions.push(q), true) },
        '-i',
        inv,
        '--node',
        'ctl-0',
        '--ssh-port',
        String(sshd.port),
      );
      expect(r.code).toBe(7);
      expect(questions).toEqual([]);
      expect(r.stderr).toContain('--replace-changed-key ctl-0');
      expect(readFileSync(knownHosts, 'utf8')).toBe(before);
    });

    it('is replaced with --replace-changed-key NODE, showing the old and the new fingerprint', async () => {
      const { inv, old, knownHosts } = changedInventory();
      const print = sshKeygenFingerprint(sshd.hostKeyFile);
      const r = await trust(
        {},
        '-i',
        inv,
        '--node',
        'ctl-0',
        '--ssh-port',
        String(sshd.port),
        '--replace-changed-key',
        'ctl-0',
      );
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain(`CHANGED (recorded ${old})`);
      expect(r.stderr).toContain(`ctl-0: replaced host key ${old} by ${print} in ${knownHosts}`);
      expect(readFileSync(knownHosts, 'utf8')).toBe(`[127.0.0.1]:${sshd.port} ssh-ed25519 ${hostKeyBase64()}\n`);
      // once replaced, the key is known; the flag has nothing more to do
      const again = await trust(
        {},
        '-i',
        inv,
        '--node',
        'ctl-0',
        '--ssh-port',
        String(sshd.port),
        '--replace-changed-key',
        'ctl-0',
      );
      expect(again.code).toBe(0);
      expect(again.stderr).toContain('ctl-0: --replace-changed-key: its key is known, not changed: nothing to replace');
    });

    it('must name a selected node', async () => {
      const { inv } = changedInventory();
      const r = await trust({}, '-i', inv, '--node', 'ctl-0', '--replace-changed-key', 'cmp-0');
      expect(r.code).toBe(2);
      expect(r.stderr).toContain("--replace-changed-key names 'cmp-0', not among the nodes selected");
    });
  });

  it('refuses a bad port as a usage error', async () => {
    const r = await trust({}, '-i', loopbackInventory(), '--all', '--ssh-port', '0');
    expect(r.code).toBe(2);
  });
});
