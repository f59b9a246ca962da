/**
 * Nova's own view of the cloud (its compute services and hypervisors, read
 * through the client adapter, src/status/openstack-client.ts) against the
 * plan: every planned Nova agent registered and up, one hypervisor up per
 * compute node.
 */
import type { AgentRole } from '../roles/service-roles.js';
import {
  Severity,
  ViewState,
  type ComputeService,
  type Finding,
  type Hypervisor,
  type OpenStackView,
} from './model.js';

/** A hypervisor belongs to a node when its hostname is the node's name or its FQDN (libvirt reports the FQDN). */
const hypervisorOf = (node: string, h: Hypervisor): boolean => h.hostname === node || h.hostname.startsWith(`${node}.`);

/** What the plan expects Nova to report: agent binaries per host, and hypervisor nodes. */
export interface NovaExpectation {
  readonly agents: readonly { readonly binary: string; readonly host: string }[];
  readonly hypervisorNodes: readonly string[];
}

/**
 * The expectation from the plan's services (name -> nodes) among the checked ones, and the agents
 * their files declare (`agent`: the binary each registers, whether its nodes run a hypervisor).
 */
export function novaExpectation(
  services: ReadonlyMap<string, readonly string[]>,
  declared: ReadonlyMap<string, AgentRole>,
): NovaExpectation {
  const agents: { binary: string; host: string }[] = [];
  const hypervisorNodes: string[] = [];
  for (const [svc, agent] of declared) {
    for (const host of services.get(svc) ?? []) {
      agents.push({ binary: agent.binary, host });
      if (agent.hypervisor) hypervisorNodes.push(host);
    }
  }
  return { agents, hypervisorNodes: [...new Set(hypervisorNodes)].sort() };
}

/** Findings from Nova's answers against the expectation. */
export function evaluateOpenStack(
  want: NovaExpectation,
  computeServices: readonly ComputeService[],
  hypervisors: readonly Hypervisor[],
): Finding[] {
  const out: Finding[] = [];
  const add = (severity: Severity, node: string, subject: string, message: string): void =>
    void out.push({ severity, node, subject, message });
  for (const a of want.agents) {
    const row = computeServices.find((s) => s.binary === a.binary && s.host === a.host);
    if (!row) add(Severity.UNHEALTHY, a.host, a.binary, 'not registered in compute service list');
    else if (row.state !== 'up')
      add(Severity.UNHEALTHY, a.host, a.binary, `compute service ${row.state || 'state unknown'}`);
    else if (row.status !== 'enabled') add(Severity.DRIFT, a.host, a.binary, `compute service ${row.status}`);
  }
  // Agents Nova knows that are down and not planned (e.g. a removed node): worth saying, not failing for.
  for (const s of computeServices) {
    const planned = want.agents.some((a) => a.binary === s.binary && a.host === s.host);
    if (!planned && s.state !== 'up' && s.status === 'enabled')
      add(Severity.DRIFT, s.host, s.binary, `compute service ${s.state}, not in the plan (delete it from Nova?)`);
  }
  for (const node of want.hypervisorNodes) {
    const h = hypervisors.find((x) => hypervisorOf(node, x));
    if (!h) add(Severity.UNHEALTHY, node, 'hypervisor', 'not in hypervisor list');
    else if (h.state !== 'up') add(Severity.UNHEALTHY, node, 'hypervisor', `hypervisor ${h.hostname} ${h.state}`);
  }
  return out;
}

/** The view when nothing Nova-related is checked. */
export const NOT_DEPLOYED: OpenStackView = { state: ViewState.NOT_DEPLOYED };
