/**
 * SSH key material that stackctl owns: the client key it logs in with
 * (ed25519, OpenSSH format, mode 0600) and helpers for public key blobs and
 * their SHA256 fingerprints as OpenSSH prints them.
 *
 * Keys are made with node:crypto and written in OpenSSH's own format, so the
 * same file works for stackctl, `ssh -i` and `ssh-keygen -y`.
 */
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { IoError, InputError } from '../core/errors.js';
import { exists, writeFileAtomic } from '../core/fs.js';

/** Key type name of ed25519 keys in the SSH wire format. */
export const ED25519 = 'ssh-ed25519';

/** The magic that starts an unencrypted OpenSSH private key (PROTOCOL.key). */
const OPENSSH_KEY_MAGIC = 'openssh-key-v1\0';

/** A public key: its type, its wire-format blob, and the OpenSSH one-line form. */
export interface PublicKey {
  readonly type: string;
  readonly blob: Buffer;
  /** `ssh-ed25519 AAAA…` (no comment), as in authorized_keys and known_hosts. */
  readonly line: string;
  /** `SHA256:…` as `ssh-keygen -lf` prints it. */
  readonly fingerprint: string;
}

/** SHA256 fingerprint of a public key blob, in OpenSSH's notation (unpadded base64). */
export function fingerprintOf(blob: Buffer): string {
  return 'SHA256:' + createHash('sha256').update(blob).digest('base64').replace(/=+$/, '');
}

/** SSH wire `string`: uint32 length, then the bytes. */
function sshString(data: Buffer | string): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}

/** Read the key type (the first wire `string`) out of a public key blob. */
export function keyTypeOf(blob: Buffer): string {
  if (blob.length < 4) throw new InputError('E_SSH_KEY_FORMAT', 'public key blob is too short');
  const len = blob.readUInt32BE(0);
  if (len > 64 || 4 + len > blob.length) throw new InputError('E_SSH_KEY_FORMAT', 'public key blob is malformed');
  return blob.subarray(4, 4 + len).toString('latin1');
}

/** Build a PublicKey from a wire blob. */
export function publicKeyFromBlob(blob: Buffer): PublicKey {
  const type = keyTypeOf(blob);
  return { type, blob, line: `${type} ${blob.toString('base64')}`, fingerprint: fingerprintOf(blob) };
}

/** Parse `type base64 [comment]` (authorized_keys / .pub / known_hosts key part). */
export function parsePublicKey(text: string): PublicKey {
  const [type, b64] = text.trim().split(/\s+/);
  if (!type || !b64 || !/^[A-Za-z0-9+/]+=*$/.test(b64)) {
    throw new InputError('E_SSH_KEY_FORMAT', 'not an OpenSSH public key (expected "type base64 [comment]")', {
      hint: 'Give the key as printed by ssh-keyscan or found in /etc/ssh/ssh_host_*_key.pub.',
    });
  }
  const key = publicKeyFromBlob(Buffer.from(b64, 'base64'));
  if (key.type !== type) {
    throw new InputError('E_SSH_KEY_FORMAT', `public key says ${type} but its blob holds ${key.type}`);
  }
  return key;
}

/** A freshly generated ed25519 key pair in OpenSSH formats. */
export interface GeneratedKey {
  /** The private key file text (`-----BEGIN OPENSSH PRIVATE KEY-----`). */
  readonly privateKey: string;
  readonly publicKey: PublicKey;
}

/** Generate an ed25519 key pair with node:crypto and encode it as OpenSSH does. */
export function generateEd25519(comment = 'stackctl'): GeneratedKey {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const jwkPriv = privateKey.export({ format: 'jwk' });
  const jwkPub = publicKey.export({ format: 'jwk' });
  const seed = Buffer.from(jwkPriv.d ?? '', 'base64url');
  const pub = Buffer.from(jwkPub.x ?? '', 'base64url');
  if (seed.length !== 32 || pub.length !== 32) throw new Error('node:crypto returned an unexpected ed25519 key');
  const blob = Buffer.concat([sshString(ED25519), sshString(pub)]);
  const check = randomBytes(4);
  let secret = Buffer.concat([
    check,
    check,
    sshString(ED25519),
    sshString(pub),
    // OpenSSH stores the 64-byte "expanded" form: seed followed by the public key.
    sshString(Buffer.concat([seed, pub])),
    sshString(comment),
  ]);
  const pad = (8 - (secret.length % 8)) % 8;
  secret = Buffer.concat([secret, Buffer.from(Array.from({ length: pad }, (_, i) => i + 1))]);
  const body = Buffer.concat([
    Buffer.from(OPENSSH_KEY_MAGIC, 'latin1'),
    sshString('none'),
    sshString('none'),
    sshString(''),
    Buffer.from([0, 0, 0, 1]),
    sshString(blob),
    sshString(secret),
  ]);
  const b64 = body.toString('base64').replace(/(.{70})/g, '$1\n');
  const text = `-----BEGIN OPENSSH PRIVATE KEY-----\n${b64.replace(/\n$/, '')}\n-----END OPENSSH PRIVATE KEY-----\n`;
  return { privateKey: text, publicKey: publicKeyFromBlob(blob) };
}

/** Where a client key pair lives: the private key file and its `.pub` beside it. */
export interface ClientKeyFiles {
  readonly privateKeyFile: string;
  readonly publicKeyFile: string;
}

/**
 * Make sure the client key exists: generate it (mode 0600, folder 0700) when
 * missing, refuse it when group or others can read it (as OpenSSH does).
 * Returns whether it was created and its public key.
 */
export function ensureClientKey(privateKeyFile: string): { created: boolean; publicKey: PublicKey } {
  const publicKeyFile = privateKeyFile + '.pub';
  if (!exists(privateKeyFile)) {
    mkdirSync(dirname(privateKeyFile), { recursive: true, mode: 0o700 });
    const key = generateEd25519();
    writeFileAtomic(privateKeyFile, key.privateKey, 0o600);
    writeFileAtomic(publicKeyFile, `${key.publicKey.line} stackctl\n`, 0o644);
    return { created: true, publicKey: key.publicKey };
  }
  readClientKey(privateKeyFile);
  if (!exists(publicKeyFile)) {
    throw new IoError('E_SSH_KEY_MISSING', `${publicKeyFile} is missing next to ${privateKeyFile}`, {
      hint: `Recreate it with: ssh-keygen -y -f ${privateKeyFile} > ${publicKeyFile}`,
      location: { file: publicKeyFile },
    });
  }
  return { created: false, publicKey: parsePublicKey(readFileSync(publicKeyFile, 'utf8')) };
}

/** Read the private key file, refusing one that group or others can read. */
export function readClientKey(privateKeyFile: string): Buffer {
  let mode: number;
  try {
    mode = statSync(privateKeyFile).mode;
  } catch (err) {
    throw new IoError('E_SSH_KEY_MISSING', `no SSH private key at ${privateKeyFile}`, {
      hint: "Run 'stackctl nodes trust' once: it creates the key, then put its .pub into the nodes' authorized_keys.",
      cause: err,
      location: { file: privateKeyFile },
    });
  }
  if ((mode & 0o077) !== 0) {
    throw new IoError(
      'E_SSH_KEY_MODE',
      `${privateKeyFile} is readable by others (mode ${(mode & 0o777).toString(8)})`,
      {
        hint: `Run: chmod 600 ${privateKeyFile}`,
        location: { file: privateKeyFile },
      },
    );
  }
  return readFileSync(privateKeyFile);
}
