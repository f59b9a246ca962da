/**
 * Benchmark: validate + plan for generated inventories of 100, 1,000 and
 * 10,000 nodes (3 controllers, the rest computes), in one process, side by
 * side. Prints wall time per phase (median of several runs) and time per node,
 * so linear growth shows as a flat per-node figure. Goal: 10,000 nodes < 1 s.
 *
 *   npm run bench            (or: node dist/bench/plan.bench.js [sizes...])
 */
import { performance } from 'node:perf_hooks';
import { defaultReleasesDir, defaultRolesDir } from '../src/core/paths.js';
import { sha256 } from '../src/core/hash.js';
import { allocate, EMPTY_IPAM } from '../src/inventory/ipam.js';
import { generateInventoryYaml } from '../src/inventory/generate.js';
import { parseInventory } from '../src/inventory/load.js';
import { loadCatalog } from '../src/roles/catalog.js';
import { buildPlan } from '../src/roles/plan.js';
import { loadRelease } from '../src/roles/release.js';

const sizes = process.argv
  .slice(2)
  .map(Number)
  .filter((n) => n > 0);
const SIZES = sizes.length ? sizes : [100, 1_000, 10_000];
const RUNS = Number(process.env.BENCH_RUNS ?? 5);

const catalog = loadCatalog(defaultRolesDir());
const release = loadRelease(defaultReleasesDir(), 'zed');

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

interface Row {
  nodes: number;
  validate: number;
  ipam: number;
  plan: number;
  total: number;
}

function runOnce(text: string): Omit<Row, 'nodes'> {
  const t0 = performance.now();
  const loaded = parseInventory('bench.yaml', text, { roles: catalog.roleInfo });
  const t1 = performance.now();
  const alloc = allocate(loaded.inventory, loaded.networks, catalog.roleInfo, EMPTY_IPAM, (p) =>
    loaded.source.locate(p),
  );
  const t2 = performance.now();
  buildPlan({
    inventory: loaded.inventory,
    inventoryDigest: sha256(text),
    catalog,
    release,
    addresses: alloc.addresses,
  });
  const t3 = performance.now();
  return { validate: t1 - t0, ipam: t2 - t1, plan: t3 - t2, total: t3 - t0 };
}

const rows: Row[] = [];
for (const n of SIZES) {
  const text = generateInventoryYaml({ controllers: 3, computes: n - 3 });
  runOnce(text); // warm-up: JIT, schema compilation
  const samples = Array.from({ length: RUNS }, () => runOnce(text));
  rows.push({
    nodes: n,
    validate: median(samples.map((s) => s.validate)),
    ipam: median(samples.map((s) => s.ipam)),
    plan: median(samples.map((s) => s.plan)),
    total: median(samples.map((s) => s.total)),
  });
}

const fmt = (ms: number): string => ms.toFixed(1).padStart(9);
console.log(`validate + plan, median of ${RUNS} runs (ms); node ${process.version}`);
console.log('    nodes  validate      ipam      plan     total   us/node');
for (const r of rows) {
  console.log(
    `${String(r.nodes).padStart(9)}${fmt(r.validate)}${fmt(r.ipam)}${fmt(r.plan)}${fmt(r.total)}${((r.total * 1000) / r.nodes).toFixed(1).padStart(10)}`,
  );
}
const first = rows[0]!;
const last = rows[rows.length - 1]!;
console.log(
  `growth ${first.nodes} -> ${last.nodes} nodes: x${(last.total / first.total).toFixed(1)} time for x${(last.nodes / first.nodes).toFixed(0)} nodes`,
);
if (last.nodes >= 10_000)
  console.log(`10,000-node goal (< 1000 ms): ${last.total < 1000 ? 'met' : 'NOT met'} (${last.total.toFixed(0)} ms)`);
