import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { parseServers } from '../../src/status/openstack-client.js';
import { formatLedgerEntry, interruption, startLedger, type LedgerEntry } from '../../src/workloads/ledger.js';

const BOOT = '0c6f3b8e-0d3c-4f36-9d34-2b8a6c3e7a01';
/** A loopback address of its own, port 80 as a guest's state page (the suite runs as root). */
const GUEST_ADDRESS = '127.0.0.77';

describe('the addresses of a server listing', () => {
  it('come from the Networks column in either form the client prints', () => {
    const rows = parseServers(
      JSON.stringify([
        {
          ID: 'a',
          Name: 'one',
          Status: 'ACTIVE',
          Host: 'cmp-0',
          Networks: { 'demo-net': ['10.0.0.5', '10.77.22.101'] },
        },
        { ID: 'b', Name: 'two', Status: 'ACTIVE', Host: 'cmp-0', Networks: 'demo-net=10.0.0.6, 10.77.22.102' },
        { ID: 'c', Name: 'three', Status: 'ACTIVE', Host: 'cmp-0', Networks: {} },
      ]),
    );
    expect(rows.map((r) => r.addresses)).toEqual([['10.0.0.5', '10.77.22.101'], ['10.0.0.6', '10.77.22.102'], []]);
  });
});

describe('the workload ledger', () => {
  let server: Server | undefined;
  afterEach(() => server?.close());

  it('watches each instance on the first address whose state page answers, and says why another is not watched', async () => {
    let counter = 0;
    server = createServer((_req, res) => res.end(`boot_id=${BOOT} counter=${counter++} uptime=3.00\n`));
    await new Promise<void>((r, j) => server!.once('error', j).listen(80, GUEST_ADDRESS, r));
    const ledger = await startLedger(
      [
        // the fixed address does not answer (nothing listens on 127.0.0.78:80): the next one is watched
        { id: 'id-1', name: 'guest-1', addresses: ['127.0.0.78', GUEST_ADDRESS] },
        { id: 'id-2', name: 'guest-2', addresses: [] },
        { id: 'id-3', name: 'guest-3', addresses: ['127.0.0.78'] },
      ],
      { intervalMs: 50, probeTimeoutMs: 500 },
    );
    await new Promise((r) => setTimeout(r, 600));
    const entries = await ledger.stop();
    expect(entries.map((e) => [e.name, e.watched, e.address])).toEqual([
      ['guest-1', true, GUEST_ADDRESS],
      ['guest-2', false, undefined],
      ['guest-3', false, undefined],
    ]);
    expect(entries[0]!.summary).toMatchObject({ bootIds: [BOOT], bootIdChanges: 0, counterRegressions: 0 });
    expect(entries[0]!.summary!.answered).toBeGreaterThan(3);
    expect(entries[1]!.note).toBe('Nova lists no address for it');
    expect(entries[2]!.note).toBe('no state page answered at 127.0.0.78');
    expect(interruption(entries[0]!, 30_000)).toBeUndefined();
    expect(formatLedgerEntry(entries[0]!)).toMatch(
      /^guest-1 at 127\.0\.0\.77: longest gap 0\.\d\d s, \d+ of \d+ polls lost, 0 boot-id change\(s\)$/,
    );
    expect(formatLedgerEntry(entries[2]!)).toBe('guest-3: not watched (no state page answered at 127.0.0.78)');
  });

  it('an interruption: a changed boot id, a counter that went back, a gap beyond the budget', () => {
    const entry = (summary: Partial<NonNullable<LedgerEntry['summary']>>): LedgerEntry => ({
      server: 'id',
      name: 'g',
      watched: true,
      address: '10.0.0.1',
      summary: {
        from: 0,
        to: 10_000,
        samples: 100,
        answered: 90,
        lost: 10,
        longestGapMs: 1000,
        bootIds: [BOOT],
        bootIdChanges: 0,
        counterRegressions: 0,
        ...summary,
      },
    });
    expect(interruption(entry({}), 2000)).toBeUndefined();
    expect(interruption(entry({ bootIdChanges: 1 }), 2000)).toMatch(/boot id changed 1 time/);
    expect(interruption(entry({ counterRegressions: 2 }), 2000)).toMatch(/counter went back 2 time/);
    expect(interruption(entry({ longestGapMs: 2500 }), 2000)).toBe('unanswered for 2.5 s, beyond the budget of 2 s');
    expect(interruption(entry({ answered: 0 }), 2000)).toMatch(/never answered/);
    // not watched: nothing to judge
    expect(interruption({ server: 'id', name: 'g', watched: false, note: 'x' }, 2000)).toBeUndefined();
  });
});
