/** How a Galera member and a recovery read for an operator. */
import { NIL_UUID } from './grastate.js';
import { isUp, knownPosition, type KnownPosition, type MemberState } from './members.js';
import type { RecoverReport } from './galera.js';

/** The container and server of a member: `running, Primary Synced (size 3)`, `restarting (4 restarts)`. */
export function runningState(m: MemberState): string {
  if (m.error !== undefined) return `unreachable: ${m.error}`;
  const c = m.container;
  let s: string = c.status;
  if (c.status === 'exited') s += ` (exit code ${c.exitCode ?? '?'})`;
  if (c.restartCount > 0) s += ` (${c.restartCount} restart${c.restartCount > 1 ? 's' : ''})`;
  if (m.server)
    s += `, ${m.server.clusterStatus ?? '?'} ${m.server.localState ?? '?'} (size ${m.server.clusterSize ?? '?'})`;
  else if (c.status === 'running') s += ', server not answering';
  return s;
}

/** `uuid:seqno (source)` of a position, `-` when unknown. */
export function positionText(p: KnownPosition | undefined): string {
  return p ? `${p.seqno} (${p.source})` : '-';
}

/** One line per member: its state, its disk, its position and the last words of its log. */
export function describeMember(m: MemberState, position?: KnownPosition): string {
  if (m.error !== undefined) return `${m.node}: unreachable (${m.error}): its data is unknown`;
  const g = m.disk?.grastate;
  const disk = !m.disk?.volume
    ? 'no data volume'
    : `grastate uuid ${g?.uuid ?? 'none'}, seqno ${g?.seqno ?? '?'}, safe_to_bootstrap ${g?.safeToBootstrap === undefined ? '?' : Number(g.safeToBootstrap)}` +
      `${m.disk.gvwstate ? ', gvwstate.dat' : ''}${m.data ? '' : ', no data'}`;
  const p = position ?? knownPosition(m);
  const last = m.log.at(-1);
  return `${m.node}: ${runningState(m)}; ${disk}${p ? `; position ${p.seqno} (${p.source})` : ''}${last ? `; log: ${last}` : ''}`;
}

/** The dry-run (or result) table and the decision line. */
export function formatRecoverReport(r: RecoverReport, dryRun: boolean): string {
  const rows = r.members.map((m) => {
    const p = r.positions.get(m.node) ?? knownPosition(m);
    const g = m.disk?.grastate;
    return [
      m.node,
      m.error !== undefined ? 'unreachable' : runningState(m),
      m.error !== undefined ? '?' : (p?.uuid ?? g?.uuid ?? (m.data ? NIL_UUID : '-')),
      m.error !== undefined ? '?' : p ? String(p.seqno) : g?.seqno !== undefined ? String(g.seqno) : '-',
      p ? p.source : g?.seqno === -1 ? 'crashed: InnoDB' : '-',
      m.error !== undefined ? '?' : g?.safeToBootstrap === undefined ? '-' : String(Number(g.safeToBootstrap)),
      m.error !== undefined ? '?' : m.data ? 'yes' : 'no',
    ];
  });
  const head = ['NODE', 'RUNNING', 'UUID', 'SEQNO', 'FROM', 'SAFE', 'DATA'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  let s = [line(head), ...rows.map(line)].join('\n') + '\n';
  for (const m of r.members) if (!isUp(m)) for (const l of m.log.slice(-3)) s += `  ${m.node} log: ${l}\n`;
  s += `${dryRun ? 'choice' : 'done'}: ${r.summary}${dryRun ? ' (dry run: nothing changed)' : ''}\n`;
  return s;
}
