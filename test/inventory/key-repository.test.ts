import { describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import {
  formatUsage,
  keyIndices,
  keyUsage,
  refuseRetiringUsed,
  retiredByNextRotation,
  rotateKeys,
} from '../../src/inventory/key-repository.js';
import { credentialKeyDigest } from '../../src/cli/rotate-credentials.js';
import { StackctlError } from '../../src/core/errors.js';

/** A key source that names its keys in order: new-1, new-2, ... */
function counter(): () => string {
  let n = 0;
  return () => `new-${++n}`;
}

describe('rotateKeys (Keystone fernet rotation)', () => {
  const scenarios: {
    scenario: string;
    keys: [number, string][];
    max: number;
    after: [number, string][];
    primary: number;
    removed: number[];
  }[] = [
    {
      scenario: 'the staged key becomes the primary at the next index, a new staged key 0 is made',
      keys: [
        [0, 'staged'],
        [1, 'primary'],
      ],
      max: 3,
      after: [
        [0, 'new-1'],
        [1, 'primary'],
        [2, 'staged'],
      ],
      primary: 2,
      removed: [],
    },
    {
      scenario: 'at max_active_keys the oldest secondary goes',
      keys: [
        [0, 'staged'],
        [1, 'old'],
        [2, 'primary'],
      ],
      max: 3,
      after: [
        [0, 'new-1'],
        [2, 'primary'],
        [3, 'staged'],
      ],
      primary: 3,
      removed: [1],
    },
    {
      scenario: 'a lowered limit drops every secondary beyond it, oldest first',
      keys: [
        [0, 's'],
        [4, 'a'],
        [5, 'b'],
        [6, 'c'],
        [7, 'p'],
      ],
      max: 3,
      after: [
        [0, 'new-1'],
        [7, 'p'],
        [8, 's'],
      ],
      primary: 8,
      removed: [4, 5, 6],
    },
    {
      scenario: 'with 2 keys only the staged and the new primary are kept: the old primary goes',
      keys: [
        [0, 's'],
        [1, 'p'],
      ],
      max: 2,
      after: [
        [0, 'new-1'],
        [2, 's'],
      ],
      primary: 2,
      removed: [1],
    },
    {
      scenario: 'indices keep growing (never reused) with a larger limit',
      keys: [
        [0, 's'],
        [9, 'p'],
      ],
      max: 5,
      after: [
        [0, 'new-1'],
        [9, 'p'],
        [10, 's'],
      ],
      primary: 10,
      removed: [],
    },
  ];
  for (const s of scenarios) {
    it(s.scenario, () => {
      const input = new Map(s.keys);
      const { keys, report } = rotateKeys('k', input, s.max, counter());
      expect([...keys].sort(([a], [b]) => a - b)).toEqual(s.after);
      expect(report.primary).toBe(s.primary);
      expect(report.removed).toEqual(s.removed);
      expect(report.before).toEqual(s.keys.map(([i]) => i));
      expect(report.after).toEqual(s.after.map(([i]) => i));
      expect(input).toEqual(new Map(s.keys)); // pure
      // indices only: no key value in the report
      const { repository, ...rest } = report;
      expect(repository).toBe('k');
      expect(
        Object.values(rest)
          .flat()
          .every((v) => typeof v === 'number'),
      ).toBe(true);
    });
  }

  it('each call is one rotation: two calls rotate twice (the staged key of the first becomes the second primary)', () => {
    const next = counter();
    const once = rotateKeys(
      'k',
      new Map([
        [0, 's'],
        [1, 'p'],
      ]),
      3,
      next,
    ).keys;
    const twice = rotateKeys('k', once, 3, next).keys;
    expect([...twice].sort(([a], [b]) => a - b)).toEqual([
      [0, 'new-2'],
      [2, 's'],
      [3, 'new-1'],
    ]);
  });

  it('refuses a repository without a staged key or without a primary, and a limit below 2', () => {
    const code = (f: () => unknown): string | undefined => {
      try {
        f();
      } catch (e) {
        return (e as StackctlError).code;
      }
      return undefined;
    };
    expect(code(() => rotateKeys('k', new Map([[1, 'p']]), 3, counter()))).toBe('E_KEY_REPOSITORY_INCOMPLETE');
    expect(code(() => rotateKeys('k', new Map([[0, 's']]), 3, counter()))).toBe('E_KEY_REPOSITORY_INCOMPLETE');
    expect(
      code(() =>
        rotateKeys(
          'k',
          new Map([
            [0, 's'],
            [1, 'p'],
          ]),
          1,
          counter(),
        ),
      ),
    ).toBe('E_KEY_REPOSITORY_LIMIT');
  });

  it('keyIndices reads NAME_<index> entries only', () => {
    expect(
      keyIndices('k_key', ['k_key_10', 'k_key_0', 'k_key_2', 'k_key_x', 'k_key_01', 'k_keys_1', 'other_1']),
    ).toEqual([0, 2, 10]);
  });
});

describe('what a rotation retires, and what still needs it (Keystone credential keys)', () => {
  const keys = new Map([
    [0, 'staged'],
    [1, 'old-primary'],
    [2, 'primary'],
  ]);

  it('retiredByNextRotation names the keys the next rotation drops, without changing the repository', () => {
    expect(retiredByNextRotation('k', keys, 3)).toEqual([1]);
    expect(retiredByNextRotation('k', keys, 4)).toEqual([]);
    expect(
      retiredByNextRotation(
        'k',
        new Map([
          [0, 'a'],
          [1, 'b'],
        ]),
        3,
      ),
    ).toEqual([]);
    expect([...keys.keys()]).toEqual([0, 1, 2]);
  });

  it("credentialKeyDigest is Keystone's key_hash: the SHA-1 hex of the key's text", () => {
    const key = 'Ab3_-Zx0Ab3_-Zx0Ab3_-Zx0Ab3_-Zx0Ab3_-Zx0Ab3=';
    expect(credentialKeyDigest(key)).toBe(createHash('sha1').update(key).digest('hex'));
    expect(credentialKeyDigest(key)).toMatch(/^[0-9a-f]{40}$/);
  });

  it('keyUsage maps rows counted by digest to key indices; digests of no key are counted apart', () => {
    const rows = new Map([
      [credentialKeyDigest('old-primary'), 2],
      [credentialKeyDigest('primary'), 5],
      ['f'.repeat(40), 1],
    ]);
    const u = keyUsage(keys, rows, credentialKeyDigest);
    expect([...u.byIndex]).toEqual([
      [1, 2],
      [2, 5],
    ]);
    expect(u.unknown).toBe(1);
    expect(formatUsage(u, 'credentials')).toBe(
      'credentials 2 on key 1, 5 on key 2, 1 on a key the secrets file does not hold',
    );
    expect(formatUsage(keyUsage(keys, new Map(), credentialKeyDigest), 'credentials')).toBe('no credentials');
  });

  it('refuseRetiringUsed refuses to drop a key rows are still encrypted with, and only then', () => {
    const migrated = keyUsage(keys, new Map([[credentialKeyDigest('primary'), 3]]), credentialKeyDigest);
    expect(() => refuseRetiringUsed('k', [1], migrated, 'credential(s)', 'migrate first')).not.toThrow();
    const pending = keyUsage(keys, new Map([[credentialKeyDigest('old-primary'), 2]]), credentialKeyDigest);
    let err: unknown;
    try {
      refuseRetiringUsed('k', [1], pending, 'credential(s)', 'migrate first');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(StackctlError);
    expect((err as StackctlError).code).toBe('E_ROTATE_KEY_IN_USE');
    expect((err as StackctlError).message).toContain('key 1, which 2 credential(s) are still encrypted with');
    expect((err as StackctlError).hint).toBe('migrate first');
    // nothing dropped: nothing to refuse, whatever the rows
    expect(() => refuseRetiringUsed('k', [], pending, 'credential(s)', 'x')).not.toThrow();
  });
});
