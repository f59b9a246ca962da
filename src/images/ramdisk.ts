/**
 * The deploy ramdisk: Debian's kernel and a small initramfs built here
 * (busybox-static, the virtio drivers from the same kernel package, the
 * agent of `images/ramdisk/`). The nodes boot it over the network to report
 * their hardware and, later, to have their OS image written.
 *
 * Both Debian packages are fetched with `apt-get download` (the machine's
 * apt sources and keys; nothing gets installed) and unpacked with
 * `dpkg-deb -x`. The result is cached by a hash of its inputs (package
 * versions, module list, agent files, recipe), so a rebuild with nothing
 * changed only asks apt-cache for two versions.
 */
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
} from 'node:fs';
import { chmodSync, lstatSync, realpathSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { gzipSync } from 'node:zlib';
import { $ } from 'zx';
import { InputError, IoError, RemoteError } from '../core/errors.js';
import { writeFileAtomic } from '../core/fs.js';
import { canonicalJson, sha256 } from '../core/hash.js';
import { packageRoot } from '../core/paths.js';

/** Bump when the recipe below changes in a way that must rebuild every ramdisk. */
const RECIPE_VERSION = 1;

/**
 * Kernel modules loaded by /init, in this order (each after what it needs:
 * insmod does not resolve dependencies). Debian builds these as modules,
 * so without them the ramdisk sees neither NIC nor disk in a VM. Real
 * hardware needs its own NIC and storage drivers added here.
 */
export const RAMDISK_MODULES = [
  'virtio_ring',
  'virtio',
  'virtio_pci_legacy_dev',
  'virtio_pci_modern_dev',
  'virtio_pci',
  // virtio_net's standby (failover) support needs these two
  'failover',
  'net_failover',
  'virtio_net',
  'virtio_blk',
  // ext4, to write the node's hostname, network and keys into the deployed root file system;
  // crc32c first: ext4 and jbd2 ask the crypto API for it and the ramdisk has no modprobe to load it then
  'crc16',
  'mbcache',
  'crc32c_generic',
  'jbd2',
  'ext4',
] as const;

/** Files of `images/ramdisk/` and where they go in the initramfs. */
export const RAMDISK_FILES = {
  init: '/init',
  'agent.sh': '/usr/sbin/stackctl-agent',
  // NOTE: Debian's busybox looks for /etc/udhcpc/default.script; the agent passes -s with this path
  'udhcpc.script': '/usr/share/udhcpc/default.script',
} as const;

/** Names of the build's outputs in the output folder. */
export const RAMDISK_OUTPUTS = {
  kernel: 'vmlinuz',
  initrd: 'initrd.gz',
  /** What was built from what; the cache key lives here. */
  manifest: 'ramdisk.json',
} as const;

/** Debian packages the build downloads. */
export const RAMDISK_PACKAGES = {
  /** Meta package; the build resolves the versioned kernel package it depends on. */
  kernel: 'linux-image-amd64',
  busybox: 'busybox-static',
} as const;

/**
 * What distinguishes one kernel + busybox initramfs image from another: the
 * deploy ramdisk and the guest image share the build below.
 */
export interface BootImageRecipe {
  /** Names the image in log lines: `ramdisk`, `guest image`. */
  readonly label: string;
  /** Bump when the recipe changes in a way that must rebuild every image of it. */
  readonly version: number;
  /** Source file name -> absolute path in the initramfs (each made executable). */
  readonly files: Readonly<Record<string, string>>;
  /** Symbolic links in the initramfs: path -> target. */
  readonly links: Readonly<Record<string, string>>;
  /** Names of the outputs in the output folder. */
  readonly outputs: { readonly kernel: string; readonly initrd: string; readonly manifest: string };
  /** Files of further Debian packages (programs beyond busybox and the libraries they load). */
  readonly packages?: readonly BootImagePackage[];
}

/** Files a boot image takes from one Debian package (downloaded and unpacked, never installed). */
export interface BootImagePackage {
  readonly package: string;
  /**
   * Path inside the package (no leading slash) -> absolute path in the initramfs. A symbolic link
   * is followed to the file it names inside the package.
   */
  readonly files: Readonly<Record<string, string>>;
}

/** The deploy ramdisk's recipe. */
export const RAMDISK_RECIPE: BootImageRecipe = {
  label: 'ramdisk',
  version: RECIPE_VERSION,
  files: RAMDISK_FILES,
  // NOTE: Debian's busybox looks for /etc/udhcpc/default.script
  links: { '/etc/udhcpc/default.script': RAMDISK_FILES['udhcpc.script'] },
  outputs: RAMDISK_OUTPUTS,
};

/** What a command printed and how it ended. */
export interface CommandResult {
  readonly stdout: string;
  readonly stderr: string;
  readonly exitCode: number;
}

/** Runs a program (no shell); never throws for a non-zero status. */
export type RunCommand = (
  argv: readonly string[],
  options?: { readonly cwd?: string; readonly input?: string },
) => Promise<CommandResult>;

/** The default runner: zx, which quotes every argument. */
export const runCommand: RunCommand = async (argv, options = {}) => {
  const r = await $({
    quiet: true,
    nothrow: true,
    ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
    ...(options.input !== undefined ? { input: options.input } : {}),
  })`${argv}`;
  return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode ?? -1 };
};

/** Options of `buildRamdisk`; side effects are injectable. */
export interface RamdiskOptions {
  /** Receives vmlinuz, initrd.gz, their .sha256 files and ramdisk.json; created when missing. */
  readonly outDir: string;
  /** Downloaded .deb files, kept across builds (default `<outDir>/cache`). */
  readonly cacheDir?: string;
  /** The agent's files (default: `images/ramdisk/` shipped with stackctl). */
  readonly sourceDir?: string;
  /** Kernel package: the meta package (resolved) or a versioned `linux-image-<abi>-<flavour>`. */
  readonly kernelPackage?: string;
  /**
   * Modules loaded at boot, in order: a name, optionally followed by module parameters
   * (`virtio_net csum=0`).
   */
  readonly modules?: readonly string[];
  /** Rebuild even when the cache key matches. */
  readonly force?: boolean;
  readonly run?: RunCommand;
  /**
   * Changes whenever apt's package lists change (default: the mtime of
   * /var/lib/apt/lists). While it stays the same, the versions resolved by
   * the last build are reused: apt-cache takes about a second per query.
   */
  readonly aptStamp?: () => string;
  readonly log?: (line: string) => void;
  readonly now?: () => number;
}

/** One output file. */
export interface RamdiskFile {
  /** Absolute path. */
  readonly path: string;
  /** File name in the output folder (what the boot server serves). */
  readonly name: string;
  readonly size: number;
  readonly sha256: string;
}

/** The inputs the cache key is computed from. */
export interface RamdiskInputs {
  readonly recipe: number;
  readonly kernel: { readonly package: string; readonly version: string; readonly release: string };
  readonly busybox: { readonly package: string; readonly version: string };
  readonly modules: readonly string[];
  /** sha256 of each agent file, by name. */
  readonly files: Readonly<Record<string, string>>;
  /** The recipe's further packages and their versions (absent when it has none). */
  readonly packages?: readonly { readonly package: string; readonly version: string }[];
}

/** What a build produced (or found in the cache). */
export interface RamdiskBuild {
  readonly kernel: RamdiskFile;
  readonly initrd: RamdiskFile;
  readonly inputs: RamdiskInputs;
  /** sha256 of the canonical JSON of `inputs`. */
  readonly inputsHash: string;
  /** True when nothing had to be built. */
  readonly cached: boolean;
  readonly elapsedMs: number;
}

interface Manifest {
  readonly inputsHash: string;
  readonly inputs: RamdiskInputs;
  readonly kernel: Omit<RamdiskFile, 'path'>;
  readonly initrd: Omit<RamdiskFile, 'path'>;
  /** What was asked for and apt's stamp when the versions were resolved. */
  readonly resolved?: { readonly kernelPackage: string; readonly aptStamp: string };
}

/** The default apt stamp: apt-get update replaces files in this folder, which changes its mtime. */
export function defaultAptStamp(): string {
  try {
    return String(statSync('/var/lib/apt/lists').mtimeMs);
  } catch {
    return 'unknown';
  }
}

/** Default folder of the agent's files. */
export const defaultRamdiskSourceDir = (): string => join(packageRoot(), 'images', 'ramdisk');

/**
 * Build the deploy ramdisk into `outDir`, or return the cached one when its
 * inputs did not change. The outputs are replaced by rename, the manifest
 * last, so an interrupted build is never taken for a finished one.
 */
export async function buildRamdisk(options: RamdiskOptions): Promise<RamdiskBuild> {
  return buildBootImage(RAMDISK_RECIPE, options);
}

/** A module line of a recipe: a module name, then parameters `key=value`. */
const MODULE_LINE = /^[A-Za-z0-9_-]+( [a-z0-9_]+=[A-Za-z0-9_,.-]+)*$/;

/** The module names of module lines (their first word). */
const moduleNames = (lines: readonly string[]): string[] => lines.map((l) => l.split(' ')[0]!);

/**
 * Build a kernel + busybox initramfs image of `recipe` into `options.outDir`, or
 * return the cached one when its inputs did not change.
 */
export async function buildBootImage(recipe: BootImageRecipe, options: RamdiskOptions): Promise<RamdiskBuild> {
  const now = options.now ?? Date.now;
  const started = now();
  const run = options.run ?? runCommand;
  const log = options.log ?? (() => undefined);
  const outDir = options.outDir;
  const cacheDir = options.cacheDir ?? join(outDir, 'cache');
  const sourceDir = options.sourceDir ?? defaultRamdiskSourceDir();
  const modules = options.modules ?? RAMDISK_MODULES;
  for (const m of modules) {
    if (!MODULE_LINE.test(m)) {
      throw new InputError('E_RAMDISK_MODULE', `invalid kernel module name '${m}'`, {
        hint: 'Give module names as modprobe knows them, e.g. virtio_net, optionally followed by parameters (csum=0).',
      });
    }
  }
  mkdirSync(outDir, { recursive: true });

  const sources = readSources(sourceDir, recipe.files);
  const kernelPackage = options.kernelPackage ?? RAMDISK_PACKAGES.kernel;
  const aptStamp = (options.aptStamp ?? defaultAptStamp)();
  const outputs = recipe.outputs;
  const previous = readManifest(outDir, outputs.manifest);
  const reuse =
    previous?.resolved?.aptStamp === aptStamp &&
    previous.resolved.kernelPackage === kernelPackage &&
    aptStamp !== 'unknown';
  const [kernel, busyboxVersion] = reuse
    ? [previous.inputs.kernel, previous.inputs.busybox.version]
    : await Promise.all([resolveKernel(run, kernelPackage), packageVersion(run, RAMDISK_PACKAGES.busybox)]);
  const extras = recipe.packages ?? [];
  const packages = extras.length > 0 ? await extraVersions(run, extras, reuse ? previous.inputs : undefined) : [];
  const inputs: RamdiskInputs = {
    recipe: recipe.version,
    kernel,
    busybox: { package: RAMDISK_PACKAGES.busybox, version: busyboxVersion },
    modules: [...modules],
    files: Object.fromEntries(Object.entries(sources).map(([name, text]) => [name, sha256(text)])),
    // only with packages: the deploy ramdisk's inputs (and cache key) stay what they were
    ...(extras.length > 0 ? { packages } : {}),
  };
  const inputsHash = sha256(canonicalJson(inputs));

  const cached = options.force || !previous ? undefined : readCached(outDir, previous, inputsHash);
  if (cached && previous) {
    if (!reuse) {
      // remember that these versions are still apt's candidates, so the next check skips apt-cache
      const manifest: Manifest = { ...previous, resolved: { kernelPackage, aptStamp } };
      writeFileAtomic(join(outDir, outputs.manifest), JSON.stringify(manifest, null, 2) + '\n');
    }
    log(`${recipe.label} up to date (${inputsHash.slice(0, 12)})`);
    return { ...cached, inputs, inputsHash, cached: true, elapsedMs: now() - started };
  }

  log(`building ${recipe.label}: kernel ${kernel.package} ${kernel.version}, busybox-static ${busyboxVersion}`);
  const work = mkdtempSync(join(outDir, '.build-'));
  try {
    const parts = await kernelParts(run, cacheDir, kernel, moduleNames(modules), work, log);
    const busyboxDeb = await download(run, cacheDir, RAMDISK_PACKAGES.busybox, busyboxVersion, log);
    const bdir = join(work, 'busybox');
    await unpack(run, busyboxDeb, bdir);
    const busybox = join(bdir, 'bin', 'busybox');
    const root = join(work, 'root');
    stageRoot(root, { recipe, sources, busybox, parts, modules, inputsHash });
    for (const [i, extra] of extras.entries()) {
      const deb = await download(run, cacheDir, extra.package, packages[i]!.version, log);
      const pdir = join(work, `pkg-${i}`);
      await unpack(run, deb, pdir);
      stagePackageFiles(root, pdir, extra);
    }

    const cpio = join(work, 'initrd.cpio');
    const list = listTree(root);
    // the static busybox we just unpacked archives the tree: no cpio needed on the host
    const r = await run([busybox, 'cpio', '-o', '-H', 'newc', '-R', '0:0', '-F', cpio], { cwd: root, input: list });
    if (r.exitCode !== 0) {
      throw new IoError('E_RAMDISK_CPIO', `cpio failed (status ${r.exitCode}): ${r.stderr.trim()}`, {
        hint: 'The build folder must be writable and on a local file system.',
      });
    }
    const initrdTmp = join(work, outputs.initrd);
    writeFileSync(initrdTmp, gzipSync(readFileSync(cpio), { level: 9 }));
    const kernelTmp = join(work, outputs.kernel);
    copyFileSync(parts.vmlinuz, kernelTmp);
    // Debian installs the kernel 0600; the boot server and a TFTP server running unprivileged must read it
    chmodSync(kernelTmp, 0o644);

    const kernelFile = publish(kernelTmp, outDir, outputs.kernel);
    const initrdFile = publish(initrdTmp, outDir, outputs.initrd);
    const manifest: Manifest = {
      inputsHash,
      inputs,
      kernel: { name: kernelFile.name, size: kernelFile.size, sha256: kernelFile.sha256 },
      initrd: { name: initrdFile.name, size: initrdFile.size, sha256: initrdFile.sha256 },
      resolved: { kernelPackage, aptStamp },
    };
    writeFileAtomic(join(outDir, outputs.manifest), JSON.stringify(manifest, null, 2) + '\n');
    const elapsedMs = now() - started;
    log(`${recipe.label} built in ${(elapsedMs / 1000).toFixed(1)} s: initrd ${initrdFile.size} bytes`);
    return { kernel: kernelFile, initrd: initrdFile, inputs, inputsHash, cached: false, elapsedMs };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/* ------------------------------------------------------------------------ */

function readSources(dir: string, files: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of Object.keys(files)) {
    try {
      out[name] = readFileSync(join(dir, name), 'utf8');
    } catch (e) {
      throw new IoError('E_RAMDISK_SOURCE', `cannot read the image file ${join(dir, name)}`, {
        hint: 'The files live in images/ramdisk/ (the deploy ramdisk) and images/guest/ (the guest image) of the stackctl package; pass sourceDir for another copy.',
        cause: e,
      });
    }
  }
  return out;
}

function aptError(what: string, r: CommandResult, pkg: string): RemoteError {
  return new RemoteError('E_RAMDISK_APT', `${what} ${pkg} failed (status ${r.exitCode}): ${r.stderr.trim()}`, {
    hint: `Check that apt can reach a Debian mirror that has ${pkg} (apt-get update), and that apt-get and dpkg-deb are installed.`,
    details: { package: pkg },
  });
}

/** The versions of a recipe's further packages: the last build's while apt's lists did not change, else apt's candidates. */
async function extraVersions(
  run: RunCommand,
  extras: readonly BootImagePackage[],
  previous: RamdiskInputs | undefined,
): Promise<{ package: string; version: string }[]> {
  const known = new Map((previous?.packages ?? []).map((p) => [p.package, p.version]));
  return Promise.all(
    extras.map(async (e) => ({
      package: e.package,
      version: known.get(e.package) ?? (await packageVersion(run, e.package)),
    })),
  );
}

/** Copy a package's listed files into the initramfs tree (each executable: programs and shared libraries). */
function stagePackageFiles(root: string, pdir: string, extra: BootImagePackage): void {
  const top = realpathSync(pdir);
  for (const [from, to] of Object.entries(extra.files)) {
    let real: string;
    try {
      real = realpathSync(join(pdir, from));
    } catch (e) {
      throw new IoError('E_RAMDISK_PACKAGE_FILE', `${extra.package} holds no ${from}`, {
        hint: 'The package changed its layout: update the file list of the image recipe (src/images/).',
        details: { package: extra.package, file: from },
        cause: e,
      });
    }
    if (relative(top, real).startsWith('..')) {
      throw new IoError('E_RAMDISK_PACKAGE_FILE', `${from} of ${extra.package} links outside the package`, {
        hint: 'Name the file the link points to in the image recipe (src/images/).',
        details: { package: extra.package, file: from },
      });
    }
    const dest = join(root, to);
    mkdirSync(join(dest, '..'), { recursive: true });
    copyFileSync(real, dest);
    chmodSync(dest, 0o755);
  }
}

/** The Debian version of a package apt would install (its candidate). */
async function packageVersion(run: RunCommand, pkg: string): Promise<string> {
  const r = await run(['apt-cache', 'show', '--no-all-versions', pkg]);
  const version = /^Version:\s*(\S+)/m.exec(r.stdout)?.[1];
  if (r.exitCode !== 0 || !version) throw aptError('apt-cache show', r, pkg);
  return version;
}

/** The versioned kernel package behind `pkg` (itself when already versioned), its version and kernel release. */
async function resolveKernel(run: RunCommand, pkg: string): Promise<RamdiskInputs['kernel']> {
  let versioned = pkg;
  if (!/^linux-image-\d/.test(pkg)) {
    const r = await run(['apt-cache', 'depends', '--no-recommends', '--no-suggests', pkg]);
    const dep = /^\s*Depends:\s*(linux-image-\d\S*)/m.exec(r.stdout)?.[1];
    if (r.exitCode !== 0 || !dep) throw aptError('resolving the kernel package of', r, pkg);
    versioned = dep;
  }
  const version = await packageVersion(run, versioned);
  return { package: versioned, version, release: versioned.slice('linux-image-'.length) };
}

/** The .deb of `pkg` at `version`, downloaded once into its own folder of the cache. */
async function download(
  run: RunCommand,
  cacheDir: string,
  pkg: string,
  version: string,
  log: (line: string) => void,
): Promise<string> {
  const dir = join(cacheDir, `${pkg}_${safeName(version)}`);
  const found = (): string | undefined => {
    const deb = existsSync(dir) ? readdirSync(dir).find((f) => f.endsWith('.deb')) : undefined;
    return deb ? join(dir, deb) : undefined;
  };
  const have = found();
  if (have) return have;
  mkdirSync(dir, { recursive: true });
  // apt drops to its _apt user for downloads and warns when that user cannot write here: harmless
  chmodSync(dir, 0o755);
  log(`apt-get download ${pkg}=${version}`);
  const r = await run(['apt-get', 'download', '-q', `${pkg}=${version}`], { cwd: dir });
  const deb = found();
  if (r.exitCode !== 0 || !deb) throw aptError('apt-get download', r, pkg);
  return deb;
}

/** A Debian version as a file name part (the epoch's colon and anything odd become _). */
function safeName(version: string): string {
  return version.replace(/[^A-Za-z0-9.+~-]/g, '_');
}

async function unpack(run: RunCommand, deb: string, dir: string): Promise<void> {
  const r = await run(['dpkg-deb', '-x', deb, dir]);
  if (r.exitCode !== 0) {
    throw new IoError('E_RAMDISK_UNPACK', `dpkg-deb -x ${deb} failed: ${r.stderr.trim()}`, {
      hint: 'The download may be truncated: delete it from the cache folder and build again.',
      details: { deb },
    });
  }
}

/** /lib/modules/<release> (bookworm) or /usr/lib/modules/<release> (merged-/usr packages). */
function moduleDirOf(kdir: string, release: string): string {
  for (const d of [join(kdir, 'lib', 'modules', release), join(kdir, 'usr', 'lib', 'modules', release)]) {
    if (existsSync(d)) return d;
  }
  throw new IoError('E_RAMDISK_MODULES', `the kernel package has no modules folder for ${release}`, {
    hint: 'Give a complete linux-image package.',
  });
}

/** Every `<name>.ko` under a folder, by module name. */
function indexModules(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ko')) out.set(e.name.slice(0, -3).replace(/-/g, '_'), p);
    }
  };
  walk(join(dir, 'kernel'));
  return out;
}

/** What the initramfs needs from the kernel package, unpacked once per kernel version and module list. */
interface KernelParts {
  readonly vmlinuz: string;
  /** Module files in load order; modules built into the kernel are left out. */
  readonly modules: readonly { readonly name: string; readonly file: string }[];
}

/**
 * The kernel and the listed modules, from `<cacheDir>/kernel-<release>_<version>_<modules hash>/`.
 * Unpacking the whole package takes seconds and hundreds of MiB; only these
 * few files are kept, so a change to the agent rebuilds in well under a second.
 */
async function kernelParts(
  run: RunCommand,
  cacheDir: string,
  kernel: RamdiskInputs['kernel'],
  modules: readonly string[],
  work: string,
  log: (line: string) => void,
): Promise<KernelParts> {
  const names = modules.map((m) => m.replace(/-/g, '_'));
  const key = `${kernel.release}_${safeName(kernel.version)}_${sha256(names.join(',')).slice(0, 12)}`;
  const dir = join(cacheDir, `kernel-${key}`);
  const listed = (): KernelParts => {
    const present = new Set(readFileSync(join(dir, 'modules.load'), 'utf8').split('\n').filter(Boolean));
    return {
      vmlinuz: join(dir, 'vmlinuz'),
      modules: names.filter((n) => present.has(n)).map((n) => ({ name: n, file: join(dir, `${n}.ko`) })),
    };
  };
  if (existsSync(join(dir, 'modules.load'))) return listed();

  const deb = await download(run, cacheDir, kernel.package, kernel.version, log);
  const kdir = join(work, 'kernel');
  await unpack(run, deb, kdir);
  const vmlinuz = join(kdir, 'boot', `vmlinuz-${kernel.release}`);
  if (!existsSync(vmlinuz)) {
    throw new IoError('E_RAMDISK_KERNEL', `${kernel.package} holds no boot/vmlinuz-${kernel.release}`, {
      hint: 'Give a linux-image package that ships a kernel (not a -dbg or -unsigned one).',
      details: { package: kernel.package },
    });
  }
  const moduleDir = moduleDirOf(kdir, kernel.release);
  const builtin = readBuiltin(moduleDir);
  const available = indexModules(moduleDir);
  const tmp = join(work, 'kernel-parts');
  mkdirSync(tmp);
  copyFileSync(vmlinuz, join(tmp, 'vmlinuz'));
  const load: string[] = [];
  for (const n of names) {
    const file = available.get(n);
    if (file) {
      copyFileSync(file, join(tmp, `${n}.ko`));
      load.push(n);
    } else if (!builtin.has(n)) {
      throw new IoError('E_RAMDISK_MODULE_MISSING', `kernel module ${n} is neither a .ko file nor built in`, {
        hint: 'Check the module name; compressed modules (.ko.xz, .ko.zst) are not supported yet.',
        details: { module: n, kernel: kernel.release },
      });
    }
  }
  // written last: its presence says the folder is complete
  writeFileSync(join(tmp, 'modules.load'), load.map((n) => n + '\n').join(''));
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(cacheDir, { recursive: true });
  renameSync(tmp, dir);
  rmSync(kdir, { recursive: true, force: true });
  return listed();
}

interface StageSpec {
  readonly recipe: BootImageRecipe;
  readonly sources: Readonly<Record<string, string>>;
  readonly busybox: string;
  readonly parts: KernelParts;
  /** The recipe's module lines (name and parameters). */
  readonly modules: readonly string[];
  readonly inputsHash: string;
}

/** Lay out the initramfs tree. */
function stageRoot(root: string, s: StageSpec): void {
  for (const d of ['bin', 'dev', 'etc/stackctl', 'etc/udhcpc', 'lib/modules', 'proc', 'run', 'sys', 'tmp']) {
    mkdirSync(join(root, d), { recursive: true });
  }
  copyFileSync(s.busybox, join(root, 'bin', 'busybox'));
  chmodSync(join(root, 'bin', 'busybox'), 0o755);
  symlinkSync('busybox', join(root, 'bin', 'sh'));
  for (const [name, target] of Object.entries(s.recipe.files)) {
    const dest = join(root, target);
    mkdirSync(join(dest, '..'), { recursive: true });
    writeFileSync(dest, s.sources[name] ?? '', { mode: 0o755 });
  }
  for (const [path, target] of Object.entries(s.recipe.links)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    symlinkSync(target, join(root, path));
  }
  for (const m of s.parts.modules) copyFileSync(m.file, join(root, 'lib', 'modules', `${m.name}.ko`));
  // /init loads them in this order (insmod does not resolve dependencies); built-in ones are left out
  const present = new Set(s.parts.modules.map((m) => m.name));
  const lines = s.modules.filter((l) => present.has(l.split(' ')[0]!.replace(/-/g, '_')));
  writeFileSync(join(root, 'etc', 'stackctl', 'modules'), lines.map((l) => l + '\n').join(''));
  writeFileSync(join(root, 'etc', 'stackctl', 'build'), `inputs ${s.inputsHash}\n`);
}

/** Modules compiled into the kernel (modules.builtin), by name. */
function readBuiltin(moduleDir: string): Set<string> {
  const file = join(moduleDir, 'modules.builtin');
  if (!existsSync(file)) return new Set();
  return new Set(
    readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => (l.split('/').pop() ?? '').replace(/\.ko$/, '').replace(/-/g, '_')),
  );
}

/** Paths under `root` for cpio, sorted, each folder before what it holds. */
function listTree(root: string): string {
  const out: string[] = [];
  const walk = (rel: string): void => {
    const abs = rel ? join(root, rel) : root;
    for (const name of readdirSync(abs).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      out.push(r);
      const st = lstatSync(join(root, r));
      if (st.isDirectory()) walk(r);
    }
  };
  walk('');
  return out.join('\n') + '\n';
}

/** Move a built file into the output folder and write `<name>.sha256` beside it. */
function publish(tmp: string, outDir: string, name: string): RamdiskFile {
  const data = readFileSync(tmp);
  const sum = sha256(data);
  const path = join(outDir, name);
  renameSync(tmp, path);
  writeFileAtomic(join(outDir, `${name}.sha256`), `${sum}  ${name}\n`);
  return { path, name, size: data.length, sha256: sum };
}

function readManifest(outDir: string, name: string): Manifest | undefined {
  try {
    const m = JSON.parse(readFileSync(join(outDir, name), 'utf8')) as Manifest;
    return typeof m.inputsHash === 'string' && typeof m.inputs === 'object' ? m : undefined;
  } catch {
    return undefined;
  }
}

/** The outputs of an earlier build with the same inputs, when they are all still there. */
function readCached(
  outDir: string,
  manifest: Manifest,
  inputsHash: string,
): Pick<RamdiskBuild, 'kernel' | 'initrd'> | undefined {
  if (manifest.inputsHash !== inputsHash) return undefined;
  const file = (f: Omit<RamdiskFile, 'path'>): RamdiskFile | undefined => {
    const path = join(outDir, f.name);
    try {
      // size only: hashing would make a cache hit cost as much as reading the files; the
      // sha256 files beside them are what nodes check
      return statSync(path).size === f.size ? { ...f, path } : undefined;
    } catch {
      return undefined;
    }
  };
  const kernel = file(manifest.kernel);
  const initrd = file(manifest.initrd);
  return kernel && initrd ? { kernel, initrd } : undefined;
}
