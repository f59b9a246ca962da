import { mkdirSync, rmdirSync, statSync } from 'node:fs';
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
      break;
    } catch {
      // a lock older than 20 minutes was left by a killed run
      try {
        if (Date.now() - statSync(LOCK).mtimeMs > 20 * 60_000) rmdirSync(LOCK);
      } catch {
        // gone meanwhile
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  try {
    return await buildImages(engine, { release, only });
  } finally {
    rmdirSync(LOCK);
  }
}
