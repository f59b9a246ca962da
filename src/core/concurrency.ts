/** The only module that imports `p-limit` (CONVENTIONS.md 9). */
import pLimit from 'p-limit';

/**
 * Run `fn` over every item with at most `limit` at once; results keep the
 * order of the items. `fn` should not throw: per-item failures are results.
 */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const run = pLimit(Math.max(1, limit));
  return Promise.all(items.map((item, i) => run(() => fn(item, i))));
}
