/**
 * Keystone's credential table as `stackctl rotate keystone-credential-keys` needs it: how many
 * credentials each key encrypts, and `keystone-manage credential_migrate`, both run in a Keystone
 * container of one controller (every controller shares the database).
 *
 * Keystone stores, with each credential, `key_hash`: the SHA-1 (hex) of the primary key that
 * encrypted it (keystone.credential.providers.fernet.core.primary_key_hash). Counting rows by
 * key_hash and hashing the keys of the secrets file the same way tells which key each credential
 * needs, without any key or credential leaving the node.
 */
import { createHash } from 'node:crypto';
import { RemoteError } from '../core/errors.js';
import type { Shell } from '../remote/index.js';

/** Time limits of the commands run in the Keystone container. */
export const CREDENTIAL_DEFAULTS = {
  /** Counting the credential rows: one query. */
  countTimeoutMs: 60_000,
  /** credential_migrate re-encrypts every row not on the primary key: one UPDATE each. */
  migrateTimeoutMs: 600_000,
} as const;

/** Keystone's digest of a credential key: SHA-1 hex of the key as written in its file. */
export function credentialKeyDigest(key: string): string {
  return createHash('sha1').update(key, 'utf8').digest('hex');
}

/**
 * Reads keystone.conf's [database] connection inside the container and prints `{key_hash: rows}` as
 * JSON. A failure prints the exception with the database password cut out, never the URL.
 */
const COUNT_PROGRAM = `
import configparser, json, sys
import sqlalchemy
conf = configparser.ConfigParser(interpolation=None, strict=False)
conf.read('/etc/keystone/keystone.conf')
url = conf.get('database', 'connection')
try:
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as db:
        rows = db.execute(sqlalchemy.text('SELECT key_hash, COUNT(*) FROM credential GROUP BY key_hash')).fetchall()
    print(json.dumps({str(h): int(n) for h, n in rows}))
except Exception as e:
    password = sqlalchemy.engine.make_url(url).password or ''
    text = str(e)
    if password:
        text = text.replace(password, '<redacted>')
    print(type(e).__name__ + ': ' + text[:400], file=sys.stderr)
    sys.exit(1)
`;

/** The credential rows by key digest, from the Keystone container `container` on `shell`'s node. */
export async function credentialRowsByDigest(shell: Shell, container: string): Promise<Map<string, number>> {
  const r = await shell.exec(['docker', 'exec', '-i', container, 'python3', '-'], {
    timeoutMs: CREDENTIAL_DEFAULTS.countTimeoutMs,
    stdin: COUNT_PROGRAM,
  });
  let parsed: Record<string, number> | undefined;
  try {
    parsed = r.code === 0 ? (JSON.parse(r.stdout.trim()) as Record<string, number>) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!parsed) {
    throw new RemoteError(
      'E_CREDENTIAL_COUNT',
      `${shell.node}: counting Keystone's credentials by key failed (exit ${r.code}): ${r.stderr.trim().split('\n').slice(-3).join(' ')}`,
      {
        hint: `Is the ${container} container on ${shell.node} running and its database reachable ('stackctl status')? Nothing was written.`,
      },
    );
  }
  return new Map(Object.entries(parsed));
}

/**
 * `keystone-manage credential_migrate` once, as the keystone user, in the running container: every
 * credential not encrypted with the primary key of the container's repository is re-encrypted with it.
 */
export async function migrateCredentials(shell: Shell, container: string): Promise<void> {
  const r = await shell.exec(['docker', 'exec', '-u', 'keystone', container, 'keystone-manage', 'credential_migrate'], {
    timeoutMs: CREDENTIAL_DEFAULTS.migrateTimeoutMs,
  });
  if (r.code !== 0) {
    throw new RemoteError(
      'E_CREDENTIAL_MIGRATE',
      `${shell.node}: keystone-manage credential_migrate failed (exit ${r.code}): ${r.stderr.trim().split('\n').slice(-4).join(' ')}`,
      {
        hint: `It can be run again: credentials already on the primary key are left alone. Check the ${container} container's keys ('stackctl status') and its database.`,
      },
    );
  }
}
