/**
 * Headless Chromium (Debian package `chromium`) for tests that look at a page the way a person's
 * browser shows it: `--dump-dom` (the DOM after parsing, scripts and layout) and `--screenshot`.
 * The only file of the tests that starts it. A missing browser fails the test with what to install.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** Where Debian installs it. */
const CHROMIUM = '/usr/bin/chromium';

/** The browser's path; throws, naming the package to install, when there is none. */
export function chromiumPath(): string {
  try {
    accessSync(CHROMIUM, constants.X_OK);
    return CHROMIUM;
  } catch {
    throw new Error(`${CHROMIUM} not found: apt-get install chromium (scripts/host-setup.sh installs it)`);
  }
}

/** Run the browser headless on a local file with extra flags; resolves with its standard output. */
async function headless(file: string, flags: readonly string[], timeoutMs: number): Promise<string> {
  const bin = chromiumPath();
  const profile = mkdtempSync(join(tmpdir(), 'stackctl-chromium-'));
  const args = [
    '--headless',
    // NOTE: as root Chromium refuses to start without it (its sandbox needs an unprivileged user).
    ...(process.getuid?.() === 0 ? ['--no-sandbox'] : []),
    '--disable-gpu',
    '--no-first-run',
    '--no-default-browser-check',
    '--hide-scrollbars',
    `--user-data-dir=${profile}`,
    ...flags,
    pathToFileURL(file).href,
  ];
  try {
    return await new Promise<string>((resolve, reject) => {
      execFile(bin, args, { timeout: timeoutMs, maxBuffer: 32 << 20 }, (err, stdout, stderr) => {
        if (err) reject(new Error(`chromium ${flags.join(' ')} failed: ${err.message}\n${stderr.slice(-2000)}`));
        else resolve(stdout);
      });
    });
  } finally {
    rmSync(profile, { recursive: true, force: true });
  }
}

/** The page's DOM as Chromium serialises it once loaded (inline scripts have run). */
export function dumpDom(file: string, timeoutMs = 20_000): Promise<string> {
  return headless(file, ['--dump-dom'], timeoutMs);
}

/** A PNG of the page at a window size (pixels). */
export async function screenshot(
  file: string,
  png: string,
  size: { width: number; height: number },
  timeoutMs = 20_000,
): Promise<void> {
  await headless(file, [`--screenshot=${png}`, `--window-size=${size.width},${size.height}`], timeoutMs);
}
