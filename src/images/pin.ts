/**
 * Pinning: which digest a tag names in the registry, asked once and then
 * kept (images/pins.ts), and whether a pinned tag has moved since. The
 * registry is asked only for images without a pin, or on purpose
 * (`images pin --refresh`) — a deploy of pinned images never asks for a tag.
 */
import type { Plan, PlanImage } from '../roles/plan.js';
import { digestOfHead, headManifest, headManifests, parseImageRef, type RegistryAccess } from './registry-api.js';
import type { PinChange } from './pins.js';

/** The tag references of a plan's images that have no pin yet. */
export function unpinnedImages(plan: Plan): string[] {
  return plan.images.filter((i) => !i.digest).map((i) => i.ref);
}

/** Ask the registry for the digest of each tag reference: ref -> digest. Throws ImagesMissing / RemoteError. */
export async function resolveDigests(
  refs: readonly string[],
  access: RegistryAccess,
): Promise<ReadonlyMap<string, string>> {
  if (!refs.length) return new Map();
  return (await headManifests(refs, access)).digests;
}

/** One line per pin change: `pinned REF sha256:…` or `re-pinned REF sha256:old -> sha256:new`. */
export function formatPinChanges(changes: readonly PinChange[]): string {
  return changes
    .map((c) =>
      c.previous
        ? `re-pinned ${c.ref}: ${short(c.previous)} -> ${short(c.digest)}\n`
        : `pinned ${c.ref} to ${short(c.digest)}\n`,
    )
    .join('');
}

/** `sha256:` and the first 12 hex digits: what people compare. */
export const short = (digest: string): string => digest.slice(0, 19);

/** A reference with its digest shortened for tables: `…/keystone:zed-1@sha256:0123456789ab`. */
export const shortRef = (ref: string): string => ref.replace(/@(sha256:[0-9a-f]{12})[0-9a-f]{52}$/, '@$1');

/** What the registry says now about a pinned image's tag. */
export const TagState = {
  /** The tag still names the pinned digest. */
  PINNED: 'pinned',
  /** The tag names another digest than the pinned one: the cloud keeps the pin until it is refreshed. */
  MOVED: 'moved',
  /** The registry has no such tag any more (the pinned digest may still be there). */
  GONE: 'gone',
} as const;
export type TagState = (typeof TagState)[keyof typeof TagState];

/** A pinned image against its tag in the registry. */
export interface TagCheck {
  readonly ref: string;
  readonly pinned: string;
  readonly state: TagState;
  /** The digest the tag names now (for `moved`). */
  readonly current?: string;
}

/**
 * Ask the registry where each pinned image's tag points now. Unpinned images
 * are not asked about. Throws RemoteError when the registry does not answer
 * or refuses (the caller reports that; it is not a tag's fault).
 */
export async function checkTags(images: readonly PlanImage[], access: RegistryAccess): Promise<TagCheck[]> {
  const out: TagCheck[] = [];
  for (const img of images) {
    if (!img.digest) continue;
    const name = parseImageRef(img.ref);
    const current = digestOfHead(name, await headManifest(name, access), access);
    if (!current) out.push({ ref: img.ref, pinned: img.digest, state: TagState.GONE });
    else if (current !== img.digest) out.push({ ref: img.ref, pinned: img.digest, state: TagState.MOVED, current });
    else out.push({ ref: img.ref, pinned: img.digest, state: TagState.PINNED });
  }
  return out;
}
