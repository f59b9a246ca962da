import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  countByClass,
  exceedsBudget,
  FailureClass,
  rolesOverBudget,
  tallyRoles,
} from '../../src/orchestrator/failures.js';
import {
  EffectKind,
  effectKey,
  JournalFile,
  journalFileFor,
  parseJournal,
  replay,
  type Effect,
  type JournalRecord,
} from '../../src/orchestrator/journal.js';
import { tempDir } from '../helpers/cli.js';

const upload: Effect = { kind: EffectKind.UPLOAD, node: 'ctl-0', target: '/etc/stackctl/a', hash: 'h1' };
const create: Effect = { kind: EffectKind.CREATE, node: 'ctl-0', target: 'memcached', hash: 'h2' };
const start: Effect = { kind: EffectKind.START, node: 'ctl-0', target: 'memcached', hash: 'h2' };
const rec = (run: string, type: 'intent' | 'done' | 'failed', effect: Effect): JournalRecord => ({
  time: '',
  run,
  type,
  effect,
});

describe('the failure budget', () => {
  it.each([
    { scenario: 'no failure at 0 %', nodes: 3, failed: 0, budget: 0, abort: false },
    { scenario: 'one failure at the default 0 %', nodes: 3, failed: 1, budget: 0, abort: true },
    { scenario: 'a share equal to the budget', nodes: 2, failed: 1, budget: 50, abort: false },
    { scenario: 'a share above the budget', nodes: 3, failed: 2, budget: 50, abort: true },
    { scenario: '1 of 3 against 33 % (33.3 % exceeds it)', nodes: 3, failed: 1, budget: 33, abort: true },
    { scenario: '1 of 3 against 34 %', nodes: 3, failed: 1, budget: 34, abort: false },
    { scenario: 'everything failed at 100 %', nodes: 5, failed: 5, budget: 100, abort: false },
  ])('$scenario: abort=$abort', ({ nodes, failed, budget, abort }) => {
    expect(exceedsBudget({ role: 'Compute', nodes, failed }, budget)).toBe(abort);
  });

  it('is counted per role', () => {
    const nodes = [
      { node: 'ctl-0', role: 'Controller' },
      { node: 'cmp-0', role: 'Compute' },
      { node: 'cmp-1', role: 'Compute' },
    ];
    const t = tallyRoles(nodes, new Set(['cmp-1']));
    expect(t).toEqual([
      { role: 'Compute', nodes: 2, failed: 1 },
      { role: 'Controller', nodes: 1, failed: 0 },
    ]);
    expect(rolesOverBudget(t, 50)).toEqual([]);
    expect(rolesOverBudget(t, 49).map((r) => r.role)).toEqual(['Compute']);
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

describe('journal replay', () => {
  it('finds effects announced but never finished: those are re-checked on resume', () => {
    const r = replay([
      { time: '', run: 'a', type: 'run.start', resumed: false },
      rec('a', 'intent', upload),
      rec('a', 'done', upload),
      rec('a', 'intent', create),
    ]);
    expect(r.run).toBe('a');
    expect(r.ended).toBe(false);
    expect([...r.done]).toEqual([effectKey(upload)]);
    expect(r.pending).toEqual([create]);
  });

  it('follows a run across its resumptions and looks at the last run only', () => {
    const r = replay([
      { time: '', run: 'old', type: 'run.start', resumed: false },
      rec('old', 'intent', start),
      { time: '', run: 'a', type: 'run.start', resumed: false },
      rec('a', 'intent', create),
      { time: '', run: 'a', type: 'run.start', resumed: true },
      rec('a', 'done', create),
      rec('a', 'intent', start),
      rec('a', 'failed', start),
    ]);
    expect([...r.done]).toEqual([effectKey(create)]);
    expect(r.pending).toEqual([]);
  });

  it('sees an ended run as nothing to resume', () => {
    expect(
      replay([
        { time: '', run: 'a', type: 'run.start', resumed: false },
        { time: '', run: 'a', type: 'run.end', ok: true },
      ]).ended,
    ).toBe(true);
  });

  it('ignores a line torn by a killed process', () => {
    expect(parseJournal('{"time":"","run":"a","type":"run.start","resumed":false}\n{"time":"","ru')).toHaveLength(1);
  });

  it('the file: a resume continues the last unfinished run, a plain run starts a new one', () => {
    const file = journalFileFor(join(tempDir(), 'site.yaml'));
    expect(file).toMatch(/site\.journal\.jsonl$/);
    const first = new JournalFile(file, { resume: false });
    first.record('intent', upload);
    first.record('done', upload);
    first.record('intent', create);
    const resumed = new JournalFile(file, { resume: true });
    expect(resumed.run).toBe(first.run);
    expect(resumed.previous.pending).toEqual([create]);
    resumed.end(true);
    const fresh = new JournalFile(file, { resume: true }); // the last run ended: nothing to resume
    expect(fresh.run).not.toBe(first.run);
    expect(readFileSync(file, 'utf8')).not.toMatch(/password|secret/i);
  });
});
