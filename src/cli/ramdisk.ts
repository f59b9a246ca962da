import type { Command } from 'commander';
import { resolve } from 'node:path';
import { buildRamdisk, RAMDISK_PACKAGES } from '../images/ramdisk.js';
import { out } from './output.js';

/** Default output folder, under the working folder's (git-ignored) .stackctl/. */
export const DEFAULT_RAMDISK_DIR = '.stackctl/ramdisk';

interface BuildRamdiskOpts {
  out: string;
  kernelPackage: string;
  force?: boolean;
}

/**
 * `stackctl images build-ramdisk`: the deploy ramdisk (kernel + initramfs
 * with the agent) that nodes boot over the network. Added to the `images`
 * command by the caller.
 */
export function registerRamdisk(images: Command): Command {
  return images
    .command('build-ramdisk')
    .description('build the deploy ramdisk (Debian kernel + busybox initramfs with the agent); cached by its inputs')
    .option('--out <dir>', 'output folder for vmlinuz, initrd.gz, their .sha256 and ramdisk.json', DEFAULT_RAMDISK_DIR)
    .option('--kernel-package <name>', 'Debian kernel package (the meta package is resolved)', RAMDISK_PACKAGES.kernel)
    .option('--force', 'rebuild even when nothing changed')
    .action(async (opts: BuildRamdiskOpts) => {
      const build = await buildRamdisk({
        outDir: resolve(opts.out),
        kernelPackage: opts.kernelPackage,
        force: opts.force === true,
        log: (line) => out(line + '\n'),
      });
      for (const f of [build.kernel, build.initrd]) out(`${f.path}  ${f.size} bytes  sha256 ${f.sha256}\n`);
      out(
        `kernel ${build.inputs.kernel.package} ${build.inputs.kernel.version}, ` +
          `${build.cached ? 'up to date' : 'built'} in ${(build.elapsedMs / 1000).toFixed(1)} s\n`,
      );
    });
}
