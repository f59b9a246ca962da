/**
 * Hook actions: an inventory hook on the deploy host is really spawned (a
 * shell script in a temporary directory) with the STACKCTL_* environment,
 * its failure and its deadline reported with its output; on nodes it runs
 * over each node's shell with the same variables in the exec environment;
 * built-in hooks dispatch by name.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { detachedScope } from '../../src/orchestrator/engine.js';
import type { ExecOptions, RemoteCommand } from '../../src/remote/index.js';
import type { UpgradeContext } from '../../src/upgrade/context.js';
import { BUILTIN_HOOKS } from '../../src/upgrade/hooks.js';
import { BUILTIN_HOOK_RUNNERS, evacuationOptions, hookHandler, type HookAction } from '../../src/upgrade/run-hooks.js';
import { FakeNova, fakeContext } from './fake-nova.js';
import { rejection } from '../helpers/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'stackctl-hooks-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function script(name: string, body: string): string {
  const p = join(dir, name);
  writeFileSync(p, `#!/bin/sh\n${body}\n`);
  chmodSync(p, 0o755);
  return p;
}

/** A context whose inventory declares `hooks` (name -> definition as in upgrade.hooks). */
function withHooks(hooks: Record<string, unknown>, over: Partial<UpgradeContext> = {}) {
  const base = fakeContext(over);
  const inventory = { ...base.inventory, upgrade: { hooks } } as UpgradeContext['inventory'];
  return Object.assign(Object.create(base) as typeof base, { inventory });
}

const hook = (over: Partial<HookAction>): HookAction => ({
  kind: 'hook',
  hook: 'notify',
  point: 'pre-batch',
  source: 'inventory',
  runOn: 'deploy-host',
  nodes: ['cmp-0', 'cmp-1'],
  ...over,
});

describe('inventory hooks on the deploy host', () => {
  it('spawns the command without a shell, with the STACKCTL_* variables in its environment', async () => {
    const out = join(dir, 'env.txt');
    const cmd = script('record.sh', `env | grep '^STACKCTL_' | sort > "$1"; printf '%s\\n' "$#" "$2" > "$1.args"`);
    const ctx = withHooks({ notify: { run_on: 'deploy-host', command: [cmd, out] } });
    const detail = await hookHandler(hook({ command: [cmd, out, 'two words; $(not expanded)'] }), ctx, detachedScope());
    expect(detail).toMatch(/^notify: done on the deploy host in \d+\.\d s$/);
    expect(readFileSync(out, 'utf8').trim().split('\n')).toEqual([
      'STACKCTL_BATCH_NODES=cmp-0 cmp-1',
      'STACKCTL_HOOK=notify',
      'STACKCTL_HOOK_POINT=pre-batch',
      'STACKCTL_INVENTORY=inventories/lab.yaml',
    ]);
    // argv as given: one argument, no word splitting, no expansion.
    expect(readFileSync(`${out}.args`, 'utf8')).toBe('2\ntwo words; $(not expanded)\n');
  });

  it('rejects a non-zero exit with the hook name, the exit code and the end of its output', async () => {
    const cmd = script('fail.sh', 'echo "checking alerts"; echo "alertmanager unreachable" >&2; exit 3');
    const ctx = withHooks({ notify: { run_on: 'deploy-host', command: [cmd] } });
    const err = await rejection(hookHandler(hook({ command: [cmd] }), ctx, detachedScope()));
    expect(err.code).toBe('E_HOOK_FAILED');
    expect(err.message).toMatch(/^hook notify \(pre-batch\) failed on the deploy host: exit 3: /);
    expect(err.message).toMatch(/checking alerts/);
    expect(err.message).toMatch(/alertmanager unreachable/);
  });

  it("kills the hook and its children at the hook's timeout_s", async () => {
    const cmd = script('slow.sh', 'echo started; sleep 30 & wait');
    const ctx = withHooks({ slow: { run_on: 'deploy-host', command: [cmd], timeout_s: 1 } });
    const t0 = Date.now();
    const err = await rejection(hookHandler(hook({ hook: 'slow', command: [cmd] }), ctx, detachedScope()));
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(err.message).toMatch(/hook slow .*no end within 1 s \(killed\): started/);
  });

  it('says which command cannot be started', async () => {
    const missing = join(dir, 'no-such-hook');
    const ctx = withHooks({ notify: { run_on: 'deploy-host', command: [missing] } });
    const err = await rejection(hookHandler(hook({ command: [missing] }), ctx, detachedScope()));
    expect(err.message).toMatch(/cannot start .*no-such-hook: .*ENOENT/);
  });
});

describe('inventory hooks on nodes', () => {
  it('runs on each batch node through its shell, the variables in the exec environment, not in argv', async () => {
    const calls: { node: string; command: RemoteCommand; env: ExecOptions['env']; timeoutMs: number }[] = [];
    const connect: UpgradeContext['connect'] = (node) => ({
      node,
      docker: {} as ReturnType<UpgradeContext['connect']>['docker'],
      files: { upload: async () => 0 },
      exec: async (command, opts) => {
        calls.push({ node, command, env: opts.env, timeoutMs: opts.timeoutMs });
        return node === 'cmp-1'
          ? { code: 5, stdout: '', stderr: 'node-exporter.service not loaded' }
          : { code: 0, stdout: '', stderr: '' };
      },
    });
    const command = ['systemctl', 'stop', 'node-exporter'];
    const ctx = withHooks({ silence: { run_on: 'nodes', command, timeout_s: 60 } }, { connect });
    const err = await rejection(hookHandler(hook({ hook: 'silence', runOn: 'nodes', command }), ctx, detachedScope()));
    expect(err.code).toBe('E_HOOK_FAILED');
    expect(err.message).toMatch(
      /^hook silence \(pre-batch\) failed on cmp-1: cmp-1: exit 5: node-exporter.service not loaded/,
    );
    expect(calls.map((c) => [c.node, c.command, c.timeoutMs])).toEqual([
      ['cmp-0', command, 60_000],
      ['cmp-1', command, 60_000],
    ]);
    expect(calls[0]!.env).toEqual({
      STACKCTL_HOOK: 'silence',
      STACKCTL_HOOK_POINT: 'pre-batch',
      STACKCTL_BATCH_NODES: 'cmp-0 cmp-1',
      STACKCTL_INVENTORY: 'inventories/lab.yaml',
    });
  });
});

describe('built-in hooks', () => {
  it('has a runner for every built-in hook', () => {
    expect(Object.keys(BUILTIN_HOOK_RUNNERS).sort()).toEqual(Object.keys(BUILTIN_HOOKS).sort());
  });

  it('dispatches nova-enable by name to the evacuation module, for the batch nodes', async () => {
    const nova = new FakeNova(
      ['cmp-0', 'cmp-1'].map((host) => ({
        host,
        status: 'disabled' as const,
        state: 'up' as const,
        vcpus: 4,
        memoryMb: 8192,
        diskGb: 100,
      })),
      [],
      [],
    );
    const ctx = fakeContext({ cloud: nova });
    const detail = await hookHandler(
      hook({ hook: 'nova-enable', source: 'built-in', point: 'post-batch', command: undefined }),
      ctx,
      detachedScope(),
    );
    expect(detail).toBe('nova-compute enabled on cmp-0, cmp-1');
    expect(nova.hosts.map((h) => h.status)).toEqual(['enabled', 'enabled']);
  });

  it("gives nova-evacuate the inventory's evacuation knobs (seconds)", async () => {
    expect(evacuationOptions({ concurrency: 4, timeout_s: 30, poll_s: 2, abort_grace_s: 10 })).toEqual({
      concurrency: 4,
      timeoutMs: 30_000,
      pollMs: 2_000,
      abortGraceMs: 10_000,
    });
    expect(evacuationOptions(undefined)).toEqual({});
    const nova = new FakeNova(
      ['cmp-0', 'cmp-1'].map((host) => ({
        host,
        status: 'enabled' as const,
        state: 'up' as const,
        vcpus: 4,
        memoryMb: 8192,
        diskGb: 100,
      })),
      [{ id: 'f', name: 'm1.tiny', vcpus: 1, ram: 512, disk: 1 }],
      [{ id: 'a', name: 'vm-a', status: 'ACTIVE', host: 'cmp-0', flavor: 'f', migration: 'hangs' }],
    );
    const base = fakeContext({ cloud: nova });
    const inventory = { ...base.inventory, upgrade: { evacuation: { timeout_s: 20, poll_s: 5 } } };
    const ctx = Object.assign(Object.create(base) as typeof base, { inventory });
    const err = await rejection(
      hookHandler(
        hook({ hook: 'nova-evacuate', source: 'built-in', nodes: ['cmp-0'], command: undefined }),
        ctx,
        detachedScope(),
      ),
    );
    expect(err.message).toMatch(/vm-a: timeout: still MIGRATING\/migrating on cmp-0 after 20 s; migration 1 aborted/);
  });

  it('refuses a built-in name stackctl does not have', async () => {
    const err = await rejection(
      hookHandler(hook({ hook: 'drain-all', source: 'built-in' }), fakeContext(), detachedScope()),
    );
    expect(err.code).toBe('E_UNKNOWN_HOOK');
  });
});
