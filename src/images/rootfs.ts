/**
 * The root of every image: a Debian root filesystem made by
 * `debootstrap --variant=minbase <suite>` and imported with the Docker API
 * (tar stream -> image import). The imported image is tagged with a hash of
 * its inputs (suite, mirrors, recipe), so it is rebuilt only when they change.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { $ } from 'zx';
import { IoError, RemoteError } from '../core/errors.js';
import { readTextFile } from '../core/fs.js';
import { canonicalJson, sha256 } from '../core/hash.js';
import type { LocalEngine, ProgressLine } from '../remote/docker-local.js';

/** Bump when the recipe below changes in a way that must rebuild every rootfs. */
const RECIPE_VERSION = 1;

/** Repository of the imported root filesystems; the tag is `<suite>-<inputs hash>`. */
export const ROOTFS_REPO = 'stackctl/rootfs';

/** The Debian archive and security mirrors the machine's apt uses. */
export interface Mirrors {
  readonly archive: string;
  readonly security: string | undefined;
}

/** One deb822 stanza or one-line `deb` entry, reduced to what we read. */
interface AptSource {
  readonly uris: readonly string[];
  readonly suites: readonly string[];
}

function parseSources(text: string, oneLine: boolean): AptSource[] {
  if (oneLine) {
    return text
      .split('\n')
      .map((l) => l.replace(/#.*/, '').trim())
      .filter((l) => l.startsWith('deb '))
      .map((l) => {
        const words = l
          .replace(/\[[^\]]*\]/, '')
          .split(/\s+/)
          .slice(1);
        return { uris: words.slice(0, 1), suites: words.slice(1, 2) };
      });
  }
  return text.split(/\n\s*\n/).flatMap((stanza) => {
    const fields = new Map<string, string>();
    for (const line of stanza.split('\n')) {
      const m = /^([A-Za-z-]+):\s*(.*)$/.exec(line);
      if (m) fields.set(m[1]!.toLowerCase(), m[2]!.trim());
    }
    if (!(fields.get('types') ?? '').split(/\s+/).includes('deb')) return [];
    if ((fields.get('enabled') ?? 'yes') === 'no') return [];
    return [{ uris: (fields.get('uris') ?? '').split(/\s+/), suites: (fields.get('suites') ?? '').split(/\s+/) }];
  });
}

/**
 * Find the Debian mirrors this machine's apt is configured with: the archive
 * is the first source whose URI path ends in /debian, the security mirror the
 * first ending in /debian-security. Reading them (rather than naming a host)
 * keeps builds on whatever mirror or proxy the site uses.
 */
export function findMirrors(aptDir = '/etc/apt'): Mirrors {
  const files: { file: string; oneLine: boolean }[] = [];
  const listDir = join(aptDir, 'sources.list.d');
  try {
    for (const f of readdirSync(listDir).sort()) {
      if (f.endsWith('.sources')) files.push({ file: join(listDir, f), oneLine: false });
      if (f.endsWith('.list')) files.push({ file: join(listDir, f), oneLine: true });
    }
  } catch {
    // no sources.list.d: only sources.list below
  }
  files.push({ file: join(aptDir, 'sources.list'), oneLine: true });
  const sources: AptSource[] = [];
  for (const { file, oneLine } of files) {
    try {
      sources.push(...parseSources(readTextFile(file, 1024 * 1024), oneLine));
    } catch {
      // unreadable or missing: skip it
    }
  }
  const uris = sources.flatMap((s) => s.uris).map((u) => u.replace(/\/+$/, ''));
  const archive = uris.find((u) => /\/debian$/.test(u));
  if (!archive) {
    throw new IoError('E_NO_MIRROR', `no Debian mirror found in ${aptDir}/sources.list(.d)`, {
      hint: 'Configure apt with a Debian mirror (a URI ending in /debian), as `apt-get update` uses it.',
    });
  }
  return { archive, security: uris.find((u) => /\/debian-security$/.test(u)) };
}

/** What the rootfs step runs on the machine; injectable for tests. */
export interface RootfsDeps {
  /** Run a command (argv, no shell); rejects with its stderr on failure. */
  readonly run: (argv: readonly string[]) => Promise<void>;
  /** A tar stream of a folder's contents. */
  readonly tar: (dir: string) => Readable;
  readonly tmp: () => string;
}

/** Commands through zx, whose templates quote every interpolated value. */
export const defaultRootfsDeps: RootfsDeps = {
  run: async (argv) => {
    const [cmd, ...args] = argv;
    try {
      await $({ quiet: true })`${cmd} ${args}`;
    } catch (e) {
      const stderr = String((e as { stderr?: unknown }).stderr ?? '').trim();
      throw new RemoteError('E_COMMAND', `${cmd} failed: ${stderr.split('\n').slice(-3).join(' / ')}`, {
        hint: `Run the command by hand to see its whole output: ${argv.join(' ')}`,
        cause: e,
      });
    }
  },
  // NOTE: a streaming child (not zx): zx keeps the whole output in memory, and this is ~200 MB.
  tar: (dir) =>
    spawn('tar', ['-C', dir, '--numeric-owner', '-c', '.'], { stdio: ['ignore', 'pipe', 'inherit'] }).stdout,
  tmp: () => mkdtempSync(join(tmpdir(), 'stackctl-rootfs-')),
};

/** The tag of a suite's root filesystem for given mirrors: changes when any input changes. */
export function rootfsTag(suite: string, mirrors: Mirrors): string {
  const hash = sha256(canonicalJson({ suite, variant: 'minbase', mirrors, recipe: RECIPE_VERSION })).slice(0, 12);
  return `${suite}-${hash}`;
}

/** apt sources written into the image: the same mirrors the host uses. */
function sourcesList(suite: string, m: Mirrors): string {
  const lines = [`deb ${m.archive} ${suite} main`, `deb ${m.archive} ${suite}-updates main`];
  if (m.security) lines.push(`deb ${m.security} ${suite}-security main`);
  return lines.join('\n') + '\n';
}

/** Result of ensuring a root filesystem image. */
export interface RootfsResult {
  readonly ref: string;
  readonly id: string;
  readonly cached: boolean;
  readonly seconds: number;
}

/** Make (or find) the root filesystem image of a suite; re-entrant and cached by input hash. */
export async function ensureRootfs(
  engine: LocalEngine,
  suite: string,
  progress: ProgressLine,
  opts: { readonly mirrors?: Mirrors; readonly deps?: RootfsDeps } = {},
): Promise<RootfsResult> {
  const started = Date.now();
  const mirrors = opts.mirrors ?? findMirrors();
  const deps = opts.deps ?? defaultRootfsDeps;
  const tag = rootfsTag(suite, mirrors);
  const ref = `${ROOTFS_REPO}:${tag}`;
  const have = await engine.image(ref);
  if (have) return { ref, id: have.id, cached: true, seconds: (Date.now() - started) / 1000 };
  const dir = deps.tmp();
  try {
    progress(`debootstrap --variant=minbase ${suite} from ${mirrors.archive}`);
    await deps.run(['debootstrap', '--variant=minbase', suite, dir, mirrors.archive]);
    // The .deb cache is a third of the tree and no image needs it.
    await deps.run(['find', join(dir, 'var/cache/apt/archives'), '-name', '*.deb', '-delete']);
    writeFileSync(join(dir, 'etc/apt/sources.list'), sourcesList(suite, mirrors));
    progress(`importing the root filesystem as ${ref}`);
    const id = await engine.importRootfs(deps.tar(dir), ROOTFS_REPO, tag);
    return { ref, id, cached: false, seconds: (Date.now() - started) / 1000 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
