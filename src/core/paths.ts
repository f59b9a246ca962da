import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let cached: string | undefined;

/** The folder holding stackctl's package.json (and the shipped roles/, images/, schemas/). */
export function packageRoot(): string {
  if (cached) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'roles'))) return (cached = dir);
    const parent = dirname(dir);
    if (parent === dir) throw new Error('stackctl package root not found above ' + fileURLToPath(import.meta.url));
    dir = parent;
  }
}

/** Default folder of role and service definitions. */
export const defaultRolesDir = (): string => join(packageRoot(), 'roles');
/** Default folder of release manifests. */
export const defaultReleasesDir = (): string => join(packageRoot(), 'images', 'releases');

/**
 * The script a background or later stackctl process runs (`lab bmc serve`, a rotation timer): this
 * process's when it is stackctl, else (stackctl used as a library, e.g. by tests) the built one of
 * the package.
 */
export function stackctlScript(): string {
  const argv1 = process.argv[1] ?? '';
  return /bin\.js$/.test(argv1) ? argv1 : join(packageRoot(), 'dist', 'src', 'cli', 'bin.js');
}
