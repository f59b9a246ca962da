/**
 * The guest image: what the cloud's first servers boot. Debian's kernel and a
 * busybox initramfs (images/guest/), built like the deploy ramdisk
 * (`buildBootImage`, cached by the hash of its inputs) and uploaded to Glance
 * at the end of a deploy as three images: the kernel, the initramfs (both
 * raw: docs/images.md says why not aki/ari) and a small raw root disk that names both (`kernel_id`,
 * `ramdisk_id`, `os_command_line`). Nova's libvirt driver boots such a server
 * straight from the kernel and initramfs; the root disk is there because Nova
 * gives every server one, and the guest never reads it.
 *
 * Under QEMU TCG it boots in seconds: no firmware boot loader, no root file
 * system to mount, no systemd.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { InputError } from '../core/errors.js';
import { sha256 } from '../core/hash.js';
import { packageRoot } from '../core/paths.js';
import {
  buildBootImage,
  type BootImagePackage,
  type BootImageRecipe,
  type RamdiskBuild,
  type RamdiskOptions,
} from './ramdisk.js';

/**
 * The kernel package, named exactly (a meta package would follow every security update and a
 * glob would download every kernel). Debian bookworm's 6.1 kernel, ABI 56.
 */
export const GUEST_KERNEL_PACKAGE = 'linux-image-6.1.0-56-amd64';

/**
 * Modules the guest's /init loads, in order, with their parameters. virtio_net's `csum=0`: the
 * NIC offers no checksum offload, so the guest computes transmit checksums itself (a userspace
 * Open vSwitch datapath drops TCP left to an offload: LAB-FACTS 9, trap B).
 */
export const GUEST_MODULES = [
  'virtio_ring',
  'virtio',
  'virtio_pci_legacy_dev',
  'virtio_pci_modern_dev',
  'virtio_pci',
  'failover',
  'net_failover',
  'virtio_net csum=0',
] as const;

/** Files of `images/guest/` and where they go in the initramfs. */
export const GUEST_FILES = {
  init: '/init',
  'udhcpc.script': '/usr/share/udhcpc/default.script',
  'state.cgi': '/srv/www/cgi-bin/state',
} as const;

/** Names of the build's outputs. */
export const GUEST_OUTPUTS = {
  kernel: 'vmlinuz',
  initrd: 'initrd.gz',
  manifest: 'guest.json',
} as const;

/** The kernel command line of the guest: the serial console (Nova's console log) and little else. */
export const GUEST_CMDLINE = 'console=ttyS0 quiet';

/** The line the guest prints once root's SSH key from the metadata service is in place. */
export const GUEST_SSH_KEY_MARKER = 'stackctl-guest: ssh key';

/** The line the guest prints on its console once it serves. */
export const GUEST_READY_MARKER = 'stackctl-guest: ready';

/** Size of the raw root disk uploaded beside the kernel and initramfs (zeros; never read). */
export const GUEST_ROOT_DISK_BYTES = 1024 * 1024;

/**
 * Where dropbear finds its libraries (/init sets LD_LIBRARY_PATH for it alone): not a folder the
 * loader searches by default, where static busybox's glibc would load this libc.so.6 for name
 * lookups and crash (wget did).
 */
const GUEST_LIB = '/usr/local/lib/dropbear';

/**
 * The SSH server (dropbear with its libraries: some 2 MB of the compressed initramfs) from
 * Debian's packages: /init makes an ed25519 host key at boot and takes root's authorized key and
 * the hostname from the metadata service. Each shared library is named by its soname link
 * (followed to the file it names).
 */
export const GUEST_PACKAGES: readonly BootImagePackage[] = [
  {
    package: 'dropbear-bin',
    files: { 'usr/sbin/dropbear': '/usr/sbin/dropbear', 'usr/bin/dropbearkey': '/usr/bin/dropbearkey' },
  },
  {
    package: 'libc6',
    files: {
      // the program interpreter dropbear names (the package's /lib64 link is absolute)
      'lib/x86_64-linux-gnu/ld-linux-x86-64.so.2': '/lib64/ld-linux-x86-64.so.2',
      'lib/x86_64-linux-gnu/libc.so.6': `${GUEST_LIB}/libc.so.6`,
    },
  },
  { package: 'libcrypt1', files: { 'lib/x86_64-linux-gnu/libcrypt.so.1': `${GUEST_LIB}/libcrypt.so.1` } },
  { package: 'zlib1g', files: { 'lib/x86_64-linux-gnu/libz.so.1': `${GUEST_LIB}/libz.so.1` } },
  {
    package: 'libtomcrypt1',
    files: { 'usr/lib/x86_64-linux-gnu/libtomcrypt.so.1': `${GUEST_LIB}/libtomcrypt.so.1` },
  },
  {
    package: 'libtommath1',
    files: { 'usr/lib/x86_64-linux-gnu/libtommath.so.1': `${GUEST_LIB}/libtommath.so.1` },
  },
  { package: 'libgmp10', files: { 'usr/lib/x86_64-linux-gnu/libgmp.so.10': `${GUEST_LIB}/libgmp.so.10` } },
];

/** The guest image's recipe. */
export const GUEST_RECIPE: BootImageRecipe = {
  label: 'guest image',
  version: 2,
  files: GUEST_FILES,
  links: { '/etc/udhcpc/default.script': GUEST_FILES['udhcpc.script'] },
  outputs: GUEST_OUTPUTS,
  packages: GUEST_PACKAGES,
};

/** Default folder of the guest's files. */
export const defaultGuestSourceDir = (): string => join(packageRoot(), 'images', 'guest');

/** Build the guest image into `outDir` (or find it built); the kernel package is the pinned one unless given. */
export function buildGuestImage(options: RamdiskOptions): Promise<RamdiskBuild> {
  return buildBootImage(GUEST_RECIPE, {
    kernelPackage: GUEST_KERNEL_PACKAGE,
    modules: GUEST_MODULES,
    sourceDir: defaultGuestSourceDir(),
    ...options,
  });
}

/** A built guest image as the deploy uploads it. */
export interface GuestImage {
  /** The files' contents, read once and checked against the build's manifest. */
  readonly kernel: Buffer;
  readonly initrd: Buffer;
  readonly kernelSha256: string;
  readonly initrdSha256: string;
  /** The kernel package and version (image properties, for people). */
  readonly kernelPackage: string;
  readonly kernelVersion: string;
  readonly cmdline: string;
}

interface GuestManifest {
  readonly inputs: { readonly kernel: { readonly package: string; readonly version: string } };
  readonly kernel: { readonly name: string; readonly sha256: string };
  readonly initrd: { readonly name: string; readonly sha256: string };
}

/**
 * Read a built guest image from `dir` and check each file against the digest its build recorded:
 * a missing build or a file that changed since is refused before anything is uploaded.
 */
export function loadGuestImage(dir: string): GuestImage {
  let m: GuestManifest;
  try {
    m = JSON.parse(readFileSync(join(dir, GUEST_OUTPUTS.manifest), 'utf8')) as GuestManifest;
  } catch (e) {
    throw new InputError('E_GUEST_IMAGE_MISSING', `no guest image built in ${dir}`, {
      hint: `Build it with 'stackctl images build guest --out ${dir}' (or give the deploy --guest-image DIR).`,
      cause: e,
    });
  }
  const read = (f: GuestManifest['kernel']): Buffer => {
    const path = join(dir, f.name);
    let data: Buffer;
    try {
      data = readFileSync(path);
    } catch (e) {
      throw new InputError('E_GUEST_IMAGE_MISSING', `the guest image file ${path} is missing`, {
        hint: `Build it again: stackctl images build guest --out ${dir}.`,
        cause: e,
      });
    }
    const sum = sha256(data);
    if (sum !== f.sha256) {
      throw new InputError(
        'E_GUEST_IMAGE_CHECKSUM',
        `the guest image file ${path} has sha256 ${sum}, not the ${f.sha256} its build recorded`,
        {
          hint: `The file changed after it was built: build it again (stackctl images build guest --out ${dir} --force).`,
        },
      );
    }
    return data;
  };
  return {
    kernel: read(m.kernel),
    initrd: read(m.initrd),
    kernelSha256: m.kernel.sha256,
    initrdSha256: m.initrd.sha256,
    kernelPackage: m.inputs.kernel.package,
    kernelVersion: m.inputs.kernel.version,
    cmdline: GUEST_CMDLINE,
  };
}
