/**
 * Image pins: the digest each image reference of a cloud resolves to, kept
 * next to the inventory (`<inventory>.images.json`, like the IPAM file). The
 * plan reads them as an input (roles/plan.ts), so nodes pull and run
 * `registry/namespace/key:tag@sha256:…`: a tag moved in the registry changes
 * nothing on the cloud until the operator pins again (`images push -i`,
 * `images pin --refresh`). Pure: reading and writing the file, no registry.
 */
import { existsSync } from 'node:fs';
import { canonicalJson } from '../core/hash.js';
import { readTextFile, writeFileAtomic } from '../core/fs.js';
import { InputError } from '../core/errors.js';

/** Who wrote a pin. */
export const PinSource = {
  /** `stackctl images push -i`: the digest the registry answered the push with. */
  PUSH: 'push',
  /** `stackctl images pin`: the tag resolved on purpose. */
  PIN: 'pin',
  /** `stackctl plan`: an image without a pin, resolved once. */
  PLAN: 'plan',
  /** `stackctl deploy`: an image without a pin on its first deploy, resolved once. */
  DEPLOY: 'deploy',
  /** `stackctl upgrade`: a target image without a pin, resolved when the upgrade starts. */
  UPGRADE: 'upgrade',
} as const;
export type PinSource = (typeof PinSource)[keyof typeof PinSource];

/** One pinned image. */
export interface ImagePin {
  /** `sha256:<64 hex>`: the manifest digest the registry named for the tag. */
  readonly digest: string;
  /** When it was pinned (ISO 8601). */
  readonly at: string;
  readonly by: PinSource;
}

/** The persisted state: tag reference (`registry/namespace/key:tag`) -> pin. */
export interface PinState {
  readonly version: 1;
  readonly images: Readonly<Record<string, ImagePin>>;
}

export const EMPTY_PINS: PinState = { version: 1, images: {} };

/** A manifest digest as registries name it. */
export const DIGEST = /^sha256:[0-9a-f]{64}$/;

/** `registry/path:tag` without a digest: the form pins are keyed by. */
const TAG_REF = /^[A-Za-z0-9.-]+(?::\d{1,5})?\/[a-z0-9]+(?:[._/-][a-z0-9]+)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

/** Path of the pin file that belongs to an inventory file. */
export function pinsFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.images.json';
}

const badState = (file: string, why: string): InputError =>
  new InputError('E_IMAGE_PINS', `image pins ${file}: ${why}`, {
    hint:
      'Restore it from a backup, or fix the entry. Removing the file (or the entry) makes the next ' +
      'deploy pin what the registry holds now: that moves every image whose tag moved.',
    location: { file },
  });

/** Read the pin file; a missing file is an empty state. Every entry is checked. */
export function loadPins(file: string): PinState {
  if (!existsSync(file)) return EMPTY_PINS;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readTextFile(file, 16 * 1024 * 1024));
  } catch (e) {
    if (e instanceof InputError) throw e;
    throw badState(file, 'not valid JSON');
  }
  const obj = parsed as Partial<PinState> | null;
  if (obj?.version !== 1 || typeof obj.images !== 'object' || obj.images === null || Array.isArray(obj.images)) {
    throw badState(file, 'unknown format (expected {"version": 1, "images": {...}})');
  }
  const sources = new Set<string>(Object.values(PinSource));
  for (const [ref, pin] of Object.entries(obj.images as Record<string, Partial<ImagePin> | null>)) {
    if (!TAG_REF.test(ref)) throw badState(file, `'${ref}' is not registry/namespace/key:tag`);
    if (typeof pin?.digest !== 'string' || !DIGEST.test(pin.digest))
      throw badState(file, `${ref}: digest is not sha256:<64 hex digits>`);
    if (typeof pin.at !== 'string' || typeof pin.by !== 'string' || !sources.has(pin.by))
      throw badState(file, `${ref}: 'at' and 'by' (${[...sources].join('|')}) are required`);
  }
  return obj as PinState;
}

/** Write the state atomically, keys sorted so the file diffs cleanly. */
export function savePins(file: string, state: PinState): void {
  writeFileAtomic(file, JSON.stringify(JSON.parse(canonicalJson(state)), null, 2) + '\n');
}

/** tag reference -> digest, the form buildPlan takes. */
export function digestsOf(state: PinState): Map<string, string> {
  return new Map(Object.entries(state.images).map(([ref, p]) => [ref, p.digest]));
}

/** One change to the pins. */
export interface PinChange {
  readonly ref: string;
  readonly digest: string;
  /** The digest it replaced; absent for a new pin. */
  readonly previous?: string;
}

/**
 * The state with `resolved` pinned (ref -> digest) by `by` at `now`, and what
 * changed: new pins and moved ones. An unchanged digest keeps its entry as it
 * was (its time and source), so re-pinning an unmoved tag writes nothing.
 */
export function withPins(
  state: PinState,
  resolved: ReadonlyMap<string, string>,
  by: PinSource,
  now: Date,
): { state: PinState; changes: PinChange[] } {
  const images: Record<string, ImagePin> = { ...state.images };
  const changes: PinChange[] = [];
  for (const [ref, digest] of [...resolved].sort(([a], [b]) => a.localeCompare(b))) {
    if (!TAG_REF.test(ref)) {
      throw new InputError('E_IMAGE_REF', `'${ref}' is not registry/namespace/key:tag: it cannot be pinned`, {
        hint: 'Pins are keyed by the tag reference the release manifest and cloud.registry make.',
      });
    }
    if (!DIGEST.test(digest)) {
      throw new InputError('E_IMAGE_DIGEST', `'${digest}' (for ${ref}) is not a sha256 digest`, {
        hint: 'A registry names manifests sha256:<64 hex digits> (header Docker-Content-Digest).',
      });
    }
    const previous = images[ref]?.digest;
    if (previous === digest) continue;
    images[ref] = { digest, at: now.toISOString(), by };
    changes.push({ ref, digest, ...(previous ? { previous } : {}) });
  }
  return { state: changes.length ? { version: 1, images } : state, changes };
}
