/**
 * Tempest against the whole lab cloud: a 1ctl-1comp container lab of its
 * own, deployed by `stackctl deploy`, configured by `stackctl tempest config`
 * and tested by `stackctl tempest run` (the identity, compute and image smoke
 * tests). Every selected test must pass; the counts and the skipped tests
 * with their reasons are printed. `npm run test:tempest`, not part of CI.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runTempest } from '../../src/cli/tempest.js';
import { EXCLUDED } from '../../src/tempest/selection.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { CLOUD_IMAGES, deployLab } from '../orchestrator/lab.js';

const lab = deployLab('tempest', '10.82', 500);

/** True when `command` is on the PATH. */
const have = (command: string): boolean => {
  try {
    execFileSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

/** Tempest from Debian's package, installed when missing (root only); a clear failure otherwise. */
function ensureTempest(): void {
  if (have('tempest')) return;
  try {
    execFileSync('apt-get', ['install', '-y', '--no-install-recommends', 'tempest'], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
      timeout: 900_000,
    });
  } catch (err) {
    throw new Error(
      `Tempest is not installed and 'apt-get install tempest' failed (${err instanceof Error ? err.message : err}); ` +
        'install the Debian package tempest as root, then run npm run test:tempest again',
    );
  }
  if (!have('tempest')) throw new Error("'apt-get install tempest' ran but there is no tempest command on the PATH");
}

const took = (t0: number): string => `${((Date.now() - t0) / 1000).toFixed(1)} s`;

describe('Tempest smoke tests against the lab cloud', () => {
  const work = tempDir('stackctl-tempest-e2e-');
  const workspace = join(work, 'ws');

  beforeAll(async () => {
    ensureTempest();
    await lab.up(CLOUD_IMAGES);
    const t0 = Date.now();
    // One deploy: within a step services start after those they require (Placement before Nova).
    const { report, text } = await lab.deploy();
    process.stderr.write(`deploy of the whole cloud: ${took(t0)}\n`);
    expect(report?.ok, text).toBe(true);
  }, 2_700_000);
  afterAll(async () => {
    try {
      await lab.down();
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 600_000);

  it.each([
    {
      scenario: 'a flavour',
      option: '--flavor',
      name: 'm1.missing',
      code: 'E_TEMPEST_FLAVOR_MISSING',
      lists: 'm1.tiny',
    },
    {
      scenario: 'an image',
      option: '--image',
      name: 'cirros-missing',
      code: 'E_TEMPEST_IMAGE_MISSING',
      lists: 'lab-tiny',
    },
  ])('refuses $scenario the cloud lacks before anything runs, naming it and listing the existing ones', async (c) => {
    const out = join(work, `refused-${c.option.slice(2)}`);
    const r = await runCli('tempest', 'config', '-i', lab.inventory, '-o', out, c.option, c.name);
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toContain(`error ${c.code}: `);
    expect(r.stderr).toContain(c.name);
    expect(r.stderr).toContain(c.lists);
    expect(existsSync(out)).toBe(false);
  });

  it('writes the workspace: etc/tempest.conf, mode 0600, with the ids of m1.tiny and lab-tiny', async () => {
    const r = await runCli('tempest', 'config', '-i', lab.inventory, '-o', workspace);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/flavor m1\.tiny \([0-9a-f-]+\), image lab-tiny \([0-9a-f-]{36}\)/);
    expect(statSync(join(workspace, 'etc', 'tempest.conf')).mode & 0o777).toBe(0o600);
  });

  it('passes every selected identity, compute and image smoke test', async () => {
    const t0 = Date.now();
    const summary = await runTempest(
      { workspace, concurrency: 2 },
      { write: (t) => void process.stderr.write(t), echo: (t) => void process.stderr.write(t) },
    ).catch((err: unknown) => {
      throw err instanceof Error
        ? new Error(`${err.message}\n${JSON.stringify((err as { details?: unknown }).details)}`)
        : err;
    });
    process.stderr.write(`tempest run: ${took(t0)}\n`);
    if (EXCLUDED.length)
      process.stderr.write(`excluded by design:\n${EXCLUDED.map((e) => `  ${e.regex}: ${e.reason}`).join('\n')}\n`);
    expect(summary.failed, summary.failures.join('\n')).toBe(0);
    expect(summary.passed).toBeGreaterThan(0);
    for (const s of summary.skips) expect(s.reason, s.id).not.toBe('(no reason given)');
  });
});
