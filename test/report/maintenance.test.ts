/**
 * Maintenance runs in the report: `nodes maintenance` keeps no journal, so its run is the span of
 * its own events (recordedMaintenance writes them as the command does); the report lists it beside
 * the journal's runs, draws its phase, migrations and workload lanes, and shows a refusal with code,
 * class and hint, without mixing in the events of another run.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InputError } from '../../src/core/errors.js';
import { eventsFileFor, JsonLinesLog, type StackctlEvent } from '../../src/core/events.js';
import { journalFileFor } from '../../src/orchestrator/journal.js';
import { recordedMaintenance } from '../../src/cli/maintenance.js';
import { reportOf } from '../../src/cli/report.js';
import { renderHtml } from '../../src/report/html.js';
import { listRuns } from '../../src/report/model.js';
import { readEvents } from '../../src/report/read.js';
import { EvacuationCapacity } from '../../src/upgrade/prechecks.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { Clock, deployRun } from './fixture.js';

const T0 = Date.parse('2026-11-26T10:00:00.000Z');

/** A maintenance on `node` whose work takes `ms` and emits what nova-evacuate emits for one server. */
async function maintenance(
  inventory: string,
  clock: Clock,
  node: string,
  o: { ms: number; fail?: boolean },
): Promise<string | Error> {
  const log = new JsonLinesLog(eventsFileFor(inventory), clock.date);
  const emit = (e: StackctlEvent): void => log.emit(e);
  return recordedMaintenance('on', node, { emit, now: clock.now }, async () => {
    await clock.sleep(1000);
    if (o.fail) {
      throw new InputError(EvacuationCapacity.CODE, `the instances of ${node} do not fit on the other compute hosts`, {
        hint: 'Free room on the other computes.',
      });
    }
    const from = new Date(clock.t).toISOString();
    emit({ kind: 'upgrade.migration', server: 'web-1', from: node, to: '', state: 'started', ms: 0 });
    await clock.sleep(o.ms);
    emit({ kind: 'upgrade.migration', server: 'web-1', from: node, to: 'cmp-0', state: 'completed', ms: o.ms });
    emit({
      kind: 'availability.window',
      source: 'workload',
      subject: 'web-1',
      from,
      to: new Date(clock.t).toISOString(),
      tries: o.ms / 100,
      ok: o.ms / 100 - 12,
      longestGapMs: 1200,
    });
    emit({
      kind: 'availability.gap',
      source: 'workload',
      subject: 'web-1',
      from: new Date(clock.t - 3000).toISOString(),
      ms: 1200,
      lost: 12,
      detail: 'no answer',
      during: `migration web-1 ${node}->cmp-0`,
    });
    return `1 instance(s) migrated away from ${node}`;
  }).catch((err: Error) => err);
}

describe('a maintenance in the report', () => {
  it('is a run of the event log alone: phase, migration, workload lane, succeeded; no journal needed', async () => {
    const dir = tempDir();
    const inventory = join(dir, 'site.yaml');
    const clock = new Clock(T0);
    expect(await maintenance(inventory, clock, 'cmp-1', { ms: 20_000 })).toBe('1 instance(s) migrated away from cmp-1');
    expect(existsSync(journalFileFor(inventory))).toBe(false);

    const r = reportOf(inventory);
    expect(r).toMatchObject({
      run: `maintenance-on@${new Date(T0).toISOString()}`,
      command: 'nodes maintenance on',
      target: 'cmp-1',
      source: 'events',
      outcome: 'succeeded',
      start: T0,
      end: T0 + 21_000,
    });
    expect(r.phases).toEqual([
      {
        id: 'maintenance:cmp-1',
        title: 'cmp-1: maintenance on',
        batch: false,
        state: 'done',
        start: T0,
        end: T0 + 21_000,
        actions: { done: 0, failed: 0, skipped: 0 },
      },
    ]);
    expect(r.migrations).toEqual([
      { server: 'web-1', from: 'cmp-1', to: 'cmp-0', state: 'completed', start: T0 + 1000, end: T0 + 21_000 },
    ]);
    expect(r.lanes).toHaveLength(1);
    expect(r.lanes[0]).toMatchObject({ source: 'workload', subject: 'web-1', gaps: [{ lost: 12 }] });
    expect(r.failures).toEqual([]);
    expect(renderHtml(r)).toContain('stackctl nodes maintenance on --node cmp-1');
  });

  it('among deploys: listed in time order, the latest picked by default, a refusal shown with code, class and hint', async () => {
    const dir = tempDir();
    const clock = new Clock(T0);
    const { inventory, run: deploy } = await deployRun(dir, clock);
    clock.t += 60_000;
    const first = clock.t;
    await maintenance(inventory, clock, 'cmp-1', { ms: 20_000 });
    clock.t += 60_000;
    const second = clock.t;
    const err = await maintenance(inventory, clock, 'cmp-0', { ms: 20_000, fail: true });
    expect(err).toBeInstanceOf(InputError);

    const journal = reportOf(inventory, deploy);
    const runs = listRuns([], readEvents(eventsFileFor(inventory)).records);
    expect(runs.map((r) => r.id)).toEqual([
      `maintenance-on@${new Date(first).toISOString()}`,
      `maintenance-on@${new Date(second).toISOString()}`,
    ]);
    // the deploy's report holds none of the maintenance's events
    expect(journal.migrations).toEqual([]);
    expect(journal.phases.some((p) => p.id.startsWith('maintenance'))).toBe(false);

    const latest = reportOf(inventory);
    expect(latest).toMatchObject({ run: runs[1]!.id, target: 'cmp-0', outcome: 'failed', migrations: [], lanes: [] });
    expect(latest.phases.map((p) => [p.id, p.state])).toEqual([['maintenance:cmp-0', 'failed']]);
    expect(latest.failures).toEqual([
      {
        time: second + 1000,
        phase: 'maintenance:cmp-0',
        path: 'maintenance:cmp-0/on',
        code: 'E_EVACUATION_CAPACITY',
        message: 'the instances of cmp-0 do not fit on the other compute hosts',
        class: 'rolled-back',
        hint: 'Free room on the other computes.',
      },
    ]);
    const earlier = reportOf(inventory, runs[0]!.id);
    expect(earlier).toMatchObject({ outcome: 'succeeded', target: 'cmp-1' });
    expect(earlier.migrations).toHaveLength(1);

    // the command writes the page of a maintenance run, and names it
    const out = join(dir, 'm.html');
    const r = await runCli('report', '-i', inventory, '--run', runs[0]!.id, '-o', out);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`nodes maintenance on run ${runs[0]!.id}, succeeded, 1 phase(s), 0 failure(s)`);
  });

  it('a maintenance still running (or killed) is unfinished, and ends where a later run starts', async () => {
    const dir = tempDir();
    const inventory = join(dir, 'site.yaml');
    const log = new JsonLinesLog(eventsFileFor(inventory), () => new Date(T0));
    log.emit({ kind: 'command.start', command: 'nodes maintenance on', nodes: ['cmp-1'] });
    log.emit({ kind: 'run.phase', phase: 'maintenance:cmp-1', title: 'cmp-1: maintenance on', state: 'start', ms: 0 });
    expect(reportOf(inventory).outcome).toBe('unfinished');
    // the next maintenance of the same node: the killed one's span stops before it
    const clock = new Clock(T0 + 300_000);
    await maintenance(inventory, clock, 'cmp-1', { ms: 10_000 });
    const killed = reportOf(inventory, `maintenance-on@${new Date(T0).toISOString()}`);
    expect(killed).toMatchObject({ outcome: 'unfinished', migrations: [] });
    expect(killed.phases.map((p) => p.state)).toEqual(['interrupted']);
    writeFileSync(journalFileFor(inventory), '');
    // an empty journal beside a log with maintenance runs: the runs are still reported
    expect(reportOf(inventory).outcome).toBe('succeeded');
  });
});
