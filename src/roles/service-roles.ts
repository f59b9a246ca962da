/**
 * What generic code knows of services, read from their files (`provides`,
 * `cluster_check`, `agent`): which service is the cloud's load balancer, its
 * database, its identity service, its message queue, where images go, which
 * container asks the compute API, which services run a cluster that can be
 * asked whether it is whole, and which run OpenStack agents. The engine,
 * status and the upgrade read this and never a service's name.
 */
import { InputError } from '../core/errors.js';
import type { ClusterCheck, NetworkAgent, Service } from './schema.js';

/** The cloud's load balancer: its container and admin socket. */
export interface LoadBalancerRole {
  readonly service: string;
  readonly container: string;
  readonly adminSocket: string;
}

/** The cloud's database: the SQL client and dump argv run in its container. */
export interface DatabaseRole {
  readonly service: string;
  readonly container: string;
  readonly client: readonly string[];
  readonly dump: readonly string[];
}

/** A service whose container carries the OpenStack client. */
export interface ClientRole {
  readonly service: string;
  readonly clientContainer: string;
}

/** An OpenStack agent of a service. */
export interface AgentRole {
  readonly binary: string;
  readonly hypervisor: boolean;
}

/** The network control plane's database: where the chassis list is asked. */
export interface NetworkControlRole {
  readonly service: string;
  readonly container: string;
  readonly chassisList: readonly string[];
}

/** A Neutron agent of a service (its Agent Type; on gateways another), and whether its nodes are chassis. */
export interface NetworkAgentRole {
  readonly type: string;
  /** Nodes with an address on `network` are gateways, and their agent is of type `type`. */
  readonly gateway?: { readonly network: string; readonly type: string };
  readonly chassis: boolean;
}

/** Every role a service file can declare, gathered over a set of services. */
export interface ServiceRoles {
  readonly loadBalancer?: LoadBalancerRole;
  readonly database?: DatabaseRole;
  readonly identity?: ClientRole;
  readonly messageQueue?: { readonly service: string };
  readonly imageStore?: { readonly service: string };
  readonly computeApi?: ClientRole;
  readonly networkControl?: NetworkControlRole;
  /** service -> how its cluster is asked whether it is whole. */
  readonly clusterChecks: ReadonlyMap<string, ClusterCheck>;
  /** service -> the agent it registers with OpenStack. */
  readonly agents: ReadonlyMap<string, AgentRole>;
  /** service -> the Neutron agent it runs on each of its nodes. */
  readonly networkAgents: ReadonlyMap<string, NetworkAgentRole>;
}

/** The roles a set of service files declares (the catalog checks that each is declared once). */
export function serviceRoles(services: Iterable<Service>): ServiceRoles {
  const out: {
    -readonly [K in keyof ServiceRoles]: ServiceRoles[K];
  } = { clusterChecks: new Map(), agents: new Map(), networkAgents: new Map() };
  const checks = new Map<string, ClusterCheck>();
  const agents = new Map<string, AgentRole>();
  const networkAgents = new Map<string, NetworkAgentRole>();
  for (const s of services) {
    const p = s.provides;
    if (p?.load_balancer)
      out.loadBalancer = {
        service: s.name,
        container: p.load_balancer.container,
        adminSocket: p.load_balancer.admin_socket,
      };
    if (p?.database)
      out.database = {
        service: s.name,
        container: p.database.container,
        client: p.database.client,
        dump: p.database.dump,
      };
    if (p?.identity) out.identity = { service: s.name, clientContainer: p.identity.client_container };
    if (p?.message_queue) out.messageQueue = { service: s.name };
    if (p?.image_store) out.imageStore = { service: s.name };
    if (p?.compute_api) out.computeApi = { service: s.name, clientContainer: p.compute_api.client_container };
    if (p?.network_control)
      out.networkControl = {
        service: s.name,
        container: p.network_control.container,
        chassisList: p.network_control.chassis_list,
      };
    if (s.cluster_check) checks.set(s.name, s.cluster_check);
    if (s.network_agent) networkAgents.set(s.name, networkAgentRole(s.network_agent));
    if (s.agent) agents.set(s.name, { binary: s.agent.binary, hypervisor: s.agent.hypervisor ?? false });
  }
  out.clusterChecks = checks;
  out.agents = agents;
  out.networkAgents = networkAgents;
  return out;
}

const networkAgentRole = (a: NetworkAgent): NetworkAgentRole => ({
  type: a.type,
  ...(a.gateway ? { gateway: { network: a.gateway.network, type: a.gateway.type } } : {}),
  chassis: a.chassis ?? false,
});

/** The roles of `provides`, each of which one service at most may declare. */
export const SINGLE_ROLES = [
  'load_balancer',
  'database',
  'identity',
  'message_queue',
  'image_store',
  'compute_api',
  'network_control',
] as const;

/**
 * The binary of the agent whose nodes each run a hypervisor (the compute service an evacuation
 * disables and enables); refused when no service file declares one.
 */
export function hypervisorBinary(roles: ServiceRoles): string {
  for (const a of roles.agents.values()) if (a.hypervisor) return a.binary;
  throw new InputError('E_NO_HYPERVISOR_AGENT', 'no service file declares an agent with hypervisor: true', {
    hint: 'Declare agent: { binary: <its binary>, hypervisor: true } in the hypervisor service file (roles/services/).',
  });
}
