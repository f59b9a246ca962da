/**
 * SSH keys of a container lab: the operator key that stackctl logs in with,
 * and one host key per node, generated here so that stackctl knows every
 * node's key before the node first answers (no trust on first use).
 */
import { chmodSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { $ } from 'zx';
import { IoError } from '../../core/errors.js';
import { writeFileAtomic } from '../../core/fs.js';

/** Creates an ed25519 key pair at `file` (+ `.pub`); injectable for tests. */
export type KeyGen = (file: string, comment: string) => Promise<void>;

/** ssh-keygen through zx (quoted argv). The empty passphrase is not a secret. */
export const sshKeygen: KeyGen = async (file, comment) => {
  try {
    await $({ quiet: true })`ssh-keygen -q -t ed25519 -N ${''} -C ${comment} -f ${file}`;
  } catch (e) {
    throw new IoError('E_SSH_KEYGEN', `ssh-keygen could not create ${file}`, {
      hint: 'Install openssh-client (ssh-keygen) and check that the folder is writable.',
      cause: e,
    });
  }
};

/** An ed25519 key pair on disk. */
export interface KeyPair {
  readonly privateFile: string;
  /** The public key line, `ssh-ed25519 AAAA... comment`. */
  readonly publicKey: string;
}

/** The key pair at `file`, created when missing; the private key is made mode 0600 either way. */
export async function ensureKeyPair(file: string, comment: string, keygen: KeyGen = sshKeygen): Promise<KeyPair> {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  if (!existsSync(file)) await keygen(file, comment);
  chmodSync(file, 0o600);
  return { privateFile: file, publicKey: readFileSync(`${file}.pub`, 'utf8').trim() };
}

/**
 * Write known_hosts: each node's host key under every address it has, in
 * OpenSSH's format, so `ssh -o StrictHostKeyChecking=yes` and stackctl's own
 * SSH client accept exactly these keys.
 */
export function writeKnownHosts(
  file: string,
  hosts: readonly { addresses: readonly string[]; publicKey: string }[],
): void {
  const lines = hosts.map((h) => {
    const [type, key] = h.publicKey.split(/\s+/);
    return `${h.addresses.join(',')} ${type} ${key}`;
  });
  writeFileAtomic(file, "# written by stackctl lab up: the lab nodes' host keys\n" + lines.join('\n') + '\n');
}
