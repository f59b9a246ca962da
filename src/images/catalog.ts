/**
 * Which images exist and how they relate: the release manifest's images plus
 * the lab's own tool images, resolved into a build order (parents first).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { InputError } from '../core/errors.js';
import { packageRoot } from '../core/paths.js';
import { imageRef } from '../roles/release.js';
import type { Release } from '../roles/schema.js';

/**
 * Images the lab needs besides the release's: never pushed to a registry, so
 * they keep a local-only name. `from` names a release image key.
 */
export const LAB_IMAGES = {
  /**
   * A lab node: sshd plus a nested dockerd (LAB-FACTS section 4); ethtool and udhcpc for the
   * dataplane probe's port (a network namespace plugged into br-int, its address by DHCP from OVN).
   */
  node: {
    from: 'base',
    packages: ['openssh-server', 'docker.io', 'fuse-overlayfs', 'iproute2', 'iptables', 'procps', 'ethtool', 'udhcpc'],
  },
  /** The deploy host's registry: Debian's docker-registry, without auth. */
  registry: { from: 'base', packages: ['docker-registry'] },
} as const satisfies Record<string, { from: string; packages: readonly string[] }>;
export type LabImageKey = keyof typeof LAB_IMAGES;

/** Label keys stackctl puts on what it builds. */
export const LABEL = {
  /** sha256 of (Dockerfile context + build args + parent image id): equal means nothing to rebuild. */
  hash: 'org.stackctl.build-hash',
  /** The image key (release manifest key or lab image key). */
  key: 'org.stackctl.image',
  /** The release manifest the image was built for. */
  release: 'org.stackctl.release',
} as const;

/** One image to build. */
export interface ImageSpec {
  readonly key: string;
  /** The local name it is built as. */
  readonly ref: string;
  /**
   * Parent image key; undefined for a root image (`base`, or an image with a suite of its own): its
   * parent is the debootstrap root filesystem of its suite.
   */
  readonly from: string | undefined;
  readonly packages: readonly string[];
  /** The Debian suite it is built on: its own, its parent's, or the release's. */
  readonly suite: string;
  /** The build context: images/containers/<key>/. */
  readonly contextDir: string;
  /** True for release images (pushed to registries), false for lab tool images. */
  readonly pushable: boolean;
}

/** Default folder of build definitions. */
export const defaultContainersDir = (): string => join(packageRoot(), 'images', 'containers');

/** Local-only name of a lab tool image. */
export function labImageRef(release: Release, key: LabImageKey): string {
  return `stackctl-lab/${key}:${release.name}`;
}

/** Every image of a release plus the lab images, by key. */
export function imageSpecs(release: Release, containersDir = defaultContainersDir()): Map<string, ImageSpec> {
  const specs = new Map<string, ImageSpec>();
  for (const [key, img] of Object.entries(release.images)) {
    specs.set(key, {
      key,
      ref: imageRef(release, key)!,
      from: img.from,
      packages: img.packages ?? [],
      suite: suiteOf(release, key),
      contextDir: join(containersDir, key),
      pushable: true,
    });
  }
  for (const [key, img] of Object.entries(LAB_IMAGES)) {
    specs.set(key, {
      key,
      ref: labImageRef(release, key as LabImageKey),
      from: img.from,
      packages: img.packages,
      suite: suiteOf(release, img.from),
      contextDir: join(containersDir, key),
      pushable: false,
    });
  }
  return specs;
}

/**
 * The Debian suite of a release image: its own `suite`, else its parent's, else the release's.
 * Unknown keys and cycles take the release's here; buildOrder reports them.
 */
export function suiteOf(release: Release, key: string): string {
  const seen = new Set<string>();
  for (let k: string | undefined = key; k !== undefined && !seen.has(k); k = release.images[k]?.from) {
    seen.add(k);
    const own = release.images[k]?.suite;
    if (own !== undefined) return own;
  }
  return release.distro.suite;
}

/**
 * The images to build for `only` (all release images when empty), with every
 * ancestor, parents before children. Unknown keys, missing parents, cycles and
 * missing build folders are errors naming the key.
 */
export function buildOrder(specs: ReadonlyMap<string, ImageSpec>, only: readonly string[] = []): ImageSpec[] {
  const wanted = only.length ? only : [...specs.values()].filter((s) => s.pushable).map((s) => s.key);
  const order: ImageSpec[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (key: string, child?: string): void => {
    const spec = specs.get(key);
    if (!spec) {
      throw new InputError(
        'E_UNKNOWN_IMAGE',
        child ? `image '${child}' is built from unknown image '${key}'` : `no image '${key}'`,
        { hint: `Image keys: ${[...specs.keys()].sort().join(', ')}.` },
      );
    }
    if (state.get(key) === 'done') return;
    if (state.get(key) === 'visiting') {
      throw new InputError('E_IMAGE_CYCLE', `image '${key}' is its own ancestor`, {
        hint: 'Check the `from` fields of the release manifest.',
      });
    }
    state.set(key, 'visiting');
    if (spec.from) visit(spec.from, key);
    if (!existsSync(join(spec.contextDir, 'Dockerfile'))) {
      throw new InputError('E_NO_DOCKERFILE', `image '${key}' has no build definition ${spec.contextDir}/Dockerfile`, {
        hint: 'Add images/containers/<key>/Dockerfile (see docs/images.md).',
      });
    }
    state.set(key, 'done');
    order.push(spec);
  };
  for (const k of wanted) visit(k);
  return order;
}
