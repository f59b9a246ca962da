/**
 * Strict host-key checking against a known_hosts file that stackctl owns
 * (OpenSSH format, so `ssh -o UserKnownHostsFile=…` reads it too).
 *
 * A host is written `addr` for port 22 and `[addr]:port` otherwise, as
 * OpenSSH does. Hashed names (`|1|salt|hash`) are matched; `@revoked` lines
 * refuse a key; `@cert-authority` lines are ignored (no certificates here).
 * The file is rewritten atomically, never appended in place.
 */
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { AuthError } from '../core/errors.js';
import { exists, writeFileAtomic } from '../core/fs.js';
import { parsePublicKey, publicKeyFromBlob, type PublicKey } from './keys.js';

/** OpenSSH's default SSH port: hosts on it are written without brackets. */
export const DEFAULT_SSH_PORT = 22;

/** What the known_hosts file says about a key a host offered. */
export const HostKeyVerdict = {
  /** The offered key is recorded for this host. */
  TRUSTED: 'trusted',
  /** No key of the host is recorded: refuse until an operator trusts it. */
  UNKNOWN: 'unknown',
  /** Other keys are recorded for this host: refuse, someone may be in between. */
  CHANGED: 'changed',
  /** The key is marked @revoked. */
  REVOKED: 'revoked',
} as const;
export type HostKeyVerdict = (typeof HostKeyVerdict)[keyof typeof HostKeyVerdict];

/** Outcome of checking one offered key, with the recorded keys when they differ. */
export interface HostKeyCheck {
  readonly verdict: HostKeyVerdict;
  readonly offered: PublicKey;
  /** Keys recorded for the host (empty when unknown). */
  readonly recorded: readonly PublicKey[];
}

/** One parsed line of the file. */
interface Entry {
  readonly marker: '' | '@revoked' | '@cert-authority';
  readonly patterns: readonly string[];
  readonly key: PublicKey;
}

/** The name a host has in known_hosts: `addr` on port 22, `[addr]:port` otherwise. */
export function knownHostName(host: string, port: number): string {
  return port === DEFAULT_SSH_PORT ? host : `[${host}]:${port}`;
}

function matchesPattern(pattern: string, name: string): boolean {
  if (pattern.startsWith('|1|')) {
    const [, , salt, hash] = pattern.split('|');
    if (!salt || !hash) return false;
    return createHmac('sha1', Buffer.from(salt, 'base64')).update(name).digest('base64') === hash;
  }
  // Wildcards are allowed by OpenSSH; stackctl writes none but honours exact names only.
  return pattern === name;
}

function parse(text: string): Entry[] {
  const entries: Entry[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const fields = line.split(/\s+/);
    let marker: Entry['marker'] = '';
    if (fields[0] === '@revoked' || fields[0] === '@cert-authority') marker = fields.shift() as Entry['marker'];
    const [hosts, type, b64] = fields;
    if (!hosts || !type || !b64) continue;
    try {
      entries.push({ marker, patterns: hosts.split(','), key: parsePublicKey(`${type} ${b64}`) });
    } catch {
      // A line we cannot read never grants trust; OpenSSH skips such lines too.
    }
  }
  return entries;
}

function readEntries(file: string): Entry[] {
  return exists(file) ? parse(readFileSync(file, 'utf8')) : [];
}

/** Keys recorded for `host:port` (revoked and CA lines excluded). */
export function recordedKeys(file: string, host: string, port: number): PublicKey[] {
  const name = knownHostName(host, port);
  return readEntries(file)
    .filter((e) => e.marker === '' && e.patterns.some((p) => matchesPattern(p, name)))
    .map((e) => e.key);
}

/** Check the key a host offered against the file; reads the file on every call (it is small). */
export function checkHostKey(file: string, host: string, port: number, offeredBlob: Buffer): HostKeyCheck {
  const name = knownHostName(host, port);
  const offered = publicKeyFromBlob(offeredBlob);
  const entries = readEntries(file).filter((e) => e.patterns.some((p) => matchesPattern(p, name)));
  const recorded = entries.filter((e) => e.marker === '').map((e) => e.key);
  const same = (k: PublicKey): boolean => k.blob.equals(offered.blob);
  let verdict: HostKeyVerdict;
  if (entries.some((e) => e.marker === '@revoked' && same(e.key))) verdict = HostKeyVerdict.REVOKED;
  else if (recorded.some(same)) verdict = HostKeyVerdict.TRUSTED;
  else if (recorded.length) verdict = HostKeyVerdict.CHANGED;
  else verdict = HostKeyVerdict.UNKNOWN;
  return { verdict, offered, recorded };
}

/**
 * Record `publicKey` (OpenSSH line or wire blob) as the key of `host:port`,
 * replacing any other plain entry for that exact host name. Written
 * atomically with mode 0644 (public data). Returns the recorded key.
 */
export function recordHostKey(file: string, host: string, port: number, publicKey: string | Buffer): PublicKey {
  const key = typeof publicKey === 'string' ? parsePublicKey(publicKey) : publicKeyFromBlob(publicKey);
  const name = knownHostName(host, port);
  const kept: string[] = [];
  if (exists(file)) {
    for (const raw of readFileSync(file, 'utf8').split('\n')) {
      const fields = raw.trim().split(/\s+/);
      const stale = fields.length >= 3 && !fields[0]!.startsWith('@') && fields[0] === name;
      if (raw.trim() && !stale) kept.push(raw);
    }
  }
  kept.push(`${name} ${key.line}`);
  writeFileAtomic(file, kept.join('\n') + '\n', 0o644);
  return key;
}

/**
 * The command that replaces a node's changed host key in known_hosts, for
 * hints: `nodes trust` never replaces one on `--yes` alone, only when
 * `--replace-changed-key` names the node.
 */
export function replaceKeyCommand(node: string, port: number, inventory = 'INVENTORY'): string {
  const sshPort = port === DEFAULT_SSH_PORT ? '' : ` --ssh-port ${port}`;
  return `stackctl nodes trust -i ${inventory} --node ${node}${sshPort} --replace-changed-key ${node}`;
}

/**
 * The error for a refused host key: names node, address and every
 * fingerprint involved. `inventory` (the file as the operator gave it) makes
 * the hints' commands ready to run.
 */
export function hostKeyError(
  check: HostKeyCheck,
  node: string,
  host: string,
  port: number,
  inventory = 'INVENTORY',
): AuthError {
  const where = `${node} (${knownHostName(host, port)})`;
  const details = {
    node,
    host,
    port,
    offered: check.offered.fingerprint,
    recorded: check.recorded.map((k) => k.fingerprint),
  };
  switch (check.verdict) {
    case HostKeyVerdict.UNKNOWN:
      return new AuthError(
        'E_HOST_KEY_UNKNOWN',
        `${where}: host key ${check.offered.type} ${check.offered.fingerprint} is not in the known hosts file`,
        {
          hint: `Compare the fingerprint with the node's console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then run 'stackctl nodes trust -i ${inventory} --node ${node}${port === DEFAULT_SSH_PORT ? '' : ` --ssh-port ${port}`} --yes'.`,
          details,
        },
      );
    case HostKeyVerdict.CHANGED:
      return new AuthError(
        'E_HOST_KEY_CHANGED',
        `${where}: HOST KEY CHANGED: recorded ${check.recorded.map((k) => `${k.type} ${k.fingerprint}`).join(', ')}; offered ${check.offered.type} ${check.offered.fingerprint}`,
        {
          hint:
            `Someone may be intercepting the connection, or the node was reinstalled outside stackctl (a stackctl deploy records the new key itself). ` +
            `Compare ${check.offered.fingerprint} with the node's console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub); only if they match, run '${replaceKeyCommand(node, port, inventory)}'. --yes alone never replaces a changed key.`,
          details,
        },
      );
    default:
      return new AuthError(
        'E_HOST_KEY_REVOKED',
        `${where}: host key ${check.offered.type} ${check.offered.fingerprint} is marked @revoked`,
        { hint: 'Replace the host key on the node, then trust the new one.', details },
      );
  }
}
