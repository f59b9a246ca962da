import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { ensureRegistry, pushImages, splitAddress } from '../../src/images/registry.js';
import { dockerOrFail, release, testImages } from './fixture.js';

const NAME = `stackctl-test-registry-${process.pid}`;
const ADDRESS = `127.0.0.1:${15100 + (process.pid % 800)}`;

describe('the local registry (Debian docker-registry) and push', () => {
  let engine: LocalEngine;
  beforeAll(async () => {
    engine = await dockerOrFail();
    await testImages(engine, ['memcached', 'registry']);
  }, 900_000);
  afterAll(async () => {
    await engine?.removeContainer(NAME);
    await engine?.removeImage(`${ADDRESS}/stackctl/memcached:zed-1`); // the push tag only
  });

  it('checks the address form', () => {
    expect(splitAddress('127.0.0.1:5000')).toEqual({ host: '127.0.0.1', port: '5000' });
    expect(() => splitAddress('127.0.0.1')).toThrow(/not host:port/);
  });

  it('starts once (re-entrant) and receives a pushed image', async () => {
    const first = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME });
    expect(first.created).toBe(true);
    const again = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME });
    expect(again.created).toBe(false);
    const lines: string[] = [];
    const r = await pushImages(engine, release, ADDRESS, ['memcached'], (l) => lines.push(l));
    expect(r.pushed.map((p) => p.ref)).toEqual([`${ADDRESS}/stackctl/memcached:zed-1`]);
    const tags = (await (await fetch(`http://${ADDRESS}/v2/stackctl/memcached/tags/list`)).json()) as {
      tags: string[];
    };
    expect(tags.tags).toContain('zed-1');
    expect(lines.some((l) => l.includes('digest:'))).toBe(true);
  }, 300_000);
});
