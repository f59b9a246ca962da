/**
 * Fernet key repositories kept in the secrets file (Keystone's token keys).
 *
 * A repository named NAME is the entries `NAME_<index>` of services: in the
 * secrets file, one key each. Keystone's meanings of the indices: 0 is the
 * staged key (validates, never signs), the highest index is the primary (signs
 * and validates), every other index is a secondary (validates only). A
 * rotation promotes the staged key to the next index, makes a new staged key
 * 0, and drops the lowest secondaries until at most `maxActive` keys are left.
 * Every node holds the staged key before it becomes the primary, so nodes
 * that have the new set and nodes that still have the old one accept each
 * other's tokens while a deploy rolls the new set out.
 *
 * Only indices leave this module (reports, messages); key values stay in the
 * secrets file and the rendered files.
 */
import { InputError } from '../core/errors.js';

/** `NAME_<index>` -> index, for the entries of repository NAME. */
function indexOf(repository: string, entry: string): number | undefined {
  if (!entry.startsWith(`${repository}_`)) return undefined;
  const rest = entry.slice(repository.length + 1);
  return /^(0|[1-9][0-9]{0,5})$/.test(rest) ? Number(rest) : undefined;
}

/** The secrets-file entry of key `index` of `repository`. */
export function keyEntry(repository: string, index: number): string {
  return `${repository}_${index}`;
}

/** The indices of `repository`'s keys among the entry names, ascending. */
export function keyIndices(repository: string, entries: Iterable<string>): number[] {
  const out: number[] = [];
  for (const e of entries) {
    const i = indexOf(repository, e);
    if (i !== undefined) out.push(i);
  }
  return out.sort((a, b) => a - b);
}

/** What a rotation did, by index (never values). */
export interface RotationReport {
  readonly repository: string;
  /** Indices before, ascending. */
  readonly before: readonly number[];
  /** Indices after, ascending. */
  readonly after: readonly number[];
  /** The index the staged key was promoted to: the new primary. */
  readonly primary: number;
  /** The secondaries dropped (oldest first). */
  readonly removed: readonly number[];
}

/** Fewest keys a repository may keep: the staged key and a primary. */
export const MIN_ACTIVE_KEYS = 2;

/**
 * One rotation of `keys` (index -> key), Keystone's way: the staged key 0
 * becomes index max+1 (the primary), `newKey()` becomes the staged key 0,
 * and the lowest secondaries go until `maxActive` keys are left. Pure: the
 * input is not changed.
 */
export function rotateKeys(
  repository: string,
  keys: ReadonlyMap<number, string>,
  maxActive: number,
  newKey: () => string,
): { keys: Map<number, string>; report: RotationReport } {
  const before = [...keys.keys()].sort((a, b) => a - b);
  const staged = keys.get(0);
  const highest = before[before.length - 1] ?? 0;
  if (staged === undefined || highest === 0) {
    throw new InputError(
      'E_KEY_REPOSITORY_INCOMPLETE',
      `key repository ${repository} has ${staged === undefined ? 'no staged key (index 0)' : 'no primary key (an index above 0)'} in the secrets file`,
      {
        hint: `Run 'stackctl secrets generate' on a repository without keys, or restore ${repository}_<index> entries from a backup of the secrets file: keys the nodes hold must not be lost.`,
      },
    );
  }
  if (!Number.isInteger(maxActive) || maxActive < MIN_ACTIVE_KEYS) {
    throw new InputError(
      'E_KEY_REPOSITORY_LIMIT',
      `key repository ${repository} may keep ${maxActive} keys: at least ${MIN_ACTIVE_KEYS} are needed`,
      {
        hint: 'A repository holds a staged key and a primary at least; 3 (the default) also keeps the previous primary.',
      },
    );
  }
  const next = new Map<number, string>(keys);
  const primary = highest + 1;
  next.set(primary, staged);
  next.set(0, newKey());
  const removed: number[] = [];
  const secondaries = [...next.keys()].filter((i) => i !== 0 && i !== primary).sort((a, b) => a - b);
  while (next.size > maxActive && secondaries.length) {
    const oldest = secondaries.shift()!;
    next.delete(oldest);
    removed.push(oldest);
  }
  const after = [...next.keys()].sort((a, b) => a - b);
  return { keys: next, report: { repository, before, after, primary, removed } };
}

/**
 * The indices the next rotation of `keys` would drop (rotateKeys without writing anything): the
 * keys whose holders must be gone before it, e.g. no credential still encrypted with one.
 */
export function retiredByNextRotation(
  repository: string,
  keys: ReadonlyMap<number, string>,
  maxActive: number,
): number[] {
  return [...rotateKeys(repository, keys, maxActive, () => '').report.removed];
}

/**
 * What a store encrypted with a repository's keys holds, by key index, from its own count of rows
 * by a digest of the key that encrypted each (Keystone's credential table: the SHA-1 of the key).
 * Rows whose digest is no key of the repository are counted apart: nothing here can decrypt them.
 */
export interface KeyUsage {
  /** Rows per key index (only indices that have rows). */
  readonly byIndex: ReadonlyMap<number, number>;
  /** Rows encrypted with a key the repository does not hold. */
  readonly unknown: number;
}

/** Map rows counted by key digest to key indices; `digest` is the store's digest of a key. */
export function keyUsage(
  keys: ReadonlyMap<number, string>,
  rowsByDigest: ReadonlyMap<string, number>,
  digest: (key: string) => string,
): KeyUsage {
  const indexOfDigest = new Map([...keys].map(([i, k]) => [digest(k), i]));
  const byIndex = new Map<number, number>();
  let unknown = 0;
  for (const [d, n] of rowsByDigest) {
    const i = indexOfDigest.get(d);
    if (i === undefined) unknown += n;
    else byIndex.set(i, (byIndex.get(i) ?? 0) + n);
  }
  return { byIndex: new Map([...byIndex].sort(([a], [b]) => a - b)), unknown };
}

/** `2 on key 1, 3 on key 2` (or `none`), for messages. */
export function formatUsage(u: KeyUsage, noun: string): string {
  const parts = [...u.byIndex].map(([i, n]) => `${n} on key ${i}`);
  if (u.unknown) parts.push(`${u.unknown} on a key the secrets file does not hold`);
  return parts.length ? `${noun} ${parts.join(', ')}` : `no ${noun}`;
}

/**
 * Refuse a rotation that would drop a key rows are still encrypted with (they could never be
 * decrypted again): E_ROTATE_KEY_IN_USE, naming indices and counts of `noun` (plural), with `hint`.
 */
export function refuseRetiringUsed(
  repository: string,
  retired: readonly number[],
  usage: KeyUsage,
  noun: string,
  hint: string,
): void {
  const used = retired.filter((i) => (usage.byIndex.get(i) ?? 0) > 0);
  if (!used.length) return;
  throw new InputError(
    'E_ROTATE_KEY_IN_USE',
    `rotating ${repository} now would drop ${used.map((i) => `key ${i}, which ${usage.byIndex.get(i)} ${noun} are still encrypted with`).join('; ')}`,
    { hint },
  );
}
