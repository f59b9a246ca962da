/**
 * The boot side of a run: the ramdisk and the host image staged in the boot
 * server's folder (`<inventory>.pxe/files/`, once per checksum), and the boot
 * services (the HTTP boot server, then dnsmasq on the provisioning interface)
 * that the inspection, the deploy and the cleaning of a run share.
 */
import { copyFileSync, existsSync, linkSync, mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { IoError } from '../../core/errors.js';
import { sha256 } from '../../core/hash.js';
import { HOST_OUTPUTS, readHostManifest } from '../../images/host.js';
import { RAMDISK_FILES, defaultRamdiskSourceDir } from '../../images/ramdisk.js';
import type { AgentReport } from '../../pxe/http.js';
import { LAB_KERNEL_ARGS, readRamdiskManifest, startBootServices, type BootServices } from '../../pxe/services.js';
import { stageImage, type DeployImage } from '../deploy.js';
import { pxeDirOf, type NodeSession } from './session.js';

/** The ramdisk's files in the boot server's folder. */
export interface BootFiles {
  readonly dir: string;
  readonly kernel: string;
  readonly initrd: string;
}

/** The boot files of a provisioning run, and the staged host image. */
export interface StagedBootFiles {
  readonly files: BootFiles;
  readonly image: DeployImage;
}

/** Where this machine serves the nodes from, and how. */
export interface BootServiceOptions {
  /** The provisioning interface dnsmasq binds to. */
  readonly iface: string;
  /** ULA /64 prefix on the interface, for router advertisements. */
  readonly ipv6Prefix?: string | undefined;
  /** This machine's address on provisioning (default: the network's gateway). */
  readonly serverAddress?: string | undefined;
  /** 0: any free port. */
  readonly httpPort: number;
  /** Folder with undionly.kpxe and ipxe.efi (absolute). */
  readonly tftpRoot?: string | undefined;
  /** Ramdisk kernel arguments (default: the lab's serial console). */
  readonly kernelArgs?: readonly string[] | undefined;
}

/** Start the boot server and dnsmasq for a run, serving `files`; the caller closes them. */
export function startRunBootServices(
  s: NodeSession,
  o: BootServiceOptions,
  files: BootFiles,
  onReport: (r: AgentReport) => void,
): Promise<BootServices> {
  return startBootServices({
    inventory: s.site.inventory,
    addresses: s.site.addresses,
    interface: o.iface,
    ...(o.serverAddress ? { serverAddress: o.serverAddress } : {}),
    httpPort: o.httpPort,
    ...(o.ipv6Prefix ? { ipv6Prefix: o.ipv6Prefix } : {}),
    runDir: pxeDirOf(s.site),
    ...(o.tftpRoot ? { tftpRoot: o.tftpRoot } : {}),
    filesDir: files.dir,
    kernel: files.kernel,
    initrd: files.initrd,
    kernelArgs: o.kernelArgs?.length ? o.kernelArgs : LAB_KERNEL_ARGS,
    onReport,
    events: s.events,
  });
}

/** The ramdisk of `ramdiskDir` as the boot server serves it (no copy: the folder itself). */
export function ramdiskFiles(ramdiskDir: string): BootFiles {
  const m = readRamdiskManifest(ramdiskDir);
  return { dir: ramdiskDir, kernel: m.kernel, initrd: m.initrd };
}

/**
 * The agent files a ramdisk was built from differ from those stackctl ships:
 * the nodes would run an older agent. Resolves to the names that differ
 * (cheap: hashes of a few small files, no apt query).
 */
export function staleRamdiskFiles(ramdiskDir: string, sourceDir = defaultRamdiskSourceDir()): string[] {
  let built: Record<string, string> = {};
  try {
    const m = JSON.parse(readFileSync(join(ramdiskDir, 'ramdisk.json'), 'utf8')) as {
      inputs?: { files?: Record<string, string> };
    };
    built = m.inputs?.files ?? {};
  } catch {
    return [];
  }
  return Object.keys(RAMDISK_FILES).filter((name) => {
    const f = join(sourceDir, name);
    return existsSync(f) && built[name] !== sha256(readFileSync(f, 'utf8'));
  });
}

/** Link (or copy) a file into the boot files folder unless an equal-sized one is there. */
function place(src: string, dir: string, name: string): void {
  const dest = join(dir, name);
  if (existsSync(dest) && statSync(dest).size === statSync(src).size) return;
  rmSync(dest, { force: true });
  try {
    linkSync(src, dest);
  } catch {
    copyFileSync(src, dest);
  }
}

/**
 * Put the ramdisk's kernel and initramfs (of `ramdiskDir`) and the host image
 * (of `imageDir`) into the boot server's folder (links, or one copy each):
 * the inspection and the deploy of a run share it.
 */
export function stageBootFiles(
  s: Pick<NodeSession, 'site'>,
  dirs: { readonly ramdiskDir: string; readonly imageDir: string },
): StagedBootFiles {
  const { ramdiskDir, imageDir } = dirs;
  const ramdisk = readRamdiskManifest(ramdiskDir);
  const manifest = readHostManifest(imageDir);
  if (!manifest) {
    throw new IoError('E_IMAGE_MISSING', `no host image in ${imageDir} (${HOST_OUTPUTS.manifest} is missing)`, {
      hint: `Build it: stackctl images build host --out ${imageDir}`,
    });
  }
  const files = join(pxeDirOf(s.site), 'files');
  mkdirSync(files, { recursive: true, mode: 0o755 });
  place(join(ramdiskDir, ramdisk.kernel), files, ramdisk.kernel);
  place(join(ramdiskDir, ramdisk.initrd), files, ramdisk.initrd);
  const image = stageImage(files, {
    path: join(imageDir, HOST_OUTPUTS.image),
    sha256: manifest.image.sha256,
    rawBytes: manifest.raw.size,
  });
  return { files: { dir: files, kernel: ramdisk.kernel, initrd: ramdisk.initrd }, image };
}
