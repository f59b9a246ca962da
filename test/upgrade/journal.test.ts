import { appendFileSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import {
  RunMode,
  UpgradeJournal,
  actionKey,
  parseUpgradeJournal,
  planDigest,
  replayUpgrade,
  upgradeJournalFileFor,
  type OpenRun,
} from '../../src/upgrade/journal.js';
import { planOf } from './fakes.js';

const plan = planOf([]);
const opts = (mode: OpenRun['mode'], over: Partial<OpenRun> = {}): OpenRun => ({
  mode,
  target: 'zed-update',
  options: plan.options,
  digest: planDigest(plan),
  inventory: 'inv.yaml',
  ...over,
});
const fresh = (): string => join(mkdtempSync(join(tmpdir(), 'upgrade-journal-')), 'inv.upgrade.jsonl');
const codeOf = (f: () => unknown): string | undefined => {
  try {
    f();
  } catch (e) {
    return e instanceof StackctlError ? e.code : 'not a StackctlError';
  }
  return undefined;
};

describe('the upgrade journal', () => {
  it('is named after the inventory, apart from the deploy journal', () => {
    expect(upgradeJournalFileFor('/x/site.yaml')).toBe('/x/site.upgrade.jsonl');
    expect(upgradeJournalFileFor('/x/site.yml')).toBe('/x/site.upgrade.jsonl');
  });

  it('keys an action by phase, step, kind and subject', () => {
    expect(actionKey('batch:2', 1, { kind: 'swap', node: 'cmp-1', containers: [] })).toBe('batch:2#1 swap cmp-1');
    expect(
      actionKey('control:keystone', 3, {
        kind: 'migrate',
        stage: 'offline',
        service: 'keystone',
        node: 'ctl-0',
        container: 'keystone',
        image: 'r/keystone:zed-2',
        command: ['keystone-manage', 'db_sync'],
      }),
    ).toBe('control:keystone#3 migrate keystone@ctl-0 offline keystone-manage db_sync');
  });

  it('writes whole JSON lines, mode 0600, and replays done, intent-only, pause and continue', () => {
    const file = fresh();
    const j = new UpgradeJournal(file, opts(RunMode.NEW));
    j.phase('pull', 'start');
    j.action('pull#0 pull ctl-0', 'intent');
    j.action('pull#0 pull ctl-0', 'done', '2 pulled');
    j.action('pull#0 pull cmp-0', 'intent');
    j.action('control:glance#3 backup glance@ctl-0', 'intent');
    j.action('control:glance#3 backup glance@ctl-0', 'done', 'ctl-0:/var/lib/stackctl/backups/x/glance.sql.gz');
    j.pause('control:keystone', 'offline migration');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const r = replayUpgrade(parseUpgradeJournal(readFileSync(file, 'utf8')));
    expect(r).toMatchObject({ run: j.run, target: 'zed-update', ended: false, pending: ['pull#0 pull cmp-0'] });
    expect([...r.done]).toEqual(['pull#0 pull ctl-0', 'control:glance#3 backup glance@ctl-0']);
    expect(r.backups).toEqual(['ctl-0:/var/lib/stackctl/backups/x/glance.sql.gz']);
    expect(r.pausedAt).toEqual({ phase: 'control:keystone', reason: 'offline migration' });

    const c = new UpgradeJournal(file, opts(RunMode.CONTINUE));
    expect(c.run).toBe(j.run);
    expect(c.previous.pausedAt?.phase).toBe('control:keystone');
    c.continued('control:keystone');
    const after = UpgradeJournal.last(file);
    expect(after.pausedAt).toBeUndefined();
    expect([...after.continued]).toEqual(['control:keystone']);
  });

  it('ignores a torn last line (the process died mid-write)', () => {
    const file = fresh();
    const j = new UpgradeJournal(file, opts(RunMode.NEW));
    j.action('pull#0 pull ctl-0', 'done', 'ok');
    appendFileSync(file, '{"time":"2026-01-01","run":"');
    const r = UpgradeJournal.last(file);
    expect(r.run).toBe(j.run);
    expect([...r.done]).toEqual(['pull#0 pull ctl-0']);
  });

  it('refuses a new run while one is open, and --resume without one, for another target or another plan', () => {
    const file = fresh();
    expect(codeOf(() => new UpgradeJournal(file, opts(RunMode.RESUME)))).toBe('E_NOTHING_TO_RESUME');
    const j = new UpgradeJournal(file, opts(RunMode.NEW));
    expect(codeOf(() => new UpgradeJournal(file, opts(RunMode.NEW)))).toBe('E_UPGRADE_IN_PROGRESS');
    expect(codeOf(() => new UpgradeJournal(file, opts(RunMode.RESUME, { target: 'epoxy' })))).toBe('E_RESUME_TARGET');
    expect(codeOf(() => new UpgradeJournal(file, opts(RunMode.CONTINUE, { digest: 'other' })))).toBe(
      'E_RESUME_PLAN_CHANGED',
    );
    expect(new UpgradeJournal(file, opts(RunMode.RESUME)).run).toBe(j.run);
    j.end(true);
    expect(codeOf(() => new UpgradeJournal(file, opts(RunMode.CONTINUE)))).toBe('E_NOTHING_TO_RESUME');
    const next = new UpgradeJournal(file, opts(RunMode.NEW));
    expect(next.run).not.toBe(j.run);
    expect(next.previous.done.size).toBe(0);
  });

  it('never holds more than names, keys, digests and details', () => {
    const file = fresh();
    new UpgradeJournal(file, opts(RunMode.NEW)).action('k', 'failed', 'E_X: boom');
    for (const line of readFileSync(file, 'utf8').trim().split('\n')) {
      const o = JSON.parse(line) as Record<string, unknown>;
      expect(
        Object.keys(o).every((k) =>
          ['time', 'run', 'type', 'mode', 'target', 'options', 'digest', 'key', 'state', 'detail'].includes(k),
        ),
      ).toBe(true);
    }
  });

  it('digests what a plan does: another failure budget is the same plan, another pause is not', () => {
    const other = planOf([], 50);
    expect(planDigest(other)).toBe(planDigest(plan));
    const paused = planOf([
      { id: 'batch:2', kind: 'batches', title: 'b', services: [], pauseBefore: { reason: 'r' }, steps: [] },
    ]);
    expect(planDigest(paused)).not.toBe(planDigest(planOf([{ ...paused.phases[0]!, pauseBefore: undefined }])));
  });
});
