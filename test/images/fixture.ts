import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildImages, type BuiltImage } from '../../src/images/build.js';
import { localEngine, type LocalEngine } from '../../src/remote/docker-local.js';
import { loadRelease } from '../../src/roles/release.js';
import { defaultReleasesDir } from '../../src/core/paths.js';

/** The zed release manifest shipped with stackctl. */
export const release = loadRelease(defaultReleasesDir(), 'zed');

/** The local Docker Engine; fails (never skips) with how to start it when it does not answer. */
export async function dockerOrFail(): Promise<LocalEngine> {
  const engine = localEngine();
  try {
    await engine.ping();
  } catch (e) {
    throw new Error(
      'these tests need the local Docker Engine: start it (`systemctl start docker`, or `dockerd &` without init) ' +
        `and check \`docker info\`. (${e instanceof Error ? e.message : String(e)})`,
    );
  }
  return engine;
}

const LOCK = join(tmpdir(), 'stackctl-test-images.lock');

/**
 * Build images for tests under a lock: test files run in parallel workers,
 * and two debootstraps of the same suite would only double the cost.
 */
export async function testImages(engine: LocalEngine, only: readonly string[]): Promise<BuiltImage[]> {
  for (;;) {
    try {
      mkdirSync(LOCK);
      writeFileSync(join(LOCK, 'pid'), String(process.pid));
      break;
    } catch {
      // a lock left by a killed run: its process is gone, or (no pid written yet) it is older than 20 minutes
      try {
        if (!holderAlive() || Date.now() - statSync(LOCK).mtimeMs > 20 * 60_000) rmSync(LOCK, { recursive: true });
      } catch {
        // gone meanwhile
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  try {
    return await buildImages(engine, { release, only });
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}

/** Whether the process that wrote the lock's pid still runs (true while no pid is written). */
function holderAlive(): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(join(LOCK, 'pid'), 'utf8'));
  } catch {
    return true;
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
