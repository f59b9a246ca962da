/**
 * Types of the cloud settings. A service file declares each of its settings
 * (roles/services/*.yaml `settings:`) with a type; an inventory's
 * `cloud.settings` and a release manifest's `settings` are checked against
 * it. The roles module reads the declarations and hands them to the
 * inventory checks (as it does RoleInfo), so a value is refused with its
 * file:line before anything renders it.
 */

/** A setting's value as YAML gives it. */
export type SettingValue = string | number | boolean;

/** The types a setting can have; the short form `name: value` infers integer, number, boolean or string. */
export const SETTING_TYPES = {
  /** A whole number, optionally within min..max. */
  integer: 'integer',
  /** Any number (ratios), optionally within min..max. */
  number: 'number',
  /** true or false. */
  boolean: 'boolean',
  /** Text matching a pattern (DEFAULT_STRING_PATTERN when none is declared). */
  string: 'string',
  /** One of the declared values. */
  enum: 'enum',
  /** A reference `<secret:NAME>` to a key of the secrets file: the only place an inventory may name a secret. */
  secret: 'secret',
  /**
   * The name of one of the inventory's networks (a key of `networks`) on which every node running the
   * declaring service has an address: what a service listens on or sends over (a migration network).
   */
  network: 'network',
} as const;
export type SettingType = keyof typeof SETTING_TYPES;

/** One declared setting, normalized from either form of the service file. */
export interface SettingSpec {
  readonly name: string;
  /** The service file that declares it. */
  readonly service: string;
  readonly type: SettingType;
  readonly default: SettingValue;
  readonly min?: number;
  readonly max?: number;
  /** enum: the allowed values. */
  readonly values?: readonly (string | number)[];
  /** string: the pattern every value matches (anchored). */
  readonly pattern?: string;
  readonly description?: string;
}

/**
 * Pattern of a string setting that declares none (the short form `name: text`): a letter, digit or
 * underscore, then letters, digits and `_ . : / + -`; at most 255 characters. It admits Python class
 * paths (`fake.FakeDriver`), plain words and URLs without credentials, and refuses what needs quoting
 * somewhere (spaces, quotes, `$`, `#`, `%`, `=`, `,`, `;`, `@`, backslashes) and a leading `-` (an
 * option on a command line). A setting that needs more declares its own pattern.
 */
export const DEFAULT_STRING_PATTERN = '^[A-Za-z0-9_][A-Za-z0-9_.:/+-]{0,254}$';

/**
 * Characters no setting, secret or config value may hold: C0 and C1 controls, DEL, and Unicode's
 * line and paragraph separators. A newline would end the line of every config format stackctl
 * writes and start a new key, section or command.
 */
// eslint-disable-next-line no-control-regex -- finding control characters is the point
export const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/** The form of a network name (the inventory schema's NetworkName). */
export const NETWORK_NAME = /^[a-z0-9][a-z0-9_-]*$/;

/** A reference to a secret, the whole value of a `secret` setting. */
export const SECRET_REF = /^<secret:([a-z][a-z0-9_]*)>$/;
/** What makes any inventory text a secret reference, well-formed or not. */
export const SECRET_REF_MARK = '<secret:';

/** How a control character is named in messages (the value itself is never shown). */
export function describeControl(text: string): string | undefined {
  const m = CONTROL_CHARS.exec(text);
  if (!m) return undefined;
  const c = m[0];
  const names: Record<string, string> = { '\n': 'a newline', '\r': 'a carriage return', '\t': 'a tab', '\0': 'a NUL' };
  return names[c] ?? `the control character U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
}

/** What a setting accepts, for hints: "an integer from 1 to 255", "one of kvm, qemu", ... */
export function describeSetting(spec: SettingSpec): string {
  const range = (): string =>
    spec.min !== undefined && spec.max !== undefined
      ? ` from ${spec.min} to ${spec.max}`
      : spec.min !== undefined
        ? ` of at least ${spec.min}`
        : spec.max !== undefined
          ? ` of at most ${spec.max}`
          : '';
  switch (spec.type) {
    case 'integer':
      return `an integer${range()}`;
    case 'number':
      return `a number${range()}`;
    case 'boolean':
      return 'true or false';
    case 'enum':
      return `one of ${(spec.values ?? []).join(', ')}`;
    case 'secret':
      return 'a reference <secret:NAME> to a key of services: in the secrets file';
    case 'network':
      return 'the name of a network (a key of networks:) that every node running the service has an address on';
    case 'string':
      return `text matching ${spec.pattern ?? DEFAULT_STRING_PATTERN}${spec.pattern === undefined || spec.pattern === DEFAULT_STRING_PATTERN ? ' (letters, digits and _ . : / + -, not starting with . : / + -)' : ''}`;
  }
}

/**
 * What is wrong with `value` as a value of the setting, or undefined when it
 * fits. The message never quotes a text value (it could be a password
 * written in the wrong place); numbers are shown.
 */
export function settingProblem(spec: SettingSpec, value: unknown): string | undefined {
  if (typeof value === 'string') {
    const control = describeControl(value);
    if (control) return `contains ${control}; no setting may hold control characters`;
  }
  const outOfRange = (n: number): string | undefined =>
    spec.min !== undefined && n < spec.min
      ? `is ${n}, below the minimum ${spec.min}`
      : spec.max !== undefined && n > spec.max
        ? `is ${n}, above the maximum ${spec.max}`
        : undefined;
  switch (spec.type) {
    case 'integer':
      if (typeof value !== 'number' || !Number.isSafeInteger(value)) return `must be an integer, not ${kind(value)}`;
      return outOfRange(value);
    case 'number':
      if (typeof value !== 'number' || !Number.isFinite(value)) return `must be a number, not ${kind(value)}`;
      return outOfRange(value);
    case 'boolean':
      return typeof value === 'boolean' ? undefined : `must be true or false, not ${kind(value)}`;
    case 'enum':
      if (typeof value !== 'string' && typeof value !== 'number')
        return `must be one of the listed values, not ${kind(value)}`;
      return (spec.values ?? []).includes(value) ? undefined : 'is not one of the allowed values';
    case 'secret':
      if (typeof value !== 'string') return `must be a secret reference, not ${kind(value)}`;
      return SECRET_REF.test(value) ? undefined : 'must be exactly <secret:NAME>, NAME a key of the secrets file';
    case 'network':
      if (typeof value !== 'string') return `must be a network name, not ${kind(value)}`;
      return NETWORK_NAME.test(value)
        ? undefined
        : 'is not a network name (lower-case letters, digits, hyphens and underscores)';
    case 'string':
      if (typeof value !== 'string') return `must be text, not ${kind(value)}`;
      return new RegExp(spec.pattern ?? DEFAULT_STRING_PATTERN, 'u').test(value)
        ? undefined
        : 'has characters or a form the setting does not allow';
  }
}

function kind(v: unknown): string {
  if (typeof v === 'number') return Number.isInteger(v) ? `the integer ${v}` : `the number ${v}`;
  if (typeof v === 'boolean') return `the boolean ${v}`;
  if (typeof v === 'string') return 'text';
  if (v === null) return 'null';
  return Array.isArray(v) ? 'a list' : typeof v === 'object' ? 'a mapping' : typeof v;
}

/** The setting names closest to a misspelt one (edit distance at most 3), best first. */
export function closestNames(name: string, known: Iterable<string>): string[] {
  const scored = [...known]
    .map((k) => ({ k, d: editDistance(name, k) }))
    .filter((x) => x.d <= 3)
    .sort((a, b) => a.d - b.d || a.k.localeCompare(b.k));
  return scored.slice(0, 3).map((x) => x.k);
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++)
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length]!;
}
