import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Loaded } from '../../src/cli/context.js';
import { formatUpgradeReport, targetInventory, UPGRADE_EXIT } from '../../src/cli/upgrade.js';
import type { UpgradePlan } from '../../src/upgrade/model.js';
import type { UpgradeReport } from '../../src/upgrade/report.js';
import { copyInventory, runCli } from '../helpers/cli.js';
import { catalog } from '../helpers/plan.js';

describe('stackctl upgrade', () => {
  it('prints the phases of zed -> zed-update with --dry-run and acts on nothing', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli(
      'upgrade',
      '-i',
      inv,
      '--to',
      'zed-update',
      '--dry-run',
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
    const a = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--dry-run', '--json');
    const b = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--dry-run', '--json');
    expect(a.code).toBe(0);
    expect(a.stdout).toBe(b.stdout);
    const plan = JSON.parse(a.stdout) as { kind: string; phases: { id: string }[] };
    expect(plan.kind).toBe('update');
    expect(plan.phases[0]!.id).toBe('precheck');
  });

  it('refuses --continue and --resume without an open run, and a run without secrets, before touching a node', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const c = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--continue');
    expect(c.code).toBe(2);
    expect(c.stderr).toContain('E_NOTHING_TO_RESUME');
    expect(c.stderr).toContain('--continue');
    const r = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--resume');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('E_NOTHING_TO_RESUME');
    const n = await runCli('upgrade', '-i', inv, '--to', 'zed-update');
    expect(n.code).toBe(3);
    expect(n.stderr).toContain('E_SECRETS_REQUIRED');
    // Nothing written: no journal, no events.
    expect(readdirSync(dirname(inv))).toEqual(['example-multinode.yaml']);
  });

  it('refuses an unknown target manifest and a target that breaks a skew rule', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli('upgrade', '-i', inv, '--to', 'zed-nope', '--dry-run');
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('E_UNKNOWN_RELEASE');
    const s = await runCli('upgrade', '-i', inv, '--to', 'epoxy', '--dry-run');
    expect(s.code).toBe(3);
    expect(s.stderr).toContain('E_UPGRADE_SKEW');
    expect(s.stderr).toContain('nova-compute would run 5 release(s) behind nova-conductor');
  });

  it('asks the registry with --check-images, and fails with REMOTE when it does not answer', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli(
      'upgrade',
      '-i',
      inv,
      '--to',
      'zed-update',
      '--dry-run',
      '--check-images',
      '127.0.0.1:17951',
    );
    expect(r.code).toBe(5);
    expect(r.stderr).toContain('E_REGISTRY_UNREACHABLE');
    expect(r.stdout).toBe('');
  });

  it('refuses bad options', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--dry-run', '--batch', 'two');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('E_OPTION');
    const p = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--dry-run', '--pause-at', 'lunch');
    expect(p.code).toBe(2);
  });

  it('reports phase durations, the pause with the command that goes on, failures with hints, and backups', () => {
    const base: UpgradeReport = {
      ok: false,
      outcome: 'paused',
      run: 'abc',
      target: 'zed-update',
      ms: 12_000,
      phases: [
        { id: 'precheck', title: 'prechecks', state: 'done', ms: 4200 },
        { id: 'control:keystone', title: 'keystone', state: 'paused', ms: 0 },
        { id: 'batch:1', title: 'batch', state: 'not-run', ms: 0 },
      ],
      pause: { phase: 'control:keystone', reason: 'offline migration of keystone' },
      failures: [],
      notSwapped: [],
      backups: ['ctl-0:/var/lib/stackctl/backups/abc/glance-20261122T213000Z.sql.gz'],
      releaseWritten: false,
    };
    const paused = formatUpgradeReport(base, 'stackctl upgrade -i inv.yaml --to zed-update');
    expect(paused).toMatch(/precheck\s+done\s+4\.2 s/);
    expect(paused).not.toContain('batch:1');
    expect(paused).toContain('PAUSED before control:keystone: offline migration of keystone');
    expect(paused).toContain("run 'stackctl upgrade -i inv.yaml --to zed-update --continue' to go on");
    expect(paused).toContain('backup: ctl-0:/var/lib/stackctl/backups/abc/glance-20261122T213000Z.sql.gz');
    const failed = formatUpgradeReport(
      {
        ...base,
        outcome: 'failed',
        failures: [
          {
            phase: 'batch:1',
            key: 'batch:1#0 hook nova-evacuate@pre-batch:cmp-0',
            action: 'hook',
            subject: 'nova-evacuate@pre-batch:cmp-0',
            step: 0,
            node: 'cmp-0',
            path: 'batch:1/cmp-0/hook',
            class: 'hard',
            code: 'E_EVACUATE',
            message: 'cmp-0 still holds 1 server',
            hint: 'look at the migration',
          },
        ],
        notSwapped: [{ phase: 'batch:1', node: 'cmp-0', reason: 'pre-batch hook nova-evacuate failed' }],
      },
      'stackctl upgrade -i inv.yaml --to zed-update',
    );
    expect(failed).toContain(
      'FAILED batch:1 hook nova-evacuate@pre-batch:cmp-0 [hard]: E_EVACUATE: cmp-0 still holds 1 server',
    );
    expect(failed).toContain('hint: look at the migration');
    expect(failed).toContain('not upgraded: cmp-0 (batch:1): pre-batch hook nova-evacuate failed');
    expect(failed).toContain('--resume');
    expect(new Set(Object.values(UPGRADE_EXIT)).size).toBe(3);
  });
});

describe('the target configs of a fast-forward', () => {
  const all = {
    catalog,
    loaded: { inventory: { cloud: { release: 'zed', settings: { nova_compute_driver: 'fake.FakeDriver' } } } },
  };
  const plan = (fastForward: boolean, services: string[]) =>
    ({
      changes: services.map((service) => ({ service })),
      ...(fastForward ? { fastForward: {} } : {}),
    }) as unknown as UpgradePlan;

  it("turns Nova's old-compute check off only for a fast-forward that moves Nova (its service file's fast_forward_settings)", () => {
    const ff = targetInventory(all as unknown as Loaded, plan(true, ['keystone', 'nova-api']));
    expect(ff.cloud.settings).toEqual({
      nova_compute_driver: 'fake.FakeDriver',
      nova_disable_compute_service_check_for_ffu: true,
    });
    expect(targetInventory(all as unknown as Loaded, plan(false, ['nova-api']))).toBe(all.loaded.inventory);
    expect(targetInventory(all as unknown as Loaded, plan(true, ['keystone'])).cloud.settings).toEqual({
      nova_compute_driver: 'fake.FakeDriver',
    });
  });
});
