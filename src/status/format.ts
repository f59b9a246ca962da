/**
 * The human output of `stackctl status` (pure): a headline with the
 * verdict, a compact table per node, one line per clustered service, the
 * findings. `--json` prints the StatusReport itself (model.ts).
 */
import { short } from '../images/pin.js';
import { CLUSTER_READERS } from './clusters.js';
import { ConfigState, ViewState, type NodeStatus, type StatusReport } from './model.js';
import { flaggedGateway } from './network.js';

/** A plain text table: columns padded to the widest cell (the last one is not padded). */
function table(header: readonly string[], rows: readonly (readonly string[])[], indent = '  '): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    indent +
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}

const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

/** One node: a title line, its containers' table and drifted config files. */
export function formatNode(n: NodeStatus): string {
  const title = `${n.name} (${n.role}, ${n.address || 'no address'})`;
  if (!n.reachable) {
    return `${title}: UNREACHABLE ${n.error?.code ?? ''}: ${n.error?.message ?? ''}\n${n.error?.hint ? `  hint: ${n.error.hint}\n` : ''}`;
  }
  let s = `${title}: reachable, ${seconds(n.ms)}\n`;
  if (!n.containers.length) s += '  no containers of the checked services\n';
  else {
    s += table(
      ['CONTAINER', 'STATE', 'HEALTH', 'IMAGE', 'CONFIG'],
      n.containers.map((c) => [
        c.name,
        (c.exitCode === undefined ? c.state : `${c.state}(${c.exitCode})`) +
          (c.restarts ? ` (${c.restarts.count} restart(s) by Docker, last ${c.restarts.lastStart.slice(0, 19)}Z)` : ''),
        c.checkedNow ? `${c.health} (checked now)` : c.health,
        c.image.matches ? c.image.wantedTag : `${c.image.runningTag ?? '-'} (want ${c.image.wantedTag})`,
        c.config.state === ConfigState.OUTDATED
          ? `would be recreated: ${c.config.changed.join(', ')}`
          : c.config.state === ConfigState.CURRENT
            ? 'up to date'
            : '-',
      ]),
    );
  }
  if (n.configFiles.drift.length) {
    s += `  config files differing from the plan (${n.configFiles.drift.length} of ${n.configFiles.checked}):\n`;
    for (const d of n.configFiles.drift) s += `    ${d.path} (${d.detail})\n`;
  }
  return s;
}

/** The clustered services, one block each. */
export function formatClusters(r: StatusReport): string {
  let s = '';
  for (const c of r.clusters) {
    s += `${c.service} (${c.kind}): ${c.state}`;
    if (c.state !== ViewState.NOT_DEPLOYED) s += ` (plan: ${c.expected} member(s))`;
    const describe = CLUSTER_READERS[c.kind].describe as (m: (typeof c.members)[number]) => string;
    s += '\n' + c.members.map((m) => `  ${describe(m)}\n`).join('');
  }
  const os = r.openstack;
  s += `openstack: ${os.state}${os.via ? ` (asked in ${os.via})` : ''}${os.error ? `: ${os.error}` : ''}\n`;
  if (os.computeServices) {
    s += table(
      ['BINARY', 'HOST', 'ZONE', 'STATUS', 'STATE', 'UPDATED'],
      os.computeServices.map((c) => [c.binary, c.host, c.zone, c.status, c.state, c.updatedAt ?? '-']),
    );
  }
  if (os.hypervisors) {
    s += os.hypervisors.length
      ? table(
          ['HYPERVISOR', 'TYPE', 'HOST IP', 'STATE'],
          os.hypervisors.map((h) => [h.hostname, h.type, h.hostIp, h.state]),
        )
      : '  no hypervisors\n';
  }
  return s + formatNetwork(r) + formatImages(r) + formatCertificates(r);
}

/** The dataplane: one line, the chassis (gateways marked) and Neutron's agents. */
export function formatNetwork(r: StatusReport): string {
  const v = r.network;
  if (!v) return '';
  const via = [v.chassisVia && `chassis from ${v.chassisVia}`, v.agentsVia && `agents from ${v.agentsVia}`]
    .filter(Boolean)
    .join(', ');
  let s = `network: ${v.state}${via ? ` (${via})` : ''}\n`;
  for (const e of v.errors ?? []) s += `  ${e}\n`;
  if (v.chassis)
    s += v.chassis.length
      ? table(
          ['CHASSIS', 'HOSTNAME', 'GATEWAY', 'BRIDGE MAPPINGS'],
          v.chassis.map((c) => [
            c.name,
            c.hostname,
            flaggedGateway(c) ? 'yes' : 'no',
            c.externalIds['ovn-bridge-mappings'] || '-',
          ]),
        )
      : '  no chassis\n';
  if (v.agents)
    s += v.agents.length
      ? table(
          ['AGENT TYPE', 'HOST', 'ALIVE'],
          v.agents.map((a) => [a.type, a.host, a.alive ? 'yes' : 'no']),
        )
      : '  no network agents\n';
  return s;
}

/** The served certificates and the CA: one line, then a table. */
export function formatCertificates(r: StatusReport): string {
  const v = r.certificates;
  if (!v) return '';
  let s = `certificates: ${v.state} (threshold ${v.thresholdDays} days)
`;
  if (v.certificates.length)
    s += table(
      ['CERTIFICATE', 'WHERE', 'STATE', 'NOT AFTER', 'DAYS LEFT'],
      v.certificates.map((c) => [
        c.name,
        c.where,
        c.state,
        c.notAfter ?? '-',
        c.daysLeft === undefined ? (c.error ?? '-') : String(c.daysLeft),
      ]),
    );
  return s;
}

/** The images' pins against the registry: one line, then one per moved or gone tag and the unpinned images. */
export function formatImages(r: StatusReport): string {
  const v = r.images;
  const moved = v.tags.filter((t) => t.state !== 'pinned');
  let s = `images: ${v.state === ViewState.NOT_DEPLOYED ? 'none pinned' : v.state}`;
  if (v.tags.length) s += ` (${v.tags.length - moved.length} of ${v.tags.length} tag(s) still name their pin)`;
  s += `${v.error ? `: ${v.error}` : ''}\n`;
  for (const t of moved)
    s += `  ${t.ref}: ${t.state === 'moved' ? `tag moved to ${short(t.current!)}` : 'tag gone'}, pinned ${short(t.pinned)}\n`;
  if (v.unpinned.length) s += `  not pinned (the next deploy pins them): ${v.unpinned.join(', ')}\n`;
  return s;
}

/** The whole human report. */
export function formatStatus(r: StatusReport): string {
  const containers = r.nodes.reduce((n, x) => n + x.containers.length, 0);
  let s =
    `cloud ${r.cloud}: ${r.verdict.toUpperCase()} (exit status ${r.exitCode}); ` +
    `${r.nodes.length} node(s), ${containers} container(s) of ${r.services.length} service(s), ${seconds(r.ms)}\n\n`;
  s += r.nodes.map(formatNode).join('\n');
  s += '\n' + formatClusters(r);
  if (r.findings.length) {
    s +=
      '\nfindings:\n' +
      table(
        ['SEVERITY', 'NODE', 'SUBJECT', 'WHAT'],
        r.findings.map((f) => [f.severity, f.node, f.subject, f.message]),
      );
  }
  return s;
}
