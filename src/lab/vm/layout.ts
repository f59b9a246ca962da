/**
 * The VM lab's layout, pure: the inventory it writes, the names of its host
 * objects, its IPv6 ULA. Everything is derived from the inventory file's
 * path and content, so two labs on one machine never pick the same names.
 */
import { join } from 'node:path';
import { UsageError } from '../../core/errors.js';
import { sha256 } from '../../core/hash.js';
import { parseCidr4 } from '../../core/ipv4.js';
import { LAB_NETWORKS, checkPrefix16, labNodeEntries, topology } from '../nodes/topology.js';

/** Defaults of a VM lab. */
export const VM_LAB_DEFAULTS = {
  /** First two octets of the lab networks. */
  prefix16: '10.97',
  /** Controllers get IPMI from here, computes Redfish from here + 100. */
  bmcPort: 7230,
  /** Guest memory: the deployed OS runs sshd and dockerd; TCG with tb-size=128 keeps QEMU at ~600 MiB RSS. */
  memoryMiB: 1024,
  /** The deployed OS needs 2 under TCG: with one, its kernel stalled after the IO-APIC timer check (LAB-FACTS 7: -smp 2). */
  cpus: 2,
  /** Sparse qcow2: costs only what the guest writes. */
  diskGiB: 4,
  /** Most nodes `--nodes` accepts: each VM needs ~600 MiB and a share of 2 cores under TCG. */
  maxNodes: 8,
} as const;

/**
 * Port of the lab registry on the bridge address, where the VMs pull from
 * (the inventory's cloud.registry); this machine pushes to it on loopback.
 */
export const VM_REGISTRY_PORT = 5000;

/** The lab's own registry container. */
export const vmRegistryContainer = (labName: string): string => `stackctl-${labName}-registry`;

/**
 * Third octets of the VM lab's networks: those of the container lab + 100, so
 * a container lab and a VM lab under the same /16 never share a subnet.
 */
export const VM_OCTET_OFFSET = 100;

/** Names of all host objects start with this, so an operator can tell them apart (and `ip link` can filter). */
export const VM_NAME_PREFIX = 'svm';

/** Inputs of a VM lab inventory. */
export interface VmLabInventoryOptions {
  readonly name: string;
  /** A topology preset (src/lab/nodes/topology.ts); ignored when `nodes` is given. */
  readonly topology: string;
  /** N nodes: one controller (ctl-0) and N-1 computes. */
  readonly nodes?: number;
  readonly prefix16: string;
  readonly bmcPort: number;
  readonly diskGiB: number;
  readonly release?: string;
}

/** Check `--nodes`: a whole number from 1 to the maximum. */
export function checkNodeCount(text: string | number): number {
  const n = typeof text === 'number' ? text : /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > VM_LAB_DEFAULTS.maxNodes) {
    throw new UsageError(
      'E_LAB_NODES',
      `--nodes must be a whole number from 1 to ${VM_LAB_DEFAULTS.maxNodes}, not '${text}'`,
      {
        hint: 'Each VM takes ~600 MiB and a share of the CPU under TCG; 2 is the usual lab.',
      },
    );
  }
  return n;
}

/** How many controllers and computes a VM lab has. */
export function vmLabShape(o: Pick<VmLabInventoryOptions, 'topology' | 'nodes'>): {
  controllers: number;
  computes: number;
} {
  if (o.nodes !== undefined) {
    const n = checkNodeCount(o.nodes);
    return { controllers: 1, computes: n - 1 };
  }
  const t = topology(o.topology);
  return { controllers: t.controllers, computes: t.computes };
}

/**
 * The inventory text of a VM lab. Provisioning is the only network that
 * exists on this machine (the lab bridge; .254 is this machine, the deploy
 * host); the others are the cloud's networks the deployed OS will carry.
 * Deterministic.
 */
export function vmLabInventoryYaml(o: VmLabInventoryOptions): string {
  const shape = vmLabShape(o);
  const p = checkPrefix16(o.prefix16);
  const net = (octet: number, host: number): string => `${p}.${octet + VM_OCTET_OFFSET}.${host}`;
  const what = o.nodes !== undefined ? `${o.nodes} node(s)` : o.topology;
  const lines = [
    `# VM lab '${o.name}' (${what}), written by \`stackctl lab up --kind vm\`.`,
    '# Each node is a QEMU VM behind a virtual BMC on 127.0.0.1; provisioning is a Linux bridge on this',
    '# machine (.254 is the deploy host, its registry listens there). Edit with care: `lab up` keeps this file.',
    'cloud:',
    `  name: ${o.name}`,
    `  release: ${o.release ?? 'zed'}`,
    `  registry: ${net(LAB_NETWORKS.provisioning.octet, 254)}:${VM_REGISTRY_PORT}`,
    '  # The lab registry speaks plain HTTP: the nodes list it under insecure-registries.',
    '  registry_insecure: true',
    '  settings:',
    '    # No KVM in the lab: Nova fake virt driver, everything above it is the real Nova.',
    '    nova_compute_driver: fake.FakeDriver',
    '    nova_virt_type: qemu',
    'networks:',
  ];
  for (const [name, n] of Object.entries(LAB_NETWORKS)) {
    const f = [`cidr: ${net(n.octet, 0)}/24`];
    if (n.gateway) f.push(`gateway: ${net(n.octet, 254)}`);
    // NOTE: no VLAN tags: every lab network is a flat subnet on the one bridge, because this
    // machine's kernel may lack 802.1Q (no 8021q module, no bridge VLAN filtering) and could then
    // not reach the nodes on a tagged network; a site's inventory tags them (docs/provisioning.md)
    if (n.vip) f.push(`vip: ${net(n.octet, 250)}`);
    if (n.dhcp) f.push(`dhcp_range: [${net(n.octet, 100)}, ${net(n.octet, 199)}]`);
    f.push(`allocation_range: [${net(n.octet, 10)}, ${net(n.octet, 99)}]`);
    lines.push(`  ${name}: { ${f.join(', ')} }`);
  }
  lines.push('nodes:');
  // the host image must fit: ask for most of the disk, leave room for a smaller disk model
  const minGb = Math.max(1, o.diskGiB - 1);
  for (const n of labNodeEntries(shape.controllers, shape.computes, o.bmcPort, '97')) {
    lines.push(...n.lines, `    root_device: { min_size_gb: ${minGb} }`);
  }
  return lines.join('\n') + '\n';
}

/** Six hex digits from the inventory's absolute path: the lab's part of every host object name. */
export function labTag(inventoryFile: string): string {
  return sha256(inventoryFile).slice(0, 6);
}

/** The bridge of a lab: `svm<tag>` (9 characters; Linux allows 15). */
export function bridgeName(tag: string): string {
  return `${VM_NAME_PREFIX}${tag}`;
}

/** The lab's VLAN interface on its bridge: `svm<tag>v<vlan>` (at most 14 characters). */
export function vlanLinkName(tag: string, vlan: number): string {
  return `${VM_NAME_PREFIX}${tag}v${vlan}`;
}

/** The tap of a lab's i-th VM: `svm<tag>t<i>`. */
export function tapName(tag: string, index: number): string {
  return `${VM_NAME_PREFIX}${tag}t${index}`;
}

/**
 * The IPv6 ULA /64 of a provisioning network, from its IPv4 octets
 * (10.97.124.0/24 -> fd0a:61:7c::): distinct per lab network, and dnsmasq's
 * router advertisements for it spare iPXE a ~13 s wait (LAB-FACTS 5).
 */
export function ulaPrefix(cidr: string): string {
  const net = parseCidr4(cidr);
  if (!net) throw new UsageError('E_LAB_CIDR', `'${cidr}' is not an IPv4 network`, { hint: 'a.b.c.d/prefix' });
  const o = [net.base >>> 24, (net.base >>> 16) & 255, (net.base >>> 8) & 255];
  return `fd${o[0]!.toString(16).padStart(2, '0')}:${o[1]!.toString(16)}:${o[2]!.toString(16)}::`;
}

/** Where a VM keeps its run folder and disk, under `<inventory>.lab/vm/`. */
export function vmPaths(labDir: string, node: string): { runDir: string; disk: string } {
  return { runDir: join(labDir, 'vm', node), disk: join(labDir, 'vm', `${node}.qcow2`) };
}

/** The disk serial number a VM's virtio disk reports (root device hints can match it). */
export function diskSerial(tag: string, index: number): string {
  return `SVM${tag.toUpperCase()}${index}`;
}
