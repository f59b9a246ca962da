import { describe, expect, it } from 'vitest';
import { keyIndices, rotateKeys } from '../../src/inventory/key-repository.js';
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
