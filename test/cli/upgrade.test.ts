import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { copyInventory, runCli } from '../helpers/cli.js';

describe('stackctl upgrade', () => {
  it('prints the phases of zed -> zed-update with --plan and acts on nothing', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli(
      'upgrade',
      '-i',
      inv,
      '--to',
      'zed-update',
      '--plan',
      '--batch',
      '4',
      '--pause-at',
      'migration',
    );
    expect(r.stderr).not.toContain('error');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('update within OpenStack zed');
    expect(r.stdout).toContain('control:keystone');
    expect(r.stdout).toContain('-- pause: offline migration of keystone');
    expect(r.stdout).toContain('batch:3: computes in batches: batch 3/3');
    // Nothing written next to the inventory: no IPAM state, no journal.
    expect(readdirSync(dirname(inv))).toEqual(['example-multinode.yaml']);
  });

  it('gives stable JSON with --json', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const a = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--plan', '--json');
    const b = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--plan', '--json');
    expect(a.code).toBe(0);
    expect(a.stdout).toBe(b.stdout);
    const plan = JSON.parse(a.stdout) as { kind: string; phases: { id: string }[] };
    expect(plan.kind).toBe('update');
    expect(plan.phases[0]!.id).toBe('precheck');
  });

  it('says plainly that only --plan is implemented', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli('upgrade', '-i', inv, '--to', 'zed-update');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('E_NOT_IMPLEMENTED');
    expect(r.stderr).toContain('--plan');
    const c = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--continue');
    expect(c.code).toBe(2);
    expect(c.stderr).toMatch(/--continue is not implemented/);
  });

  it('refuses an unknown target manifest and a target that breaks a skew rule', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli('upgrade', '-i', inv, '--to', 'zed-nope', '--plan');
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('E_UNKNOWN_RELEASE');
    const s = await runCli('upgrade', '-i', inv, '--to', 'epoxy', '--plan');
    expect(s.code).toBe(3);
    expect(s.stderr).toContain('E_UPGRADE_SKEW');
    expect(s.stderr).toContain('nova-compute would run 5 release(s) behind nova-conductor');
  });

  it('asks the registry with --check-images, and fails with REMOTE when it does not answer', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--plan', '--check-images', '127.0.0.1:17951');
    expect(r.code).toBe(5);
    expect(r.stderr).toContain('E_REGISTRY_UNREACHABLE');
    expect(r.stdout).toBe('');
  });

  it('refuses bad options', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--plan', '--batch', 'two');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('E_OPTION');
    const p = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--plan', '--pause-at', 'lunch');
    expect(p.code).toBe(2);
  });
});
