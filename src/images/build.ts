/**
 * Build images locally through the Docker API, parents first, skipping every
 * image whose inputs have not changed: each image carries a label with the
 * hash of (build context + build args + parent image id), so an unchanged
 * image costs one inspect call, and a changed parent rebuilds its children.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { canonicalJson, sha256 } from '../core/hash.js';
import type { Release } from '../roles/schema.js';
import { buildOrder, imageSpecs, LABEL, type ImageSpec } from './catalog.js';
import type { LocalEngine } from '../remote/docker-local.js';
import { ensureRootfs, type Mirrors, type RootfsDeps } from './rootfs.js';

/** Progress of a build, one event per step (CONVENTIONS.md 10). */
export type BuildEvent =
  | { readonly kind: 'rootfs.start'; readonly suite: string }
  | { readonly kind: 'rootfs.done'; readonly ref: string; readonly cached: boolean; readonly seconds: number }
  | { readonly kind: 'image.start'; readonly key: string; readonly ref: string }
  | { readonly kind: 'image.line'; readonly key: string; readonly line: string }
  | {
      readonly kind: 'image.done';
      readonly key: string;
      readonly ref: string;
      readonly id: string;
      readonly cached: boolean;
      readonly seconds: number;
    };

/** One human line per event kind; `image.line` is build output, shown only when verbose. */
export const BUILD_EVENT_FORMAT: {
  readonly [K in BuildEvent['kind']]: (e: Extract<BuildEvent, { kind: K }>) => string;
} = {
  'rootfs.start': (e) => `rootfs ${e.suite}: checking`,
  'rootfs.done': (e) => `rootfs ${e.ref}: ${e.cached ? 'up to date' : `built in ${e.seconds.toFixed(1)} s`}`,
  'image.start': (e) => `${e.key}: building ${e.ref}`,
  'image.line': (e) => `  ${e.key}: ${e.line}`,
  'image.done': (e) =>
    `${e.key}: ${e.cached ? 'up to date' : `built in ${e.seconds.toFixed(1)} s`} (${e.id.slice(7, 19)})`,
};

/** Format any build event. */
export function formatBuildEvent(e: BuildEvent): string {
  return (BUILD_EVENT_FORMAT[e.kind] as (x: BuildEvent) => string)(e);
}

/** Options of a build run. */
export interface BuildOptions {
  readonly release: Release;
  /** Keys to build (with their ancestors); every release image when empty. */
  readonly only?: readonly string[];
  readonly containersDir?: string;
  readonly onEvent?: (e: BuildEvent) => void;
  readonly mirrors?: Mirrors;
  readonly rootfsDeps?: RootfsDeps;
}

/** What was built. */
export interface BuiltImage {
  readonly key: string;
  readonly ref: string;
  readonly id: string;
  readonly cached: boolean;
  readonly seconds: number;
}

/** sha256 of every file of a build context, by relative path: what the Dockerfile can see. */
export function contextDigest(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string): void => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      const st = statSync(p);
      if (st.isDirectory()) walk(p);
      // the mode matters too: an entrypoint that loses its x bit must rebuild
      else out[relative(dir, p)] = `${(st.mode & 0o777).toString(8)}:${sha256(readFileSync(p))}`;
    }
  };
  walk(dir);
  return out;
}

/** The build hash of an image: equal inputs give an equal hash. */
export function buildHash(spec: ImageSpec, buildArgs: Readonly<Record<string, string>>, parentId: string): string {
  return sha256(canonicalJson({ context: contextDigest(spec.contextDir), buildArgs, parentId }));
}

/** Build the requested images (and their ancestors) in dependency order. Re-entrant. */
export async function buildImages(engine: LocalEngine, opts: BuildOptions): Promise<BuiltImage[]> {
  const emit = opts.onEvent ?? (() => undefined);
  const specs = imageSpecs(opts.release, opts.containersDir);
  const order = buildOrder(specs, opts.only ?? []);
  await engine.ping();
  // One root filesystem per suite the build needs, made (or found) before any image is built.
  const roots = new Map<string, { ref: string; id: string }>();
  for (const suite of new Set(order.filter((s) => !s.from).map((s) => s.suite))) {
    emit({ kind: 'rootfs.start', suite });
    const rootfs = await ensureRootfs(engine, suite, (line) => emit({ kind: 'image.line', key: 'rootfs', line }), {
      ...(opts.mirrors ? { mirrors: opts.mirrors } : {}),
      ...(opts.rootfsDeps ? { deps: opts.rootfsDeps } : {}),
    });
    emit({ kind: 'rootfs.done', ref: rootfs.ref, cached: rootfs.cached, seconds: rootfs.seconds });
    roots.set(suite, rootfs);
  }

  const ids = new Map<string, { ref: string; id: string }>();
  const built: BuiltImage[] = [];
  for (const spec of order) {
    const started = Date.now();
    const parent = spec.from ? ids.get(spec.from)! : roots.get(spec.suite)!;
    // NOTE: PARENT is the image id, not its name, so the build uses exactly the parent hashed below.
    const buildArgs = { PARENT: parent.id, PACKAGES: spec.packages.join(' ') };
    const hash = buildHash(spec, buildArgs, parent.id);
    const have = await engine.image(spec.ref);
    let id: string;
    let cached: boolean;
    if (have && have.labels[LABEL.hash] === hash) {
      id = have.id;
      cached = true;
    } else {
      emit({ kind: 'image.start', key: spec.key, ref: spec.ref });
      id = await engine.build(
        spec.contextDir,
        {
          tag: spec.ref,
          buildArgs,
          labels: { [LABEL.hash]: hash, [LABEL.key]: spec.key, [LABEL.release]: opts.release.name },
        },
        (line) => emit({ kind: 'image.line', key: spec.key, line }),
      );
      cached = false;
    }
    const seconds = (Date.now() - started) / 1000;
    ids.set(spec.key, { ref: spec.ref, id });
    built.push({ key: spec.key, ref: spec.ref, id, cached, seconds });
    emit({ kind: 'image.done', key: spec.key, ref: spec.ref, id, cached, seconds });
  }
  return built;
}
