/**
 * The nova-evacuate and nova-enable hooks against a fake Nova: hosts
 * disabled first, capacity refused before any migration (and the hosts
 * enabled again), migrations a few at a time, each watched to ACTIVE on
 * another host, and the hosts that could not be emptied named for the
 * runner.
 */
import { createServer } from 'node:http';
import { describe, expect, it } from 'vitest';
import type { StackctlEvent } from '../../src/core/events.js';
import { EVACUATION_DEFAULTS, EvacuationFailed, novaEnable, novaEvacuate, novaUp } from '../../src/upgrade/evacuate.js';
import { FakeNova, fakeContext, type FakeHost, type FakeServer } from './fake-nova.js';
import { rejection } from '../helpers/errors.js';

const FLAVORS = [
  { id: 'f-small', name: 'm1.small', vcpus: 1, ram: 2048, disk: 20 },
  { id: 'f-large', name: 'm1.large', vcpus: 4, ram: 8192, disk: 80 },
];
const host = (name: string, over: Partial<FakeHost> = {}): FakeHost => ({
  host: name,
  status: 'enabled',
  state: 'up',
  vcpus: 8,
  memoryMb: 16384,
  diskGb: 500,
  ...over,
});
const server = (id: string, on: string, over: Partial<FakeServer> = {}): FakeServer => ({
  id,
  name: `vm-${id}`,
  status: 'ACTIVE',
  host: on,
  flavor: 'f-small',
  ...over,
});
const migrations = (events: readonly StackctlEvent[]) =>
  events.flatMap((e) => (e.kind === 'upgrade.migration' ? [`${e.server} ${e.state} ${e.from}->${e.to}`] : []));

describe('novaEvacuate', () => {
  it('disables the batch, live-migrates its running instances two at a time and leaves the hosts empty', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1'), host('cmp-2')], FLAVORS, [
      server('a', 'cmp-0', { polls: 3 }),
      server('b', 'cmp-0', { polls: 2 }),
      server('c', 'cmp-0'),
      server('d', 'cmp-0', { status: 'SHUTOFF' }),
      server('e', 'cmp-1'),
    ]);
    const ctx = fakeContext({ cloud: nova });
    const detail = await novaEvacuate(['cmp-0'], ctx);
    expect(detail).toMatch(/cmp-0: nova-compute disabled, 3 instance\(s\) live-migrated/);
    expect(detail).toMatch(/1 instance\(s\) not running stay/);
    // The first command disables the host, before anything moves.
    expect(nova.calls[0]).toEqual([
      'compute',
      'service',
      'set',
      '--disable',
      '--disable-reason',
      'stackctl upgrade',
      'cmp-0',
      'nova-compute',
    ]);
    expect(nova.hosts[0]!.status).toBe('disabled');
    expect(nova.maxInFlight).toBe(EVACUATION_DEFAULTS.concurrency);
    expect(nova.servers.filter((s) => s.host === 'cmp-0').map((s) => s.id)).toEqual(['d']);
    // The scheduler chooses: no --host, microversion 2.30.
    const live = nova.calls.filter((c) => c.includes('--live-migration'));
    expect(live).toHaveLength(3);
    for (const c of live) expect(c.slice(0, 2)).toEqual(['--os-compute-api-version', '2.30']);
    expect(live.flat()).not.toContain('--host');
    expect(migrations(ctx.events).sort()).toEqual([
      'vm-a completed cmp-0->cmp-1',
      'vm-a started cmp-0->',
      'vm-b completed cmp-0->cmp-1',
      'vm-b started cmp-0->',
      'vm-c completed cmp-0->cmp-1',
      'vm-c started cmp-0->',
    ]);
  });

  it('refuses before the first migration when the other hosts cannot hold the instances, and enables the batch again', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1', { memoryMb: 4096 })], FLAVORS, [
      server('a', 'cmp-0', { flavor: 'f-large' }),
    ]);
    const ctx = fakeContext({ cloud: nova });
    const err = await rejection(novaEvacuate(['cmp-0'], ctx));
    expect(err.code).toBe('E_EVACUATION_CAPACITY');
    expect(err.message).toMatch(/MiB memory/);
    expect(nova.calls.some((c) => c.includes('migrate'))).toBe(false);
    expect(nova.hosts[0]!.status).toBe('enabled');
    expect(migrations(ctx.events)).toEqual([]);
  });

  it('names the hosts it could not empty (rolled back, timed out) for the runner, and enables them again', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1'), host('cmp-2'), host('cmp-3')], FLAVORS, [
      server('a', 'cmp-0', { migration: 'rolls-back' }),
      server('b', 'cmp-1', { migration: 'hangs' }),
      server('c', 'cmp-2'),
    ]);
    const ctx = fakeContext({ cloud: nova });
    const err = await rejection(novaEvacuate(['cmp-0', 'cmp-1', 'cmp-2'], ctx, { timeoutMs: 60_000, pollMs: 10_000 }));
    expect(err).toBeInstanceOf(EvacuationFailed);
    expect(err.code).toBe('E_EVACUATION_FAILED');
    const hosts = err.details.hosts as { host: string; instances: string[]; reasons: string[] }[];
    expect(hosts.map((h) => [h.host, h.instances])).toEqual([
      ['cmp-0', ['vm-a']],
      ['cmp-1', ['vm-b']],
    ]);
    expect(hosts[0]!.reasons.join()).toMatch(/did not move it/);
    expect(hosts[1]!.reasons.join()).toMatch(/timeout: still MIGRATING\/migrating on cmp-1 after 60 s/);
    // the timed-out migration was aborted: the instance is ACTIVE on its source, not landing elsewhere later
    expect(hosts[1]!.reasons.join()).toMatch(/migration 2 aborted: ACTIVE on cmp-1, its source/);
    expect(nova.servers.find((x) => x.id === 'b')).toMatchObject({ status: 'ACTIVE', host: 'cmp-1' });
    expect(nova.migrations.find((m) => m.server === 'b')!.status).toBe('cancelled');
    expect(nova.calls).toContainEqual(['--os-compute-api-version', '2.65', 'server', 'migration', 'abort', 'b', '2']);
    expect(err.details.emptied).toEqual(['cmp-2']);
    // Left on the current release, serving again; the emptied host stays disabled for its upgrade.
    expect(nova.hosts.map((h) => `${h.host}:${h.status}`)).toEqual([
      'cmp-0:enabled',
      'cmp-1:enabled',
      'cmp-2:disabled',
      'cmp-3:enabled',
    ]);
    expect(migrations(ctx.events).filter((m) => !m.includes('started'))).toEqual(
      expect.arrayContaining(['vm-a failed cmp-0->', 'vm-b timeout cmp-1->', 'vm-c completed cmp-2->cmp-3']),
    );
  });

  it('says so when an aborted migration does not roll back within the grace period', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1')], FLAVORS, [
      server('a', 'cmp-0', { migration: 'hangs-for-good' }),
    ]);
    const err = await rejection(
      novaEvacuate(['cmp-0'], fakeContext({ cloud: nova }), { timeoutMs: 60_000, abortGraceMs: 30_000 }),
    );
    expect(err.code).toBe('E_EVACUATION_FAILED');
    expect(err.message).toMatch(
      /vm-a: timeout: .*migration 1 aborted, but still MIGRATING\/migrating on cmp-0 after 30 s/,
    );
    expect(nova.hosts[0]!.status).toBe('enabled');
  });

  it('asks again to abort a timed-out migration that Nova does not abort yet (accepted), within the grace', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1')], FLAVORS, [
      server('a', 'cmp-0', { migration: 'hangs', acceptedLooks: 3 }),
    ]);
    const err = await rejection(
      novaEvacuate(['cmp-0'], fakeContext({ cloud: nova }), { timeoutMs: 20_000, pollMs: 5_000, abortGraceMs: 60_000 }),
    );
    expect(err.code).toBe('E_EVACUATION_FAILED');
    expect(err.message).toMatch(
      /vm-a: timeout: still MIGRATING\/migrating on cmp-0 after 20 s; migration 1 aborted: ACTIVE on cmp-0, its source/,
    );
    // two looks found it accepted (no abort asked), the third found it running and aborted it, once
    const aborts = nova.calls.filter((c) => c.includes('abort'));
    expect(aborts).toEqual([['--os-compute-api-version', '2.65', 'server', 'migration', 'abort', 'a', '1']]);
    expect(nova.migrations[0]!.status).toBe('cancelled');
    expect(nova.servers[0]).toMatchObject({ status: 'ACTIVE', host: 'cmp-0' });
  });

  it('reports a migration that stays unabortable for the whole grace, naming its status', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1')], FLAVORS, [
      server('a', 'cmp-0', { migration: 'hangs', acceptedLooks: 1_000 }),
    ]);
    const err = await rejection(
      novaEvacuate(['cmp-0'], fakeContext({ cloud: nova }), { timeoutMs: 20_000, pollMs: 5_000, abortGraceMs: 30_000 }),
    );
    expect(err.message).toMatch(/vm-a: timeout: .*migration 1 still accepted, which Nova does not abort for 30 s/);
    expect(nova.calls.filter((c) => c.includes('abort'))).toEqual([]);
    expect(nova.hosts[0]!.status).toBe('enabled');
  });

  it('counts a refused migration request as a failure of that host', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1')], FLAVORS, [
      server('a', 'cmp-0', { migration: 'refused' }),
    ]);
    const err = await rejection(novaEvacuate(['cmp-0'], fakeContext({ cloud: nova })));
    expect(err.code).toBe('E_EVACUATION_FAILED');
    expect(err.message).toMatch(/cmp-0 still holds vm-a .*live migration refused: No valid host/);
  });

  it('stops watching when the operator interrupts, one migration at a time with concurrency 1', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1')], FLAVORS, [
      server('a', 'cmp-0', { migration: 'hangs' }),
      server('b', 'cmp-0'),
    ]);
    const stop = new AbortController();
    const ctx = fakeContext({ cloud: nova, signal: stop.signal });
    const sleep = ctx.sleep;
    const interrupting = Object.assign(Object.create(ctx) as typeof ctx, {
      sleep: async (ms: number) => {
        if (ctx.clock.t > 1_000_000 + 20_000) stop.abort();
        await sleep(ms);
      },
    });
    const err = await rejection(novaEvacuate(['cmp-0'], interrupting, { concurrency: 1 }));
    expect(nova.maxInFlight).toBe(1);
    expect(err.message).toMatch(/vm-a: failed: interrupted while migrating/);
    expect(err.message).toMatch(/vm-b: failed: interrupted before its migration was requested/);
    expect(nova.calls.filter((c) => c.includes('--live-migration'))).toHaveLength(1);
  });

  it('waits for a live migration a killed run left under way, and does not request it again', async () => {
    const nova = new FakeNova([host('cmp-0', { status: 'disabled' }), host('cmp-1')], FLAVORS, [
      server('a', 'cmp-0', { status: 'MIGRATING', task: 'migrating', polls: 3 }),
      server('b', 'cmp-0'),
    ]);
    const detail = await novaEvacuate(['cmp-0'], fakeContext({ cloud: nova }));
    expect(detail).toMatch(/1 instance\(s\) live-migrated .*; 1 live migration\(s\) already under way waited for/);
    const live = nova.calls.filter((c) => c.includes('--live-migration'));
    expect(live.map((c) => c.at(-1))).toEqual(['b']);
    expect(nova.servers.map((s) => `${s.id} ${s.status} ${s.host}`)).toEqual(['a ACTIVE cmp-1', 'b ACTIVE cmp-1']);
  });

  it('does not call a host empty while a migration left under way is still running there', async () => {
    const nova = new FakeNova([host('cmp-0'), host('cmp-1')], FLAVORS, [
      server('a', 'cmp-0', { status: 'MIGRATING', task: 'migrating', migration: 'hangs' }),
    ]);
    const err = await rejection(novaEvacuate(['cmp-0'], fakeContext({ cloud: nova }), { timeoutMs: 60_000 }));
    expect(err.code).toBe('E_EVACUATION_FAILED');
    expect(err.message).toMatch(/cmp-0 still holds vm-a \(still listed on the host after the migrations\)/);
    expect(nova.calls.some((c) => c.includes('--live-migration'))).toBe(false);
    expect(nova.hosts[0]!.status).toBe('enabled');
  });

  it('has nothing to move on empty hosts and is harmless to run again', async () => {
    const nova = new FakeNova([host('cmp-0', { status: 'disabled' }), host('cmp-1')], FLAVORS, []);
    const detail = await novaEvacuate(['cmp-0'], fakeContext({ cloud: nova }));
    expect(detail).toMatch(/0 instance\(s\) live-migrated/);
    expect(nova.calls.some((c) => c[0] === 'flavor' || c[0] === 'hypervisor')).toBe(false);
  });
});

describe('novaEvacuate: the workload ledger', () => {
  /** A guest's state page on a loopback address of its own, port 80 (the suite runs as root); its boot id changes after `rebootAfter` answers. */
  async function guestPage(address: string, rebootAfter = Infinity): Promise<{ close: () => void }> {
    let n = 0;
    const srv = createServer((_q, res) => {
      const boot = n++ < rebootAfter ? 'b0000000-0000-4000-8000-000000000001' : 'b0000000-0000-4000-8000-000000000002';
      res.end(`boot_id=${boot} counter=${n} uptime=1.00\n`);
    });
    await new Promise<void>((r, j) => srv.once('error', j).listen(80, address, r));
    return {
      close: () => {
        srv.closeAllConnections();
        srv.close();
      },
    };
  }
  /** The fake clock's sleeps take real time too, so that the watcher polls while the migration runs. */
  const slowContext = (nova: FakeNova) => {
    const ctx = fakeContext({ cloud: nova });
    return {
      ...ctx,
      sleep: async (ms: number) => {
        ctx.clock.t += ms;
        await new Promise((r) => setTimeout(r, 150));
      },
    };
  };

  it('watches each migrating instance at its first answering address and records it: events for the log and the run report', async () => {
    const page = await guestPage('127.0.0.79');
    try {
      const nova = new FakeNova([host('cmp-0'), host('cmp-1')], FLAVORS, [
        server('a', 'cmp-0', { polls: 4, addresses: ['127.0.0.80', '127.0.0.79'] }),
        server('b', 'cmp-0', { addresses: [] }),
      ]);
      const ctx = slowContext(nova);
      const detail = await novaEvacuate(['cmp-0'], ctx, { workloadMaxGapMs: 5000 });
      expect(detail).toMatch(
        /2 instance\(s\) live-migrated in \d+ s; 1 watched, longest gap [\d.]+ s, 0 boot-id changes/,
      );
      const ledger = ctx.events.filter((e) => e.kind === 'workload.ledger');
      expect(ledger).toEqual([
        expect.objectContaining({ server: 'vm-a', address: '127.0.0.79', watched: true, bootIdChanges: 0 }),
        expect.objectContaining({ server: 'vm-b', watched: false, note: 'Nova lists no address for it' }),
      ]);
      expect(ctx.events).toContainEqual(
        expect.objectContaining({ kind: 'availability.window', source: 'workload', subject: 'vm-a' }),
      );
    } finally {
      page.close();
    }
  });

  it('watches a live migration a killed run left under way while it waits for it', async () => {
    const page = await guestPage('127.0.0.82');
    try {
      const nova = new FakeNova([host('cmp-0', { status: 'disabled' }), host('cmp-1')], FLAVORS, [
        server('a', 'cmp-0', { status: 'MIGRATING', task: 'migrating', polls: 4, addresses: ['127.0.0.82'] }),
      ]);
      const ctx = slowContext(nova);
      const detail = await novaEvacuate(['cmp-0'], ctx, { workloadMaxGapMs: 5000 });
      expect(detail).toMatch(
        /1 watched, longest gap [\d.]+ s, 0 boot-id changes; 1 live migration\(s\) already under way waited for/,
      );
      expect(nova.calls.some((c) => c.includes('--live-migration'))).toBe(false);
      expect(ctx.events.filter((e) => e.kind === 'workload.ledger')).toEqual([
        expect.objectContaining({ server: 'vm-a', address: '127.0.0.82', watched: true, bootIdChanges: 0 }),
      ]);
    } finally {
      page.close();
    }
  });

  it('fails with E_WORKLOAD_INTERRUPTED when a watched instance rebooted during its migration; the emptied host stays disabled', async () => {
    const page = await guestPage('127.0.0.81', 2);
    try {
      const nova = new FakeNova([host('cmp-0'), host('cmp-1')], FLAVORS, [
        server('a', 'cmp-0', { polls: 6, addresses: ['127.0.0.81'] }),
      ]);
      const ctx = slowContext(nova);
      const err = await rejection(novaEvacuate(['cmp-0'], ctx));
      expect(err).toMatchObject({ code: 'E_WORKLOAD_INTERRUPTED' });
      expect(String((err as Error).message)).toMatch(/vm-a: its boot id changed 1 time/);
      // emptied, and not enabled again
      expect(nova.calls.some((c) => c.includes('--enable'))).toBe(false);
    } finally {
      page.close();
    }
  });
});

describe('novaUp', () => {
  it("waits until each host's nova-compute reports again (Updated At moves) and is up", async () => {
    const nova = new FakeNova(
      [host('cmp-0', { updatedAt: 't0' }), host('cmp-1', { updatedAt: 't0', state: 'down' })],
      [],
      [],
    );
    let polls = 0;
    const ctx = fakeContext({
      cloud: nova,
      // the new processes report one after the other
      sleep: async () => {
        polls++;
        if (polls === 1) nova.hosts[0]!.updatedAt = 't1';
        if (polls === 3) Object.assign(nova.hosts[1]!, { updatedAt: 't1', state: 'up' });
      },
    });
    expect(await novaUp(['cmp-0', 'cmp-1'], ctx)).toBe('nova-compute reports and is up on cmp-0, cmp-1');
    expect(polls).toBe(3);
    expect(nova.calls[0]).toEqual(['compute', 'service', 'list', '--service', 'nova-compute', '-f', 'json']);
  });

  it('fails naming the host whose nova-compute still shows its last report before the swap', async () => {
    const nova = new FakeNova([host('cmp-0', { updatedAt: 't0' }), host('cmp-1', { updatedAt: 't0' })], [], []);
    const clock = { t: 0 };
    const ctx = fakeContext({
      cloud: nova,
      now: () => clock.t,
      // cmp-0 reports at every poll; cmp-1's new process never does
      sleep: async (ms) => {
        clock.t += ms;
        nova.hosts[0]!.updatedAt = `t${clock.t}`;
      },
    });
    const err = await rejection(novaUp(['cmp-0', 'cmp-1'], ctx, { reportTimeoutMs: 30_000, pollMs: 5_000 }));
    expect(err.code).toBe('E_NOVA_NOT_REPORTING');
    expect(err.message).toBe('nova-compute did not report within 30 s on cmp-1 (cmp-1: up, last report t0)');
    expect(err.details['nodes']).toEqual(['cmp-1']);
  });
});

describe('novaEnable', () => {
  it('enables nova-compute on every host of the batch', async () => {
    const nova = new FakeNova([host('cmp-0', { status: 'disabled' }), host('cmp-1', { status: 'disabled' })], [], []);
    expect(await novaEnable(['cmp-0', 'cmp-1'], fakeContext({ cloud: nova }))).toBe(
      'nova-compute enabled on cmp-0, cmp-1',
    );
    expect(nova.hosts.map((h) => h.status)).toEqual(['enabled', 'enabled']);
    expect(nova.calls).toContainEqual(['compute', 'service', 'set', '--enable', 'cmp-1', 'nova-compute']);
  });

  it('names the hosts it could not enable', async () => {
    const nova = new FakeNova([host('cmp-0', { status: 'disabled' })], [], []);
    const err = await rejection(novaEnable(['cmp-0', 'cmp-9'], fakeContext({ cloud: nova })));
    expect(err.code).toBe('E_NOVA_ENABLE');
    expect(err.message).toMatch(/cmp-9/);
    expect(nova.hosts[0]!.status).toBe('enabled');
  });
});
