/**
 * The node state store with its journal, on real files in a temporary
 * folder: every transition durable before apply returns, a killed run
 * resumes from exactly what was applied, damage is named, readers see
 * everything, compaction writes what the single-file store wrote, and the
 * bytes written per transition do not depend on the number of nodes.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import { packageRoot } from '../../src/core/paths.js';
import {
  InvalidTransition,
  NodeStateStore,
  applyEvent,
  journalFileFor,
  newRecord,
  type Compaction,
  type NodeRecord,
} from '../../src/provision/machine.js';
import { DISK_NODE_FILES, memoryNodeFiles, type NodeFiles } from '../../src/provision/node-files.js';
import { NodeEvent, type NodeEvent as Event } from '../../src/provision/states.js';

const E = NodeEvent;
/** enroll to active, as `nodes enroll|inspect|provision` drive a node: 11 transitions. */
const TO_ACTIVE: readonly Event[] = [
  E.MANAGE,
  E.DONE,
  E.INSPECT,
  E.WAIT,
  E.DONE,
  E.PROVIDE,
  E.WAIT,
  E.DONE,
  E.DEPLOY,
  E.WAIT,
  E.DONE,
];

let dir: string;
let clock: number;
const now = (): Date => new Date(clock++ * 1000);
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'stackctl-journal-'));
  clock = Date.UTC(2026, 0, 1) / 1000;
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The disk, with what was written and read counted. */
function counting(inner: NodeFiles = DISK_NODE_FILES) {
  const c = { written: 0, writes: 0, reads: 0, fail: undefined as undefined | 'append' | 'replace' };
  const files: NodeFiles = {
    stat: (f) => inner.stat(f),
    read: (f, max) => (c.reads++, inner.read(f, max)),
    readFrom: (f, o, max) => (c.reads++, inner.readFrom(f, o, max)),
    replace: (f, t) => {
      if (c.fail === 'replace') throw new Error('disk full');
      c.writes++;
      c.written += Buffer.byteLength(t);
      return inner.replace(f, t);
    },
    append: (f, at, t) => {
      if (c.fail === 'append') throw new Error('disk full');
      c.writes++;
      c.written += Buffer.byteLength(t);
      return inner.append(f, at, t);
    },
    remove: (f) => inner.remove(f),
  };
  return { c, files };
}

/**
 * What the single-file store (before the journal) wrote after these events:
 * the records by applyEvent, the file as it serialised them, written out
 * here independently of the store's code.
 */
function singleFileText(events: readonly (readonly [string, Event, string])[], times: () => Date): string {
  const records = new Map<string, NodeRecord>();
  for (const [node, event, reason] of events) {
    records.set(node, applyEvent(records.get(node) ?? newRecord(node), event, reason, times()));
  }
  const nodes: Record<string, unknown> = {};
  for (const name of [...records.keys()].sort()) {
    const r = records.get(name)!;
    nodes[name] = { state: r.state, history: r.history };
  }
  return JSON.stringify({ version: 1, nodes }, null, 2) + '\n';
}

const read = (f: string): string => (existsSync(f) ? readFileSync(f, 'utf8') : '');
const states = (s: NodeStateStore): string[][] => s.list().map((r) => [r.name, r.state, String(r.history.length)]);

describe('node state journal', () => {
  it('appends one line per transition and leaves the node state file to compaction', () => {
    const file = join(dir, 'site.nodes.json');
    const store = NodeStateStore.open(file, { now });
    store.apply('ctl-0', E.MANAGE, 'operator: enroll');
    store.apply('ctl-0', E.DONE, 'BMC answers');
    expect(existsSync(file)).toBe(false);
    expect(store.journalFile).toBe(join(dir, 'site.nodes.journal'));
    expect(read(store.journalFile).split('\n')).toEqual([
      '{"journal":1,"snapshot":"none"}',
      '{"seq":1,"node":"ctl-0","event":"manage","from":"enroll","to":"verifying","reason":"operator: enroll","time":"2026-01-01T00:00:00.000Z"}',
      '{"seq":2,"node":"ctl-0","event":"done","from":"verifying","to":"manageable","reason":"BMC answers","time":"2026-01-01T00:00:01.000Z"}',
      '',
    ]);
    store.close();
    expect(existsSync(store.journalFile)).toBe(false);
    expect(NodeStateStore.open(file).get('ctl-0').state).toBe('manageable');
  });

  it('compacts to the bytes the single-file store wrote for the same transitions', () => {
    const file = join(dir, 'site.nodes.json');
    const events: [string, Event, string][] = [];
    for (let i = 0; i < 30; i++) {
      for (const ev of TO_ACTIVE) events.push([`n-${(i * 7) % 30}`, ev, `step ${events.length} ü "quoted"`]);
    }
    const t0 = clock;
    // thresholds low enough that compactions also happen during the run
    const store = NodeStateStore.open(file, { now, compaction: { minBytes: 4096, snapshotRatio: 1 } });
    for (const [node, ev, reason] of events) store.apply(node, ev, reason);
    store.close();
    clock = t0;
    expect(read(file)).toBe(singleFileText(events, now));
    expect(existsSync(store.journalFile)).toBe(false);
  });

  it('writes nothing and changes nothing when a transition is refused', () => {
    const file = join(dir, 'x.nodes.json');
    const store = NodeStateStore.open(file, { now });
    store.apply('n', E.MANAGE);
    const before = [read(file), read(store.journalFile)];
    expect(() => store.apply('n', E.DEPLOY)).toThrow(InvalidTransition);
    expect([read(file), read(store.journalFile)]).toEqual(before);
    expect(store.get('n').state).toBe('verifying');
  });

  it('keeps memory and files as they were when an append or a new journal fails, and goes on after', () => {
    const file = join(dir, 'x.nodes.json');
    const { c, files } = counting();
    const store = NodeStateStore.open(file, { now, files });
    c.fail = 'replace';
    expect(() => store.apply('n', E.MANAGE)).toThrow('disk full');
    expect(store.get('n').state).toBe('enroll');
    expect(existsSync(store.journalFile)).toBe(false);
    c.fail = undefined;
    store.apply('n', E.MANAGE);
    c.fail = 'append';
    const before = read(store.journalFile);
    expect(() => store.apply('n', E.DONE)).toThrow('disk full');
    expect(store.get('n').state).toBe('verifying');
    expect(read(store.journalFile)).toBe(before);
    c.fail = undefined;
    store.apply('n', E.DONE);
    expect(
      NodeStateStore.open(file)
        .get('n')
        .history.map((h) => h.event),
    ).toEqual(['manage', 'done']);
  });

  it('resumes after a crash in the middle of an append: the cut line is ignored, the next append replaces it', () => {
    const file = join(dir, 'site.nodes.json');
    const store = NodeStateStore.open(file, { now });
    for (const ev of TO_ACTIVE.slice(0, 5)) store.apply('ctl-0', ev);
    const journal = store.journalFile;
    const text = read(journal);
    const lastLine = text.lastIndexOf('\n', text.length - 2) + 1;
    // the crash: the fifth append reached the disk up to the middle of its line
    truncateSync(journal, lastLine + 40);

    const resumed = NodeStateStore.open(file, { now });
    expect(resumed.get('ctl-0').state).toBe('inspect wait');
    expect(resumed.get('ctl-0').history).toHaveLength(4);
    resumed.apply('ctl-0', E.FAIL, 'agent gone');
    expect(read(journal).split('\n').slice(-2)).toEqual([expect.stringContaining('"seq":5,'), '']);
    const again = NodeStateStore.open(file);
    expect(again.get('ctl-0').state).toBe('inspect failed');
    expect(again.get('ctl-0').history.map((h) => h.event)).toEqual(['manage', 'done', 'inspect', 'wait', 'fail']);
  });

  it('refuses a cut line followed by a whole one: damage, named by file and line, with a hint', () => {
    const file = join(dir, 'site.nodes.json');
    const store = NodeStateStore.open(file, { now });
    for (const ev of TO_ACTIVE.slice(0, 3)) store.apply('ctl-0', ev);
    const journal = store.journalFile;
    const lines = read(journal).split('\n');
    // line 3 cut short, then a whole line after it: no crash of one append does this
    writeFileSync(journal, [lines[0], lines[1], lines[2]!.slice(0, 30), lines[3], ''].join('\n'));
    let error: unknown;
    try {
      NodeStateStore.open(file);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(StackctlError);
    const e = error as StackctlError;
    expect(e.code).toBe('E_NODES_JOURNAL');
    expect(e.message).toBe(`node state journal ${journal} line 3: not a JSON line`);
    expect(e.location).toEqual({ file: journal, line: 3 });
    expect(e.hint).toMatch(/not the last append of a run that was killed.*cut it before line 3/);
  });

  it.each([
    ['a line that is not a transition', (l: string[]) => [l[0], '{"seq":1,"node":"n"}', l[2]], 2, /not a transition/],
    ['a line out of sequence', (l: string[]) => [l[0], l[1], l[2]!.replace('"seq":2', '"seq":3')], 3, /entry number 3/],
    [
      'a line that does not follow the node',
      (l: string[]) => [l[0], l[2]!.replace('"seq":2', '"seq":1')],
      2,
      /node 'n' is in state 'enroll' there, but the entry moves it from 'verifying'/,
    ],
    ['an unknown line 1', (l: string[]) => ['{"journal":7}', l[1]], 1, /unknown format/],
  ])('refuses a journal with %s', (_what, edit, line, message) => {
    const file = join(dir, 'site.nodes.json');
    const store = NodeStateStore.open(file, { now });
    store.apply('n', E.MANAGE);
    store.apply('n', E.DONE);
    writeFileSync(store.journalFile, edit(read(store.journalFile).split('\n')).join('\n') + '\n');
    expect(() => NodeStateStore.open(file)).toThrow(message);
    expect(() => NodeStateStore.open(file)).toThrow(`${store.journalFile} line ${line}:`);
  });

  it('ignores a journal left behind by a compaction that wrote the snapshot and was stopped before removing it', () => {
    const file = join(dir, 'site.nodes.json');
    const store = NodeStateStore.open(file, { now });
    store.apply('n', E.MANAGE);
    store.apply('n', E.DONE);
    const leftover = read(store.journalFile);
    store.close();
    // the crash between the two steps: the new snapshot is there, the old journal too
    writeFileSync(store.journalFile, leftover);
    const resumed = NodeStateStore.open(file, { now });
    expect(resumed.get('n').history.map((h) => h.event)).toEqual(['manage', 'done']);
    resumed.apply('n', E.INSPECT);
    expect(read(store.journalFile).split('\n')[1]).toContain('"seq":1,');
    expect(
      NodeStateStore.open(file)
        .get('n')
        .history.map((h) => h.event),
    ).toEqual(['manage', 'done', 'inspect']);
  });

  it('shows a reader every applied transition, also when a compaction runs between its two reads', () => {
    const file = join(dir, 'site.nodes.json');
    const compaction: Compaction = { minBytes: 600, snapshotRatio: 0.5 };
    const writer = NodeStateStore.open(file, { now, compaction });
    let applied = 0;
    for (let i = 0; i < 8; i++) {
      for (const ev of TO_ACTIVE) {
        writer.apply(`n-${i}`, ev, `#${applied++}`);
        // a reader opened now (as `nodes list` in another process) sees what the writer holds
        expect(states(NodeStateStore.open(file))).toEqual(states(writer));
      }
    }
    // a reader that read the snapshot, then saw the writer compact before it read the journal
    let raced = false;
    const racing: NodeFiles = {
      ...DISK_NODE_FILES,
      read: (f, max) => {
        const r = DISK_NODE_FILES.read(f, max);
        if (f === file && !raced) {
          raced = true;
          writer.apply('n-0', E.UNDEPLOY, 'raced');
          writer.close();
        }
        return r;
      },
    };
    const reader = NodeStateStore.open(file, { files: racing });
    expect(raced).toBe(true);
    expect(reader.get('n-0').state).toBe('undeploying');
    expect(states(reader)).toEqual(states(writer));
  });

  it('has a second store of the same files carry on from what the first appended, reading only the new lines', () => {
    const file = join(dir, 'site.nodes.json');
    const a = NodeStateStore.open(file, { now });
    a.apply('n', E.MANAGE);
    const { c, files } = counting();
    const b = NodeStateStore.open(file, { now, files });
    a.apply('n', E.DONE);
    c.reads = 0;
    expect(() => b.apply('n', E.DONE)).toThrow(InvalidTransition);
    expect(c.reads).toBe(1); // the journal's new bytes, not both files
    b.apply('n', E.INSPECT);
    a.apply('n', E.WAIT);
    expect(
      NodeStateStore.open(file)
        .get('n')
        .history.map((h) => h.event),
    ).toEqual(['manage', 'done', 'inspect', 'wait']);
  });

  it('writes the same bytes per transition, and reads nothing, whatever the number of nodes', () => {
    const perApply = (nodes: number): { bytes: number; reads: number } => {
      const file = join(dir, `n${nodes}.nodes.json`);
      const names = Array.from({ length: nodes }, (_, i) => `node-${String(i).padStart(5, '0')}`);
      writeFileSync(
        file,
        singleFileText(
          names.flatMap((n) => [[n, E.MANAGE, ''] as const, [n, E.DONE, ''] as const]),
          now,
        ),
      );
      const { c, files } = counting();
      const store = NodeStateStore.open(file, { now, files });
      store.apply('node-00000', E.INSPECT); // the journal's line 1
      c.written = 0;
      c.reads = 0;
      for (let i = 1; i <= 50; i++) {
        // the same transitions of the same ten nodes: only the number of nodes in the files differs
        const n = `node-${String(i % 10).padStart(5, '0')}`;
        store.apply(n, store.get(n).state === 'manageable' ? E.INSPECT : E.DONE);
      }
      return { bytes: c.written / 50, reads: c.reads };
    };
    const small = perApply(10);
    const large = perApply(3000);
    expect(large).toEqual(small);
    expect(small.reads).toBe(0);
    expect(small.bytes).toBeLessThan(200);
  });

  it('spreads compaction so that bytes per transition and file sizes stay bounded whatever the number of nodes', () => {
    // in memory: thousands of transitions, the disk's fsyncs would only make the test slow
    const amortised = (nodes: number): { perApply: number; biggest: number; snapshot: number } => {
      const mem = memoryNodeFiles();
      const { c, files } = counting(mem);
      const file = `/mem/n${nodes}.nodes.json`;
      const store = NodeStateStore.open(file, { now, files, compaction: { minBytes: 0, snapshotRatio: 1 } });
      let biggest = 0;
      const applies = Math.max(nodes * 11, 2000);
      for (let i = 0; i < applies; i++) {
        const n = `node-${String(i % nodes).padStart(5, '0')}`;
        const state = store.get(n).state;
        store.apply(n, state === 'enroll' ? E.MANAGE : state === 'verifying' ? E.FAIL : E.MANAGE, 'x');
        biggest = Math.max(biggest, (mem.stat(file)?.size ?? 0) + (mem.stat(journalFileFor(file))?.size ?? 0));
      }
      return { perApply: c.written / applies, biggest, snapshot: mem.stat(file)!.size };
    };
    const lineBytes = 130;
    for (const n of [10, 100, 1000]) {
      const r = amortised(n);
      // one line each, plus the snapshot written once per as many bytes of journal
      expect(r.perApply, `${n} nodes`).toBeLessThan(3 * lineBytes);
      expect(r.biggest, `${n} nodes`).toBeLessThan(2 * r.snapshot + 2 * lineBytes);
    }
  });

  it('survives SIGKILL at any instant: the state is every transition acknowledged, or one more', async () => {
    const machine = join(packageRoot(), 'dist', 'src', 'provision', 'machine.js');
    expect(existsSync(machine), 'build first: npm run build').toBe(true);
    const sources = ['machine', 'records', 'nodes-file', 'node-journal', 'node-files'].map((m) =>
      statSync(join(packageRoot(), 'src', 'provision', `${m}.ts`)),
    );
    const fresh = statSync(machine).mtimeMs >= Math.max(...sources.map((s) => s.mtimeMs));
    expect(fresh, 'dist is older than src/provision: npm run build').toBe(true);
    const file = join(dir, 'kill.nodes.json');
    // each process applies manage/fail to one node in turn and says so once apply returned
    const script = `
      const { NodeStateStore } = await import(${JSON.stringify(machine)});
      const store = NodeStateStore.open(process.argv[1], { compaction: { minBytes: 2048, snapshotRatio: 1 } });
      for (let i = 0; ; i++) {
        const n = 'n-' + (i % 7);
        store.apply(n, store.get(n).state === 'enroll' ? 'manage' : 'fail', 'r' + i);
        process.stdout.write(n + '\\n');
      }`;
    const acked = new Map<string, number>();
    for (let round = 0; round < 6; round++) {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script, file], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const killAt = 30 + round * 37;
      let seen = 0;
      let buffered = '';
      await new Promise<void>((resolve) => {
        child.stdout.on('data', (d: Buffer) => {
          buffered += d.toString();
          const parts = buffered.split('\n');
          buffered = parts.pop()!;
          for (const n of parts) {
            acked.set(n, (acked.get(n) ?? 0) + 1);
            if (++seen === killAt) child.kill('SIGKILL');
          }
        });
        child.on('exit', () => resolve());
      });
      expect(seen).toBeGreaterThanOrEqual(killAt);
      const store = NodeStateStore.open(file);
      for (const n of acked.keys()) expect(store.get(n).history.length, n).toBeGreaterThan(0);
      for (const r of store.list()) {
        const count = acked.get(r.name) ?? 0;
        // the one in flight at the kill may be on disk without its acknowledgement
        expect([count, count + 1], r.name).toContain(r.history.length);
        acked.set(r.name, r.history.length);
      }
    }
  }, 60_000);
});
