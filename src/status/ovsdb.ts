/**
 * OVN's databases as each ovn-central member sees them: `ovs-appctl cluster/status` of the
 * Northbound and Southbound ovsdb-servers (a RAFT member's role, leader, log index and the servers
 * it knows), or, for a standalone database, that its server serves it. Parsing and the verdict
 * against the plan.
 */
import { judgeMembers } from './cluster-members.js';
import { ViewState, type Finding, type OvsdbDatabase, type OvsdbMember, type OvsdbView } from './model.js';

/** The databases every member serves. */
export const OVN_DATABASES = ['OVN_Northbound', 'OVN_Southbound'] as const;

/**
 * Parse the cluster_check command's output: per database a `== NAME` line, then either
 * `cluster/status` (a clustered database) or `standalone` followed by the server's list-dbs.
 */
export function ovsdbMember(node: string, output: string): OvsdbMember {
  const sections = new Map<string, string[]>();
  let current: string[] | undefined;
  for (const line of output.split('\n')) {
    const m = /^== (\S+)$/.exec(line.trim());
    if (m) sections.set(m[1]!, (current = []));
    else if (current && line.trim()) current.push(line);
  }
  if (sections.size === 0) return { node, error: `unreadable output: ${output.trim().slice(0, 200)}` };
  const databases: OvsdbDatabase[] = [];
  for (const name of OVN_DATABASES) {
    const lines = sections.get(name);
    if (!lines) {
      databases.push({ name, error: 'not reported' });
      continue;
    }
    const field = (key: string): string | undefined =>
      lines.map((l) => new RegExp(`^${key}:\\s*(.*)$`).exec(l.trim())?.[1]).find((v) => v !== undefined);
    if (lines[0]?.trim() === 'standalone') {
      const served = lines.slice(1).some((l) => l.trim() === name);
      databases.push(served ? { name, clustered: false } : { name, clustered: false, error: 'not served' });
      continue;
    }
    const role = field('Role');
    if (role === undefined) {
      databases.push({ name, error: lines.join(' ').slice(0, 200) });
      continue;
    }
    // "Log: [2, 15]": the first and last index of the member's log
    const log = /\[\s*\d+\s*,\s*(\d+)\s*\]/.exec(field('Log') ?? '');
    const serversAt = lines.findIndex((l) => l.trim() === 'Servers:');
    const servers = serversAt < 0 ? [] : lines.slice(serversAt + 1).filter((l) => /^\s+\S+ \(/.test(l));
    const leader = field('Leader');
    const status = field('Status');
    databases.push({
      name,
      clustered: true,
      role,
      ...(leader !== undefined ? { leader } : {}),
      ...(status !== undefined ? { status } : {}),
      ...(log ? { logIndex: Number(log[1]) } : {}),
      servers: servers.length,
    });
  }
  return { node, databases };
}

/** The view and its findings, for the plan's `expected` ovn-central members. */
export function evaluateOvsdb(
  expected: number,
  members: readonly OvsdbMember[],
): { view: OvsdbView; findings: Finding[] } {
  if (expected === 0) return { view: { state: ViewState.NOT_DEPLOYED, expected, members: [] }, findings: [] };
  const { findings, state } = judgeMembers(
    members,
    (m, bad) => {
      for (const d of m.databases ?? []) {
        if (d.error !== undefined) bad(m.node, `${d.name}: ${d.error}`);
        else if (!d.clustered && expected > 1)
          bad(m.node, `${d.name} is standalone, the plan has a cluster of ${expected}`);
        else if (d.clustered && d.status !== 'cluster member') bad(m.node, `${d.name}: ${d.status ?? 'no status'}`);
        else if (d.clustered && d.servers !== expected)
          bad(m.node, `${d.name}: ${d.servers} server(s) in the cluster, the plan has ${expected}`);
      }
    },
    (bad) => {
      for (const name of OVN_DATABASES) {
        const clustered = members.flatMap((m) => m.databases ?? []).filter((d) => d.name === name && d.clustered);
        if (clustered.length && !clustered.some((d) => d.role === 'leader'))
          bad('cloud', `${name}: no member is the leader`);
      }
    },
  );
  return { view: { state, expected, members }, findings };
}

/** One line per member for the human output. */
export function describeOvsdbMember(m: OvsdbMember): string {
  if (m.error !== undefined) return `${m.node}: ${m.error}`;
  const dbs = (m.databases ?? []).map((d) => {
    const short = d.name.replace(/^OVN_/, '');
    if (d.error !== undefined) return `${short} ${d.error}`;
    if (!d.clustered) return `${short} standalone`;
    return `${short} ${d.role} (log ${d.logIndex ?? '?'}, ${d.servers} server(s))`;
  });
  return `${m.node}: ${dbs.join(', ')}`;
}
