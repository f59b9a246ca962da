import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RemoteError } from '../../src/core/errors.js';
import { ensureRegistry, pushImages } from '../../src/images/registry.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { checkImagesPresent, ImagesMissing, MANIFEST_MEDIA_TYPES, parseImageRef } from '../../src/upgrade/images.js';
import { dockerOrFail, release, testImages } from '../images/fixture.js';

// NOTE: a port of its own: test/images/registry.test.ts uses 15100-15899.
const ADDRESS = '127.0.0.1:17950';
const NAME = `stackctl-test-upgrade-registry-${process.pid}`;

describe('the target-images precheck against a real registry (HTTP API v2)', () => {
  let engine: LocalEngine;
  beforeAll(async () => {
    engine = await dockerOrFail();
    await testImages(engine, ['memcached', 'registry']);
    await ensureRegistry(engine, { release, address: ADDRESS, container: NAME });
    const r = await pushImages(engine, release, ADDRESS, ['memcached'], () => {});
    expect(r.pushed).toHaveLength(1);
  }, 900_000);
  afterAll(async () => {
    await engine?.removeContainer(NAME);
    await engine?.removeImage(`${ADDRESS}/stackctl/memcached:zed-1`); // the push tag only
  });

  it('finds a pushed image', async () => {
    const r = await checkImagesPresent([`${ADDRESS}/stackctl/memcached:zed-1`]);
    expect(r.present).toEqual([`${ADDRESS}/stackctl/memcached:zed-1`]);
  });

  it('refuses, naming image:tag, when an image is missing, and asks the given address instead of the plan one', async () => {
    const refs = ['192.168.24.1:5000/stackctl/memcached:zed-1', '192.168.24.1:5000/stackctl/keystone:zed-2'];
    let err: unknown;
    try {
      await checkImagesPresent(refs, { address: ADDRESS, release: 'zed-update' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ImagesMissing);
    const e = err as ImagesMissing;
    expect(e.code).toBe('E_IMAGE_NOT_IN_REGISTRY');
    expect(e.missing).toEqual(['stackctl/keystone:zed-2']);
    expect(e.message).toContain('stackctl/keystone:zed-2');
    expect(e.message).not.toContain('memcached');
    expect(e.hint).toMatch(/Nothing was stopped/);
  });

  it('reports a registry that does not answer as a remote failure', async () => {
    await expect(
      checkImagesPresent(['127.0.0.1:17951/stackctl/memcached:zed-1'], { timeoutMs: 2000 }),
    ).rejects.toMatchObject({ code: 'E_REGISTRY_UNREACHABLE' });
  });
});

describe('checkImagesPresent with an injected fetch', () => {
  it('sends HEAD with every manifest media type, and turns other statuses into RemoteError', async () => {
    const seen: { url: string; init: RequestInit | undefined }[] = [];
    const fake = (async (url: string | URL | Request, init?: RequestInit) => {
      seen.push({ url: String(url), init });
      return new Response(null, { status: 500 });
    }) as typeof fetch;
    const err = await checkImagesPresent(['reg.example:5000/stackctl/nova-api:zed-2'], { fetch: fake }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RemoteError);
    expect(err).toMatchObject({ code: 'E_REGISTRY' });
    expect(seen[0]!.url).toBe('http://reg.example:5000/v2/stackctl/nova-api/manifests/zed-2');
    expect(seen[0]!.init?.method).toBe('HEAD');
    const accept = (seen[0]!.init?.headers as Record<string, string>).Accept!;
    for (const t of MANIFEST_MEDIA_TYPES) expect(accept).toContain(t);
  });

  it('parses references and refuses one without a registry', () => {
    expect(parseImageRef('192.168.24.1:5000/stackctl/keystone:zed-2')).toEqual({
      registry: '192.168.24.1:5000',
      repository: 'stackctl/keystone',
      tag: 'zed-2',
    });
    expect(() => parseImageRef('keystone')).toThrow(expect.objectContaining({ code: 'E_IMAGE_REF' }));
  });
});
