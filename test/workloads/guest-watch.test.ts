import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  gapsBySpan,
  parseGuestState,
  summarize,
  watchGuest,
  type GuestSample,
} from '../../src/workloads/guest-watch.js';

const BOOT_A = '0c6f3b8e-0d3c-4f36-9d34-2b8a6c3e7a01';
const BOOT_B = '5d1e9a20-7f4b-4c1e-8a55-93c0d2e6b402';
const ok = (at: number, counter: number, bootId = BOOT_A): GuestSample => ({ at, ok: true, bootId, counter });

describe('the guest state page', () => {
  it('parses the boot id and counter, and nothing else', () => {
    expect(parseGuestState(`boot_id=${BOOT_A} counter=42 uptime=12.34\n`)).toEqual({ bootId: BOOT_A, counter: 42 });
    expect(parseGuestState('<html>502 Bad Gateway</html>')).toBeUndefined();
    expect(parseGuestState(`boot_id=${BOOT_A} counter=-1 uptime=1`)).toBeUndefined();
  });
});

describe('gapsBySpan', () => {
  it("cuts a watch by an upgrade's phases: polls, losses and the longest silence overlapping each", () => {
    const lost = (at: number): GuestSample => ({ at, ok: false });
    // answers every 100 ms, but none from 1,000 to 2,500 (a migration's switch-over)
    const samples: GuestSample[] = [];
    for (let t = 0; t <= 4000; t += 100) samples.push(t > 1000 && t < 2500 ? lost(t) : ok(t, t / 100));
    expect(
      gapsBySpan(samples, [
        { name: 'controllers', from: 0, to: 900 },
        { name: 'compute batch 1', from: 950, to: 2000 },
        { name: 'compute batch 2', from: 2600, to: 4000 },
      ]),
    ).toEqual([
      { name: 'controllers', samples: 10, lost: 0, longestGapMs: 100 },
      // the silence began in it: 1,000 -> 2,500
      { name: 'compute batch 1', samples: 11, lost: 10, longestGapMs: 1500 },
      { name: 'compute batch 2', samples: 15, lost: 0, longestGapMs: 100 },
    ]);
    // a span the silence only began before and ended in counts it too
    expect(gapsBySpan(samples, [{ name: 'late', from: 2200, to: 2300 }])).toEqual([
      { name: 'late', samples: 2, lost: 2, longestGapMs: 1500 },
    ]);
    expect(gapsBySpan([], [{ name: 'empty', from: 0, to: 10 }])).toEqual([
      { name: 'empty', samples: 0, lost: 0, longestGapMs: 0 },
    ]);
  });
});

describe('summarize', () => {
  it('a live migration: the longest silence between two answers, and the same boot', () => {
    const s = summarize(
      [ok(0, 10), ok(100, 11), { at: 200, ok: false }, { at: 1200, ok: false }, ok(2200, 33), ok(2300, 34)],
      2400,
    );
    expect(s).toMatchObject({ samples: 6, answered: 4, lost: 2, longestGapMs: 2100, longestGapFrom: 100 });
    expect(s).toMatchObject({
      bootIds: [BOOT_A],
      bootIdChanges: 0,
      counterRegressions: 0,
      firstCounter: 10,
      lastCounter: 34,
    });
  });

  it('a reboot: a new boot id (and its counter from 0 is not counted again as a regression)', () => {
    const s = summarize([ok(0, 500), ok(100, 501), ok(5000, 3, BOOT_B), ok(5100, 4, BOOT_B)], 5100);
    expect(s).toMatchObject({ bootIds: [BOOT_A, BOOT_B], bootIdChanges: 1, counterRegressions: 0 });
  });

  it('a counter that went back under the same boot id, and a silence still open at the end', () => {
    const s = summarize([ok(0, 50), ok(100, 20), { at: 200, ok: false }], 3000);
    expect(s).toMatchObject({ counterRegressions: 1, longestGapMs: 2900, longestGapFrom: 100, lost: 1 });
  });

  it('nothing answered: no gap to measure, every sample lost', () => {
    expect(summarize([{ at: 0, ok: false }], 1000)).toMatchObject({
      answered: 0,
      lost: 1,
      longestGapMs: 0,
      bootIds: [],
    });
  });
});

describe('watchGuest against an HTTP server', () => {
  let server: Server | undefined;
  afterEach(() => server?.close());

  it('counts the answers, the silence while the server stalls, and a boot id change', async () => {
    let counter = 0;
    let boot = BOOT_A;
    let stalled = false;
    server = createServer((req, res) => {
      if (stalled) return; // no answer: the watch's timeout counts it lost
      res.end(`boot_id=${boot} counter=${counter++} uptime=1.00\n`);
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/cgi-bin/state`;
    const watch = watchGuest(url, { intervalMs: 50, timeoutMs: 200 });
    await new Promise((r) => setTimeout(r, 400));
    stalled = true;
    await new Promise((r) => setTimeout(r, 700));
    stalled = false;
    boot = BOOT_B;
    await new Promise((r) => setTimeout(r, 400));
    const s = await watch.stop();
    expect(s.answered).toBeGreaterThan(8);
    expect(s.lost).toBeGreaterThanOrEqual(2);
    expect(s.longestGapMs).toBeGreaterThanOrEqual(500);
    expect(s.longestGapMs).toBeLessThan(3000);
    expect(s.bootIds).toEqual([BOOT_A, BOOT_B]);
    expect(s.bootIdChanges).toBe(1);
    // stopped means stopped: no poll after stop() returned
    const n = watch.samples().length;
    await new Promise((r) => setTimeout(r, 200));
    expect(watch.samples().length).toBe(n);
  });
});
