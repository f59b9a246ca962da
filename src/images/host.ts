/**
 * The host OS image: a Debian root file system made by debootstrap, turned
 * into a bootable whole-disk raw image (msdos partition table, one ext4
 * partition from 1 MiB, GRUB for BIOS in the MBR gap) without loop devices
 * or mounts, then gzip-compressed for serving (the deploy ramdisk's busybox
 * decompresses LZO, and LZO decompresses some three times faster than gzip,
 * which matters in a ramdisk under emulation) with its SHA-256 written beside it.
 *
 * The recipe, in order:
 *   debootstrap --variant=minbase --include=<packages> <suite>
 *   files/ copied over the tree; identity removed (machine-id emptied, SSH host keys deleted)
 *   initramfs regenerated with MODULES=list (the definition's modules only)
 *   sfdisk + `mke2fs -d` (the tree goes straight into the partition, by byte offset)
 *   grub-mkimage -O i386-pc: boot.img into the MBR, core.img from sector 1
 *   busybox lzop -> host.img.lzo + host.img.lzo.sha256 + host.json (the manifest, written last)
 *
 * The result is cached by a hash of its inputs (definition, files, mirrors,
 * recipe), so a rebuild with nothing changed only reads a few small files.
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  createReadStream,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { createHash } from 'node:crypto';
import { join, relative } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { InputError, IoError, RemoteError, UsageError, ValidationFailed } from '../core/errors.js';
import { readTextFile, writeFileAtomic } from '../core/fs.js';
import { canonicalJson, sha256 } from '../core/hash.js';
import { packageRoot } from '../core/paths.js';
import { checkSchema } from '../core/schema.js';
import { parseYaml } from '../core/yaml.js';
import { runCommand, type CommandResult, type RunCommand } from './ramdisk.js';
import { findMirrors, type Mirrors } from './rootfs.js';

/** Bump when the recipe below changes in a way that must rebuild every host image. */
const RECIPE_VERSION = 2;

/** The definition file (`images/host/host.yaml`). */
/** One word of a kernel command line as the image definition and `--kernel-arg` accept it. */
export const KERNEL_ARG_PATTERN = '^[A-Za-z0-9_.,=:/-]+$';

/**
 * What a lab adds to the host image's command line (`images build host --kernel-arg`): no crypto
 * self-tests. Under QEMU's TCG a deployed node's first boot sat over 260 s in the kernel's
 * `cryptomgr_test` ("soft lockup") and missed its SSH deadline; on hardware the tests take
 * milliseconds, so the image the definition describes keeps them.
 */
export const TCG_HOST_KERNEL_ARGS: readonly string[] = ['cryptomgr.notests'];

export const HostDefinitionSchema = Type.Object(
  {
    suite: Type.String({ pattern: '^[a-z]+$', description: 'Debian suite given to debootstrap' }),
    packages: Type.Array(Type.String({ pattern: '^[a-z0-9][a-z0-9.+-]+$' }), {
      minItems: 1,
      description: 'packages debootstrap installs on top of minbase',
    }),
    drop_modules: Type.Array(Type.String({ pattern: '^[a-z0-9_][a-z0-9_/-]*$' }), {
      description: 'folders under /usr/lib/modules/<release>/kernel/ left out of the image',
    }),
    free_mib: Type.Integer({ minimum: 64, description: 'free space left in the image root file system' }),
    initramfs_modules: Type.Array(Type.String({ pattern: '^[A-Za-z0-9_-]+$' }), {
      minItems: 1,
      description: 'kernel modules of the image initramfs (MODULES=list)',
    }),
    kernel_args: Type.Array(Type.String({ pattern: KERNEL_ARG_PATTERN }), {
      description: 'kernel command line after root=',
    }),
  },
  { additionalProperties: false, description: 'the host OS image definition' },
);
export type HostDefinition = Static<typeof HostDefinitionSchema>;

/** Names of the build's outputs in the output folder. */
export const HOST_OUTPUTS = {
  /** Compressed raw image (LZO): what the boot server serves and the agent writes. */
  image: 'host.img.lzo',
  /** `<sha256>  host.img.lzo`, the checksum the agent must find before the node may boot the image. */
  sha256: 'host.img.lzo.sha256',
  /** What was built from what; the cache key lives here. Written last. */
  manifest: 'host.json',
} as const;

/** Host tools the build runs, and the Debian package of each (for the error hint). */
export const HOST_BUILD_TOOLS: Readonly<Record<string, string>> = {
  debootstrap: 'debootstrap',
  sfdisk: 'fdisk',
  mke2fs: 'e2fsprogs',
  'grub-mkimage': 'grub-pc-bin',
  // the same lzop as the ramdisk's: what one writes, the other reads
  busybox: 'busybox-static',
  chroot: 'coreutils',
};

/** Where GRUB's BIOS files live (Debian grub-pc-bin). */
const GRUB_DIR = '/usr/lib/grub/i386-pc';

/** GRUB modules built into core.img: enough to find the root partition by label and boot Linux. */
const GRUB_MODULES = [
  'biosdisk',
  'part_msdos',
  'ext2',
  'search',
  'search_label',
  'normal',
  'configfile',
  'linux',
  'serial',
  'terminal',
  'echo',
  'test',
  'gzio',
] as const;

/** Partition start: 1 MiB, which leaves the MBR gap for GRUB's core.img. */
const PART_OFFSET = 1024 * 1024;

/** The ext4 label of the root partition (GRUB finds it by this label). */
export const ROOT_LABEL = 'stackctl-root';

/** Default folder of the definition (images/host shipped with stackctl). */
export const defaultHostSourceDir = (): string => join(packageRoot(), 'images', 'host');

/** The inputs of a build; their hash is the cache key. */
export interface HostInputs {
  readonly recipe: number;
  readonly definition: HostDefinition;
  /** sha256 of each file under files/, by relative path. */
  readonly files: Readonly<Record<string, string>>;
  readonly mirrors: Mirrors;
  /** Kernel arguments after the definition's (`--kernel-arg`); absent when none. */
  readonly extraKernelArgs?: readonly string[];
}

/** The manifest (host.json): recorded next to the image. */
export interface HostManifest {
  readonly inputsHash: string;
  readonly inputs: HostInputs;
  /** The compressed image. */
  readonly image: { readonly name: string; readonly size: number; readonly sha256: string };
  /** The raw disk image inside it. */
  readonly raw: { readonly size: number; readonly sha256: string };
  readonly kernel: string;
  readonly rootUuid: string;
  /** `package version` of every installed package, sorted. */
  readonly packages: readonly string[];
  readonly builtAt: string;
  readonly buildSeconds: number;
}

/** What a build produced (or found in the cache). */
export interface HostBuild {
  readonly manifest: HostManifest;
  /** Absolute path of the compressed image. */
  readonly imagePath: string;
  readonly cached: boolean;
  readonly elapsedMs: number;
}

/** Options of `buildHostImage`. */
export interface HostBuildOptions {
  /** Receives host.img.gz, its .sha256 and host.json; created when missing. */
  readonly outDir: string;
  /** Folder with host.yaml and files/ (default: images/host shipped with stackctl). */
  readonly sourceDir?: string;
  readonly mirrors?: Mirrors;
  readonly force?: boolean;
  readonly run?: RunCommand;
  readonly log?: (line: string) => void;
  readonly now?: () => number;
  /** Appended to the definition's kernel_args (a lab's, e.g. TCG_HOST_KERNEL_ARGS); part of the inputs' hash. */
  readonly extraKernelArgs?: readonly string[];
}

/** Read and check the definition; every fault at once. */
export function loadHostDefinition(sourceDir: string): HostDefinition {
  const file = join(sourceDir, 'host.yaml');
  const source = parseYaml(file, readTextFile(file, 1024 * 1024));
  if (source.issues.some((i) => i.severity === 'error')) throw new ValidationFailed(file, source.issues);
  const { value, issues } = checkSchema(HostDefinitionSchema, source);
  if (!value) throw new ValidationFailed(file, issues);
  return value;
}

/** Every regular file and symlink under `dir`, by path relative to it. */
function listFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

/** The inputs and their hash, computed without building anything. */
export function hostInputs(
  sourceDir: string,
  mirrors: Mirrors,
  extraKernelArgs: readonly string[] = [],
): { inputs: HostInputs; inputsHash: string } {
  const definition = loadHostDefinition(sourceDir);
  const filesDir = join(sourceDir, 'files');
  const files = Object.fromEntries(listFiles(filesDir).map((f) => [f, sha256(readFileSync(join(filesDir, f)))]));
  const bad = extraKernelArgs.find((a) => !new RegExp(KERNEL_ARG_PATTERN).test(a));
  if (bad !== undefined) {
    throw new UsageError('E_OPTION', `--kernel-arg must be one word of letters, digits and _.,=:/-, not '${bad}'`, {
      hint: 'Give each kernel argument its own --kernel-arg, e.g. --kernel-arg cryptomgr.notests.',
    });
  }
  // without extra arguments the inputs (and their hash) are those of the definition alone
  const inputs: HostInputs = {
    recipe: RECIPE_VERSION,
    definition,
    files,
    mirrors,
    ...(extraKernelArgs.length ? { extraKernelArgs: [...extraKernelArgs] } : {}),
  };
  return { inputs, inputsHash: sha256(canonicalJson(inputs)) };
}

/** The manifest of the image in `outDir`, when one was built there. */
export function readHostManifest(outDir: string): HostManifest | undefined {
  try {
    const m = JSON.parse(readFileSync(join(outDir, HOST_OUTPUTS.manifest), 'utf8')) as HostManifest;
    return typeof m.inputsHash === 'string' && typeof m.image?.sha256 === 'string' ? m : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Build the host image into `outDir`, or return the cached one when its
 * inputs did not change. The outputs are replaced by rename and the manifest
 * goes last, so an interrupted build is never taken for a finished one.
 */
export async function buildHostImage(options: HostBuildOptions): Promise<HostBuild> {
  const now = options.now ?? Date.now;
  const started = now();
  const run = options.run ?? runCommand;
  const log = options.log ?? (() => undefined);
  const sourceDir = options.sourceDir ?? defaultHostSourceDir();
  const outDir = options.outDir;
  const mirrors = options.mirrors ?? findMirrors();
  const { inputs, inputsHash } = hostInputs(sourceDir, mirrors, options.extraKernelArgs);
  mkdirSync(outDir, { recursive: true });

  const previous = readHostManifest(outDir);
  const imagePath = join(outDir, HOST_OUTPUTS.image);
  if (!options.force && previous?.inputsHash === inputsHash && sizeOf(imagePath) === previous.image.size) {
    log(`host image up to date (${inputsHash.slice(0, 12)})`);
    return { manifest: previous, imagePath, cached: true, elapsedMs: now() - started };
  }
  await requireTools(run);

  const def = inputs.definition;
  const work = mkdtempSync(join(outDir, '.build-'));
  try {
    const root = join(work, 'rootfs');
    log(`debootstrap ${def.suite} from ${mirrors.archive} with ${def.packages.length} packages`);
    await must(run, [
      'debootstrap',
      '--variant=minbase',
      `--include=${def.packages.join(',')}`,
      def.suite,
      root,
      mirrors.archive,
    ]);
    const kernel = installedKernel(root);
    const rootUuid = randomUUID();
    log(`configuring the tree (kernel ${kernel})`);
    configureTree(root, { def, mirrors, sourceDir, rootUuid });
    for (const d of def.drop_modules)
      rmSync(join(root, 'usr/lib/modules', kernel, 'kernel', d), { recursive: true, force: true });
    await must(run, ['chroot', root, 'depmod', kernel]);
    await must(run, ['chroot', root, 'systemctl', 'enable', 'systemd-networkd', 'stackctl-hostkeys.service']);
    log(`initramfs with ${def.initramfs_modules.length} modules`);
    await must(run, ['chroot', root, 'update-initramfs', '-u', '-k', kernel]);
    const packages = (await must(run, ['chroot', root, 'dpkg-query', '-W', '-f', '${Package} ${Version}\\n'])).stdout
      .split('\n')
      .filter(Boolean)
      .sort();
    writeGrubConfig(root, { kernel, rootUuid, args: [...def.kernel_args, ...(inputs.extraKernelArgs ?? [])] });
    // what the image does not need once built: downloaded packages and apt's lists
    for (const d of ['var/cache/apt/archives', 'var/lib/apt/lists']) emptyDir(join(root, d), ['lock', 'partial']);
    emptyDir(join(root, 'tmp'), []);

    const used = await treeBytes(run, root);
    // ext4 metadata (inode tables, journal) takes a few per cent on top of the files
    const fsBytes = roundUp(Math.ceil(used * 1.08) + def.free_mib * 1024 * 1024, 64 * 1024 * 1024);
    const raw = join(work, 'host.img');
    log(`disk image: ${Math.round(used / 1048576)} MiB used, file system ${fsBytes / 1048576} MiB`);
    await writeDiskImage(run, raw, { root, fsBytes, rootUuid, work });
    rmSync(root, { recursive: true, force: true });

    const rawSize = statSync(raw).size;
    const rawSum = await fileSha256(raw);
    log('compressing (lzop)');
    const gz = join(work, HOST_OUTPUTS.image);
    await must(run, ['sh', '-c', 'busybox lzop -c "$0" > "$1"', raw, gz]);
    const gzSum = await fileSha256(gz);
    const gzSize = statSync(gz).size;
    chmodSync(gz, 0o644);
    renameSync(gz, imagePath);
    writeFileAtomic(join(outDir, HOST_OUTPUTS.sha256), `${gzSum}  ${HOST_OUTPUTS.image}\n`);
    const elapsedMs = now() - started;
    const manifest: HostManifest = {
      inputsHash,
      inputs,
      image: { name: HOST_OUTPUTS.image, size: gzSize, sha256: gzSum },
      raw: { size: rawSize, sha256: rawSum },
      kernel,
      rootUuid,
      packages,
      builtAt: new Date(now()).toISOString(),
      buildSeconds: Math.round(elapsedMs / 100) / 10,
    };
    writeFileAtomic(join(outDir, HOST_OUTPUTS.manifest), JSON.stringify(manifest, null, 2) + '\n');
    log(
      `host image built in ${(elapsedMs / 1000).toFixed(1)} s: raw ${Math.round(rawSize / 1048576)} MiB, ` +
        `lzo ${Math.round(gzSize / 1048576)} MiB`,
    );
    return { manifest, imagePath, cached: false, elapsedMs };
  } finally {
    removeBuildFolder(work);
  }
}

/* ------------------------------------------------------------------------ */

/**
 * Remove the build folder, unmounting first what debootstrap may have left
 * mounted in the tree (proc, sys) when it failed: a recursive delete must
 * never walk into a mounted file system.
 */
function removeBuildFolder(work: string): void {
  let mounts: string[] = [];
  try {
    mounts = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .map((l) => (l.split(' ')[1] ?? '').replace(/\\040/g, ' '))
      .filter((m) => m === work || m.startsWith(work + '/'))
      .sort((a, b) => b.length - a.length);
  } catch {
    // no /proc/mounts: nothing was mounted by us either
  }
  for (const m of mounts) spawnSync('umount', ['-l', m]);
  if (mounts.length && readFileSync('/proc/mounts', 'utf8').includes(` ${work}/`)) {
    throw new IoError('E_HOST_IMAGE_MOUNTS', `file systems are still mounted under ${work}: not removing it`, {
      hint: `Unmount them (grep ${work} /proc/mounts), then remove the folder.`,
    });
  }
  rmSync(work, { recursive: true, force: true });
}

async function must(run: RunCommand, argv: readonly string[]): Promise<CommandResult> {
  const r = await run(argv);
  if (r.exitCode !== 0) {
    const tail = (r.stderr.trim() || r.stdout.trim()).split('\n').slice(-4).join(' / ');
    throw new RemoteError('E_HOST_IMAGE_STEP', `${argv[0]} failed (status ${r.exitCode}): ${tail}`, {
      hint: `Run the step by hand to see its whole output: ${argv.join(' ')}`,
      details: { argv: argv.join(' ') },
    });
  }
  return r;
}

async function requireTools(run: RunCommand): Promise<void> {
  const missing: string[] = [];
  for (const tool of Object.keys(HOST_BUILD_TOOLS)) {
    const r = await run(['sh', '-c', 'command -v "$0"', tool]);
    if (r.exitCode !== 0) missing.push(tool);
  }
  if (!existsSync(join(GRUB_DIR, 'boot.img')) && !missing.includes('grub-mkimage')) missing.push('grub-mkimage');
  if (missing.length) {
    const pkgs = [...new Set(missing.map((t) => HOST_BUILD_TOOLS[t]))];
    throw new IoError('E_HOST_IMAGE_TOOLS', `the host image build needs ${missing.join(', ')}`, {
      hint: `Install them: apt-get install ${pkgs.join(' ')}`,
      details: { missing },
    });
  }
}

function sizeOf(file: string): number | undefined {
  try {
    return statSync(file).size;
  } catch {
    return undefined;
  }
}

function roundUp(n: number, step: number): number {
  return Math.ceil(n / step) * step;
}

async function fileSha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file, { highWaterMark: 4 * 1024 * 1024 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** The one kernel release installed in the tree (`/boot/vmlinuz-<release>`). */
function installedKernel(root: string): string {
  const kernels = readdirSync(join(root, 'boot'))
    .filter((f) => f.startsWith('vmlinuz-'))
    .map((f) => f.slice('vmlinuz-'.length));
  if (kernels.length !== 1) {
    throw new InputError('E_HOST_IMAGE_KERNEL', `the image holds ${kernels.length} kernels (${kernels.join(', ')})`, {
      hint: 'List exactly one kernel package (linux-image-amd64) in images/host/host.yaml.',
    });
  }
  return kernels[0]!;
}

/** Empty a folder, keeping the named entries. */
function emptyDir(dir: string, keep: readonly string[]): void {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir)) if (!keep.includes(e)) rmSync(join(dir, e), { recursive: true, force: true });
}

/** Copy files/ over the tree, then remove what must differ per node and write fstab, apt and initramfs settings. */
function configureTree(
  root: string,
  s: { def: HostDefinition; mirrors: Mirrors; sourceDir: string; rootUuid: string },
): void {
  const filesDir = join(s.sourceDir, 'files');
  for (const f of listFiles(filesDir)) {
    const dest = join(root, f);
    mkdirSync(join(dest, '..'), { recursive: true });
    if (existsSync(dest) || isSymlink(dest)) unlinkSync(dest);
    const src = join(filesDir, f);
    const st = lstatSync(src);
    if (st.isSymbolicLink()) symlinkSync(readFileSync(src, 'utf8'), dest);
    else copyFileSync(src, dest);
  }
  // identity: every node gets its own machine-id at first boot, and SSH host keys from the deploy
  writeFileSync(join(root, 'etc/machine-id'), '');
  rmSync(join(root, 'var/lib/dbus/machine-id'), { force: true });
  for (const f of readdirSync(join(root, 'etc/ssh'))) {
    if (/^ssh_host_.*_key(\.pub)?$/.test(f)) unlinkSync(join(root, 'etc/ssh', f));
  }
  writeFileSync(join(root, 'etc/hostname'), 'localhost\n');
  writeFileSync(
    join(root, 'etc/fstab'),
    `# the deploy stretches the partition to the end of the disk; x-systemd.growfs grows the file system at boot\n` +
      `UUID=${s.rootUuid} / ext4 errors=remount-ro,x-systemd.growfs 0 1\n`,
  );
  const lines = [
    `deb ${s.mirrors.archive} ${s.def.suite} main`,
    `deb ${s.mirrors.archive} ${s.def.suite}-updates main`,
  ];
  if (s.mirrors.security) lines.push(`deb ${s.mirrors.security} ${s.def.suite}-security main`);
  writeFileSync(join(root, 'etc/apt/sources.list'), lines.join('\n') + '\n');
  writeFileSync(
    join(root, 'etc/initramfs-tools/conf.d/stackctl'),
    '# written by the stackctl host image build\nMODULES=list\nCOMPRESS=gzip\n',
  );
  writeFileSync(join(root, 'etc/initramfs-tools/modules'), s.def.initramfs_modules.join('\n') + '\n');
}

function isSymlink(p: string): boolean {
  try {
    return lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

/** A fixed GRUB menu: no os-prober, no update-grub, boots the one kernel at once. */
function writeGrubConfig(root: string, s: { kernel: string; rootUuid: string; args: readonly string[] }): void {
  const dir = join(root, 'boot/grub');
  mkdirSync(join(dir, 'i386-pc'), { recursive: true });
  // normal mode loads more modules from the prefix on demand
  for (const f of readdirSync(GRUB_DIR)) {
    if (f.endsWith('.mod') || f.endsWith('.lst')) copyFileSync(join(GRUB_DIR, f), join(dir, 'i386-pc', f));
  }
  writeFileSync(
    join(dir, 'grub.cfg'),
    [
      '# written by the stackctl host image build',
      'serial --unit=0 --speed=115200',
      'terminal_input serial console',
      'terminal_output serial console',
      'set timeout=0',
      `linux /boot/vmlinuz-${s.kernel} root=UUID=${s.rootUuid} ro ${s.args.join(' ')}`,
      `initrd /boot/initrd.img-${s.kernel}`,
      'boot',
      '',
    ].join('\n'),
  );
}

/** Bytes the tree takes (du, apparent sizes of files plus their blocks). */
async function treeBytes(run: RunCommand, root: string): Promise<number> {
  const r = await must(run, ['du', '-s', '-B1', '-x', root]);
  return Number(r.stdout.split(/\s/)[0]);
}

/**
 * Partition table, ext4 file system and boot loader, written into a file:
 * no loop device, no mount. `mke2fs -d` copies the tree into the file system
 * at the partition's byte offset.
 */
async function writeDiskImage(
  run: RunCommand,
  raw: string,
  s: { root: string; fsBytes: number; rootUuid: string; work: string },
): Promise<void> {
  const total = PART_OFFSET + s.fsBytes;
  await must(run, ['truncate', '-s', String(total), raw]);
  await must(run, [
    'sh',
    '-c',
    'printf "label: dos\\nstart=2048, type=83, bootable\\n" | sfdisk --quiet --no-reread --no-tell-kernel "$0"',
    raw,
  ]);
  await must(run, [
    'mke2fs',
    '-q',
    '-F',
    '-t',
    'ext4',
    '-L',
    ROOT_LABEL,
    '-U',
    s.rootUuid,
    '-E',
    `offset=${PART_OFFSET}`,
    '-d',
    s.root,
    raw,
    `${s.fsBytes / 1024}k`,
  ]);
  const early = join(s.work, 'early.cfg');
  writeFileSync(early, `search --no-floppy --label --set=root ${ROOT_LABEL}\nset prefix=($root)/boot/grub\n`);
  const core = join(s.work, 'core.img');
  await must(run, [
    'grub-mkimage',
    '-O',
    'i386-pc',
    '-d',
    GRUB_DIR,
    '-c',
    early,
    '-p',
    '/boot/grub',
    '-o',
    core,
    ...GRUB_MODULES,
  ]);
  const coreSize = statSync(core).size;
  if (coreSize > PART_OFFSET - 512) {
    throw new IoError('E_HOST_IMAGE_GRUB', `GRUB core image is ${coreSize} bytes: it does not fit before 1 MiB`, {
      hint: 'Trim GRUB_MODULES in src/images/host.ts.',
    });
  }
  // boot.img's first 440 bytes (the partition table that follows stays), then core.img from sector 1
  await must(run, ['dd', `if=${join(GRUB_DIR, 'boot.img')}`, `of=${raw}`, 'bs=440', 'count=1', 'conv=notrunc']);
  await must(run, ['dd', `if=${core}`, `of=${raw}`, 'bs=512', 'seek=1', 'conv=notrunc']);
}
