/**
 * What `privileged: true` maps to is hashed into the plan: a new mapping (a Docker option added to
 * the privileged set, as the unmasked /proc and /sys paths were) changes the hash of exactly the
 * privileged containers, so the next deploy recreates those and leaves every other container alone.
 * The plan module is loaded twice, once with the mapping replaced.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { PRIVILEGED_OPTIONS } from '../../src/roles/privileged.js';
import { containerSpec } from '../../src/orchestrator/state.js';

type Hashes = Map<string, string>;

async function hashes(): Promise<{ hashes: Hashes; privileged: Set<string> }> {
  const { planFromText, catalog } = await import('../helpers/plan.js');
  const r = planFromText(generateInventoryYaml({ controllers: 1, computes: 1 }));
  const out: Hashes = new Map();
  for (const n of r.plan.nodes) for (const c of n.containers) out.set(`${n.name}/${c.name}`, c.hash);
  const privileged = new Set<string>();
  for (const s of catalog.services.values()) for (const c of s.containers) if (c.privileged) privileged.add(c.name);
  return { hashes: out, privileged };
}

describe('the privileged mapping in the plan', () => {
  afterEach(() => {
    vi.doUnmock('../../src/roles/privileged.js');
    vi.resetModules();
  });

  it('is what the engine creates a privileged container with', () => {
    const spec = containerSpec('c', {
      name: 'x',
      image: 'i',
      definition: { name: 'x', image: 'i', privileged: true },
    } as unknown as Parameters<typeof containerSpec>[1]);
    expect(spec).toMatchObject({
      capAdd: [...PRIVILEGED_OPTIONS.capAdd],
      capDrop: [...PRIVILEGED_OPTIONS.capDrop],
      securityOpt: [...PRIVILEGED_OPTIONS.securityOpt],
      deviceCgroupRules: [...PRIVILEGED_OPTIONS.deviceCgroupRules],
      unmaskPaths: true,
    });
  });

  it('recreates exactly the privileged containers when it changes', async () => {
    vi.resetModules();
    const before = await hashes();
    expect(before.privileged.size).toBeGreaterThan(0);
    vi.resetModules();
    vi.doMock('../../src/roles/privileged.js', () => ({
      PRIVILEGED_OPTIONS: { ...PRIVILEGED_OPTIONS, unmaskPaths: false },
    }));
    const after = await hashes();
    expect([...after.hashes.keys()]).toEqual([...before.hashes.keys()]);
    const changed = [...after.hashes].filter(([k, h]) => before.hashes.get(k) !== h).map(([k]) => k);
    const expected = [...before.hashes.keys()].filter((k) => before.privileged.has(k.split('/')[1]!));
    expect(expected.length).toBeGreaterThan(0);
    expect(changed.sort()).toEqual(expected.sort());
  });
});
