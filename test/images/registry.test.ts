import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll, planOf } from '../../src/cli/context.js';
import { labImageRef } from '../../src/images/catalog.js';
import { checkTags, resolveDigests } from '../../src/images/pin.js';
import { loadPins, pinsFileFor } from '../../src/images/pins.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { ensureRegistry, pushImages, splitAddress } from '../../src/images/registry.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { dockerOrFail, release, testImages } from './fixture.js';

const NAME = `stackctl-test-registry-${process.pid}`;
const ADDRESS = `127.0.0.1:${15100 + (process.pid % 800)}`;
const REF = `${ADDRESS}/stackctl/memcached:zed-1`;
const HTTP = { scheme: 'http' } as const;

describe('the local registry (Debian docker-registry) and push', () => {
  let engine: LocalEngine;
  /** The digest the first push named. */
  let pushed = '';
  beforeAll(async () => {
    engine = await dockerOrFail();
    await testImages(engine, ['memcached', 'registry']);
  }, 900_000);
  afterAll(async () => {
    await engine?.removeContainer(NAME);
    await engine?.removeImage(REF); // the push tag only
  });

  it('checks the address form', () => {
    expect(splitAddress('127.0.0.1:5000')).toEqual({ host: '127.0.0.1', port: '5000' });
    expect(() => splitAddress('127.0.0.1')).toThrow(/not host:port/);
  });

  it('starts once (re-entrant) and receives a pushed image, naming its digest as the registry does', async () => {
    const first = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME });
    expect(first.created).toBe(true);
    const again = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME });
    expect(again.created).toBe(false);
    const lines: string[] = [];
    const r = await pushImages(engine, release, ADDRESS, ['memcached'], (l) => lines.push(l));
    expect(r.pushed.map((p) => p.ref)).toEqual([REF]);
    const tags = (await (await fetch(`http://${ADDRESS}/v2/stackctl/memcached/tags/list`)).json()) as {
      tags: string[];
    };
    expect(tags.tags).toContain('zed-1');
    expect(lines.some((l) => l.includes('digest:'))).toBe(true);
    pushed = r.pushed[0]!.digest;
    expect(pushed).toMatch(/^sha256:[0-9a-f]{64}$/);
    // read back through the registry API: the digest of the push is the one the tag names
    expect(await resolveDigests([REF], HTTP)).toEqual(new Map([[REF, pushed]]));
  }, 300_000);

  it('pins the tag once; another image pushed under it moves nothing until images pin --refresh', async () => {
    // a cloud whose nodes pull from this registry
    const inv = join(tempDir('stackctl-pin-'), 'lab.yaml');
    const lab = readFileSync(join(import.meta.dirname, '..', '..', 'inventories', 'lab.yaml'), 'utf8');
    writeFileSync(inv, lab.replace('registry: 192.168.24.1:5000', `registry: ${ADDRESS}`));
    const memcached = () => {
      const all = loadAll({ inventory: inv });
      const c = planOf(all).plan.nodes[0]!.containers.find((x) => x.name === 'memcached')!;
      return { image: c.image, hash: c.hash, pins: all.pins, images: planOf(all).plan.images };
    };
    expect(memcached().image).toBe(REF); // no pin yet: the tag

    const p1 = await runCli('images', 'pin', '-i', inv, '--only', 'memcached');
    expect(p1.code, p1.stderr).toBe(0);
    expect(p1.stdout).toMatch(new RegExp(`${REF}\\s+${pushed.slice(0, 19)}\\s+pinned\\n`));
    expect(loadPins(pinsFileFor(inv)).images[REF]).toMatchObject({ digest: pushed, by: 'pin' });
    const before = memcached();
    expect(before.image).toBe(`${REF}@${pushed}`);

    // Someone pushes another image under the same tag.
    await engine.tag(labImageRef(release, 'registry'), REF);
    const moved = (await engine.push(REF, () => undefined))!;
    expect(moved).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(moved).not.toBe(pushed);
    expect(await resolveDigests([REF], HTTP)).toEqual(new Map([[REF, moved]]));

    // The cloud's plan does not move: same reference, same container hash, pin file untouched.
    const text = readFileSync(pinsFileFor(inv), 'utf8');
    expect(memcached()).toMatchObject({ image: before.image, hash: before.hash });
    const p2 = await runCli('images', 'pin', '-i', inv, '--only', 'memcached');
    expect(p2.code, p2.stderr).toBe(0);
    expect(p2.stdout).toContain('pinned already');
    expect(readFileSync(pinsFileFor(inv), 'utf8')).toBe(text);
    // status sees the move (what `stackctl status` reports as drift)
    expect(
      await checkTags(
        before.images.filter((i) => i.key === 'memcached'),
        HTTP,
      ),
    ).toEqual([{ ref: REF, pinned: pushed, state: 'moved', current: moved }]);

    // On purpose: --refresh moves the pin, and with it the container hash.
    const p3 = await runCli('images', 'pin', '-i', inv, '--only', 'memcached', '--refresh');
    expect(p3.code, p3.stderr).toBe(0);
    expect(p3.stdout).toContain(`moved from ${pushed.slice(0, 19)}`);
    const after = memcached();
    expect(after.image).toBe(`${REF}@${moved}`);
    expect(after.hash).not.toBe(before.hash);

    // `images push -i` pins what it pushed: memcached again, under the same tag.
    const p4 = await runCli(
      'images',
      'push',
      '--only',
      'memcached',
      '--registry',
      ADDRESS,
      '--registry-container',
      NAME,
      '-i',
      inv,
    );
    expect(p4.code, p4.stderr).toBe(0);
    const now = (await resolveDigests([REF], HTTP)).get(REF)!;
    expect(now).not.toBe(moved);
    expect(p4.stdout).toContain(`re-pinned ${REF}: ${moved.slice(0, 19)} -> ${now.slice(0, 19)}`);
    expect(loadPins(pinsFileFor(inv)).images[REF]).toMatchObject({ digest: now, by: 'push' });
  }, 300_000);
});
