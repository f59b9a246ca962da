/** The image pin file next to the inventory: read, written atomically, changed only where a digest moved. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EMPTY_PINS, PinSource, digestsOf, loadPins, pinsFileFor, savePins, withPins } from '../../src/images/pins.js';
import { tempDir } from '../helpers/cli.js';

const A = `sha256:${'a'.repeat(64)}`;
const B = `sha256:${'b'.repeat(64)}`;
const KEYSTONE = '192.168.24.1:5000/stackctl/keystone:zed-1';
const MEMCACHED = '192.168.24.1:5000/stackctl/memcached:zed-1';
const T0 = new Date('2026-11-25T10:00:00Z');
const T1 = new Date('2026-11-26T10:00:00Z');

describe('the image pin file', () => {
  it('sits next to the inventory, like the IPAM file', () => {
    expect(pinsFileFor('/srv/site/site1.yaml')).toBe('/srv/site/site1.images.json');
    expect(pinsFileFor('/srv/site/lab.yml')).toBe('/srv/site/lab.images.json');
  });

  it('reads a missing file as no pins, and reads back what it wrote, keys sorted', () => {
    const file = join(tempDir('stackctl-pins-'), 'lab.images.json');
    expect(loadPins(file)).toEqual(EMPTY_PINS);
    const { state } = withPins(
      EMPTY_PINS,
      new Map([
        [MEMCACHED, B],
        [KEYSTONE, A],
      ]),
      PinSource.PUSH,
      T0,
    );
    savePins(file, state);
    expect(loadPins(file)).toEqual(state);
    const text = readFileSync(file, 'utf8');
    expect(text.indexOf(KEYSTONE)).toBeLessThan(text.indexOf(MEMCACHED));
    expect(JSON.parse(text)).toEqual({
      version: 1,
      images: {
        [KEYSTONE]: { digest: A, at: '2026-11-25T10:00:00.000Z', by: 'push' },
        [MEMCACHED]: { digest: B, at: '2026-11-25T10:00:00.000Z', by: 'push' },
      },
    });
    expect(digestsOf(loadPins(file))).toEqual(
      new Map([
        [KEYSTONE, A],
        [MEMCACHED, B],
      ]),
    );
  });

  it.each([
    { scenario: 'not JSON', text: '{"version": 1,', why: /not valid JSON/ },
    { scenario: 'another format', text: '{"version": 2, "images": {}}', why: /unknown format/ },
    {
      scenario: 'a key that is not a tag reference',
      text: JSON.stringify({ version: 1, images: { keystone: { digest: A, at: 'x', by: 'push' } } }),
      why: /'keystone' is not registry\/namespace\/key:tag/,
    },
    {
      scenario: 'a short digest',
      text: JSON.stringify({ version: 1, images: { [KEYSTONE]: { digest: 'sha256:abc', at: 'x', by: 'push' } } }),
      why: /digest is not sha256:<64 hex digits>/,
    },
    {
      scenario: 'an unknown source',
      text: JSON.stringify({ version: 1, images: { [KEYSTONE]: { digest: A, at: 'x', by: 'someone' } } }),
      why: /'at' and 'by'/,
    },
  ])('refuses a file with $scenario (E_IMAGE_PINS), naming the file', ({ text, why }) => {
    const file = join(tempDir('stackctl-pins-'), 'lab.images.json');
    writeFileSync(file, text);
    let err: unknown;
    try {
      loadPins(file);
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'E_IMAGE_PINS', location: { file } });
    expect((err as Error).message).toMatch(why);
    expect((err as { hint: string }).hint).toMatch(/Restore it from a backup/);
  });
});

describe('withPins', () => {
  const first = withPins(EMPTY_PINS, new Map([[KEYSTONE, A]]), PinSource.DEPLOY, T0);

  it('pins a new image and says so', () => {
    expect(first.changes).toEqual([{ ref: KEYSTONE, digest: A }]);
    expect(first.state.images[KEYSTONE]).toEqual({ digest: A, at: T0.toISOString(), by: 'deploy' });
  });

  it('leaves an unmoved pin as it was (its time and source): nothing to write', () => {
    const again = withPins(first.state, new Map([[KEYSTONE, A]]), PinSource.PIN, T1);
    expect(again.changes).toEqual([]);
    expect(again.state).toBe(first.state);
  });

  it('moves a pin to a new digest, naming the previous one', () => {
    const moved = withPins(first.state, new Map([[KEYSTONE, B]]), PinSource.PIN, T1);
    expect(moved.changes).toEqual([{ ref: KEYSTONE, digest: B, previous: A }]);
    expect(moved.state.images[KEYSTONE]).toEqual({ digest: B, at: T1.toISOString(), by: 'pin' });
    // the state it came from is not changed
    expect(first.state.images[KEYSTONE]!.digest).toBe(A);
  });

  it('refuses a digest that is not sha256 and a reference that is not a tag reference', () => {
    expect(() => withPins(EMPTY_PINS, new Map([[KEYSTONE, 'md5:00']]), PinSource.PIN, T0)).toThrow(
      expect.objectContaining({ code: 'E_IMAGE_DIGEST' }),
    );
    expect(() => withPins(EMPTY_PINS, new Map([[`${KEYSTONE}@${A}`, A]]), PinSource.PIN, T0)).toThrow(
      expect.objectContaining({ code: 'E_IMAGE_REF' }),
    );
  });
});
