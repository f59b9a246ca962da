import { join } from 'node:path';
import { InputError, ValidationFailed } from '../core/errors.js';
import { exists, readTextFile } from '../core/fs.js';
import { checkSchema } from '../core/schema.js';
import { parseYaml } from '../core/yaml.js';
import { ReleaseSchema, type Release } from './schema.js';

/** Load images/releases/<name>.yaml. */
export function loadRelease(dir: string, name: string): Release {
  const file = join(dir, `${name}.yaml`);
  if (!exists(file)) {
    throw new InputError('E_UNKNOWN_RELEASE', `release '${name}' has no manifest ${file}`, {
      hint: 'cloud.release names a file of images/releases/ (e.g. zed).',
      location: { file },
    });
  }
  const source = parseYaml(file, readTextFile(file, 1024 * 1024));
  if (source.issues.some((i) => i.severity === 'error')) throw new ValidationFailed(file, source.issues);
  const { value, issues } = checkSchema(ReleaseSchema, source);
  if (!value) throw new ValidationFailed(file, issues);
  if (value.name !== name) {
    throw new InputError('E_NAME_MISMATCH', `release manifest ${file} is named '${value.name}'`, {
      hint: `Set name: ${name}, or rename the file.`,
      location: { file },
    });
  }
  for (const [key, img] of Object.entries(value.images)) {
    // NOTE: a child is built on its parent, so it can only be of its parent's suite.
    if (img.from !== undefined && img.suite !== undefined) {
      throw new InputError('E_IMAGE_SUITE', `image '${key}' of ${file} names both a parent and a suite`, {
        hint: `An image built from another has its parent's Debian suite: drop \`suite\`, or drop \`from\` and list the packages it needs from the suite's root filesystem.`,
        location: source.locate(['images', key, 'suite']),
      });
    }
  }
  return value;
}

/** Full image reference of an image key: registry/namespace/key:tag. */
export function imageRef(release: Release, key: string, registry?: string): string | undefined {
  const img = release.images[key];
  if (!img) return undefined;
  return `${registry ?? release.registry}/${release.namespace}/${key}:${img.tag}`;
}

/**
 * An image reference pinned to a manifest digest: `registry/namespace/key:tag@sha256:…`.
 * Docker resolves such a reference by the digest alone (the tag is only read by people), so a
 * node pulls and runs exactly the pinned content whatever the tag points to now.
 */
export function pinnedRef(ref: string, digest: string): string {
  return `${ref}@${digest}`;
}

/** The tag reference of a possibly pinned reference (the part before `@`). */
export function unpinnedRef(ref: string): string {
  const at = ref.indexOf('@');
  return at < 0 ? ref : ref.slice(0, at);
}
