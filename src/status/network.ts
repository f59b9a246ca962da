/**
 * The dataplane against the plan: every node of a service whose Neutron agent is a chassis
 * (`network_agent.chassis`: ovn-controller) has a Chassis row in the network control plane's
 * database, the gateway chassis (nodes on the agent's gateway network) carry the gateway flag where
 * Neutron 21 reads it (the row's external_ids), and Neutron lists a live agent of the declared type
 * on every node of every service that declares one (OVN Controller [Gateway] agent, OVN Metadata
 * agent). What a service is comes from its file (src/roles/service-roles.ts), never from its name.
 */
import type { NetworkExpectation } from '../roles/network-agents.js';
import { Severity, type ChassisRow, type Finding } from './model.js';

/** The option of a Chassis row's `ovn-cms-options` that makes it a gateway for Neutron. */
export const GATEWAY_FLAG = 'enable-chassis-as-gw';

/** An OVSDB JSON datum as a map: ["map", [[k, v], ...]] (anything else: empty). */
const datumMap = (d: unknown): Record<string, string> => {
  const out: Record<string, string> = {};
  if (Array.isArray(d) && d[0] === 'map' && Array.isArray(d[1]))
    for (const kv of d[1] as unknown[]) if (Array.isArray(kv) && typeof kv[0] === 'string') out[kv[0]] = String(kv[1]);
  return out;
};

/**
 * `ovn-sbctl --format=json --columns=name,hostname,external_ids list Chassis` (any column order).
 * Throws an Error saying what is wrong with output of another shape (status shows it).
 */
export function parseChassisJson(output: string): ChassisRow[] {
  let doc: { headings?: unknown; data?: unknown };
  try {
    doc = JSON.parse(output) as typeof doc;
  } catch {
    throw new Error(`chassis list: not JSON: ${output.trim().slice(0, 200)}`);
  }
  if (!Array.isArray(doc.headings) || !Array.isArray(doc.data))
    throw new Error('chassis list: not an OVSDB JSON table (headings, data)');
  const col = (name: string): number => (doc.headings as unknown[]).indexOf(name);
  const [n, h, e] = [col('name'), col('hostname'), col('external_ids')];
  if (n < 0) throw new Error('chassis list: no name column');
  return (doc.data as unknown[][]).map((row) => ({
    name: String(row[n]),
    hostname: h < 0 ? '' : String(row[h]),
    externalIds: e < 0 ? {} : datumMap(row[e]),
  }));
}

/** Is the row flagged as a gateway (its external_ids' ovn-cms-options, where Neutron 21 reads them)? */
export const flaggedGateway = (row: ChassisRow): boolean =>
  (row.externalIds['ovn-cms-options'] ?? '')
    .split(',')
    .map((o) => o.trim())
    .includes(GATEWAY_FLAG);

/** One row of Neutron's agent list, as the dataplane check reads it. */
type AgentRow = { readonly type: string; readonly host: string; readonly alive: boolean };

/**
 * How long status waits before asking Neutron for its agents again when a planned agent was listed
 * not alive: the chassis answer a liveness ping within a second (collect.ts says why it asks twice).
 */
export const AGENT_RECHECK_MS = 3000;

/** Does the list show a planned agent not alive (or lack one)? Then status asks again. */
export const plannedAgentDown = (want: NetworkExpectation, agents: readonly AgentRow[]): boolean =>
  want.agents.some((w) => !agents.some((a) => a.host === w.host && a.type === w.type && a.alive));

/**
 * Findings from the chassis rows (undefined: not read) and Neutron's agents (undefined: not asked;
 * recheckedMs: the list is a second one, asked that long after a first that showed an agent down).
 */
export function evaluateNetwork(
  want: NetworkExpectation,
  rows: readonly ChassisRow[] | undefined,
  agents: readonly AgentRow[] | undefined,
  recheckedMs?: number,
): Finding[] {
  const out: Finding[] = [];
  const add = (severity: Severity, node: string, subject: string, message: string): void =>
    void out.push({ severity, node, subject, message });
  if (rows) {
    for (const node of want.chassis) {
      const row = rows.find((r) => r.name === node);
      const gateway = want.gateways.includes(node);
      if (!row) {
        add(
          Severity.UNHEALTHY,
          node,
          'chassis',
          'no Chassis row in the Southbound database (ovn-controller not registered)',
        );
        continue;
      }
      const flagged = flaggedGateway(row);
      if (gateway && !flagged)
        add(
          Severity.UNHEALTHY,
          node,
          'chassis',
          `a gateway without ${GATEWAY_FLAG} in its Chassis row's external_ids: Neutron places no router gateway on it`,
        );
      if (!gateway && flagged)
        add(Severity.DRIFT, node, 'chassis', `flagged ${GATEWAY_FLAG} but not on the gateway network`);
    }
    for (const r of rows)
      if (!want.chassis.includes(r.name)) add(Severity.DRIFT, r.name, 'chassis', 'a chassis the plan does not have');
  }
  if (agents) {
    const planned = (x: { host: string; type: string }): boolean =>
      want.agents.some((w) => w.host === x.host && w.type === x.type);
    for (const w of want.agents) {
      const a = agents.find((x) => x.host === w.host && x.type === w.type);
      if (!a) {
        const other = agents.find((x) => x.host === w.host && !planned(x));
        add(
          Severity.UNHEALTHY,
          w.host,
          w.type,
          `not in Neutron's agent list${other ? ` (the node has an ${other.type} instead)` : ''}`,
        );
      } else if (!a.alive)
        add(
          Severity.UNHEALTHY,
          w.host,
          w.type,
          `Neutron reports it not alive${recheckedMs ? ` (asked twice, ${recheckedMs / 1000} s apart)` : ''}`,
        );
    }
    for (const a of agents)
      if (!planned(a) && !a.alive)
        add(Severity.DRIFT, a.host, a.type, 'not alive and not in the plan (delete it from Neutron?)');
  }
  return out;
}
