/**
 * The node state store alone: what one transition (`NodeStateStore.apply`)
 * costs with N nodes in the files, for the store with its journal
 * (src/provision/machine.ts) and, for comparison, the single-file store it
 * replaced (kept here only, as `SingleFileStore`: read the whole file,
 * compare, serialise every node, write it atomically with fsync).
 *
 *   npm run bench:node-store
 *   BENCH_STORE_NODES=10,100,1000,10000 BENCH_STORE_APPLIES=2000 BENCH_STORE_OLD_SECONDS=20 node dist/bench/node-store.js
 *
 * Per size, both stores start from the same node state file: every node
 * manageable with two history entries (enroll and verify). Then transitions
 * inspect/done on the nodes in turn, on real files in a temporary folder
 * (BENCH_STORE_DIR, default the system's; its filesystem decides what an
 * fsync costs). Figures: transitions per second and wall time per apply
 * (apply is synchronous: that is how long it holds the event loop), the
 * longest apply (for the journal: the one that compacted), CPU per apply,
 * and bytes written per apply, counted by wrapping the store's write
 * functions. The journal store's figures include its compactions during the
 * run; its close() (the compaction a run ends with) is given apart. The old
 * store runs BENCH_STORE_APPLIES transitions or BENCH_STORE_OLD_SECONDS,
 * whichever ends first (at 10,000 nodes one of its applies takes long).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { readTextFileIfExists, writeFileAtomic } from '../src/core/fs.js';
import { NodeStateStore, applyEvent, newRecord, type NodeRecord } from '../src/provision/machine.js';
import { DISK_NODE_FILES, type NodeFiles } from '../src/provision/node-files.js';
import { parseNodesFile, serializeNodes } from '../src/provision/nodes-file.js';
import { NodeEvent, NodeState } from '../src/provision/states.js';

/** The single-file store before the journal, as it was: for comparison only. */
class SingleFileStore {
  readonly #records = new Map<string, NodeRecord>();
  #seen: string | undefined;
  constructor(
    readonly file: string,
    private readonly write: (file: string, text: string) => void,
  ) {
    this.#load(readTextFileIfExists(file, 64 * 1024 * 1024));
  }
  #load(text: string | undefined): void {
    this.#records.clear();
    for (const r of text === undefined ? [] : parseNodesFile(this.file, text)) this.#records.set(r.name, r);
    this.#seen = text;
  }
  get(name: string): NodeRecord {
    return this.#records.get(name) ?? newRecord(name);
  }
  apply(name: string, event: NodeEvent, reason = ''): NodeRecord {
    const current = readTextFileIfExists(this.file, 64 * 1024 * 1024);
    if (current !== this.#seen) this.#load(current);
    const after = applyEvent(this.get(name), event, reason, new Date());
    const next = new Map(this.#records).set(name, after);
    const text = serializeNodes(next);
    this.write(this.file, text);
    this.#records.set(name, after);
    this.#seen = text;
    return after;
  }
}

interface Store {
  get(name: string): NodeRecord;
  apply(name: string, event: NodeEvent, reason?: string): NodeRecord;
}

interface Run {
  readonly applies: number;
  readonly wallMs: number;
  readonly maxMs: number;
  readonly cpuMs: number;
  readonly bytes: number;
}

function envList(name: string, fallback: number[]): number[] {
  const v = process.env[name];
  return v ? v.split(',').map(Number) : fallback;
}
const envNum = (name: string, fallback: number): number => Number(process.env[name] ?? fallback) || fallback;

const nameOf = (i: number): string => `node-${String(i).padStart(5, '0')}`;

/** The starting file: n nodes, manageable, two entries each. */
function startingFile(n: number): string {
  const records = new Map<string, NodeRecord>();
  const t = new Date(Date.UTC(2026, 0, 1));
  for (let i = 0; i < n; i++) {
    const r = applyEvent(
      applyEvent(newRecord(nameOf(i)), NodeEvent.MANAGE, 'operator: enroll', t),
      NodeEvent.DONE,
      'BMC answers',
      t,
    );
    records.set(r.name, r);
  }
  return serializeNodes(records);
}

function drive(store: Store, n: number, applies: number, seconds: number, written: () => number): Run {
  const cpu0 = process.cpuUsage();
  const bytes0 = written();
  const t0 = performance.now();
  let maxMs = 0;
  let done = 0;
  for (; done < applies && performance.now() - t0 < seconds * 1000; done++) {
    const name = nameOf(done % n);
    const event = store.get(name).state === NodeState.MANAGEABLE ? NodeEvent.INSPECT : NodeEvent.DONE;
    const a = performance.now();
    store.apply(name, event, 'bench');
    maxMs = Math.max(maxMs, performance.now() - a);
  }
  const cpu = process.cpuUsage(cpu0);
  return {
    applies: done,
    wallMs: performance.now() - t0,
    maxMs,
    cpuMs: (cpu.user + cpu.system) / 1000,
    bytes: written() - bytes0,
  };
}

function row(label: string, n: number, r: Run): string {
  const per = (x: number): string => (x / r.applies).toFixed(x / r.applies < 10 ? 2 : 0);
  return (
    `| ${n.toLocaleString('en').padStart(6)} | ${label.padEnd(12)} | ${String(r.applies).padStart(5)} | ` +
    `${((r.applies / r.wallMs) * 1000).toFixed(0).padStart(6)} /s | ${per(r.wallMs).padStart(7)} ms | ` +
    `${r.maxMs.toFixed(1).padStart(7)} ms | ${per(r.cpuMs).padStart(6)} ms | ${per(r.bytes).padStart(10)} B |`
  );
}

function main(): void {
  const sizes = envList('BENCH_STORE_NODES', [10, 100, 1000, 10000]);
  const applies = envNum('BENCH_STORE_APPLIES', 2000);
  const oldSeconds = envNum('BENCH_STORE_OLD_SECONDS', 20);
  const base = mkdtempSync(join(process.env.BENCH_STORE_DIR ?? tmpdir(), 'stackctl-bench-store-'));
  const load = (): string =>
    loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(
    `node state store, ${applies} transitions per size (the old store: at most ${oldSeconds} s); files in ${base}`,
  );
  console.log(`load average before: ${load()}`);
  console.log('| nodes  | store        | apply | rate      | wall/apply | longest    | CPU/apply | written/apply |');
  console.log('| ------ | ------------ | ----- | --------- | ---------- | ---------- | --------- | ------------- |');
  try {
    for (const n of sizes) {
      const start = startingFile(n);

      const oldFile = join(base, `old-${n}.nodes.json`);
      writeFileSync(oldFile, start);
      let oldBytes = 0;
      const old = new SingleFileStore(oldFile, (f, t) => {
        oldBytes += Buffer.byteLength(t);
        writeFileAtomic(f, t);
      });
      console.log(
        row(
          'single file',
          n,
          drive(old, n, applies, oldSeconds, () => oldBytes),
        ),
      );

      const newFile = join(base, `new-${n}.nodes.json`);
      writeFileSync(newFile, start);
      let newBytes = 0;
      const files: NodeFiles = {
        ...DISK_NODE_FILES,
        replace: (f, t) => ((newBytes += Buffer.byteLength(t)), DISK_NODE_FILES.replace(f, t)),
        append: (f, at, t) => ((newBytes += Buffer.byteLength(t)), DISK_NODE_FILES.append(f, at, t)),
      };
      const store = NodeStateStore.open(newFile, { files });
      console.log(
        row(
          'journal',
          n,
          drive(store, n, applies, 3600, () => newBytes),
        ),
      );
      const before = newBytes;
      const t = performance.now();
      store.close();
      console.log(
        `|        | close()      | compaction at the end: ${(performance.now() - t).toFixed(1)} ms, ` +
          `${(newBytes - before).toLocaleString('en')} B |`,
      );
    }
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
  console.log(`load average after: ${load()}`);
}

main();
