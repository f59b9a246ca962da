import { randomBytes, randomInt } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { Type, type Static } from '@sinclair/typebox';
import { InputError, IoError, ValidationFailed, type Issue } from '../core/errors.js';
import { readTextFile, writeFileAtomic } from '../core/fs.js';
import { checkSchema } from '../core/schema.js';
import { Secret } from '../core/secret.js';
import { parseYaml, toYaml } from '../core/yaml.js';
import { keyEntry, keyIndices, rotateKeys, type RotationReport } from './key-repository.js';
import { describeControl } from './settings.js';

/**
 * The secrets file: BMC credentials and every service password and key,
 * kept apart from the inventory in a YAML file of mode 0600. Values are
 * wrapped in Secret as soon as they are read, so they cannot be printed.
 */

/** Kinds of generated secret and how each is made. */
export const SECRET_KINDS = {
  /** 32 letters and digits: safe in any config file without quoting. */
  password: () => randomAlnum(32),
  /** A Fernet key: 32 random bytes, URL-safe base64 (Keystone tokens and credentials). */
  fernet_key: () => randomBytes(32).toString('base64url') + '=',
  /** An Erlang cookie for RabbitMQ clustering: 32 upper-case letters. */
  erlang_cookie: () => randomString(32, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ'),
  /** A VRRP password: keepalived's PASS authentication uses at most 8 characters. */
  vrrp_password: () => randomAlnum(8),
  /** A BMC password: 16 letters and digits, within IPMI 2.0's 20-byte limit. */
  bmc_password: () => randomAlnum(16),
  /** 32 random bytes as hex. */
  hex_key: () => randomBytes(32).toString('hex'),
} as const;
export type SecretKind = keyof typeof SECRET_KINDS;

/** The entries of services: a spec stands for in a new secrets file: its name, or a key repository's keys 0 (staged) and 1 (primary). */
export function entriesOf(spec: SecretSpec): string[] {
  return spec.key_repository ? [keyEntry(spec.name, 0), keyEntry(spec.name, 1)] : [spec.name];
}

/** A secret a service needs, as declared in its service file. */
export interface SecretSpec {
  readonly name: string;
  readonly kind: SecretKind;
  /**
   * A key repository (src/inventory/key-repository.ts): the secrets file holds `NAME_<index>`, one
   * key each; `generate` makes a staged key 0 and a primary 1 when it holds none.
   */
  readonly key_repository?: boolean;
}

const Credentials = Type.Object(
  {
    username: Type.String({ minLength: 1, description: 'BMC user name' }),
    password: Type.String({ minLength: 1, description: 'BMC password' }),
  },
  { additionalProperties: false },
);

export const SecretsFileSchema = Type.Object(
  {
    bmc: Type.Optional(Type.Record(Type.String({ pattern: '^[a-z0-9][a-z0-9-]*$' }), Credentials)),
    services: Type.Optional(Type.Record(Type.String({ pattern: '^[a-z][a-z0-9_]*$' }), Type.String({ minLength: 1 }))),
  },
  { additionalProperties: false, $id: 'urn:stackctl:schema:secrets', title: 'stackctl secrets file' },
);
type SecretsFile = Static<typeof SecretsFileSchema>;

/** Loaded secrets; every value is a Secret. */
export interface Secrets {
  readonly file: string;
  readonly bmc: ReadonlyMap<string, { readonly username: string; readonly password: Secret }>;
  readonly services: ReadonlyMap<string, Secret>;
}

/** Path of the secrets file that belongs to an inventory file. */
export function secretsFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.secrets.yaml';
}

/** Refuse a secrets file that the group or others can read or write. */
export function assertPrivate(file: string): void {
  const mode = statSync(file).mode & 0o777;
  if ((mode & 0o077) !== 0) {
    throw new IoError(
      'E_SECRETS_PERMISSIONS',
      `secrets file ${file} is accessible to group or others (mode ${mode.toString(8).padStart(4, '0')})`,
      {
        hint: `Run 'chmod 600 ${file}' and check who may have read it; rotate its secrets if in doubt.`,
        location: { file },
      },
    );
  }
}

function readRaw(file: string): SecretsFile {
  assertPrivate(file);
  const src = parseYaml(file, readTextFile(file, 4 * 1024 * 1024));
  const errors = src.issues.filter((i) => i.severity === 'error');
  if (errors.length) throw new ValidationFailed(file, errors);
  if (src.data === null || src.data === undefined) return {};
  const { value, issues } = checkSchema(SecretsFileSchema, src);
  if (!value) throw new ValidationFailed(file, issues);
  const control: Issue[] = [];
  const check = (text: string, path: string[], what: string): void => {
    const c = describeControl(text);
    if (c)
      control.push({
        severity: 'error',
        code: 'E_SECRET_CONTROL_CHAR',
        message: `${what} contains ${c} (the value is not shown)`,
        hint: 'A secret is written into config files and environment files, where a control character would end the line: choose a value without control characters (a YAML block scalar adds a final newline: use a quoted or plain scalar).',
        location: src.locate(path),
      });
  };
  for (const [k, v] of Object.entries(value.services ?? {})) check(v, ['services', k], `secret ${k}`);
  for (const [k, v] of Object.entries(value.bmc ?? {})) {
    check(v.username, ['bmc', k, 'username'], `the user name of BMC credentials ${k}`);
    check(v.password, ['bmc', k, 'password'], `the password of BMC credentials ${k}`);
  }
  if (control.length) throw new ValidationFailed(file, control);
  return value;
}

/** Load the secrets file, or undefined when it does not exist. */
export function loadSecrets(file: string): Secrets | undefined {
  if (!existsSync(file)) return undefined;
  const raw = readRaw(file);
  return {
    file,
    bmc: new Map(
      Object.entries(raw.bmc ?? {}).map(([k, v]) => [k, { username: v.username, password: new Secret(v.password) }]),
    ),
    services: new Map(Object.entries(raw.services ?? {}).map(([k, v]) => [k, new Secret(v)])),
  };
}

/** What `generate` did: names only, never values. */
export interface GenerateReport {
  readonly file: string;
  readonly created: boolean;
  readonly added: string[];
  readonly kept: number;
}

/**
 * Create the missing secrets, never overwriting an existing value. BMC
 * credentials are generated only for lab BMCs (loopback addresses, served
 * by stackctl's own virtual BMCs); real BMC credentials must be written by
 * the operator, and their absence is an error naming them.
 */
export function generateSecrets(
  file: string,
  specs: readonly SecretSpec[],
  bmcRefs: ReadonlyMap<string, { lab: boolean; nodes: string[] }>,
): GenerateReport {
  const created = !existsSync(file);
  const raw: SecretsFile = created ? {} : readRaw(file);
  const services: Record<string, string> = { ...(raw.services ?? {}) };
  const bmc: Record<string, { username: string; password: string }> = { ...(raw.bmc ?? {}) };
  const added: string[] = [];
  const kept = Object.keys(services).length + Object.keys(bmc).length;

  const missingReal: string[] = [];
  for (const [name, ref] of [...bmcRefs.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    if (bmc[name]) continue;
    if (!ref.lab) {
      missingReal.push(`${name} (nodes ${ref.nodes.slice(0, 3).join(', ')}${ref.nodes.length > 3 ? ', …' : ''})`);
      continue;
    }
    bmc[name] = { username: 'admin', password: SECRET_KINDS.bmc_password() };
    added.push(`bmc.${name}`);
  }
  if (missingReal.length) {
    throw new InputError(
      'E_BMC_CREDENTIALS_MISSING',
      `BMC credentials missing from ${file}: ${missingReal.join('; ')}`,
      {
        hint: `Add them under bmc: in ${file} (username and password of each BMC); stackctl only invents credentials for its own lab BMCs. Nothing was written.`,
        location: { file },
      },
    );
  }
  for (const spec of [...specs].sort((a, b) => a.name.localeCompare(b.name))) {
    if (spec.key_repository) {
      if (keyIndices(spec.name, Object.keys(services)).length) continue;
      for (const entry of entriesOf(spec)) {
        services[entry] = SECRET_KINDS[spec.kind]();
        added.push(entry);
      }
      continue;
    }
    if (services[spec.name] !== undefined) continue;
    services[spec.name] = SECRET_KINDS[spec.kind]();
    added.push(spec.name);
  }
  if (added.length === 0 && !created) return { file, created, added, kept };
  writeSecretsFile(file, bmc, services);
  return { file, created, added, kept };
}

/** Write the whole secrets file at once (temporary file, fsync, rename), mode 0600. */
function writeSecretsFile(file: string, bmc: SecretsFile['bmc'], services: Record<string, string>): void {
  const sortedServices = Object.fromEntries(Object.entries(services).sort(([a], [b]) => a.localeCompare(b)));
  const sortedBmc = Object.fromEntries(Object.entries(bmc ?? {}).sort(([a], [b]) => a.localeCompare(b)));
  const body =
    '# stackctl secrets: BMC credentials and service passwords. Keep this file private (mode 0600).\n' +
    '# Existing values are never overwritten by `stackctl secrets generate`.\n' +
    toYaml({ bmc: sortedBmc, services: sortedServices });
  writeFileAtomic(file, body, 0o600);
}

/**
 * Rotate the key repository `spec.name` of the secrets file once (rotateKeys) and write the file
 * in one atomic replacement. The caller holds the inventory's run lock. Returns indices only.
 */
export function rotateKeyRepository(
  file: string,
  spec: SecretSpec,
  maxActive: number,
  newKey: () => string = SECRET_KINDS[spec.kind],
): RotationReport {
  if (!existsSync(file)) {
    throw new IoError('E_NO_SECRETS_FILE', `no secrets file ${file}: the keys to rotate live there`, {
      hint: "Run 'stackctl secrets generate' for this inventory first; there is nothing to rotate yet.",
    });
  }
  const raw = readRaw(file);
  const services: Record<string, string> = { ...(raw.services ?? {}) };
  const keys = new Map(keyIndices(spec.name, Object.keys(services)).map((i) => [i, services[keyEntry(spec.name, i)]!]));
  const { keys: next, report } = rotateKeys(spec.name, keys, maxActive, newKey);
  for (const i of keys.keys()) delete services[keyEntry(spec.name, i)];
  for (const [i, k] of next) services[keyEntry(spec.name, i)] = k;
  writeSecretsFile(file, raw.bmc, services);
  return report;
}

function randomString(length: number, alphabet: string): string {
  let out = '';
  for (let i = 0; i < length; i++) out += alphabet[randomInt(alphabet.length)];
  return out;
}

function randomAlnum(length: number): string {
  return randomString(length, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789');
}
