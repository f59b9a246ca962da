import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/core/errors.js';
import { readTextFile, readTextFileIfExists, regularFile } from '../../src/core/fs.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'stackctl-fs-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('readTextFile', () => {
  it('reads a regular file', () => {
    const file = join(dir, 'site.yaml');
    writeFileSync(file, 'cloud: {}\n');
    expect(readTextFile(file, 100)).toBe('cloud: {}\n');
    expect(regularFile(file).size).toBe(10);
  });

  it('refuses a FIFO at once instead of waiting for a writer', () => {
    const fifo = join(dir, 'site.yaml');
    expect(spawnSync('mkfifo', [fifo]).status, 'mkfifo (coreutils) is needed').toBe(0);
    const t0 = Date.now();
    expect(() => readTextFile(fifo, 100)).toThrow(
      expect.objectContaining({
        code: 'E_FILE_TYPE',
        exitCode: ExitCode.IO,
        message: `${fifo} is a FIFO (named pipe), not a regular file`,
      }),
    );
    expect(Date.now() - t0).toBeLessThan(1_000);
  });

  it.each([
    ['/dev/zero', 'a character device'],
    ['/dev/null', 'a character device'],
  ])('refuses %s (%s), which would never end or read as empty', (file, kind) => {
    expect(() => readTextFile(file, 100)).toThrow(`${file} is ${kind}, not a regular file`);
  });

  it('refuses a directory with the same code', () => {
    expect(() => readTextFile(dir, 100)).toThrow(expect.objectContaining({ code: 'E_FILE_TYPE' }));
  });

  it('names a missing file and one over the size limit', () => {
    expect(() => readTextFile(join(dir, 'nope.yaml'), 100)).toThrow(
      expect.objectContaining({ code: 'E_FILE_READ', message: `cannot read ${join(dir, 'nope.yaml')}: ENOENT` }),
    );
    writeFileSync(join(dir, 'big.yaml'), 'x'.repeat(101));
    expect(() => readTextFile(join(dir, 'big.yaml'), 100)).toThrow(
      expect.objectContaining({ code: 'E_FILE_TOO_LARGE' }),
    );
  });

  it('reads nothing for a missing file only when asked (readTextFileIfExists)', () => {
    expect(readTextFileIfExists(join(dir, 'nope.json'), 100)).toBeUndefined();
    expect(() => readTextFileIfExists(dir, 100)).toThrow(expect.objectContaining({ code: 'E_FILE_TYPE' }));
  });
});
