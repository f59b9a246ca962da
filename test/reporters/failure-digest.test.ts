import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { clip, digest } from './failure-digest.js';

describe('failure digest', () => {
  it('keeps a short message whole and clips a long one to its first and last lines', () => {
    expect(clip('a\nb')).toEqual(['a', 'b']);
    const long = Array.from({ length: 100 }, (_, i) => `line ${i}`).join('\n');
    const c = clip(`\u001b[31m${long}\u001b[39m`);
    expect(c).toHaveLength(8 + 1 + 16);
    expect(c[0]).toBe('line 0');
    expect(c[8]).toBe('… 76 lines left out …');
    expect(c.at(-1)).toBe('line 99');
  });

  it('numbers the failures, shows the first six and names the rest; nothing when all passed', () => {
    expect(digest([])).toEqual([]);
    const list = Array.from({ length: 8 }, (_, i) => ({
      where: `t${i}`,
      errors: [{ name: 'AssertionError', message: `boom ${i}` }],
    }));
    const out = digest(list).join('\n');
    expect(out).toContain('== failure digest: 8 failure(s), each clipped ==');
    expect(out).toContain('-- 1. t0\n   AssertionError: boom 0');
    expect(out).toContain('-- 6. t5\n   AssertionError: boom 5');
    expect(out).toContain('-- 8. t7');
    expect(out).not.toContain('boom 7');
  });

  it('comes after vitest summary in a real run: two failures, the first one still in the last lines', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-digest-'));
    try {
      writeFileSync(
        join(dir, 'two.test.ts'),
        [
          "import { it, expect } from 'vitest';",
          "it('first', () => { throw new Error(['first failure', ...Array(200).fill('noise')].join('\\n')); });",
          "it('second', () => { expect({ big: 'x'.repeat(50) }).toEqual({ big: 'y' }); });",
          "it('passes', () => { expect(1).toBe(1); });",
        ].join('\n'),
      );
      const vitest = resolve('node_modules/vitest/vitest.mjs');
      const r = spawnSync(
        process.execPath,
        [
          vitest,
          'run',
          '--root',
          dir,
          '--reporter=default',
          `--reporter=${resolve('test/reporters/failure-digest.ts')}`,
        ],
        { encoding: 'utf8', timeout: 60_000, env: { ...process.env, NO_COLOR: '1', CI: '1' } },
      );
      expect(r.status, r.stdout + r.stderr).toBe(1);
      const tail = r.stdout.trimEnd().split('\n').slice(-60).join('\n');
      expect(tail).toContain('== failure digest: 2 failure(s), each clipped ==');
      expect(tail).toMatch(/-- 1\. two\.test\.ts › first\n {3}Error: first failure/);
      expect(tail).toMatch(/-- 2\. two\.test\.ts › second\n {3}AssertionError: expected/);
      // vitest's own summary came before it
      expect(r.stdout.indexOf('Test Files')).toBeLessThan(r.stdout.indexOf('== failure digest'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
