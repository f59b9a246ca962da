import { execFileSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { demuxDockerStream } from '../../src/remote/docker.js';
import { ensureClientKey, generateEd25519, parsePublicKey } from '../../src/remote/keys.js';
import { checkHostKey, knownHostName, recordHostKey } from '../../src/remote/known-hosts.js';
import { tempDir } from '../helpers/cli.js';
import { requireOpenSsh, sshKeygenFingerprint } from './sshd.js';

describe('client keys', () => {
  it('writes an ed25519 key that OpenSSH reads, with the fingerprint ssh-keygen prints', () => {
    requireOpenSsh();
    const file = join(tempDir(), 'keys', 'id_ed25519');
    const { created, publicKey } = ensureClientKey(file);
    expect(created).toBe(true);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const derived = execFileSync('/usr/bin/ssh-keygen', ['-y', '-f', file], { encoding: 'utf8' });
    expect(derived.trim().split(' ').slice(0, 2).join(' ')).toBe(publicKey.line);
    expect(sshKeygenFingerprint(file + '.pub')).toBe(publicKey.fingerprint);
    expect(ensureClientKey(file).created).toBe(false);
  });

  it('refuses a private key that others can read', () => {
    const file = join(tempDir(), 'id');
    ensureClientKey(file);
    execFileSync('chmod', ['644', file]);
    expect(() => ensureClientKey(file)).toThrow(expect.objectContaining({ code: 'E_SSH_KEY_MODE' }));
  });
});

describe('known_hosts', () => {
  /** Scenarios of checkHostKey: what the file holds, and the verdict for the offered key. */
  const key = generateEd25519().publicKey;
  const other = generateEd25519().publicKey;
  const salt = randomBytes(20);
  const hashed = (name: string): string =>
    `|1|${salt.toString('base64')}|${createHmac('sha1', salt).update(name).digest('base64')}`;
  const SCENARIOS: readonly { scenario: string; file: string; verdict: string }[] = [
    { scenario: 'an empty file knows nobody', file: '', verdict: 'unknown' },
    { scenario: 'a recorded key is trusted', file: `[10.0.0.5]:2222 ${key.line}\n`, verdict: 'trusted' },
    { scenario: 'port 22 is written without brackets', file: `10.0.0.5 ${key.line}\n`, verdict: 'unknown' },
    {
      scenario: 'another key for the host means it changed',
      file: `[10.0.0.5]:2222 ${other.line}\n`,
      verdict: 'changed',
    },
    { scenario: 'hashed host names match', file: `${hashed('[10.0.0.5]:2222')} ${key.line}\n`, verdict: 'trusted' },
    { scenario: 'a list of names matches any', file: `a,[10.0.0.5]:2222 ${key.line}\n`, verdict: 'trusted' },
    {
      scenario: 'a revoked key is refused',
      file: `@revoked [10.0.0.5]:2222 ${key.line}\n[10.0.0.5]:2222 ${key.line}\n`,
      verdict: 'revoked',
    },
    {
      scenario: 'garbage lines grant nothing',
      file: `# comment\n[10.0.0.5]:2222 ssh-ed25519 !!!\n`,
      verdict: 'unknown',
    },
  ];
  for (const s of SCENARIOS) {
    it(s.scenario, () => {
      const file = join(tempDir(), 'known_hosts');
      writeFileSync(file, s.file);
      expect(checkHostKey(file, '10.0.0.5', 2222, key.blob).verdict).toBe(s.verdict);
    });
  }

  it('recording replaces the old key of that host and keeps the others', () => {
    const file = join(tempDir(), 'known_hosts');
    recordHostKey(file, '10.0.0.5', 22, other.line);
    recordHostKey(file, '10.0.0.6', 22, other.line);
    recordHostKey(file, '10.0.0.5', 22, key.blob);
    expect(checkHostKey(file, '10.0.0.5', 22, key.blob).verdict).toBe('trusted');
    expect(checkHostKey(file, '10.0.0.6', 22, other.blob).verdict).toBe('trusted');
    expect(knownHostName('10.0.0.5', 22)).toBe('10.0.0.5');
    expect(() => parsePublicKey('ssh-rsa ' + key.blob.toString('base64'))).toThrow(/blob holds ssh-ed25519/);
  });
});

describe('docker stream demultiplexing', () => {
  it('splits stdout and stderr frames', () => {
    const frame = (kind: number, text: string): Buffer => {
      const h = Buffer.alloc(8);
      h[0] = kind;
      h.writeUInt32BE(Buffer.byteLength(text), 4);
      return Buffer.concat([h, Buffer.from(text)]);
    };
    const { stdout, stderr } = demuxDockerStream(Buffer.concat([frame(1, 'a'), frame(2, 'b'), frame(1, 'c')]));
    expect([stdout.toString(), stderr.toString()]).toEqual(['ac', 'b']);
  });
});
