import type { Command } from 'commander';
import { resolve } from 'node:path';
import { defaultReleasesDir } from '../core/paths.js';
import { formatBuildEvent, buildImages } from '../images/build.js';
import { imageSpecs, LABEL } from '../images/catalog.js';
import { localEngine } from '../remote/docker-local.js';
import { DEFAULT_REGISTRY_ADDRESS, ensureRegistry, pushImages, REGISTRY_CONTAINER } from '../images/registry.js';
import { servedMode } from '../images/registry-tls.js';
import { loadRelease } from '../roles/release.js';
import { buildHostImage } from '../images/host.js';
import { buildGuestImage } from '../images/guest.js';
import { UsageError } from '../core/errors.js';
import { formatPinChanges, short, unpinnedImages } from '../images/pin.js';
import { PinSource, savePins, withPins } from '../images/pins.js';
import { imageRef } from '../roles/release.js';
import type { Release } from '../roles/schema.js';
import { loadAll, pinImages, planOf, registryTls } from './context.js';
import { out, table } from './output.js';
import { withRunLock } from './run-lock.js';

/** Default output folder of the host OS image, under the working folder's (git-ignored) .stackctl/. */
export const DEFAULT_HOST_IMAGE_DIR = '.stackctl/host';

/** Default output folder of the guest image (the deploy's --guest-image reads it from there). */
export const DEFAULT_GUEST_IMAGE_DIR = '.stackctl/guest';

/** What `images build` builds: the release's container images (default), the host OS disk image, the guest image. */
const BUILD_TARGETS = ['containers', 'host', 'guest'] as const;

interface ReleaseOpts {
  release?: string;
  releases?: string;
}

/** The release when neither --release nor an inventory names one. */
const DEFAULT_RELEASE = 'zed';

const releaseOptions = (cmd: Command): Command =>
  cmd
    .option(
      '--release <name>',
      `release manifest (images/releases/<name>.yaml; default: the inventory's, else ${DEFAULT_RELEASE})`,
    )
    .option('--releases <dir>', 'release manifests folder (default: images/releases shipped with stackctl)');

const load = (opts: ReleaseOpts, fallback = DEFAULT_RELEASE): Release =>
  loadRelease(opts.releases ? resolve(opts.releases) : defaultReleasesDir(), opts.release ?? fallback);

/** The inventory options `images push|pin` read (no secrets needed: pins hold none). */
const inventoryOf = (opts: ReleaseOpts & { inventory: string; roles?: string }) => ({
  inventory: opts.inventory,
  ...(opts.roles ? { roles: opts.roles } : {}),
  ...(opts.releases ? { releases: opts.releases } : {}),
});

/** Options of `images push`. */
interface PushOpts extends ReleaseOpts {
  registry: string;
  registryContainer: string;
  only?: string[];
  inventory?: string;
}

/**
 * Push the release images; with an inventory (its run lock held by the caller), pin what was pushed.
 * The pins are keyed by the references the nodes pull (cloud.registry), whatever address this machine
 * pushed to: the digest is the content's, not the address's.
 */
async function push(opts: PushOpts): Promise<void> {
  const inventory = opts.inventory;
  // with an inventory, a bad one fails before anything is pushed
  const all = inventory ? loadAll(inventoryOf({ ...opts, inventory })) : undefined;
  const release = load(opts, all?.release.name);
  const engine = localEngine();
  const tls = all ? registryTls(all) : undefined;
  const reg = await ensureRegistry(engine, {
    release,
    address: opts.registry,
    container: opts.registryContainer,
    ...(tls !== undefined ? { tls } : {}),
  });
  if (reg.created) out(`started registry ${reg.container} at ${reg.address}\n`);
  if (reg.reconfigured) out(`registry ${reg.container} now serves ${servedMode(tls ?? false)}\n`);
  const { pushed, missing } = await pushImages(engine, release, reg.address, opts.only ?? [], (l) => out(l + '\n'));
  out(`${pushed.length} image(s) pushed to ${reg.address}\n`);
  if (missing.length) out(`not built, skipped: ${missing.join(', ')} (stackctl images build)\n`);
  if (!all) {
    if (pushed.length) out('pins unchanged (give -i INVENTORY to pin what was pushed)\n');
    return;
  }
  const registry = all.loaded.inventory.cloud.registry;
  const resolved = new Map(pushed.map((p) => [imageRef(release, p.key, registry)!, p.digest]));
  const { state, changes } = withPins(all.pins, resolved, PinSource.PUSH, new Date());
  if (changes.length) savePins(all.imagesFile, state);
  out(formatPinChanges(changes) || `pins of ${all.imagesFile} unchanged\n`);
}

/** `stackctl images build|push|list`: the container images of a release, built and pushed locally. */
export function registerImages(program: Command): Command {
  const images = program.command('images').description('container images: build locally, push to the registry');

  releaseOptions(images.command('build'))
    .description(
      'build the release container images (parents first), with "host" the host OS disk image, with "guest" ' +
        'the guest image the cloud boots (Debian kernel + busybox initramfs); unchanged images are not rebuilt',
    )
    .argument('[target]', `what to build: ${BUILD_TARGETS.join(' | ')}`, 'containers')
    .option('--only <key...>', 'build these image keys (and their parents) only; lab images: node, registry')
    .option(
      '--out <dir>',
      `host: output folder of host.img.lzo, its .sha256 and host.json (default ${DEFAULT_HOST_IMAGE_DIR}); ` +
        `guest: of vmlinuz, initrd.gz and guest.json (default ${DEFAULT_GUEST_IMAGE_DIR})`,
    )
    .option('--force', 'host, guest: rebuild even when nothing changed')
    .option(
      '--kernel-arg <arg...>',
      "host: kernel arguments after the definition's (a lab under QEMU TCG: cryptomgr.notests, docs/images.md)",
    )
    .option('--verbose', 'show the build output')
    .action(
      async (
        target: string,
        opts: ReleaseOpts & { only?: string[]; verbose?: boolean; out?: string; force?: boolean; kernelArg?: string[] },
      ) => {
        if (!(BUILD_TARGETS as readonly string[]).includes(target)) {
          throw new UsageError('E_USAGE', `unknown build target '${target}'`, {
            hint: `Use one of: ${BUILD_TARGETS.join(', ')} (the deploy ramdisk: stackctl images build-ramdisk).`,
          });
        }
        if (target === 'guest') {
          const build = await buildGuestImage({
            outDir: resolve(opts.out ?? DEFAULT_GUEST_IMAGE_DIR),
            force: opts.force === true,
            log: (line) => out(line + '\n'),
          });
          for (const f of [build.kernel, build.initrd]) out(`${f.path}  ${f.size} bytes  sha256 ${f.sha256}\n`);
          out(
            `kernel ${build.inputs.kernel.package} ${build.inputs.kernel.version}, ` +
              `${build.cached ? 'up to date' : 'built'} in ${(build.elapsedMs / 1000).toFixed(1)} s\n`,
          );
          return;
        }
        if (target === 'host') {
          const build = await buildHostImage({
            outDir: resolve(opts.out ?? DEFAULT_HOST_IMAGE_DIR),
            force: opts.force === true,
            extraKernelArgs: opts.kernelArg ?? [],
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
    .description(
      'push the built release images to the registry (started if it does not run); with -i, pin what was pushed',
    )
    .option('--registry <host:port>', 'registry address as seen from this machine', DEFAULT_REGISTRY_ADDRESS)
    .option('--registry-container <name>', 'registry container name', REGISTRY_CONTAINER)
    .option('--only <key...>', 'push these image keys only')
    .option(
      '-i, --inventory <file>',
      "pin the pushed digests for this inventory's cloud (<inventory>.images.json); its release is the default",
    )
    .action((opts: PushOpts) => (opts.inventory ? withRunLock(opts.inventory, () => push(opts)) : push(opts)));

  releaseOptions(images.command('pin'))
    .description(
      "pin the images of the inventory's plan that have no pin to the digests their tags name now; " +
        '--refresh re-resolves pinned tags too (moving the cloud to what they point to at the next deploy)',
    )
    .requiredOption('-i, --inventory <file>', 'inventory YAML file; pins go to <inventory>.images.json')
    .option('--refresh', 'ask the registry again for images already pinned, and move their pins')
    .option('--only <key...>', 'these image keys only')
    .option('--registry <host:port>', "ask the registry at this address (default: the plan's, cloud.registry)")
    .option('--roles <dir>', 'roles folder (default: the roles shipped with stackctl)')
    .option('--json', 'machine-readable output')
    .action(
      async (
        opts: ReleaseOpts & {
          inventory: string;
          roles?: string;
          refresh?: boolean;
          only?: string[];
          registry?: string;
          json?: boolean;
        },
      ) =>
        withRunLock(opts.inventory, async () => {
          const all = loadAll(inventoryOf(opts));
          const release = opts.release ? load(opts) : all.release;
          const plan = planOf({ ...all, release }).plan;
          const known = new Set(plan.images.map((i) => i.key));
          for (const k of opts.only ?? []) {
            if (!known.has(k)) {
              throw new UsageError(
                'E_UNKNOWN_IMAGE',
                `the plan of ${opts.inventory} (release ${release.name}) runs no image '${k}'`,
                {
                  hint: `Images of this plan: ${[...known].sort().join(', ')}.`,
                },
              );
            }
          }
          const chosen = plan.images.filter((i) => !opts.only?.length || opts.only.includes(i.key));
          const ask = opts.refresh ? chosen.map((i) => i.ref) : unpinnedImages({ ...plan, images: chosen });
          const r = await pinImages(all, ask, {
            by: PinSource.PIN,
            save: true,
            release: release.name,
            ...(opts.registry ? { address: opts.registry } : {}),
          });
          const changed = new Map(r.changes.map((c) => [c.ref, c]));
          const rows = chosen.map((i) => {
            const c = changed.get(i.ref);
            const digest = c?.digest ?? i.digest!;
            const change = !c
              ? ask.includes(i.ref)
                ? 'unchanged'
                : 'pinned already'
              : c.previous
                ? `moved from ${short(c.previous)}`
                : 'pinned';
            return { ref: i.ref, digest, change };
          });
          if (opts.json) out(JSON.stringify({ file: all.imagesFile, images: rows }, null, 2) + '\n');
          else {
            out(
              table(
                ['IMAGE', 'DIGEST', 'CHANGE'],
                rows.map((x) => [x.ref, short(x.digest), x.change]),
              ),
            );
            out(
              r.changes.length
                ? `${r.changes.length} pin(s) written to ${all.imagesFile}; the next deploy moves the cloud to them\n`
                : `pins of ${all.imagesFile} unchanged${opts.refresh ? '' : ' (--refresh asks the registry about pinned tags too)'}\n`,
            );
          }
        }),
    );

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
          // a root image: the suite's debootstrap root filesystem (docs/images.md)
          from: spec.from ?? `rootfs ${spec.suite}`,
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
