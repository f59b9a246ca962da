/**
 * Image pins as an input of the plan: a pinned image is pulled and run as `ref@sha256:…`, its
 * digest (not what the tag names in the registry, which the plan never asks) enters the container
 * hash, and the deploy pulls and creates containers from those references.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { sha256 } from '../../src/core/hash.js';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { allocate, EMPTY_IPAM } from '../../src/inventory/ipam.js';
import { parseInventory } from '../../src/inventory/load.js';
import { unpinnedOf } from '../../src/cli/deploy.js';
import { unpinnedImages } from '../../src/images/pin.js';
import { planConverge } from '../../src/orchestrator/converge.js';
import type { EngineContext } from '../../src/orchestrator/context.js';
import { pull } from '../../src/orchestrator/handlers.js';
import type { RunScope } from '../../src/orchestrator/engine.js';
import type { NodeAction } from '../../src/orchestrator/model.js';
import { planDeploy } from '../../src/orchestrator/planner.js';
import { ContainerAction, containerSpec } from '../../src/orchestrator/state.js';
import { buildPlan, type PlanResult } from '../../src/roles/plan.js';
import { catalog, release } from '../helpers/plan.js';
import { copyInventory, runCli } from '../helpers/cli.js';
import { pinsFileFor } from '../../src/images/pins.js';

const TEXT = generateInventoryYaml({ name: 'lab', controllers: 1, computes: 1, lab: true }).replace(
  'release: zed }',
  'release: zed, settings: { nova_compute_driver: fake.FakeDriver } }',
);
const REGISTRY = '192.168.24.1:5000'; // the release's: the generated inventory names none
const KEYSTONE = `${REGISTRY}/stackctl/keystone:zed-1`;
const digest = (c: string): string => `sha256:${c.repeat(64)}`;

/** The plan of the lab-shaped inventory with these pins (tag reference -> digest). */
function planWith(pins?: ReadonlyMap<string, string>): PlanResult {
  const loaded = parseInventory('lab.yaml', TEXT, { roles: catalog.roleInfo });
  const alloc = allocate(loaded.inventory, loaded.networks, catalog.roleInfo, EMPTY_IPAM, (p) =>
    loaded.source.locate(p),
  );
  return buildPlan({
    inventory: loaded.inventory,
    inventoryDigest: sha256(TEXT),
    catalog,
    release,
    addresses: alloc.addresses,
    ...(pins ? { pins } : {}),
  });
}

/** Every image of the plan pinned to `d`. */
const allPinned = (d: string): Map<string, string> => new Map(planWith().plan.images.map((i) => [i.ref, d] as const));

const keystoneHash = (r: PlanResult): string =>
  r.plan.nodes.find((n) => n.name === 'ctl-0')!.containers.find((c) => c.name === 'keystone')!.hash;

describe('a plan with image pins', () => {
  it('lists each image the cloud runs once, with its pin, and runs pinned images by digest', () => {
    const unpinned = planWith();
    expect(unpinned.plan.images.map((i) => i.key)).toContain('keystone');
    expect(unpinned.plan.images.every((i) => i.digest === undefined)).toBe(true);
    expect(unpinnedImages(unpinned.plan)).toContain(KEYSTONE);

    const pinned = planWith(new Map([[KEYSTONE, digest('a')]]));
    expect(pinned.plan.images.find((i) => i.key === 'keystone')).toEqual({
      key: 'keystone',
      ref: KEYSTONE,
      digest: digest('a'),
    });
    const ks = pinned.plan.nodes.find((n) => n.name === 'ctl-0')!.containers.find((c) => c.name === 'keystone')!;
    expect(ks.image).toBe(`${KEYSTONE}@${digest('a')}`);
    // the others keep their tags until they are pinned
    const mc = pinned.plan.nodes.find((n) => n.name === 'ctl-0')!.containers.find((c) => c.name === 'memcached')!;
    expect(mc.image).toBe(`${REGISTRY}/stackctl/memcached:zed-1`);
    expect(unpinnedImages(pinned.plan)).not.toContain(KEYSTONE);
  });

  it('changes the container hash when the pin changes, and only then', () => {
    const a = planWith(new Map([[KEYSTONE, digest('a')]]));
    const again = planWith(new Map([[KEYSTONE, digest('a')]]));
    const b = planWith(new Map([[KEYSTONE, digest('b')]]));
    // The registry is no input: the same pins give the same plan, whatever the tag names there now.
    expect(keystoneHash(again)).toBe(keystoneHash(a));
    expect(keystoneHash(b)).not.toBe(keystoneHash(a));
    expect(keystoneHash(planWith())).not.toBe(keystoneHash(a));
    // a pin of one image changes no other container
    const others = (r: PlanResult) =>
      r.plan.nodes.flatMap((n) => n.containers.filter((c) => c.service !== 'keystone').map((c) => c.hash));
    expect(others(b)).toEqual(others(a));
  });

  it('hands the deploy pinned references: containers, their inputs and the images of run-once tasks', () => {
    const d = digest('c');
    const deploy = planDeploy(planWith(allPinned(d)).effective, catalog);
    const works = deploy.steps.flatMap((s) => s.nodes.flatMap((n) => n.containers));
    expect(works.length).toBeGreaterThan(5);
    for (const w of works) {
      expect(w.image, w.name).toMatch(new RegExp(`^${REGISTRY}/stackctl/[a-z-]+:zed-[12]@${d}$`));
      expect(w.inputs.image).toBe(w.image);
      expect(containerSpec('lab', w).image).toBe(w.image);
    }
    const taskImages = deploy.steps.flatMap((s) => s.nodes.flatMap((n) => n.images));
    expect(taskImages.length).toBeGreaterThan(0);
    for (const i of taskImages) expect(i).toContain(`@${d}`);
  });

  it('a deploy pins only what it pulls: the images of its services and of their tasks', () => {
    const plan = planWith(new Map([[KEYSTONE, digest('a')]])).effective;
    expect(unpinnedOf(planDeploy(plan, catalog, { services: ['memcached'] }))).toEqual([
      `${REGISTRY}/stackctl/memcached:zed-1`,
    ]);
    expect(unpinnedOf(planDeploy(plan, catalog, { services: ['keystone'] }))).toEqual([]);
    expect(unpinnedOf(planDeploy(planWith(allPinned(digest('e'))).effective, catalog))).toEqual([]);
  });

  it('makes a fresh deploy pull the pinned references, and the pull handler asks Docker for exactly those', async () => {
    const d = digest('d');
    const deploy = planDeploy(planWith(allPinned(d)).effective, catalog);
    const containers = new Map(
      deploy.steps.flatMap((s) =>
        s.nodes.flatMap((n) =>
          n.containers.map((w) => [`${n.node}/${w.name}`, { work: w, action: ContainerAction.CREATE, changed: [] }]),
        ),
      ),
    );
    // the nodes have none of the images (the observation looked each up by the reference it would pull)
    const images = new Map(
      deploy.steps.flatMap((s) =>
        s.nodes.flatMap((n) =>
          [...n.containers.map((w) => w.image), ...n.images].map((i) => [`${n.node}/${i}`, false]),
        ),
      ),
    );
    const c = planConverge(
      deploy,
      { containers, configs: new Map(), images, done: new Set(), unreachable: new Map() },
      catalog,
    );
    const pulls = c.phases
      .flatMap((p) => p.steps.flatMap((s) => s.actions))
      .filter((a): a is Extract<NodeAction, { kind: 'pull' }> => a.kind === 'pull');
    expect(pulls.length).toBeGreaterThan(0);
    for (const a of pulls) for (const i of a.images) expect(i).toMatch(new RegExp(`:zed-[12]@${d}$`));

    // the handler: what it hands to the node's Docker engine
    const pulled: string[] = [];
    const action = pulls.find((a) => a.node === 'ctl-0')!;
    const ctx = {
      now: () => 0,
      connect: () => ({
        node: 'ctl-0',
        docker: { imageExists: async () => false, pullImage: async (ref: string) => void pulled.push(ref) },
      }),
    } as unknown as EngineContext;
    const run = {
      effect: async <T>(_e: unknown, act: () => Promise<T>) => act(),
      verify: () => undefined,
      change: () => undefined,
      where: (node: string, what: string) => `${node}/${what}`,
    } as unknown as RunScope;
    expect(await pull(action, ctx, run)).toBe(`${action.images.length} pulled, 0 present`);
    expect(pulled).toEqual([...action.images]);
    expect(pulled.every((r) => r.includes(`@${d}`))).toBe(true);
  });
});

describe('stackctl plan and image pins', () => {
  it('a registry that does not answer: the plan is printed with its tags and a warning, no pin written', async () => {
    const inv = copyInventory('lab.yaml');
    // nothing listens on port 1 of this machine: refused at once
    writeFileSync(inv, readFileSync(inv, 'utf8').replace('registry: 192.168.24.1:5000', 'registry: 127.0.0.1:1'));
    const r = await runCli('plan', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(
      /warning W_IMAGES_UNPINNED: \d+ image\(s\) not pinned: the registry 127\.0\.0\.1:1 does not answer/,
    );
    expect(r.stdout).toMatch(/^127\.0\.0\.1:1\/stackctl\/keystone:zed-1\s+not pinned \(deploy pins it\)$/m);
    expect(existsSync(pinsFileFor(inv))).toBe(false);
    // the IPAM allocations were saved all the same
    expect(existsSync(inv.replace(/\.yaml$/, '.ipam.json'))).toBe(true);
    // --no-save asks no registry: no warning
    const n = await runCli('plan', '--no-save', '-i', inv);
    expect(n.code).toBe(0);
    expect(n.stderr).not.toContain('W_IMAGES_UNPINNED');
  });
});
