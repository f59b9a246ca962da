/**
 * The run report as one self-contained HTML page (pure): inline CSS and an inline SVG timeline,
 * no script and nothing fetched, so it can be mailed or attached to a ticket and opened anywhere.
 * Every value that comes from the files (node, server and phase names, messages, hints) goes
 * through `esc`: the page must show a hostile name as text, never run it.
 */
import type { AvailabilityLane, FailureRow, PhaseSpan, RunReport, Span } from './model.js';

/** HTML's five special characters, for text and attribute values alike. */
const ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** A value made safe for HTML text and quoted attributes. */
export function esc(value: unknown): string {
  return String(value).replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

/** What each outcome is called on the page and its colour class. */
export const OUTCOME_TEXT: Readonly<Record<RunReport['outcome'], string>> = {
  succeeded: 'succeeded',
  failed: 'failed (--resume retries)',
  paused: 'paused at a declared pause (--continue goes on)',
  unfinished: 'unfinished: still running, or killed (--resume goes on)',
};

/** Label of each availability source on the timeline. */
export const SOURCE_LABEL: Readonly<Record<AvailabilityLane['source'], string>> = {
  api: 'API probe',
  workload: 'server',
};

/** Tick steps of the time axis (ms), the first that gives at most 10 ticks is used. */
const TICK_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600].map((s) => s * 1000);

const CSS = `
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde6}
dl.identity{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:0}
dl.identity dt{color:#5b6577}dl.identity dd{margin:0}
.outcome{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;color:#fff}
.outcome-succeeded{background:#2e7d32}.outcome-failed{background:#c62828}.outcome-paused{background:#b26a00}
.outcome-unfinished{background:#5b6577}
svg text{font:11px system-ui,sans-serif;fill:#1d2430}svg .axis text{fill:#5b6577}
svg .grid{stroke:#e6e9ef}
.bar.state-done{fill:#4a7bd0}.bar.state-failed{fill:#c62828}.bar.state-interrupted{fill:#9e9e9e}
.bar.state-running{fill:#7aa5e8}.bar.state-skipped,.bar.state-paused{fill:#b0b8c6}
.batch .bar.state-done{fill:#00897b}
.migration .bar{fill:#8e63c7}.migration .bar.state-failed,.migration .bar.state-timeout{fill:#c62828}
.avail-window{fill:#a5d6a7}.gap{fill:#c62828}
.failure-mark{stroke:#c62828;stroke-width:1.5;stroke-dasharray:4 3}
table{border-collapse:collapse;margin:4px 0}td,th{padding:3px 10px;border-bottom:1px solid #e6e9ef;text-align:left;vertical-align:top}
th{color:#5b6577;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.failure{border-left:4px solid #c62828;background:#fdf3f3;padding:8px 12px;margin:8px 0}
.failure h3{margin:0 0 4px;font-size:15px}.failure .code{font-weight:700;color:#c62828}
.failure .hint{margin:4px 0 0;color:#1d2430}.failure .hint b{font-weight:600}
.message{white-space:pre-wrap;margin:4px 0 0;font-family:ui-monospace,monospace;font-size:13px}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
.notes li{color:#5b6577}
`;

/** `12.3 s`, `4 min 05 s`, `1 h 02 min`. */
export function duration(ms: number): string {
  const s = Math.max(0, ms) / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(Math.floor(s % 60)).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}

const iso = (t: number): string => new Date(t).toISOString();

/** The geometry of the timeline. */
const G = { width: 1100, label: 240, right: 16, row: 22, bar: 14, top: 24 } as const;

/** One row of the timeline: a label and its rectangles. */
interface Row {
  readonly cls: string;
  readonly attrs: string;
  readonly label: string;
  readonly body: (y: number, x: (t: number) => number) => string;
}

const clipLabel = (s: string): string => (s.length > 38 ? `${s.slice(0, 37)}…` : s);

/** A bar from span, at least 2 px wide so an instant still shows. */
function bar(cls: string, s: Span, y: number, x: (t: number) => number, title: string, attrs = ''): string {
  const x0 = x(s.start);
  const w = Math.max(2, x(s.end) - x0);
  return (
    `<rect class="${cls}" x="${x0.toFixed(1)}" y="${y + (G.row - G.bar) / 2}" width="${w.toFixed(1)}" height="${G.bar}"${attrs}>` +
    `<title>${esc(title)}</title></rect>`
  );
}

function phaseRow(p: PhaseSpan): Row {
  const acts = `${p.actions.done} done, ${p.actions.failed} failed, ${p.actions.skipped} skipped`;
  return {
    cls: p.batch ? 'batch' : 'phase',
    attrs: ` data-phase="${esc(p.id)}" data-state="${esc(p.state)}"`,
    label: p.title || p.id,
    body: (y, x) =>
      bar(
        `bar state-${esc(p.state)}`,
        p,
        y,
        x,
        `${p.id} (${p.title}): ${p.state}, ${duration(p.end - p.start)}, actions ${acts}`,
      ),
  };
}

function laneRow(l: AvailabilityLane): Row {
  return {
    cls: `lane lane-${l.source}`,
    attrs: ` data-source="${esc(l.source)}" data-subject="${esc(l.subject)}"`,
    label: `${SOURCE_LABEL[l.source]}: ${l.subject}`,
    body: (y, x) =>
      l.windows
        .map((w) => bar('avail-window', w, y, x, `${l.subject}: ${w.ok}/${w.tries} answered`))
        .concat(
          l.gaps.map((g) =>
            bar(
              'gap',
              g,
              y,
              x,
              `${l.subject}: gap of ${duration(g.end - g.start)}, ${g.lost} lost${g.detail ? `, ${g.detail}` : ''}${g.during ? ` during ${g.during}` : ''}`,
              ` data-gap-ms="${g.end - g.start}"`,
            ),
          ),
        )
        .join(''),
  };
}

/** The SVG timeline: phases and batches, migrations, availability lanes, failure marks. */
export function timelineSvg(r: RunReport): string {
  const rows: Row[] = [
    // a phase a resumed run skipped took no time: the table lists it, the timeline does not
    ...r.phases.filter((p) => p.state !== 'skipped').map(phaseRow),
    ...r.migrations.map((m): Row => ({
      cls: 'migration',
      attrs: ` data-server="${esc(m.server)}" data-state="${esc(m.state)}"`,
      label: `${m.server} ${m.from} → ${m.to || '?'}`,
      body: (y, x) =>
        bar(
          `bar state-${esc(m.state)}`,
          m,
          y,
          x,
          `${m.server} ${m.from} -> ${m.to || '?'}: ${m.state}, ${duration(m.end - m.start)}`,
        ),
    })),
    ...r.lanes.map(laneRow),
  ];
  const span = Math.max(1, r.end - r.start);
  const plot = G.width - G.label - G.right;
  const x = (t: number): number => G.label + ((Math.min(Math.max(t, r.start), r.end) - r.start) / span) * plot;
  const height = G.top + rows.length * G.row + 8;
  const step = TICK_STEPS.find((s) => span / s <= 10) ?? TICK_STEPS.at(-1)!;
  const ticks: string[] = [];
  for (let t = 0; t <= span; t += step) {
    const tx = x(r.start + t).toFixed(1);
    ticks.push(
      `<line class="grid" x1="${tx}" x2="${tx}" y1="${G.top - 6}" y2="${height}"/>` +
        `<text x="${tx}" y="${G.top - 10}" text-anchor="middle">+${esc(duration(t))}</text>`,
    );
  }
  const body = rows
    .map((row, i) => {
      const y = G.top + i * G.row;
      return (
        `<g class="row ${row.cls}"${row.attrs}><text x="4" y="${y + G.row / 2 + 4}">${esc(clipLabel(row.label))}<title>${esc(row.label)}</title></text>` +
        row.body(y, x) +
        '</g>'
      );
    })
    .join('\n');
  const marks = r.failures
    .map(
      (f: FailureRow) =>
        `<line class="failure-mark" data-code="${esc(f.code)}" x1="${x(f.time).toFixed(1)}" x2="${x(f.time).toFixed(1)}" y1="${G.top - 4}" y2="${height}"><title>${esc(`${f.code}: ${f.message}`)}</title></line>`,
    )
    .join('');
  return (
    `<svg id="timeline-svg" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${G.width} ${height}" width="${G.width}" height="${height}" role="img" aria-label="run timeline">` +
    `<g class="axis">${ticks.join('')}</g>\n${body}\n${marks}</svg>`
  );
}

const legend = (items: readonly [string, string][]): string =>
  `<p class="legend">${items.map(([colour, text]) => `<span><i style="background:${colour}"></i>${esc(text)}</span>`).join('')}</p>`;

function failuresHtml(r: RunReport): string {
  if (!r.failures.length) return '<p>No failure recorded.</p>';
  return r.failures
    .map(
      (f) =>
        `<article class="failure" data-code="${esc(f.code)}"><h3><span class="code">${esc(f.code)}</span> ${esc(f.class)} · ${esc(f.path)}</h3>` +
        `<p>at +${esc(duration(f.time - r.start))} (${esc(iso(f.time))}), phase ${esc(f.phase)}</p>` +
        `<p class="message">${esc(f.message)}</p>` +
        (f.hint ? `<p class="hint"><b>hint:</b> ${esc(f.hint)}</p>` : '') +
        '</article>',
    )
    .join('\n');
}

function phasesTable(r: RunReport): string {
  const rows = r.phases.map(
    (p) =>
      `<tr data-phase="${esc(p.id)}"><td>${esc(p.id)}</td><td>${esc(p.title)}</td><td>${esc(p.state)}</td>` +
      `<td class="num">+${esc(duration(p.start - r.start))}</td><td class="num">${esc(duration(p.end - p.start))}</td>` +
      `<td class="num">${p.actions.done}/${p.actions.failed}/${p.actions.skipped}</td></tr>`,
  );
  return `<table><tr><th>phase</th><th>title</th><th>state</th><th>start</th><th>took</th><th>actions done/failed/skipped</th></tr>${rows.join('')}</table>`;
}

function availabilityTable(r: RunReport): string {
  if (!r.lanes.length) {
    return '<p>No availability record in this run: the API probe and the workload ledger write <code>availability.window</code> and <code>availability.gap</code> events when they watch a run.</p>';
  }
  const rows = r.lanes.map((l) => {
    const tries = l.windows.reduce((a, w) => a + w.tries, 0);
    const ok = l.windows.reduce((a, w) => a + w.ok, 0);
    const longest = Math.max(0, ...l.windows.map((w) => w.longestGapMs), ...l.gaps.map((g) => g.end - g.start));
    const gaps = l.gaps
      .map((g) => `${duration(g.end - g.start)} at +${duration(g.start - r.start)}${g.during ? ` (${g.during})` : ''}`)
      .join('; ');
    return (
      `<tr data-source="${esc(l.source)}"><td>${esc(SOURCE_LABEL[l.source])}</td><td>${esc(l.subject)}</td>` +
      `<td class="num">${tries ? ((ok / tries) * 100).toFixed(1) : '-'} %</td><td class="num">${tries}</td>` +
      `<td class="num">${esc(duration(longest))}</td><td>${esc(gaps || 'none')}</td></tr>`
    );
  });
  return `<table><tr><th>source</th><th>watched</th><th>answered</th><th>tries</th><th>longest gap</th><th>gaps</th></tr>${rows.join('')}</table>`;
}

function migrationsTable(r: RunReport): string {
  if (!r.migrations.length) return '';
  const rows = r.migrations.map(
    (m) =>
      `<tr><td>${esc(m.server)}</td><td>${esc(m.from)}</td><td>${esc(m.to || '?')}</td><td>${esc(m.state)}</td><td class="num">${esc(duration(m.end - m.start))}</td></tr>`,
  );
  return `<h2>Migrations</h2><table><tr><th>server</th><th>from</th><th>to</th><th>state</th><th>took</th></tr>${rows.join('')}</table>`;
}

/** The whole page. */
export function renderHtml(r: RunReport, generatedAt: Date = new Date()): string {
  const options = Object.entries(r.options)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join(' ');
  const identity: [string, string][] = [
    ['run', r.run],
    [
      'command',
      `stackctl ${r.command}${!r.target ? '' : r.source === 'events' ? ` --node ${r.target}` : ` (to ${r.target})`}`,
    ],
    ['inventory', r.inventory],
    ['options', options || 'none'],
    ['started', iso(r.start)],
    ['last record', `${iso(r.end)} (${duration(r.end - r.start)} after the start)`],
    ['starts', r.starts > 1 ? `${r.starts} (resumed ${r.starts - 1} time(s))` : '1'],
    ...(r.pause ? ([['paused before', `${r.pause.phase}: ${r.pause.reason}`]] as [string, string][]) : []),
    ['events', String(r.events)],
  ];
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>${esc(`stackctl ${r.command} run ${r.run}: ${r.outcome}`)}</title><style>${CSS}</style></head>
<body>
<header><h1>stackctl ${esc(r.command)} ${esc(r.target)} <span id="outcome" class="outcome outcome-${esc(r.outcome)}">${esc(OUTCOME_TEXT[r.outcome])}</span></h1>
<dl class="identity" id="identity">${identity.map(([k, v]) => `<dt>${esc(k)}</dt><dd data-field="${esc(k)}">${esc(v)}</dd>`).join('')}</dl></header>
<section id="timeline"><h2>Timeline</h2>
${legend([
  ['#4a7bd0', 'phase'],
  ['#00897b', 'compute batch'],
  ['#8e63c7', 'migration'],
  ['#a5d6a7', 'watched, answering'],
  ['#c62828', 'failed / gap'],
  ['#9e9e9e', 'interrupted'],
])}
${timelineSvg(r)}</section>
<section id="failures"><h2>Failures (${r.failures.length})</h2>
${failuresHtml(r)}</section>
<section id="availability"><h2>Availability</h2>
${availabilityTable(r)}</section>
<section id="phases"><h2>Phases</h2>
${phasesTable(r)}</section>
${migrationsTable(r)}
${r.notes.length ? `<section id="notes"><h2>Notes</h2><ul class="notes">${r.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul></section>` : ''}
<footer><p class="notes">Written by stackctl report at ${esc(iso(generatedAt.getTime()))} from the journal and the event log of ${esc(r.inventory)}.</p></footer>
</body></html>
`;
}
