/**
 * `stackctl report` end to end: run files written by the real engine and writers (fixture.ts), the
 * page written by the CLI, then loaded in headless Chromium (Debian `chromium`) to check what a
 * person sees: a timeline row per phase and batch with widths proportional to time, the failure's
 * code and hint on screen, a hostile node name shown as text and never run. The screenshot is kept
 * in test-output/report/ of the repository.
 */
import { copyFileSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/core/paths.js';
import { esc } from '../../src/report/html.js';
import { dumpDom, screenshot } from '../helpers/chromium.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { Clock, HOSTILE, upgradeRun } from './fixture.js';

const OUTPUT = join(packageRoot(), 'test-output', 'report');

/**
 * Appended to a copy of the page: measures in the browser what is shown and writes it into the
 * DOM for --dump-dom. `alert` is replaced first, so a hostile name that ran would leave a mark.
 */
const PROBE_HEAD = `<script>window.alert = () => { document.documentElement.dataset.alerted = 'yes'; };</script>`;
const PROBE_TAIL = `<script>
const shown = (el) => { if (!el) return false; const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
const rows = [...document.querySelectorAll('#timeline-svg g.row')].map((g) => {
  const bars = [...g.querySelectorAll('rect')].map((r) => { const b = r.getBBox(); return { cls: r.getAttribute('class'), x: b.x, w: b.width }; });
  return { cls: g.getAttribute('class'), phase: g.dataset.phase ?? null, state: g.dataset.state ?? null, bars };
});
const failure = document.querySelector('.failure');
const out = {
  rows,
  failure: failure && { code: failure.querySelector('.code').textContent, codeShown: shown(failure.querySelector('.code')),
    hint: failure.querySelector('.hint')?.innerText ?? null, hintShown: shown(failure.querySelector('.hint')),
    message: failure.querySelector('.message').textContent },
  marks: document.querySelectorAll('.failure-mark').length,
  imgs: document.querySelectorAll('img').length,
  scripts: document.querySelectorAll('script').length,
  outcome: document.getElementById('outcome').textContent,
  identity: Object.fromEntries([...document.querySelectorAll('#identity dd')].map((d) => [d.dataset.field, d.textContent])),
};
const pre = document.createElement('pre'); pre.id = 'probe-result'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>`;

interface Probe {
  rows: { cls: string; phase: string | null; state: string | null; bars: { cls: string; x: number; w: number }[] }[];
  failure: { code: string; codeShown: boolean; hint: string | null; hintShown: boolean; message: string } | null;
  marks: number;
  imgs: number;
  scripts: number;
  outcome: string;
  identity: Record<string, string>;
}

describe('stackctl report, seen in headless Chromium', () => {
  let page = '';
  let html = '';
  let run = '';
  beforeAll(async () => {
    const dir = tempDir();
    const f = await upgradeRun(dir, { clock: new Clock(Date.parse('2026-11-26T10:00:00.000Z')) });
    run = f.run;
    page = join(dir, 'run.html');
    const r = await runCli('report', '-i', f.inventory, '-o', page);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`upgrade run ${run}, failed, 4 phase(s), 1 failure(s)`);
    html = readFileSync(page, 'utf8');
    mkdirSync(OUTPUT, { recursive: true });
    copyFileSync(page, join(OUTPUT, 'run.html'));
  });

  it('is self-contained (no script, no external resource) and holds the hostile name only escaped', () => {
    expect(html).not.toContain(HOSTILE);
    expect(html).toContain(esc(HOSTILE));
    expect(html).not.toMatch(/<script|<link|<img|<iframe|@import|url\(|https?:\/\/(?!www\.w3\.org\/2000\/svg)/i);
  });

  it('shows phases and batches on a timeline proportional to time, the failure with code and hint, the hostile name as text', async () => {
    const probed = join(tempDir(), 'probed.html');
    writeFileSync(probed, html.replace('<head>', `<head>${PROBE_HEAD}`).replace('</body>', `${PROBE_TAIL}</body>`));
    const dom = await dumpDom(probed);
    const m = /<pre id="probe-result">(.*?)<\/pre>/s.exec(dom);
    expect(m, dom.slice(-2000)).not.toBeNull();
    const p = JSON.parse(m![1]!.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&')) as Probe;

    // the hostile name ran nowhere: no element made of it, no alert, only the probe's two scripts
    expect(dom).not.toContain('data-alerted');
    expect(p.imgs).toBe(0);
    expect(p.scripts).toBe(2);

    // a row per phase and batch, each drawn, in time order, widths in the ratio of their durations
    const phases = p.rows.filter((r) => r.phase !== null);
    expect(phases.map((r) => [r.cls, r.phase, r.state])).toEqual([
      ['row phase', 'precheck', 'done'],
      ['row phase', 'control:keystone', 'done'],
      ['row batch', 'batch:1', 'done'],
      ['row batch', 'batch:2', 'failed'],
    ]);
    const bar = (id: string) => phases.find((r) => r.phase === id)!.bars[0]!;
    for (const [a, b] of [
      ['precheck', 'control:keystone'],
      ['control:keystone', 'batch:1'],
      ['batch:1', 'batch:2'],
    ] as const)
      expect(bar(a).x + bar(a).w).toBeCloseTo(bar(b).x, 0);
    // 20 s of keystone against 21 s of batch 1 and 3 s of batch 2
    expect(bar('batch:1').w / bar('control:keystone').w).toBeCloseTo(21 / 20, 2);
    expect(bar('batch:2').w / bar('control:keystone').w).toBeCloseTo(3 / 20, 2);
    expect(bar('batch:2').cls).toBe('bar state-failed');

    // the migration and the availability lanes, with their gaps
    expect(p.rows.filter((r) => r.cls === 'row migration')).toHaveLength(1);
    const lanes = p.rows.filter((r) => r.cls.startsWith('row lane'));
    expect(lanes.map((l) => [l.cls, l.bars.map((b) => b.cls)])).toEqual([
      ['row lane lane-api', ['avail-window', 'gap']],
      ['row lane lane-workload', ['avail-window', 'gap']],
    ]);
    // the API gap of 2.5 s sits 9 s after the start: 9/46 of the plot
    const apiGap = lanes[0]!.bars[1]!;
    const plot = bar('batch:2').x + bar('batch:2').w - bar('precheck').x;
    expect((apiGap.x - bar('precheck').x) / plot).toBeCloseTo(9 / 46, 2);

    // the failure: code and hint on screen, the message with the hostile name as text
    expect(p.failure).toMatchObject({ code: 'E_HEALTH_TIMEOUT', codeShown: true, hintShown: true });
    expect(p.failure!.hint).toContain(`hint: Look at 'docker logs nova_compute' on ${HOSTILE}`);
    expect(p.failure!.message).toBe(`nova_compute on ${HOSTILE} did not become healthy in 300 s`);
    expect(p.marks).toBe(1);
    expect(p.outcome).toMatch(/^failed/);
    expect(p.identity).toMatchObject({ run, command: 'stackctl upgrade (to zed-update)', options: 'batch=1' });
  });

  it('renders to a screenshot kept in test-output/report/', async () => {
    const png = join(OUTPUT, 'run.png');
    await screenshot(page, png, { width: 1280, height: 1400 });
    const head = readFileSync(png).subarray(0, 24);
    expect(head.subarray(1, 4).toString()).toBe('PNG');
    expect([head.readUInt32BE(16), head.readUInt32BE(20)]).toEqual([1280, 1400]);
    expect(statSync(png).size).toBeGreaterThan(20_000);
  });
});
