import { appendFileSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import { actionKey, exceeds } from '../../src/orchestrator/engine.js';
import { countByClass, FailureClass } from '../../src/orchestrator/failures.js';
import {
  EffectKind,
  JournalFile,
  RunMode,
  checkLegacyUpgrade,
  effectKey,
  journalFileFor,
  legacyUpgradeJournalFileFor,
  parseJournal,
  replay,
  type Effect,
  type JournalRecord,
  type OpenRun,
} from '../../src/orchestrator/journal.js';
import { planDigest, subjectOf } from '../../src/upgrade/journal.js';
import { tempDir } from '../helpers/cli.js';
import { planOf } from '../upgrade/fakes.js';

const upload: Effect = { kind: EffectKind.UPLOAD, node: 'ctl-0', target: '/etc/stackctl/a', hash: 'h1' };
const create: Effect = { kind: EffectKind.CREATE, node: 'ctl-0', target: 'memcached', hash: 'h2' };
const start: Effect = { kind: EffectKind.START, node: 'ctl-0', target: 'memcached', hash: 'h2' };
const plan = planOf([]);
const upgrade = (mode: OpenRun['mode'], over: Partial<OpenRun> = {}): OpenRun => ({
  command: 'upgrade',
  mode,
  target: 'zed-update',
  options: plan.options,
  digest: planDigest(plan),
  inventory: 'inv.yaml',
  ...over,
});
const deploy = (mode: OpenRun['mode']): OpenRun => ({ command: 'deploy', mode, target: 'zed', inventory: 'inv.yaml' });
const fresh = (): string => journalFileFor(join(tempDir(), 'site.yaml'));
const codeOf = (f: () => unknown): string | undefined => {
  try {
    f();
  } catch (e) {
    return e instanceof StackctlError ? e.code : 'not a StackctlError';
  }
  return undefined;
};
const start2 = (run: string, command: 'deploy' | 'upgrade', mode: RunMode): JournalRecord => ({
  time: '',
  run,
  type: 'run.start',
  format: 2,
  command,
  mode,
  target: 'zed',
});
const eff = (run: string, state: 'intent' | 'done' | 'failed', effect: Effect): JournalRecord => ({
  time: '',
  run,
  type: 'effect',
  state,
  effect,
});

describe('the failure budget', () => {
  it.each([
    { scenario: 'no failure at 0 %', nodes: 3, failed: 0, budget: 0, stop: false },
    { scenario: 'one failure at the default 0 %', nodes: 3, failed: 1, budget: 0, stop: true },
    { scenario: 'a share equal to the budget', nodes: 2, failed: 1, budget: 50, stop: false },
    { scenario: 'a share above the budget', nodes: 3, failed: 2, budget: 50, stop: true },
    { scenario: '1 of 3 against 33 % (33.3 % exceeds it)', nodes: 3, failed: 1, budget: 33, stop: true },
    { scenario: '1 of 3 against 34 %', nodes: 3, failed: 1, budget: 34, stop: false },
    { scenario: 'everything failed at 100 %', nodes: 5, failed: 5, budget: 100, stop: false },
  ])('$scenario: stop=$stop', ({ nodes, failed, budget, stop }) => {
    expect(exceeds({ group: 'Compute', nodes, failed }, budget)).toBe(stop);
  });

  it('summarises failures by class, every class listed', () => {
    const f = { step: 2, node: 'n', path: 'p', code: 'E', message: 'm' };
    expect(
      countByClass([
        { ...f, class: FailureClass.HARD },
        { ...f, class: FailureClass.HARD },
      ]),
    ).toEqual({
      retryable: 0,
      'rolled-back': 0,
      'rollback-failed': 0,
      hard: 2,
    });
  });
});

describe('the journal of converge runs', () => {
  it('is named after the inventory, one file for deploy and upgrade', () => {
    expect(journalFileFor('/x/site.yaml')).toBe('/x/site.journal.jsonl');
    expect(journalFileFor('/x/site.yml')).toBe('/x/site.journal.jsonl');
    expect(legacyUpgradeJournalFileFor('/x/site.yaml')).toBe('/x/site.upgrade.jsonl');
  });

  it('keys an action by phase, step, kind and subject', () => {
    const migrate = {
      kind: 'migrate' as const,
      stage: 'offline' as const,
      service: 'keystone',
      node: 'ctl-0',
      container: 'keystone',
      image: 'r/keystone:zed-2',
      command: ['keystone-manage', 'db_sync'],
    };
    expect(actionKey('control:keystone', 3, migrate.kind, subjectOf(migrate))).toBe(
      'control:keystone#3 migrate keystone@ctl-0 offline keystone-manage db_sync',
    );
  });

  it('finds effects announced but never finished: those are re-checked on resume', () => {
    const r = replay([
      start2('a', 'deploy', RunMode.NEW),
      eff('a', 'intent', upload),
      eff('a', 'done', upload),
      eff('a', 'intent', create),
    ]);
    expect(r.run).toBe('a');
    expect(r.ended).toBe(false);
    expect([...r.effectsDone]).toEqual([effectKey(upload)]);
    expect(r.effectsPending).toEqual([create]);
  });

  it('follows a run across its resumptions and looks at the last run only', () => {
    const r = replay([
      start2('old', 'deploy', RunMode.NEW),
      eff('old', 'intent', start),
      start2('a', 'deploy', RunMode.NEW),
      eff('a', 'intent', create),
      start2('a', 'deploy', RunMode.RESUME),
      eff('a', 'done', create),
      eff('a', 'intent', start),
      eff('a', 'failed', start),
    ]);
    expect([...r.effectsDone]).toEqual([effectKey(create)]);
    expect(r.effectsPending).toEqual([]);
  });

  it('ignores a torn last line (the process died mid-write)', () => {
    const file = fresh();
    const j = new JournalFile(file, upgrade(RunMode.NEW));
    j.action('pull#0 pull ctl-0', 'done', 'ok');
    appendFileSync(file, '{"time":"2026-01-01","run":"');
    const r = JournalFile.last(file);
    expect(r.run).toBe(j.run);
    expect([...r.done]).toEqual(['pull#0 pull ctl-0']);
    expect(parseJournal('{"run":"a","type":"run.end","ok":true}\n{"time":"","ru')).toHaveLength(1);
  });

  it('writes whole JSON lines, mode 0600, and replays done, intent-only, backups, pause and continue', () => {
    const file = fresh();
    const j = new JournalFile(file, upgrade(RunMode.NEW));
    j.phase('pull', 'start');
    j.action('pull#0 pull ctl-0', 'intent');
    j.action('pull#0 pull ctl-0', 'done', '2 pulled');
    j.action('pull#0 pull cmp-0', 'intent');
    j.action('control:glance#3 backup glance@ctl-0', 'intent');
    j.action('control:glance#3 backup glance@ctl-0', 'done', 'ctl-0:/var/lib/stackctl/backups/x/glance.sql.gz');
    j.effect('intent', upload);
    j.pause('control:keystone', 'offline migration');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const r = JournalFile.last(file);
    expect(r).toMatchObject({ run: j.run, command: 'upgrade', target: 'zed-update', ended: false });
    expect(r.pending).toEqual(['pull#0 pull cmp-0']);
    expect([...r.done]).toEqual(['pull#0 pull ctl-0', 'control:glance#3 backup glance@ctl-0']);
    expect(r.backups).toEqual(['ctl-0:/var/lib/stackctl/backups/x/glance.sql.gz']);
    expect(r.effectsPending).toEqual([upload]);
    expect(r.pausedAt).toEqual({ phase: 'control:keystone', reason: 'offline migration' });

    const c = new JournalFile(file, upgrade(RunMode.CONTINUE));
    expect(c.run).toBe(j.run);
    expect(c.previous.pausedAt?.phase).toBe('control:keystone');
    c.continued('control:keystone');
    const after = JournalFile.last(file);
    expect(after.pausedAt).toBeUndefined();
    expect([...after.continued]).toEqual(['control:keystone']);
  });

  it('refuses a new upgrade while one is open, and --resume without one, for another target or another plan', () => {
    const file = fresh();
    expect(codeOf(() => new JournalFile(file, upgrade(RunMode.RESUME)))).toBe('E_NOTHING_TO_RESUME');
    const j = new JournalFile(file, upgrade(RunMode.NEW));
    expect(codeOf(() => new JournalFile(file, upgrade(RunMode.NEW)))).toBe('E_UPGRADE_IN_PROGRESS');
    expect(codeOf(() => new JournalFile(file, upgrade(RunMode.RESUME, { target: 'epoxy' })))).toBe('E_RESUME_TARGET');
    expect(codeOf(() => new JournalFile(file, upgrade(RunMode.CONTINUE, { digest: 'other' })))).toBe(
      'E_RESUME_PLAN_CHANGED',
    );
    expect(new JournalFile(file, upgrade(RunMode.RESUME)).run).toBe(j.run);
    j.end(true);
    expect(codeOf(() => new JournalFile(file, upgrade(RunMode.CONTINUE)))).toBe('E_NOTHING_TO_RESUME');
    const next = new JournalFile(file, upgrade(RunMode.NEW));
    expect(next.run).not.toBe(j.run);
    expect(next.previous.done.size).toBe(0);
  });

  it('refuses a deploy while an upgrade is open: it would move the upgraded services back', () => {
    const file = fresh();
    const j = new JournalFile(file, upgrade(RunMode.NEW));
    j.pause('control:keystone', 'offline migration');
    expect(codeOf(() => new JournalFile(file, deploy(RunMode.NEW)))).toBe('E_UPGRADE_IN_PROGRESS');
    expect(codeOf(() => new JournalFile(file, deploy(RunMode.RESUME)))).toBe('E_UPGRADE_IN_PROGRESS');
    j.end(true);
    expect(new JournalFile(file, deploy(RunMode.NEW)).run).not.toBe(j.run);
  });

  it('a deploy --resume continues the last unfinished deploy run; without one it deploys afresh', () => {
    const file = fresh();
    const first = new JournalFile(file, deploy(RunMode.NEW));
    first.effect('intent', upload);
    first.effect('done', upload);
    first.effect('intent', create);
    const resumed = new JournalFile(file, deploy(RunMode.RESUME));
    expect(resumed.resumed).toBe(true);
    expect(resumed.run).toBe(first.run);
    expect(resumed.previous.effectsPending).toEqual([create]);
    resumed.end(true);
    const again = new JournalFile(file, deploy(RunMode.RESUME)); // the last run ended: nothing to resume
    expect(again.resumed).toBe(false);
    expect(again.run).not.toBe(first.run);
    // an upgrade supersedes an unfinished deploy run (a deploy converges from real state)
    expect(new JournalFile(file, upgrade(RunMode.NEW)).run).not.toBe(again.run);
    expect(readFileSync(file, 'utf8')).not.toMatch(/password|secret/i);
  });

  it('does not continue a run journaled by an earlier version: a deploy deploys afresh, an open upgrade is refused', () => {
    const file = fresh();
    writeFileSync(
      file,
      [
        { time: '', run: 'old', type: 'run.start', resumed: false },
        { time: '', run: 'old', type: 'intent', effect: upload },
      ]
        .map((r) => JSON.stringify(r))
        .join('\n') + '\n',
    );
    const r = JournalFile.last(file);
    expect(r).toMatchObject({ run: 'old', legacy: true, ended: false });
    const d = new JournalFile(file, deploy(RunMode.RESUME));
    expect(d.resumed).toBe(false);
    expect(d.previous.effectsPending).toEqual([]);

    const legacy = legacyUpgradeJournalFileFor(join(tempDir(), 'site.yaml'));
    writeFileSync(
      legacy,
      JSON.stringify({ time: '', run: 'u1', type: 'run.start', mode: 'new', target: 'epoxy' }) + '\n',
    );
    expect(codeOf(() => checkLegacyUpgrade(legacy, 'site.yaml'))).toBe('E_JOURNAL_LEGACY');
    appendFileSync(legacy, JSON.stringify({ time: '', run: 'u1', type: 'run.end', ok: true }) + '\n');
    expect(codeOf(() => checkLegacyUpgrade(legacy, 'site.yaml'))).toBeUndefined();
  });

  it('closes a run without going on with it', () => {
    const file = fresh();
    const j = new JournalFile(file, upgrade(RunMode.NEW));
    JournalFile.close(file, j.run, true);
    expect(JournalFile.last(file).ended).toBe(true);
  });

  it('never holds more than names, keys, hashes, digests and details', () => {
    const file = fresh();
    const j = new JournalFile(file, upgrade(RunMode.NEW));
    j.action('k', 'failed', 'E_X: boom');
    j.effect('done', upload, true);
    for (const line of readFileSync(file, 'utf8').trim().split('\n')) {
      const o = JSON.parse(line) as Record<string, unknown>;
      for (const k of Object.keys(o))
        expect([
          'time',
          'run',
          'type',
          'format',
          'command',
          'mode',
          'target',
          'options',
          'digest',
          'key',
          'state',
          'detail',
          'effect',
          'verified',
        ]).toContain(k);
    }
  });

  it('digests what a plan does: another failure budget is the same plan, another pause is not', () => {
    const other = planOf([], 50);
    expect(planDigest(other)).toBe(planDigest(plan));
    const paused = planOf([
      {
        id: 'batch:2',
        kind: 'batches',
        title: 'b',
        services: [],
        onFailure: 'budget',
        pauseBefore: { reason: 'r' },
        steps: [],
      },
    ]);
    expect(planDigest(paused)).not.toBe(planDigest(planOf([{ ...paused.phases[0]!, pauseBefore: undefined }])));
  });
});
