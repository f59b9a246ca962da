/**
 * What the plan expects of the dataplane, from the service files alone (`network_agent`): which
 * nodes are chassis, which of them are gateways (an address on the agent's gateway network), and
 * which Neutron agent, of which type, each node must run. `stackctl status` checks it, and the
 * deploy's last step waits for it (neutron-server's wait-agents task reads it as `network_agents`).
 */
import type { NetworkAgentRole } from './service-roles.js';

/** What the plan expects of the dataplane. */
export interface NetworkExpectation {
  /** Nodes that must be chassis. */
  readonly chassis: readonly string[];
  /** Chassis that must be gateways (the others must not be). */
  readonly gateways: readonly string[];
  /** The Neutron agents that must be listed alive, sorted by host then type. */
  readonly agents: readonly { readonly host: string; readonly type: string }[];
}

/**
 * The expectation from each node's addresses (who is on a gateway network), the services' nodes
 * (name -> nodes), and the Neutron agents their files declare.
 */
export function networkExpectation(
  addressesOf: (node: string) => Readonly<Record<string, string>> | undefined,
  services: ReadonlyMap<string, readonly string[]>,
  declared: ReadonlyMap<string, NetworkAgentRole>,
): NetworkExpectation {
  const chassis = new Set<string>();
  const gateways = new Set<string>();
  const agents: { host: string; type: string }[] = [];
  for (const [svc, agent] of declared) {
    for (const host of services.get(svc) ?? []) {
      const gateway = agent.gateway !== undefined && Boolean(addressesOf(host)?.[agent.gateway.network]);
      agents.push({ host, type: gateway ? agent.gateway!.type : agent.type });
      if (agent.chassis) chassis.add(host);
      if (agent.chassis && gateway) gateways.add(host);
    }
  }
  agents.sort((a, b) => (a.host === b.host ? a.type.localeCompare(b.type) : a.host.localeCompare(b.host)));
  return { chassis: [...chassis].sort(), gateways: [...gateways].sort(), agents };
}
