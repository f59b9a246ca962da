/**
 * OVN's chassis and Neutron's agents against the plan: every node running ovn-controller has a
 * Chassis row in the Southbound database, the gateway chassis (nodes on the external network) carry
 * the gateway flag where Neutron 21 reads it (the row's external_ids), and Neutron reports a live
 * agent of the expected type for each (OVN Controller [Gateway] agent, OVN Metadata agent).
 * Parsing of `ovn-sbctl --format=json list Chassis` and `openstack network agent list -f json`,
 * and the verdict.
 */
import { Severity, type Finding } from './model.js';

/** A Southbound Chassis row: its name (the node's system-id), hostname and external_ids. */
export interface ChassisRow {
  readonly name: string;
  readonly hostname: string;
  readonly externalIds: Readonly<Record<string, string>>;
}

/** One row of Neutron's agent list. */
export interface NeutronAgent {
  readonly type: string;
  readonly host: string;
  readonly alive: boolean;
}

/** What the plan expects: chassis nodes, the gateway ones among them, the metadata agents' nodes. */
export interface ChassisExpectation {
  readonly chassis: readonly string[];
  readonly gateways: readonly string[];
  readonly metadata: readonly string[];
}

export const GATEWAY_FLAG = 'enable-chassis-as-gw';
export const AGENT_CONTROLLER = 'OVN Controller agent';
export const AGENT_GATEWAY = 'OVN Controller Gateway agent';
export const AGENT_METADATA = 'OVN Metadata agent';

/** An OVSDB JSON datum: a plain string, or ["map", [[k, v], ...]]. */
const datumMap = (d: unknown): Record<string, string> => {
  const out: Record<string, string> = {};
  if (Array.isArray(d) && d[0] === 'map' && Array.isArray(d[1]))
    for (const kv of d[1] as unknown[]) if (Array.isArray(kv) && typeof kv[0] === 'string') out[kv[0]] = String(kv[1]);
  return out;
};

/** `ovn-sbctl --format=json --columns=name,hostname,external_ids list Chassis` (any column order). */
export function parseChassisJson(output: string): ChassisRow[] {
  const doc = JSON.parse(output) as { headings?: unknown; data?: unknown };
  if (!Array.isArray(doc.headings) || !Array.isArray(doc.data)) throw new Error('not an ovn-sbctl JSON table');
  const col = (name: string): number => (doc.headings as unknown[]).indexOf(name);
  const [n, h, e] = [col('name'), col('hostname'), col('external_ids')];
  if (n < 0) throw new Error('no name column');
  return (doc.data as unknown[][]).map((row) => ({
    name: String(row[n]),
    hostname: h < 0 ? '' : String(row[h]),
    externalIds: e < 0 ? {} : datumMap(row[e]),
  }));
}

/** `openstack network agent list -f json`: Alive is a boolean, or the table's `:-)` / `XXX`. */
export function parseNetworkAgents(output: string): NeutronAgent[] {
  const rows = JSON.parse(output) as Record<string, unknown>[];
  if (!Array.isArray(rows)) throw new Error('not a JSON list');
  return rows.map((r) => ({
    type: String(r['Agent Type'] ?? ''),
    host: String(r['Host'] ?? ''),
    alive: r['Alive'] === true || r['Alive'] === ':-)' || r['Alive'] === 'True',
  }));
}

/** Findings from the Southbound rows and Neutron's agents against the plan. */
export function evaluateChassis(
  want: ChassisExpectation,
  rows: readonly ChassisRow[],
  agents: readonly NeutronAgent[] | undefined,
): Finding[] {
  const out: Finding[] = [];
  const add = (severity: Severity, node: string, subject: string, message: string): void =>
    void out.push({ severity, node, subject, message });
  for (const node of want.chassis) {
    const row = rows.find((r) => r.name === node);
    const gateway = want.gateways.includes(node);
    if (!row) {
      add(
        Severity.UNHEALTHY,
        node,
        'ovn-chassis',
        'no Chassis row in the Southbound database (ovn-controller not registered)',
      );
      continue;
    }
    const flagged = (row.externalIds['ovn-cms-options'] ?? '')
      .split(',')
      .map((o) => o.trim())
      .includes(GATEWAY_FLAG);
    if (gateway && !flagged)
      add(
        Severity.UNHEALTHY,
        node,
        'ovn-chassis',
        `gateway chassis without ${GATEWAY_FLAG} in its Chassis row's external_ids: Neutron places no router gateway on it`,
      );
    if (!gateway && flagged)
      add(Severity.DRIFT, node, 'ovn-chassis', `flagged ${GATEWAY_FLAG} but not on the external network`);
  }
  for (const r of rows)
    if (!want.chassis.includes(r.name)) add(Severity.DRIFT, r.name, 'ovn-chassis', 'a chassis the plan does not have');
  if (!agents) return out;
  const expectAgent = (node: string, type: string): void => {
    const a = agents.find((x) => x.host === node && x.type === type);
    if (!a) add(Severity.UNHEALTHY, node, type, "not in Neutron's agent list");
    else if (!a.alive) add(Severity.UNHEALTHY, node, type, 'Neutron reports it not alive');
  };
  for (const node of want.chassis) expectAgent(node, want.gateways.includes(node) ? AGENT_GATEWAY : AGENT_CONTROLLER);
  for (const node of want.metadata) expectAgent(node, AGENT_METADATA);
  return out;
}
