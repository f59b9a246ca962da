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
