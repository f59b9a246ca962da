import { isLoopbackHost, parseBmcAddress } from '../core/bmc-address.js';
import { StackctlError, type Issue } from '../core/errors.js';
import { formatIpv4, inCidr, overlaps, parseCidr4, parseIpv4, type Cidr4 } from '../core/ipv4.js';
import type { YamlSource } from '../core/yaml.js';
import type { Inventory } from './schema.js';
import {
  closestNames,
  describeSetting,
  SECRET_REF,
  SECRET_REF_MARK,
  settingProblem,
  type SettingSpec,
} from './settings.js';

/** What the inventory checks need to know of a role (the roles module provides it). */
export interface RoleInfo {
  /** Networks every node of the role has an address on. */
  readonly networks: readonly string[];
  /** Services of the role that form a quorum cluster (Galera, RabbitMQ). */
  readonly quorumServices: readonly string[];
  /** Settings the role's services declare, with their types. */
  readonly settings: ReadonlyMap<string, SettingSpec>;
}

/** Inputs of the semantic checks beyond the inventory itself. */
export interface SemanticContext {
  readonly roles: ReadonlyMap<string, RoleInfo>;
  /** BMC credential names present in the secrets file; undefined when there is no secrets file yet. */
  readonly bmcCredentials?: ReadonlySet<string>;
  /** Service secret names (keys of services:) in the secrets file; undefined when there is no secrets file yet. */
  readonly secretNames?: ReadonlySet<string>;
  readonly secretsFile?: string;
}

/** The network every node must have a NIC on: DHCP, PXE and the deploy agent live there. */
export const PROVISIONING_NETWORK = 'provisioning';

/** A network with its addresses parsed to numbers. */
export interface ParsedNetwork {
  readonly name: string;
  readonly cidr: Cidr4;
  readonly gateway?: number;
  readonly vip?: number;
  readonly dhcp?: readonly [number, number];
  readonly allocation?: readonly [number, number];
}

/**
 * Every semantic check of DESIGN.md section 3, all reported at once, each
 * finding located in the source. Returns the parsed networks for IPAM.
 */
export function checkInventory(
  inv: Inventory,
  src: YamlSource,
  ctx: SemanticContext,
): { issues: Issue[]; networks: Map<string, ParsedNetwork> } {
  const issues: Issue[] = [];
  const err = (code: string, message: string, hint: string, path: (string | number)[]): void => {
    issues.push({ severity: 'error', code, message, hint, location: src.locate(path) });
  };
  const warn = (code: string, message: string, hint: string, path: (string | number)[]): void => {
    issues.push({ severity: 'warning', code, message, hint, location: src.locate(path) });
  };
  const where = (path: (string | number)[]): string => {
    const loc = src.locate(path);
    return `line ${loc.line ?? '?'}`;
  };

  const networks = checkNetworks(inv, err);

  if (!inv.networks[PROVISIONING_NETWORK]) {
    err(
      'E_NO_PROVISIONING_NETWORK',
      `no '${PROVISIONING_NETWORK}' network is defined`,
      'Define networks.provisioning: the network the nodes PXE-boot from.',
      ['networks'],
    );
  }

  // stackctl's registry (images push, lab up) serves TLS with the cloud's CA when the inventory has a
  // `tls:` section; without one it speaks plain HTTP, which the inventory must accept in so many words.
  if (inv.cloud.registry_insecure !== true && !inv.tls) {
    err(
      'E_REGISTRY_PLAIN_HTTP',
      `the registry ${inv.cloud.registry ?? "(the release manifest's)"} would speak plain HTTP (no tls section), and cloud.registry_insecure is not true`,
      "Add a tls: section (then `stackctl certs generate` issues the registry's certificate, the registry serves it and the nodes' dockerd trusts the cloud's CA for it; docs/tls.md), or set cloud.registry_insecure: true to accept that the nodes pull over plain HTTP (their dockerd lists the registry under insecure-registries): keep the registry on the isolated provisioning network then.",
      inv.cloud.registry_insecure === undefined ? ['cloud'] : ['cloud', 'registry_insecure'],
    );
  }

  // Indexes for duplicate detection: value -> first place seen.
  const names = new Map<string, number>();
  const macs = new Map<string, { node: string; path: (string | number)[] }>();
  const bmcs = new Map<string, { node: string; index: number }>();
  const ips = new Map<string, { node: string; path: (string | number)[] }>(); // key: network|ip
  const quorum = new Map<string, number[]>(); // service -> indexes of the nodes running it

  inv.nodes.forEach((node, i) => {
    const base: (string | number)[] = ['nodes', i];
    const first = names.get(node.name);
    if (first !== undefined) {
      err(
        'E_DUPLICATE_NODE',
        `node name '${node.name}' is used twice (also at ${where(['nodes', first, 'name'])})`,
        'Node names are host names: each must be unique.',
        [...base, 'name'],
      );
    } else names.set(node.name, i);

    // Role
    const role = ctx.roles.get(node.role);
    if (!role) {
      const known = [...ctx.roles.keys()].sort().join(', ');
      err(
        'E_UNKNOWN_ROLE',
        `node '${node.name}' has role '${node.role}', which has no definition`,
        `Known roles: ${known || '(none)'}. Add roles/${node.role}.yaml or fix the spelling.`,
        [...base, 'role'],
      );
    } else {
      for (const net of role.networks) {
        if (!inv.networks[net]) {
          err(
            'E_ROLE_NETWORK_MISSING',
            `role ${node.role} of node '${node.name}' needs network '${net}', which the inventory does not define`,
            `Define networks.${net}, or use a role without it.`,
            [...base, 'role'],
          );
        }
      }
      for (const svc of role.quorumServices) {
        const members = quorum.get(svc) ?? [];
        members.push(i);
        quorum.set(svc, members);
      }
    }

    // NICs
    let provisioningNic = false;
    node.nics.forEach((nic, n) => {
      const mac = nic.mac.toLowerCase();
      const seen = macs.get(mac);
      if (seen) {
        err(
          'E_DUPLICATE_MAC',
          `MAC ${mac} of node '${node.name}' is also used by node '${seen.node}' (${where(seen.path)})`,
          'Every NIC has its own MAC address; check for a copy-paste mistake.',
          [...base, 'nics', n, 'mac'],
        );
      } else macs.set(mac, { node: node.name, path: [...base, 'nics', n, 'mac'] });
      if (!inv.networks[nic.network]) {
        err(
          'E_UNKNOWN_NETWORK',
          `NIC ${mac} of node '${node.name}' is on network '${nic.network}', which is not defined`,
          `Defined networks: ${Object.keys(inv.networks).join(', ')}.`,
          [...base, 'nics', n, 'network'],
        );
      }
      if (nic.network === PROVISIONING_NETWORK) provisioningNic = true;
    });
    if (!provisioningNic) {
      err(
        'E_NO_PROVISIONING_NIC',
        `node '${node.name}' has no NIC on the '${PROVISIONING_NETWORK}' network`,
        'Add the MAC of the NIC that PXE-boots, with network: provisioning.',
        [...base, 'nics'],
      );
    }

    // BMC
    try {
      const addr = parseBmcAddress(node.bmc.address);
      const seen = bmcs.get(addr.canonical);
      if (seen) {
        err(
          'E_DUPLICATE_BMC',
          `BMC address ${node.bmc.address} of node '${node.name}' is also used by node '${seen.node}' (${where(['nodes', seen.index, 'bmc', 'address'])})`,
          'Each node has its own BMC; check the address and port.',
          [...base, 'bmc', 'address'],
        );
      } else bmcs.set(addr.canonical, { node: node.name, index: i });
      if (addr.scheme === 'redfish+http' && !isLoopbackHost(addr.host)) {
        if (node.bmc.insecure_http) {
          warn(
            'W_BMC_PLAINTEXT',
            `node '${node.name}' reaches its BMC over plain HTTP (insecure_http: true)`,
            'redfish+http sends credentials in clear text; use redfish+https outside the lab.',
            [...base, 'bmc', 'address'],
          );
        } else {
          err(
            'E_BMC_PLAIN_HTTP',
            `node '${node.name}' would send its BMC credentials in clear text to ${addr.host} (redfish+http)`,
            'Use redfish+https. If this BMC truly has no HTTPS, add insecure_http: true to its bmc entry; ' +
              'anyone on the path can then read the BMC password.',
            [...base, 'bmc', 'address'],
          );
        }
      } else if (node.bmc.insecure_http) {
        warn(
          'W_BMC_INSECURE_HTTP_UNUSED',
          `node '${node.name}' has insecure_http: true, which only matters for redfish+http off loopback`,
          'Remove insecure_http from this bmc entry.',
          [...base, 'bmc', 'insecure_http'],
        );
      }
    } catch (e) {
      if (!(e instanceof StackctlError)) throw e;
      err(e.code, `node '${node.name}': ${e.message}`, e.hint ?? '', [...base, 'bmc', 'address']);
    }
    if (ctx.bmcCredentials && !ctx.bmcCredentials.has(node.bmc.credentials)) {
      err(
        'E_UNKNOWN_CREDENTIALS',
        `node '${node.name}' uses BMC credentials '${node.bmc.credentials}', which the secrets file ${ctx.secretsFile ?? ''} does not hold`,
        `Add bmc.${node.bmc.credentials} (username and password) to the secrets file, or run 'stackctl secrets generate' for lab BMCs.`,
        [...base, 'bmc', 'credentials'],
      );
    }

    // Root device
    if (node.root_device?.name) {
      warn(
        'W_ROOT_DEVICE_NAME',
        `node '${node.name}' picks its root disk by kernel name ${node.root_device.name}`,
        'Kernel names can change between boots; prefer serial or wwn.',
        [...base, 'root_device', 'name'],
      );
    }

    // Fixed IPs
    for (const [netName, ipText] of Object.entries(node.ips ?? {})) {
      const path = [...base, 'ips', netName];
      const net = networks.get(netName);
      if (!inv.networks[netName]) {
        err(
          'E_UNKNOWN_NETWORK',
          `node '${node.name}' has an address on network '${netName}', which is not defined`,
          `Defined networks: ${Object.keys(inv.networks).join(', ')}.`,
          path,
        );
        continue;
      }
      if (role && !role.networks.includes(netName)) {
        warn(
          'W_IP_UNUSED_NETWORK',
          `node '${node.name}' has an address on '${netName}', which role ${node.role} does not use`,
          `Role ${node.role} uses: ${role.networks.join(', ')}. The address is ignored.`,
          path,
        );
      }
      const ip = parseIpv4(ipText);
      if (ip === undefined || !net) continue;
      checkAddressInNetwork(ip, ipText, net, `address ${ipText} of node '${node.name}'`, path, err);
      const key = `${netName}|${ip}`;
      const seen = ips.get(key);
      if (seen) {
        err(
          'E_DUPLICATE_IP',
          `address ${ipText} on ${netName} of node '${node.name}' is also given to node '${seen.node}' (${where(seen.path)})`,
          'Give each node its own address, or leave ips out and let IPAM choose.',
          path,
        );
      } else ips.set(key, { node: node.name, path });
      if (net.vip === ip) {
        err(
          'E_VIP_COLLISION',
          `the VIP of network ${netName} (${ipText}) is also the address of node '${node.name}'`,
          'The VIP moves between controllers; it cannot be a node address.',
          path,
        );
      }
    }
  });

  for (const [svc, members] of [...quorum.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const count = members.length;
    const names = members.map((m) => inv.nodes[m]!.name).join(', ');
    const last = ['nodes', members[count - 1]!, 'role'];
    if (count === 2) {
      err(
        'E_QUORUM',
        `2 nodes run ${svc} (${names}): a 2-member cluster loses quorum when either member fails`,
        'Use 1 node (no HA) or an odd number of 3 or more.',
        last,
      );
    } else if (count % 2 === 0 && count > 0) {
      warn(
        'W_QUORUM_EVEN',
        `${count} nodes run ${svc}: an even cluster tolerates no more failures than ${count - 1} nodes do`,
        'Prefer an odd number of nodes for quorum services (Galera, RabbitMQ, OVN databases).',
        last,
      );
    }
  }

  checkSettings(inv, ctx, err);
  checkNetworkResources(inv, networks, err);

  return { issues, networks };
}

/** Geneve's overhead on an IPv4 underlay as Neutron counts it (max_header_size 38 + the outer IPv4 header). */
export const GENEVE_OVERHEAD = 38 + 20;
/** The smallest MTU a tenant network may have: IPv6's minimum. */
const MIN_TENANT_MTU = 1280;

/**
 * The starter networks of `cloud.resources` against the inventory's networks: the external network
 * exists, has a gateway, and its floating-IP range lies inside it, clear of the VIP, the gateway and
 * the addresses IPAM and DHCP hand out; the tenant network's MTU carries Geneve.
 */
function checkNetworkResources(inv: Inventory, networks: Map<string, ParsedNetwork>, err: Report): void {
  const tenant = inv.networks['tenant'];
  if (tenant?.mtu !== undefined && tenant.mtu - GENEVE_OVERHEAD < MIN_TENANT_MTU) {
    err(
      'E_TENANT_MTU',
      `network tenant's MTU ${tenant.mtu} leaves tenant networks ${tenant.mtu - GENEVE_OVERHEAD} bytes after Geneve's ${GENEVE_OVERHEAD}, below ${MIN_TENANT_MTU}`,
      `Give the tenant network an MTU of at least ${MIN_TENANT_MTU + GENEVE_OVERHEAD} (jumbo frames on the underlay are better).`,
      ['networks', 'tenant', 'mtu'],
    );
  }
  const ext = inv.cloud.resources?.external_network;
  if (!ext) return;
  const base = ['cloud', 'resources', 'external_network'];
  const netName = ext.network ?? 'external';
  const net = networks.get(netName);
  if (!inv.networks[netName]) {
    err(
      'E_EXTERNAL_NETWORK',
      `the external network is inventory network '${netName}', which is not defined`,
      `Name one of: ${Object.keys(inv.networks).sort().join(', ')} (network:), or define networks.${netName}.`,
      ext.network ? [...base, 'network'] : base,
    );
    return;
  }
  if (!net) return; // its own faults are reported already
  if (net.gateway === undefined) {
    err(
      'E_EXTERNAL_NETWORK',
      `network ${netName} has no gateway: floating IPs' traffic would have no way out`,
      `Give networks.${netName}.gateway, the router of that network.`,
      base,
    );
  }
  const path = [...base, 'floating_range'];
  const [a, b] = ext.floating_range.map((t) => parseIpv4(t)) as [number | undefined, number | undefined];
  if (a === undefined || b === undefined) return;
  const text = `${ext.floating_range[0]}-${ext.floating_range[1]}`;
  if (!inCidr(a, net.cidr) || !inCidr(b, net.cidr) || a > b) {
    err(
      'E_EXTERNAL_NETWORK',
      `the floating-IP range ${text} is not a range inside network ${netName} (${net.cidr.text})`,
      `Give its first and last address, both inside ${net.cidr.text}.`,
      path,
    );
    return;
  }
  const inside = (ip: number | undefined): boolean => ip !== undefined && ip >= a && ip <= b;
  const clash = (lo: number, hi: number): boolean => lo <= b && hi >= a;
  if (inside(net.vip) || inside(net.gateway)) {
    err(
      'E_EXTERNAL_NETWORK',
      `the floating-IP range ${text} holds the ${inside(net.vip) ? 'VIP' : 'gateway'} of network ${netName}`,
      'Keep the VIP and the gateway outside the floating-IP range.',
      path,
    );
  }
  const ipam = net.allocation ?? [net.cidr.first + 1, net.cidr.last - 1];
  if (clash(ipam[0], ipam[1])) {
    err(
      'E_EXTERNAL_NETWORK',
      `the floating-IP range ${text} overlaps the addresses IPAM gives nodes on ${netName} (${formatIpv4(ipam[0])}-${formatIpv4(ipam[1])})`,
      net.allocation
        ? 'Move the floating-IP range or the allocation_range so that they do not overlap.'
        : `Give networks.${netName}.allocation_range, the nodes' part of the network, outside the floating-IP range.`,
      path,
    );
  }
  if (net.dhcp && clash(net.dhcp[0], net.dhcp[1])) {
    err(
      'E_EXTERNAL_NETWORK',
      `the floating-IP range ${text} overlaps the DHCP range of ${netName}`,
      'Move the floating-IP range out of the DHCP range.',
      path,
    );
  }
}

type Report = (code: string, message: string, hint: string, path: (string | number)[]) => void;

function checkAddressInNetwork(
  ip: number,
  text: string,
  net: ParsedNetwork,
  what: string,
  path: (string | number)[],
  err: Report,
): void {
  if (!inCidr(ip, net.cidr)) {
    err(
      'E_IP_OUTSIDE_CIDR',
      `${what} is outside network ${net.name} (${net.cidr.text})`,
      `Pick an address inside ${net.cidr.text}.`,
      path,
    );
    return;
  }
  if (net.cidr.prefix < 31 && (ip === net.cidr.first || ip === net.cidr.last)) {
    err(
      'E_IP_RESERVED',
      `${what} is the network or broadcast address of ${net.cidr.text}`,
      'Pick a host address.',
      path,
    );
  }
  if (net.gateway === ip) {
    err(
      'E_IP_IS_GATEWAY',
      `${what} is the gateway of network ${net.name}`,
      'Pick another address; the gateway belongs to the router.',
      path,
    );
  }
  if (net.dhcp && ip >= net.dhcp[0] && ip <= net.dhcp[1]) {
    err(
      'E_IP_IN_DHCP_RANGE',
      `${what} is inside the DHCP range of network ${net.name}`,
      'Addresses in the DHCP range are leased to machines being inspected; pick one outside it.',
      path,
    );
  }
}

function checkNetworks(inv: Inventory, err: Report): Map<string, ParsedNetwork> {
  const parsed = new Map<string, ParsedNetwork>();
  const vlans = new Map<number, string>();
  for (const [name, def] of Object.entries(inv.networks)) {
    const base = ['networks', name];
    const cidr = parseCidr4(def.cidr);
    if (!cidr) {
      err(
        'E_BAD_CIDR',
        `network ${name} has an invalid cidr '${def.cidr}'`,
        'Write it as a.b.c.d/prefix, e.g. 172.17.0.0/24.',
        [...base, 'cidr'],
      );
      continue;
    }
    if (!cidr.exact) {
      err(
        'E_BAD_CIDR',
        `network ${name}: '${def.cidr}' has host bits set`,
        `Did you mean ${formatIpv4(cidr.base)}/${cidr.prefix}? Write the network address.`,
        [...base, 'cidr'],
      );
    }
    const range = (r: readonly [string, string] | undefined, key: string): [number, number] | undefined => {
      if (!r) return undefined;
      const a = parseIpv4(r[0]);
      const b = parseIpv4(r[1]);
      if (a === undefined || b === undefined) return undefined;
      if (a > b) {
        err('E_BAD_RANGE', `network ${name}: ${key} starts after it ends`, 'Write [first, last].', [...base, key]);
        return undefined;
      }
      if (!inCidr(a, cidr) || !inCidr(b, cidr)) {
        err(
          'E_IP_OUTSIDE_CIDR',
          `network ${name}: ${key} is not inside ${def.cidr}`,
          `Keep the range inside ${def.cidr}.`,
          [...base, key],
        );
      }
      return [a, b];
    };
    const dhcp = range(def.dhcp_range, 'dhcp_range');
    const allocation = range(def.allocation_range, 'allocation_range');
    const gateway = def.gateway !== undefined ? parseIpv4(def.gateway) : undefined;
    const vip = def.vip !== undefined ? parseIpv4(def.vip) : undefined;
    const net: ParsedNetwork = {
      name,
      cidr,
      ...(gateway !== undefined ? { gateway } : {}),
      ...(vip !== undefined ? { vip } : {}),
      ...(dhcp ? { dhcp } : {}),
      ...(allocation ? { allocation } : {}),
    };
    if (gateway !== undefined && !inCidr(gateway, cidr)) {
      err(
        'E_IP_OUTSIDE_CIDR',
        `network ${name}: gateway ${def.gateway} is outside ${def.cidr}`,
        'The gateway must be on the network.',
        [...base, 'gateway'],
      );
    }
    if (vip !== undefined) {
      checkAddressInNetwork(vip, def.vip!, net, `VIP ${def.vip}`, [...base, 'vip'], err);
    }
    if (dhcp && allocation && dhcp[0] <= allocation[1] && allocation[0] <= dhcp[1]) {
      err(
        'E_RANGE_OVERLAP',
        `network ${name}: allocation_range overlaps dhcp_range`,
        'IPAM never allocates inside the DHCP range; make the ranges disjoint.',
        [...base, 'allocation_range'],
      );
    }
    if (def.vlan !== undefined) {
      const other = vlans.get(def.vlan);
      if (other) {
        err(
          'E_DUPLICATE_VLAN',
          `networks ${other} and ${name} both use VLAN ${def.vlan}`,
          'Each network needs its own VLAN id.',
          [...base, 'vlan'],
        );
      } else vlans.set(def.vlan, name);
    }
    for (const other of parsed.values()) {
      if (overlaps(other.cidr, cidr)) {
        err(
          'E_NETWORK_OVERLAP',
          `network ${name} (${def.cidr}) overlaps network ${other.name} (${other.cidr.text})`,
          'Networks must not share addresses; routing between them would be ambiguous.',
          [...base, 'cidr'],
        );
      }
    }
    parsed.set(name, net);
  }
  return parsed;
}

/**
 * `cloud.settings` against the types the services of the inventory's roles
 * declare: an unknown name (a typo, or a service no node runs), a value of
 * the wrong type, out of range, off its pattern or with a control character.
 * And `<secret:NAME>` is allowed only as the value of a `secret` setting:
 * anywhere else in the inventory it is refused, so that no inventory text
 * becomes a secret in a config file.
 */
function checkSettings(inv: Inventory, ctx: SemanticContext, err: Report): void {
  const known = new Map<string, SettingSpec>();
  for (const node of inv.nodes) for (const [k, v] of ctx.roles.get(node.role)?.settings ?? []) known.set(k, v);
  const allowedRefs = new Set<string>();
  for (const [name, value] of Object.entries(inv.cloud.settings ?? {})) {
    const path = ['cloud', 'settings', name];
    const spec = known.get(name);
    if (!spec) {
      const elsewhere = [...ctx.roles.values()].map((r) => r.settings.get(name)).find((s) => s !== undefined);
      const close = closestNames(name, known.keys());
      err(
        'E_UNKNOWN_SETTING',
        elsewhere
          ? `cloud.settings.${name} belongs to service ${elsewhere.service}, which no node of this inventory runs`
          : `cloud.settings.${name} is not a setting of any service this cloud runs`,
        close.length
          ? `Did you mean ${close.join(' or ')}? Settings are listed in docs/roles.md.`
          : `Known settings: ${[...known.keys()].sort().join(', ') || '(none)'}.`,
        path,
      );
      continue;
    }
    const problem = settingProblem(spec, value);
    if (problem) {
      err(
        'E_SETTING_VALUE',
        `cloud.settings.${name} ${problem}`,
        `${name} (service ${spec.service}) takes ${describeSetting(spec)}${spec.description ? `: ${spec.description}` : ''}.`,
        path,
      );
      continue;
    }
    if (spec.type === 'secret') {
      allowedRefs.add(name);
      const ref = SECRET_REF.exec(String(value))![1]!;
      if (ctx.secretNames && !ctx.secretNames.has(ref))
        err(
          'E_SECRET_REF_UNKNOWN',
          `cloud.settings.${name} names secret '${ref}', which the secrets file ${ctx.secretsFile ?? ''} does not hold`,
          `Add services.${ref} to the secrets file, or fix the name.`,
          path,
        );
    }
  }
  checkNetworkSettings(inv, ctx, known, err);
  findSecretRefs(inv, [], (path) => {
    if (path.length === 3 && path[0] === 'cloud' && path[1] === 'settings' && allowedRefs.has(String(path[2]))) return;
    const settingName = path[0] === 'cloud' && path[1] === 'settings' ? String(path[2]) : undefined;
    err(
      'E_SECRET_REF_NOT_ALLOWED',
      `${path.join('.')} refers to a secret, which this field cannot hold`,
      settingName && known.has(settingName)
        ? `Setting ${settingName} is not of type secret: write its value, or declare the setting 'type: secret' in roles/services/${known.get(settingName)!.service}.yaml.`
        : 'Only settings declared with type: secret take <secret:NAME>; write the value itself here.',
      path,
    );
  });
}

/**
 * Settings of type network, set or by default: the network exists, and every node whose role runs the
 * declaring service has an address on it (a migration network the computes lack would render an empty
 * listener address).
 */
function checkNetworkSettings(
  inv: Inventory,
  ctx: SemanticContext,
  known: ReadonlyMap<string, SettingSpec>,
  err: Report,
): void {
  for (const spec of known.values()) {
    if (spec.type !== 'network') continue;
    const set = inv.cloud.settings?.[spec.name];
    const value = String(set ?? spec.default);
    if (set !== undefined && settingProblem(spec, set)) continue; // reported as E_SETTING_VALUE
    const path = set !== undefined ? ['cloud', 'settings', spec.name] : ['networks'];
    const what = set !== undefined ? `cloud.settings.${spec.name}` : `${spec.name} (by default)`;
    if (!inv.networks[value]) {
      err(
        'E_SETTING_NETWORK',
        `${what} names network '${value}', which this inventory does not define`,
        `Networks defined: ${Object.keys(inv.networks).sort().join(', ')}. Set ${spec.name} to one of them (service ${spec.service}).`,
        path,
      );
      continue;
    }
    const without = inv.nodes.filter((n) => {
      const role = ctx.roles.get(n.role);
      return role?.settings.has(spec.name) && !role.networks.includes(value);
    });
    if (without.length)
      err(
        'E_SETTING_NETWORK',
        `${what} names network '${value}', on which node(s) ${without.map((n) => n.name).join(', ')} have no address (their role does not list it)`,
        `Add '${value}' to the networks of role(s) ${[...new Set(without.map((n) => n.role))].join(', ')}, or choose a network they have for ${spec.name}.`,
        path,
      );
  }
}

/** Call `f` with the path of every string of a parsed YAML value that holds `<secret:`. */
function findSecretRefs(v: unknown, path: (string | number)[], f: (path: (string | number)[]) => void): void {
  if (typeof v === 'string') {
    if (v.includes(SECRET_REF_MARK)) f([...path]);
  } else if (Array.isArray(v))
    v.forEach((x, i) => {
      path.push(i);
      findSecretRefs(x, path, f);
      path.pop();
    });
  else if (v !== null && typeof v === 'object')
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      path.push(k);
      findSecretRefs(x, path, f);
      path.pop();
    }
}
