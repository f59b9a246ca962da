/**
 * The registry API v2 calls behind pinning, with an injected fetch: what is asked (HEAD, the manifest
 * media types, the digest of a pinned reference), and how each answer is read. The same calls against
 * Debian's docker-registry are in registry.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { checkTags, resolveDigests, shortRef, TagState } from '../../src/images/pin.js';
import { headManifests, ImagesMissing, MANIFEST_MEDIA_TYPES, parseImageRef } from '../../src/images/registry-api.js';

const A = `sha256:${'a'.repeat(64)}`;
const B = `sha256:${'b'.repeat(64)}`;
const KEYSTONE = '10.0.0.1:5000/stackctl/keystone:zed-1';
const MEMCACHED = '10.0.0.1:5000/stackctl/memcached:zed-1';

/** A registry answering HEAD from a table `path -> [status, digest]`; records what it was asked. */
function registry(table: Record<string, readonly [number, string?]>) {
  const asked: { url: string; init: RequestInit | undefined }[] = [];
  const fetch = (async (url: string | URL | Request, init?: RequestInit) => {
    asked.push({ url: String(url), init });
    const [status, digest] = table[new URL(String(url)).pathname] ?? [404];
    return new Response(null, { status, headers: digest ? { 'Docker-Content-Digest': digest } : {} });
  }) as typeof globalThis.fetch;
  return { fetch, asked };
}

describe('image references', () => {
  it.each([
    { ref: KEYSTONE, parsed: { registry: '10.0.0.1:5000', repository: 'stackctl/keystone', tag: 'zed-1' } },
    {
      ref: `${KEYSTONE}@${A}`,
      parsed: { registry: '10.0.0.1:5000', repository: 'stackctl/keystone', tag: 'zed-1', digest: A },
    },
    {
      ref: `reg.example/stackctl/keystone@${A}`,
      parsed: { registry: 'reg.example', repository: 'stackctl/keystone', digest: A },
    },
  ])('$ref', ({ ref, parsed }) => {
    expect(parseImageRef(ref)).toEqual(parsed);
  });

  it('refuses a reference without registry, without tag or digest, or with a short digest', () => {
    for (const ref of ['keystone:zed-1', '10.0.0.1:5000/stackctl/keystone', `${KEYSTONE}@sha256:abc`])
      expect(() => parseImageRef(ref), ref).toThrow(expect.objectContaining({ code: 'E_IMAGE_REF' }));
  });

  it('shortens a pinned reference for tables', () => {
    expect(shortRef(`${KEYSTONE}@${A}`)).toBe(`${KEYSTONE}@sha256:aaaaaaaaaaaa`);
    expect(shortRef(KEYSTONE)).toBe(KEYSTONE);
  });
});

describe('resolving tags to digests', () => {
  it('HEADs each manifest with every manifest media type and takes Docker-Content-Digest', async () => {
    const r = registry({
      '/v2/stackctl/keystone/manifests/zed-1': [200, A],
      '/v2/stackctl/memcached/manifests/zed-1': [200, B],
    });
    const digests = await resolveDigests([KEYSTONE, MEMCACHED], { scheme: 'http', fetch: r.fetch });
    expect(digests).toEqual(
      new Map([
        [KEYSTONE, A],
        [MEMCACHED, B],
      ]),
    );
    expect(r.asked.map((a) => a.url)).toEqual([
      'http://10.0.0.1:5000/v2/stackctl/keystone/manifests/zed-1',
      'http://10.0.0.1:5000/v2/stackctl/memcached/manifests/zed-1',
    ]);
    expect(r.asked[0]!.init?.method).toBe('HEAD');
    const accept = (r.asked[0]!.init?.headers as Record<string, string>).Accept!;
    for (const t of MANIFEST_MEDIA_TYPES) expect(accept).toContain(t);
  });

  it('asks over HTTPS when told so, and at another address when given one', async () => {
    const r = registry({ '/v2/stackctl/keystone/manifests/zed-1': [200, A] });
    await resolveDigests([KEYSTONE], { scheme: 'https', fetch: r.fetch });
    await resolveDigests([KEYSTONE], { scheme: 'http', address: '127.0.0.1:5000', fetch: r.fetch });
    expect(r.asked.map((a) => a.url)).toEqual([
      'https://10.0.0.1:5000/v2/stackctl/keystone/manifests/zed-1',
      'http://127.0.0.1:5000/v2/stackctl/keystone/manifests/zed-1',
    ]);
  });

  it('names every missing tag at once (E_IMAGE_NOT_IN_REGISTRY)', async () => {
    const r = registry({ '/v2/stackctl/keystone/manifests/zed-1': [200, A] });
    const err = await resolveDigests([KEYSTONE, MEMCACHED], { fetch: r.fetch, release: 'zed' }).catch((e) => e);
    expect(err).toBeInstanceOf(ImagesMissing);
    expect((err as ImagesMissing).missing).toEqual(['stackctl/memcached:zed-1']);
  });

  it('refuses an answer without a sha256 digest, and a pinned reference answered with another digest', async () => {
    const none = registry({ '/v2/stackctl/keystone/manifests/zed-1': [200] });
    await expect(resolveDigests([KEYSTONE], { fetch: none.fetch })).rejects.toMatchObject({
      code: 'E_REGISTRY_DIGEST',
    });
    const other = registry({ [`/v2/stackctl/keystone/manifests/${encodeURIComponent(A)}`]: [200, B] });
    await expect(headManifests([`${KEYSTONE}@${A}`], { fetch: other.fetch })).rejects.toMatchObject({
      code: 'E_REGISTRY_DIGEST',
    });
    // a pinned reference is asked for by its digest, not its tag
    expect(other.asked[0]!.url).toBe(`http://10.0.0.1:5000/v2/stackctl/keystone/manifests/${encodeURIComponent(A)}`);
  });

  it('an existence check makes do without the digest header for a tag', async () => {
    const none = registry({ '/v2/stackctl/keystone/manifests/zed-1': [200] });
    expect((await headManifests([KEYSTONE], { fetch: none.fetch }, false)).digests).toEqual(new Map([[KEYSTONE, '']]));
  });
});

describe('checkTags: where pinned tags point now', () => {
  it('tells pinned, moved and gone tags apart, and asks nothing about unpinned images', async () => {
    const NOVA = '10.0.0.1:5000/stackctl/nova-api:zed-1';
    const r = registry({
      '/v2/stackctl/keystone/manifests/zed-1': [200, A],
      '/v2/stackctl/memcached/manifests/zed-1': [200, B],
    });
    const checks = await checkTags(
      [
        { key: 'keystone', ref: KEYSTONE, digest: A },
        { key: 'memcached', ref: MEMCACHED, digest: A },
        { key: 'nova-api', ref: NOVA, digest: A },
        { key: 'glance-api', ref: '10.0.0.1:5000/stackctl/glance-api:zed-1' },
      ],
      { fetch: r.fetch },
    );
    expect(checks).toEqual([
      { ref: KEYSTONE, pinned: A, state: TagState.PINNED },
      { ref: MEMCACHED, pinned: A, state: TagState.MOVED, current: B },
      { ref: NOVA, pinned: A, state: TagState.GONE },
    ]);
    expect(r.asked).toHaveLength(3);
  });

  it('reports a registry that refuses as a remote failure, not as a moved tag', async () => {
    const r = registry({ '/v2/stackctl/keystone/manifests/zed-1': [500] });
    await expect(checkTags([{ key: 'keystone', ref: KEYSTONE, digest: A }], { fetch: r.fetch })).rejects.toMatchObject({
      code: 'E_REGISTRY',
    });
  });
});
