import { mkdtempSync, writeFileSync, mkdirSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildHash, buildImages, contextDigest } from '../../src/images/build.js';
import { buildOrder, defaultContainersDir, imageSpecs, LABEL } from '../../src/images/catalog.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { findMirrors, rootfsTag } from '../../src/images/rootfs.js';
import { dockerOrFail, release, testImages } from './fixture.js';

describe('image catalog', () => {
  it('orders every release image after its parent, with a build definition for each', () => {
    const specs = imageSpecs(release);
    const order = buildOrder(specs);
    expect(order.map((s) => s.key).sort()).toEqual(Object.keys(release.images).sort());
    for (const [i, s] of order.entries()) {
      if (s.from) expect(order.findIndex((p) => p.key === s.from)).toBeLessThan(i);
    }
  });

  it('builds the ancestors of a requested image, and names an unknown key', () => {
    const specs = imageSpecs(release);
    expect(buildOrder(specs, ['keystone']).map((s) => s.key)).toEqual(['base', 'openstack-base', 'keystone']);
    expect(buildOrder(specs, ['node']).map((s) => s.key)).toEqual(['base', 'node']);
    expect(() => buildOrder(specs, ['nope'])).toThrow(/no image 'nope'/);
  });

  it('tags release images <registry>/<namespace>/<key>:<tag>', () => {
    expect(imageSpecs(release).get('memcached')!.ref).toBe(`${release.registry}/stackctl/memcached:zed-1`);
  });
});

describe('build inputs', () => {
  it('reads the Debian mirrors from deb822 and one-line apt sources', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-apt-'));
    mkdirSync(join(dir, 'sources.list.d'));
    writeFileSync(
      join(dir, 'sources.list.d', 'debian.sources'),
      'Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n' +
        'Types: deb\nURIs: http://mirror.example/debian-security/\nSuites: bookworm-security\nComponents: main\n',
    );
    writeFileSync(
      join(dir, 'sources.list.d', 'other.list'),
      'deb [arch=amd64] https://vendor.example/apt stable main\n',
    );
    expect(findMirrors(dir)).toEqual({
      archive: 'http://mirror.example/debian',
      security: 'http://mirror.example/debian-security',
    });
    expect(() => findMirrors(join(dir, 'missing'))).toThrow(/no Debian mirror/);
  });

  it('changes the rootfs tag and the build hash when an input changes', () => {
    const m = { archive: 'http://a/debian', security: undefined };
    expect(rootfsTag('bookworm', m)).toBe(rootfsTag('bookworm', { ...m }));
    expect(rootfsTag('bookworm', m)).not.toBe(rootfsTag('trixie', m));
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-ctx-'));
    cpSync(join(defaultContainersDir(), 'memcached'), dir, { recursive: true });
    const spec = { ...imageSpecs(release).get('memcached')!, contextDir: dir };
    const h1 = buildHash(spec, { PACKAGES: 'memcached' }, 'sha256:1');
    expect(buildHash(spec, { PACKAGES: 'memcached' }, 'sha256:1')).toBe(h1);
    expect(buildHash(spec, { PACKAGES: 'memcached' }, 'sha256:2')).not.toBe(h1);
    expect(buildHash(spec, { PACKAGES: 'memcached curl' }, 'sha256:1')).not.toBe(h1);
    const before = contextDigest(dir);
    writeFileSync(join(dir, 'Dockerfile'), '# changed\n', { flag: 'a' });
    expect(contextDigest(dir)).not.toEqual(before);
  });
});

describe('stackctl images build (real dockerd, real debootstrap)', () => {
  let engine: LocalEngine;
  beforeAll(async () => {
    engine = await dockerOrFail();
  });

  it('builds base, memcached and the lab images, then rebuilds nothing when nothing changed', async () => {
    const first = await testImages(engine, ['memcached', 'node', 'registry']);
    expect(first.map((b) => b.key)).toEqual(['base', 'memcached', 'node', 'registry']);
    for (const b of first) {
      const img = await engine.image(b.ref);
      expect(img?.id).toBe(b.id);
      expect(img?.labels[LABEL.key]).toBe(b.key);
    }
    const started = Date.now();
    const again = await buildImages(engine, { release, only: ['memcached', 'node', 'registry'] });
    const seconds = (Date.now() - started) / 1000;
    expect(again.every((b) => b.cached)).toBe(true);
    expect(again.map((b) => b.id)).toEqual(first.map((b) => b.id));
    // An unchanged rebuild is one inspect per image: well under a second; allow for a loaded machine.
    expect(seconds).toBeLessThan(5);
  }, 900_000);

  it('the memcached image runs its service from the release packages', async () => {
    const ref = imageSpecs(release).get('memcached')!.ref;
    const name = `stackctl-test-memcached-${process.pid}`;
    await engine.createContainer({ name, image: ref, labels: { 'org.stackctl.test': 'images' } });
    try {
      await engine.start(name);
      const r = await engine.exec(name, ['sh', '-c', 'dpkg -s memcached >/dev/null && id -un']);
      expect(r.exitCode).toBe(0);
      expect(r.output.trim()).toBe('memcache');
    } finally {
      await engine.removeContainer(name);
    }
  }, 120_000);
});
