/**
 * Galera as each server sees it: the parsing of the output of its service's
 * `cluster_check` command (`name<TAB>value` lines; `wsrep_on` first: a single
 * server runs without replication and then has no wsrep_local_state_comment
 * at all) and the verdict against the plan's number of members.
 */
import { Severity, ViewState, type Finding, type GaleraMember, type GaleraView } from './model.js';

/** Parse `name<TAB>value` lines. */
export function parseVariables(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const tab = line.indexOf('\t');
    if (tab > 0) out.set(line.slice(0, tab).trim().toLowerCase(), line.slice(tab + 1).trim());
  }
  return out;
}

/** One member from its answer to the `cluster_check` command. */
export function galeraMember(node: string, output: string): GaleraMember {
  const v = parseVariables(output);
  const on = v.get('wsrep_on');
  const size = v.get('wsrep_cluster_size');
  return {
    node,
    ...(on === undefined ? {} : { wsrepOn: on === '1' || on.toUpperCase() === 'ON' }),
    ...(size === undefined || !/^\d+$/.test(size) ? {} : { clusterSize: Number(size) }),
    ...(v.has('wsrep_local_state_comment') ? { localState: v.get('wsrep_local_state_comment')! } : {}),
    ...(v.has('wsrep_cluster_status') ? { clusterStatus: v.get('wsrep_cluster_status')! } : {}),
  };
}

/** The view and its findings, for the plan's `expected` members. */
export function evaluateGalera(
  expected: number,
  members: readonly GaleraMember[],
): { view: GaleraView; findings: Finding[] } {
  if (expected === 0) return { view: { state: ViewState.NOT_DEPLOYED, expected, members: [] }, findings: [] };
  const findings: Finding[] = [];
  const bad = (node: string, message: string): void =>
    void findings.push({ severity: Severity.UNHEALTHY, node, subject: 'cluster', message });
  for (const m of members) {
    if (m.error !== undefined) bad(m.node, `not queried: ${m.error}`);
    else if (m.wsrepOn === false) {
      // One server: no replication by design (the service's galera.cnf template).
      if (expected > 1) bad(m.node, `replication is off (wsrep_on=0) in a cluster of ${expected}`);
    } else {
      if (m.localState !== 'Synced') bad(m.node, `local state ${m.localState ?? 'unknown'}, not Synced`);
      if (m.clusterStatus !== 'Primary') bad(m.node, `cluster status ${m.clusterStatus ?? 'unknown'}, not Primary`);
      if (m.clusterSize !== expected)
        bad(m.node, `cluster size ${m.clusterSize ?? 'unknown'}, the plan has ${expected}`);
    }
  }
  const answered = members.some((m) => m.error === undefined);
  const state = !answered ? ViewState.UNKNOWN : findings.length ? ViewState.PROBLEM : ViewState.OK;
  return { view: { state, expected, members }, findings };
}

/**
 * The cluster-wide finding of a Galera outage: no member (of several) runs a primary component,
 * and the command that shows each member's position and the one to restart the cluster from.
 */
export function outageFinding(expected: number, members: readonly GaleraMember[]): Finding | undefined {
  if (expected < 2 || members.some((m) => m.clusterStatus === 'Primary')) return undefined;
  const up = members.filter((m) => m.diagnosis?.running.startsWith('running'));
  return {
    severity: Severity.UNHEALTHY,
    node: 'cloud',
    subject: 'galera',
    message:
      `no member runs a primary component${up.length ? ` (${up.map((m) => m.node).join(', ')} waiting)` : ''}: ` +
      "'stackctl recover galera --dry-run' shows each member's position and the one to restart the cluster from",
  };
}

/** One line per member for the human output, then its diagnosis (disk and log) when it was read. */
export function describeGaleraMember(m: GaleraMember): string {
  const d = m.diagnosis;
  const more = d
    ? `
    ${d.running}; grastate uuid ${d.uuid ?? 'none'}, seqno ${d.seqno ?? '?'}, safe_to_bootstrap ` +
      `${d.safeToBootstrap === undefined ? '?' : Number(d.safeToBootstrap)}${d.gvwstate ? ', gvwstate.dat' : ''}` +
      `${d.position ? `, position ${d.position}` : ''}${d.data ? '' : ', no data'}` +
      d.log
        .map(
          (l) => `
    | ${l}`,
        )
        .join('')
    : '';
  if (m.error !== undefined) return `${m.node}: ${m.error}${more}`;
  if (m.wsrepOn === false) return `${m.node}: standalone (wsrep off)`;
  return `${m.node}: size ${m.clusterSize ?? '?'}, ${m.localState ?? '?'}, ${m.clusterStatus ?? '?'}${more}`;
}
