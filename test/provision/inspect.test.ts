/**
 * The inspect workflow against an in-memory machine and a fake boot server:
 * it boots the node from the network once, waits without blocking, takes a
 * report only if it is newer than the inspection, boots again when the boot
 * server lost the token, and fails the node at the deadline.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InMemoryMachine } from '../../src/lab/vbmc/machine.js';
import type { Introspection } from '../../src/pxe/http.js';
import {
  IntrospectionStore,
  introspectionReportHandler,
  reconcileInspection,
  startInspection,
  type InspectDeps,
} from '../../src/provision/inspect.js';
import { NodeStateStore } from '../../src/provision/machine.js';
import { memoryNodeFiles } from '../../src/provision/node-files.js';
import { machinePower } from './machine-power.js';

const NODE = 'n1';

const REPORT: Introspection = {
  cpu: { count: 2, arch: 'x86_64' },
  memory_mib: 4096,
  disks: [{ name: '/dev/vda', size_bytes: 1024 ** 3, serial: 'S1' }],
  interfaces: [{ name: 'eth0', mac: '52:54:00:00:00:01' }],
};

function setup() {
  let clock = Date.parse('2026-01-01T00:00:00Z');
  const now = (): Date => new Date(clock);
  const files = new Map<string, string>();
  const write = (f: string, t: string): void => void files.set(f, t);
  const read = (f: string): string | undefined => files.get(f);
  const nodes = NodeStateStore.open('/nonexistent/lab.nodes.json', { now, files: memoryNodeFiles() });
  const introspection = IntrospectionStore.open('/nonexistent/lab.introspection.json', { now, write, read });
  const machine = new InMemoryMachine({ name: NODE });
  const armed = new Set<string>();
  let arms = 0;
  const boot = {
    arm: (n: string) => void (armed.add(n), arms++),
    disarm: (n: string) => void armed.delete(n),
    isArmed: (n: string) => armed.has(n),
  };
  const deps: InspectDeps = {
    nodes,
    introspection,
    boot,
    power: () => machinePower(machine),
    now: () => clock,
    timeoutMs: 60_000,
    pollMs: 1_000,
  };
  nodes.apply(NODE, 'manage');
  nodes.apply(NODE, 'done', 'BMC answers');
  return {
    deps,
    machine,
    armed,
    files,
    arms: () => arms,
    tick: (ms: number) => void (clock += ms),
    report: () => introspectionReportHandler(introspection)({ node: NODE, endpoint: 'introspection', body: REPORT }),
  };
}

describe('reconcileInspection', () => {
  it('boots the node from the network once, waits, and takes the report back to manageable', async () => {
    const t = setup();
    startInspection(t.deps, NODE);
    const booted = await reconcileInspection(t.deps, NODE);
    expect(booted).toMatchObject({ state: 'inspect wait', dirty: true, requeueAfterMs: 1_000 });
    expect(t.machine.lastBootDevice).toBe('pxe');
    expect(await t.machine.getBootDevice()).toMatchObject({ device: 'disk' }); // the PXE setting was one-time
    expect(t.armed.has(NODE)).toBe(true);

    t.tick(5_000);
    expect(await reconcileInspection(t.deps, NODE)).toMatchObject({ state: 'inspect wait', dirty: true });
    expect(t.machine.boots).toBe(1); // waiting does not boot again

    t.tick(5_000);
    t.report();
    t.armed.delete(NODE); // the server spends the token after storing the report
    const done = await reconcileInspection(t.deps, NODE);
    expect(done).toMatchObject({ state: 'manageable', dirty: false, introspection: { data: REPORT } });
    expect(await t.machine.powerState()).toBe('off');
    expect(t.deps.nodes.get(NODE).history.map((h) => h.event)).toEqual(['manage', 'done', 'inspect', 'wait', 'done']);
    expect(t.deps.nodes.get(NODE).history.at(-1)?.reason).toBe('inspected: 2 CPU, 4096 MiB, 1 disk(s), 1 NIC(s)');
    expect(JSON.parse(t.files.get('/nonexistent/lab.introspection.json')!).nodes[NODE].data).toEqual(REPORT);
  });

  it('ignores a report from an earlier inspection', async () => {
    const t = setup();
    t.report();
    t.tick(1_000);
    startInspection(t.deps, NODE);
    await reconcileInspection(t.deps, NODE);
    expect(await reconcileInspection(t.deps, NODE)).toMatchObject({ state: 'inspect wait', dirty: true });
  });

  it('boots again with a new token when the boot server lost it (restart)', async () => {
    const t = setup();
    startInspection(t.deps, NODE);
    await reconcileInspection(t.deps, NODE);
    t.armed.clear();
    t.tick(2_000);
    expect(await reconcileInspection(t.deps, NODE)).toMatchObject({ state: 'inspect wait', dirty: true });
    expect(t.arms()).toBe(2);
    expect(t.machine.boots).toBe(2);
  });

  it('fails the node at the deadline and powers it off', async () => {
    const t = setup();
    startInspection(t.deps, NODE);
    await reconcileInspection(t.deps, NODE);
    t.tick(61_000);
    const step = await reconcileInspection(t.deps, NODE);
    expect(step).toMatchObject({ state: 'inspect failed', dirty: false, error: { code: 'E_INSPECT_TIMEOUT' } });
    expect(await t.machine.powerState()).toBe('off');
    expect(t.armed.has(NODE)).toBe(false);
    // the operator may inspect again from there
    expect(startInspection(t.deps, NODE).state).toBe('inspecting');
  });

  it('fails the node when its BMC refuses, naming the error', async () => {
    const t = setup();
    const deps: InspectDeps = {
      ...t.deps,
      power: () => ({
        ...machinePower(t.machine),
        powerOn: () => Promise.reject(new Error('BMC said no')),
      }),
    };
    startInspection(deps, NODE);
    const step = await reconcileInspection(deps, NODE);
    expect(step).toMatchObject({ state: 'inspect failed', dirty: false });
    expect(deps.nodes.get(NODE).history.at(-1)?.reason).toMatch(/BMC said no/);
    expect(t.armed.has(NODE)).toBe(false);
  });

  it('leaves nodes in other states alone', async () => {
    const t = setup();
    expect(await reconcileInspection(t.deps, NODE)).toEqual({ node: NODE, state: 'manageable', dirty: false });
    expect(t.machine.boots).toBe(0);
  });
});

describe('IntrospectionStore', () => {
  it('keeps the reports another store of the same file wrote since it last looked', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-introspection-'));
    try {
      const file = join(dir, 'site.introspection.json');
      const a = IntrospectionStore.open(file);
      const b = IntrospectionStore.open(file);
      a.put('ctl-0', REPORT);
      b.put('cmp-0', { ...REPORT, memory_mib: 8192 });
      const again = IntrospectionStore.open(file);
      expect(again.get('ctl-0')?.data.memory_mib).toBe(4096);
      expect(again.get('cmp-0')?.data.memory_mib).toBe(8192);
      expect(b.get('ctl-0')?.data).toEqual(REPORT);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
