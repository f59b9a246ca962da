import { mkdtempSync, writeFileSync, mkdirSync, cpSync, readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildHash, buildImages, contextDigest } from '../../src/images/build.js';
import { buildOrder, defaultContainersDir, imageSpecs, LABEL, suiteOf } from '../../src/images/catalog.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { findMirrors, rootfsTag, type RootfsDeps } from '../../src/images/rootfs.js';
import { defaultReleasesDir } from '../../src/core/paths.js';
import { loadRelease } from '../../src/roles/release.js';
import type { Release } from '../../src/roles/schema.js';
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

  it("builds each image on its own suite, else its parent's, else the release's", () => {
    const specs = imageSpecs(release);
    expect(release.distro.suite).toBe('bookworm');
    // Zed's Open vSwitch comes from trixie (docs/lab.md); OVN and the lab images stay on bookworm
    expect(specs.get('openvswitch')!.suite).toBe('trixie');
    expect(specs.get('openvswitch')!.from).toBeUndefined();
    expect(specs.get('ovn-controller')!.suite).toBe('bookworm');
    expect(specs.get('node')!.suite).toBe('bookworm');
    expect(buildOrder(specs, ['openvswitch']).map((s) => s.key)).toEqual(['openvswitch']);
    // a child of an image with a suite of its own inherits it
    const r: Release = { ...release, images: { ...release.images, child: { tag: 'x', from: 'openvswitch' } } };
    expect(suiteOf(r, 'child')).toBe('trixie');
    expect(suiteOf(r, 'keystone')).toBe('bookworm');
  });

  it('refuses a release image naming both a parent and a suite, with its file and line', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-rel-'));
    const text = readFileSync(join(defaultReleasesDir(), 'zed.yaml'), 'utf8').replace(
      /^ {2}ovn-controller: \{ tag: zed-2, from: base,/m,
      '  ovn-controller: { tag: zed-2, suite: trixie, from: base,',
    );
    writeFileSync(join(dir, 'zed.yaml'), text);
    const line = text.split('\n').findIndex((l) => l.startsWith('  ovn-controller:')) + 1;
    expect(line).toBeGreaterThan(0);
    let err: unknown;
    try {
      loadRelease(dir, 'zed');
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'E_IMAGE_SUITE', location: { file: join(dir, 'zed.yaml'), line } });
    expect(String((err as Error).message)).toContain("image 'ovn-controller'");
  });

  it('makes one root filesystem per suite and builds each root image on its own', async () => {
    const imported: string[] = [];
    const builds: { tag: string; parent: string }[] = [];
    const engine = {
      ping: async () => undefined,
      image: async () => undefined,
      importRootfs: async (tar: Readable, repo: string, tag: string) => {
        tar.resume();
        imported.push(tag);
        return `sha256:root-${tag.split('-')[0]}`;
      },
      build: async (_dir: string, o: { tag: string; buildArgs: Record<string, string> }) => {
        builds.push({ tag: o.tag, parent: o.buildArgs['PARENT']! });
        return `sha256:${o.tag}`;
      },
    } as unknown as LocalEngine;
    const deps: RootfsDeps = {
      run: async () => undefined,
      tar: () => Readable.from([]),
      tmp: () => {
        const d = mkdtempSync(join(tmpdir(), 'stackctl-fakeroot-'));
        mkdirSync(join(d, 'etc/apt'), { recursive: true });
        return d;
      },
    };
    const mirrors = { archive: 'http://a/debian', security: undefined };
    await buildImages(engine, { release, only: ['openvswitch', 'memcached'], mirrors, rootfsDeps: deps });
    expect(imported.map((t) => t.split('-')[0]).sort()).toEqual(['bookworm', 'trixie']);
    const parentOf = (key: string): string => builds.find((b) => b.tag.includes(`/${key}:`))!.parent;
    expect(parentOf('openvswitch')).toBe('sha256:root-trixie');
    expect(parentOf('base')).toBe('sha256:root-bookworm');
    expect(parentOf('memcached')).toBe(`sha256:${imageSpecs(release).get('base')!.ref}`);
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

  it("builds Zed's Open vSwitch on trixie (not bookworm's 3.1.0, whose userspace conntrack aborts) beside bookworm's OVN", async () => {
    await testImages(engine, ['openvswitch', 'ovn-controller']);
    const run = async (key: string, script: string): Promise<string> => {
      const name = `stackctl-test-${key}-${process.pid}`;
      await engine.createContainer({
        name,
        image: imageSpecs(release).get(key)!.ref,
        cmd: ['sleep', '60'],
        labels: { 'org.stackctl.test': 'images' },
      });
      try {
        await engine.start(name);
        const r = await engine.exec(name, ['sh', '-c', script]);
        expect(r.exitCode, r.output).toBe(0);
        return r.output;
      } finally {
        await engine.removeContainer(name);
      }
    };
    const ovs = await run('openvswitch', 'cat /etc/debian_version; ovs-vswitchd --version; command -v ethtool ip');
    expect(ovs).toMatch(/^13\./);
    const [major, minor] = /ovs-vswitchd \(Open vSwitch\) (\d+)\.(\d+)/.exec(ovs)!.slice(1).map(Number);
    expect(major! * 100 + minor!).toBeGreaterThanOrEqual(302);
    const ovn = await run('ovn-controller', 'cat /etc/debian_version; ovn-controller --version; command -v ovs-vsctl');
    expect(ovn).toMatch(/^12\./);
    expect(ovn).toMatch(/^ovn-controller 23\.03\./m);
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
