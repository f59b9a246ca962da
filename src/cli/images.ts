import type { Command } from 'commander';
import { resolve } from 'node:path';
import { defaultReleasesDir } from '../core/paths.js';
import { formatBuildEvent, buildImages } from '../images/build.js';
import { imageSpecs, LABEL } from '../images/catalog.js';
import { localEngine } from '../remote/docker-local.js';
import { DEFAULT_REGISTRY_ADDRESS, ensureRegistry, pushImages, REGISTRY_CONTAINER } from '../images/registry.js';
import { loadRelease } from '../roles/release.js';
import { buildHostImage } from '../images/host.js';
import { UsageError } from '../core/errors.js';
import { out, table } from './output.js';

/** Default output folder of the host OS image, under the working folder's (git-ignored) .stackctl/. */
export const DEFAULT_HOST_IMAGE_DIR = '.stackctl/host';

/** What `images build` builds: the release's container images (default) or the host OS disk image. */
const BUILD_TARGETS = ['containers', 'host'] as const;

interface ReleaseOpts {
  release: string;
  releases?: string;
}

const releaseOptions = (cmd: Command): Command =>
  cmd
    .option('--release <name>', 'release manifest (images/releases/<name>.yaml)', 'zed')
    .option('--releases <dir>', 'release manifests folder (default: images/releases shipped with stackctl)');

const load = (opts: ReleaseOpts) =>
  loadRelease(opts.releases ? resolve(opts.releases) : defaultReleasesDir(), opts.release);

/** `stackctl images build|push|list`: the container images of a release, built and pushed locally. */
export function registerImages(program: Command): Command {
  const images = program.command('images').description('container images: build locally, push to the registry');

  releaseOptions(images.command('build'))
    .description(
      'build the release container images (parents first), or with "host" the host OS disk image; ' +
        'unchanged images are not rebuilt',
    )
    .argument('[target]', `what to build: ${BUILD_TARGETS.join(' | ')}`, 'containers')
    .option('--only <key...>', 'build these image keys (and their parents) only; lab images: node, registry')
    .option('--out <dir>', 'host: output folder of host.img.gz, its .sha256 and host.json', DEFAULT_HOST_IMAGE_DIR)
    .option('--force', 'host: rebuild even when nothing changed')
    .option('--verbose', 'show the build output')
    .action(
      async (
        target: string,
        opts: ReleaseOpts & { only?: string[]; verbose?: boolean; out: string; force?: boolean },
      ) => {
        if (!(BUILD_TARGETS as readonly string[]).includes(target)) {
          throw new UsageError('E_USAGE', `unknown build target '${target}'`, {
            hint: `Use one of: ${BUILD_TARGETS.join(', ')} (the deploy ramdisk: stackctl images build-ramdisk).`,
          });
        }
        if (target === 'host') {
          const build = await buildHostImage({
            outDir: resolve(opts.out),
            force: opts.force === true,
            log: (line) => out(line + '\n'),
          });
          const m = build.manifest;
          out(`${build.imagePath}  ${m.image.size} bytes  sha256 ${m.image.sha256}\n`);
          out(
            `raw ${m.raw.size} bytes, kernel ${m.kernel}, ${m.packages.length} packages, ` +
              `${build.cached ? 'up to date' : 'built'} in ${(build.elapsedMs / 1000).toFixed(1)} s\n`,
          );
          return;
        }
        const release = load(opts);
        const started = Date.now();
        const built = await buildImages(localEngine(), {
          release,
          only: opts.only ?? [],
          onEvent: (e) => {
            if (e.kind !== 'image.line' || opts.verbose) out(formatBuildEvent(e) + '\n');
          },
        });
        const fresh = built.filter((b) => !b.cached).length;
        out(
          `${built.length} image(s): ${fresh} built, ${built.length - fresh} up to date, ` +
            `${((Date.now() - started) / 1000).toFixed(1)} s\n`,
        );
      },
    );

  releaseOptions(images.command('push'))
    .description('push the built release images to the registry (started if it does not run)')
    .option('--registry <host:port>', 'registry address as seen from this machine', DEFAULT_REGISTRY_ADDRESS)
    .option('--registry-container <name>', 'registry container name', REGISTRY_CONTAINER)
    .option('--only <key...>', 'push these image keys only')
    .action(async (opts: ReleaseOpts & { registry: string; registryContainer: string; only?: string[] }) => {
      const release = load(opts);
      const engine = localEngine();
      const reg = await ensureRegistry(engine, {
        release,
        address: opts.registry,
        container: opts.registryContainer,
      });
      if (reg.created) out(`started registry ${reg.container} at ${reg.address}\n`);
      const { pushed, missing } = await pushImages(engine, release, reg.address, opts.only ?? [], (l) => out(l + '\n'));
      out(`${pushed.length} image(s) pushed to ${reg.address}\n`);
      if (missing.length) out(`not built, skipped: ${missing.join(', ')} (stackctl images build)\n`);
    });

  releaseOptions(images.command('list'))
    .description('list the images of a release and whether they are built')
    .option('--json', 'machine-readable output')
    .action(async (opts: ReleaseOpts & { json?: boolean }) => {
      const release = load(opts);
      const engine = localEngine();
      const rows = [];
      for (const spec of imageSpecs(release).values()) {
        const img = await engine.image(spec.ref);
        rows.push({
          key: spec.key,
          ref: spec.ref,
          from: spec.from ?? 'rootfs',
          id: img?.id ?? null,
          size_mb: img ? Math.round(img.size / 1e6) : null,
          built: img ? img.labels[LABEL.hash] !== undefined : false,
        });
      }
      if (opts.json) out(JSON.stringify(rows, null, 2) + '\n');
      else
        out(
          table(
            ['KEY', 'FROM', 'IMAGE', 'ID', 'SIZE'],
            rows.map((r) => [
              r.key,
              r.from,
              r.ref,
              r.id ? r.id.slice(7, 19) : 'not built',
              r.size_mb === null ? '' : `${r.size_mb} MB`,
            ]),
          ),
        );
    });
  return images;
}
