/**
 * The report model, from run files the real engine, journal and event log wrote (fixture.ts), and
 * the errors of missing, empty and corrupt files.
 */
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import { eventsFileFor } from '../../src/core/events.js';
import { RunMode, journalFileFor } from '../../src/orchestrator/journal.js';
import { reportOf } from '../../src/cli/report.js';
import { buildReport, type LoggedEvent } from '../../src/report/model.js';
import { readEvents, readJournal } from '../../src/report/read.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { Clock, HOSTILE, deployRun, upgradeRun } from './fixture.js';

const T0 = Date.parse('2026-11-26T10:00:00.000Z');

/** The error a call throws (code, message, hint). */
function errorOf(f: () => unknown): StackctlError {
  try {
    f();
  } catch (err) {
    if (err instanceof StackctlError) return err;
    throw err;
  }
  throw new Error('no error thrown');
}

describe('the report model of a run', () => {
  it('an upgrade that failed in its second batch: identity, phases in time, batches, migration, failure, availability', async () => {
    const clock = new Clock(T0);
    const { inventory, run } = await upgradeRun(tempDir(), { clock });
    const r = reportOf(inventory);
    expect(r).toMatchObject({
      run,
      command: 'upgrade',
      target: 'zed-update',
      options: { batch: 1 },
      outcome: 'failed',
    });
    expect(r.starts).toBe(1);
    expect(r.start).toBe(T0);
    expect(r.phases.map((p) => [p.id, p.state, p.batch, p.start - T0, p.end - T0])).toEqual([
      ['precheck', 'done', false, 0, 2000],
      ['control:keystone', 'done', false, 2000, 22000],
      ['batch:1', 'done', true, 22000, 43000],
      ['batch:2', 'failed', true, 43000, 46000],
    ]);
    expect(r.phases[2]!.actions).toEqual({ done: 2, failed: 0, skipped: 0 });
    expect(r.migrations).toEqual([
      { server: 'web-1', from: 'cmp-0', to: HOSTILE, state: 'completed', start: T0 + 22000, end: T0 + 28000 },
    ]);
    expect(r.failures).toHaveLength(1);
    expect(r.failures[0]).toMatchObject({
      phase: 'batch:2',
      code: 'E_HEALTH_TIMEOUT',
      message: `nova_compute on ${HOSTILE} did not become healthy in 300 s`,
      class: 'hard',
      time: T0 + 46000,
    });
    expect(r.failures[0]!.hint).toContain('--resume');
    expect(r.lanes.map((l) => [l.source, l.subject, l.gaps.map((g) => [g.start - T0, g.end - g.start])])).toEqual([
      ['api', 'keystone+nova via VIP', [[9000, 2500]]],
      ['workload', 'web-1', [[27500, 1200]]],
    ]);
    expect(r.end).toBe(T0 + 46000);
  });

  it('a resumed run: two starts, the done phases skipped, the failed batch tried again and the run succeeded', async () => {
    const clock = new Clock(T0);
    const dir = tempDir();
    const first = await upgradeRun(dir, { clock });
    clock.t += 60_000;
    const second = await upgradeRun(dir, { clock, mode: RunMode.RESUME });
    expect(second.run).toBe(first.run);
    const r = reportOf(first.inventory);
    expect(r.outcome).toBe('succeeded');
    expect(r.starts).toBe(2);
    const b2 = r.phases.filter((p) => p.id === 'batch:2');
    expect(b2.map((p) => p.state)).toEqual(['failed', 'done']);
    expect(r.phases.filter((p) => p.state === 'skipped').map((p) => p.id)).toEqual([
      'precheck',
      'control:keystone',
      'batch:1',
    ]);
  });

  it('a killed run: unfinished, its open batch running; resumed, that attempt shows as interrupted', async () => {
    const clock = new Clock(T0);
    const dir = tempDir();
    const killed = await upgradeRun(dir, { clock, kill: true });
    const r = reportOf(killed.inventory);
    expect(r.outcome).toBe('unfinished');
    expect(r.phases.at(-1)).toMatchObject({ id: 'batch:2', state: 'running', start: T0 + 43000 });
    clock.t += 600_000;
    await upgradeRun(dir, { clock, mode: RunMode.RESUME });
    const after = reportOf(killed.inventory);
    expect(after.outcome).toBe('succeeded');
    const b2 = after.phases.filter((p) => p.id === 'batch:2');
    expect(b2.map((p) => p.state)).toEqual(['interrupted', 'done']);
    // the interrupted attempt ends at the killed segment's last record, not at the resumption
    expect(b2[0]!.end).toBe(T0 + 43000);
  });

  it('a paused run: outcome paused, with the pause and its reason', async () => {
    const { inventory } = await upgradeRun(tempDir(), { clock: new Clock(T0), pause: true });
    const r = reportOf(inventory);
    expect(r.outcome).toBe('paused');
    expect(r.pause).toEqual({ phase: 'batch:2', reason: 'batch 1 (cmp-0) done' });
    expect(r.phases.at(-1)).toMatchObject({ id: 'batch:2', state: 'paused' });
  });

  it('--run picks an earlier run; without it the run started last is shown; another run is not mixed in', async () => {
    const clock = new Clock(T0);
    const dir = tempDir();
    const deploy = await deployRun(dir, clock);
    clock.t += 3600_000;
    const upgrade = await upgradeRun(dir, { clock, fail: false });
    expect(reportOf(deploy.inventory).run).toBe(upgrade.run);
    const d = reportOf(deploy.inventory, deploy.run);
    expect(d).toMatchObject({ command: 'deploy', target: 'zed', outcome: 'succeeded', failures: [], lanes: [] });
    expect(d.phases.map((p) => p.id)).toEqual(['step:1:apply', 'step:2:apply']);
    expect(d.end - d.start).toBe(12000);
  });

  it('folds a long event log (200 000 action events) without running out of stack', async () => {
    const { inventory } = await upgradeRun(tempDir(), { clock: new Clock(T0), fail: false });
    const events = [...readEvents(eventsFileFor(inventory)).records];
    const extra: LoggedEvent[] = Array.from({ length: 200_000 }, (_, i) => ({
      time: new Date(T0 + 2000 + (i % 20000)).toISOString(),
      kind: 'run.action',
      phase: 'control:keystone',
      action: 'ensure',
      subject: `ctl-${i}`,
      state: 'done',
      detail: '',
      ms: 1,
    }));
    const journalFile = journalFileFor(inventory);
    const r = buildReport(readJournal(journalFile).records, [...events, ...extra], { inventory, journalFile });
    expect(r.events).toBe(events.length + extra.length);
    expect(r.outcome).toBe('succeeded');
  });

  it('refuses an unknown run, naming the runs it has', async () => {
    const { inventory, run } = await upgradeRun(tempDir(), { clock: new Clock(T0) });
    const e = errorOf(() => reportOf(inventory, 'nope'));
    expect(e.code).toBe('E_REPORT_UNKNOWN_RUN');
    expect(e.message).toContain("'nope'");
    expect(e.hint).toContain(run);
  });

  it('refuses a journal with no run and a missing journal', () => {
    const dir = tempDir();
    const inventory = `${dir}/site.yaml`;
    expect(errorOf(() => reportOf(inventory)).code).toBe('E_REPORT_NO_FILE');
    writeFileSync(journalFileFor(inventory), '');
    const e = errorOf(() => reportOf(inventory));
    expect(e.code).toBe('E_REPORT_EMPTY');
    expect(e.message).toContain(journalFileFor(inventory));
  });

  it('refuses an empty event log, naming it', async () => {
    const { inventory } = await upgradeRun(tempDir(), { clock: new Clock(T0) });
    writeFileSync(eventsFileFor(inventory), '\n');
    const e = errorOf(() => reportOf(inventory));
    expect(e.code).toBe('E_REPORT_EMPTY');
    expect(e.message).toBe(`${eventsFileFor(inventory)} holds no events record`);
    expect(e.hint).toMatch(/stackctl deploy/);
  });

  it('refuses a corrupt line of the event log, naming file and line; a torn last line is left out with a note', async () => {
    const { inventory } = await upgradeRun(tempDir(), { clock: new Clock(T0) });
    const file = eventsFileFor(inventory);
    const lines = readFileSync(file, 'utf8').split('\n');
    appendFileSync(file, '{"time":"2026-11-26T10:00:50.000Z","kind":"run.ph');
    const torn = reportOf(inventory);
    expect(torn.notes.join('\n')).toContain(`${file}:${lines.length}: the last line is torn`);
    lines[2] = '{"time": "2026-11-26T10:00:01.000Z", "kind": ';
    writeFileSync(file, lines.join('\n'));
    const e = errorOf(() => reportOf(inventory));
    expect(e.code).toBe('E_REPORT_CORRUPT');
    expect(e.message).toMatch(new RegExp(`^${file.replace(/[.]/g, '\\.')}:3: not a record of the events file`));
    lines[2] = '["an array"]';
    writeFileSync(file, lines.join('\n'));
    expect(errorOf(() => reportOf(inventory)).message).toContain(':3:');
  });

  it('the command prints the error, its hint and exits 2 for an unknown run, 3 for a corrupt line', async () => {
    const { inventory, run } = await upgradeRun(tempDir(), { clock: new Clock(T0) });
    const unknown = await runCli('report', '-i', inventory, '--run', 'abc');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`error E_REPORT_UNKNOWN_RUN: ${journalFileFor(inventory)} records no run 'abc'`);
    expect(unknown.stderr).toContain(`hint: Runs recorded last: ${run} (upgrade zed-update, 2026-11-26T10:00:00.000Z)`);
    appendFileSync(eventsFileFor(inventory), 'garbage\n');
    const corrupt = await runCli('report', '-i', inventory);
    expect(corrupt.code).toBe(3);
    expect(corrupt.stderr).toMatch(
      /error E_REPORT_CORRUPT: .*site\.events\.jsonl:\d+: not a record of the events file: "garbage"/,
    );
  });
});
