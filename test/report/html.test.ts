/** The page's pure parts: escaping, durations, what the timeline draws of a resumed run. */
import { describe, expect, it } from 'vitest';
import { reportOf } from '../../src/cli/report.js';
import { RunMode } from '../../src/orchestrator/journal.js';
import { duration, esc, renderHtml } from '../../src/report/html.js';
import { tempDir } from '../helpers/cli.js';
import { Clock, HOSTILE, upgradeRun } from './fixture.js';

describe('the report page', () => {
  it.each([
    ['&', '&amp;'],
    ['<', '&lt;'],
    ['>', '&gt;'],
    ['"', '&quot;'],
    ["'", '&#39;'],
  ])('escapes %s', (raw, escaped) => {
    expect(esc(`a${raw}b`)).toBe(`a${escaped}b`);
  });

  it('leaves no special character of a hostile name unescaped', () => {
    expect(esc(HOSTILE)).not.toMatch(/[<>"']/);
  });

  it.each([
    [0, '0.0 s'],
    [59_949, '59.9 s'],
    [245_000, '4 min 05 s'],
    [3_720_000, '1 h 02 min'],
  ])('writes %i ms as %s', (ms, text) => {
    expect(duration(ms)).toBe(text);
  });

  it('draws each attempt of a resumed run, not the phases it skipped (the table lists them)', async () => {
    const clock = new Clock(Date.parse('2026-11-26T10:00:00.000Z'));
    const dir = tempDir();
    const { inventory } = await upgradeRun(dir, { clock, failNode: 'cmp-1' });
    clock.t += 60_000;
    await upgradeRun(dir, { clock, failNode: 'cmp-1', mode: RunMode.RESUME });
    const html = renderHtml(reportOf(inventory));
    const drawn = [...html.matchAll(/<g class="row (?:phase|batch)" data-phase="([^"]+)" data-state="([^"]+)"/g)];
    expect(drawn.map((m) => `${m[1]} ${m[2]}`)).toEqual([
      'precheck done',
      'control:keystone done',
      'batch:1 done',
      'batch:2 failed',
      'batch:2 done',
    ]);
    expect([...html.matchAll(/<tr data-phase="precheck">/g)]).toHaveLength(2);
  });
});
