/**
 * Lab topologies for container nodes: each preset writes a ready inventory
 * whose networks exist as Docker bridge networks on this machine, so the
 * inventory's addresses are the containers' real addresses.
 */
import { UsageError } from '../../core/errors.js';

/** Topology presets: how many nodes of each role. */
export const TOPOLOGIES = {
  /** The smallest cloud: one controller, one compute. */
  '1ctl-1comp': { controllers: 1, computes: 1 },
  /** One controller, two computes: compute batches and evacuation between hosts (upgrade tests). */
  '1ctl-2comp': { controllers: 1, computes: 2 },
  /** HA control plane: three controllers (Galera/RabbitMQ quorum), two computes. */
  '3ctl-2comp': { controllers: 3, computes: 2 },
} as const;
export type TopologyName = keyof typeof TOPOLOGIES;

/**
 * The lab's networks as third octets under a /16 (DESIGN.md 3 names). One
 * Docker bridge per network: the same L2 separation a site has with VLANs.
 */
export const LAB_NETWORKS = {
  provisioning: { octet: 24, vlan: undefined, gateway: true, vip: false, dhcp: true },
  internal_api: { octet: 20, vlan: 20, gateway: false, vip: true, dhcp: false },
  external: { octet: 10, vlan: undefined, gateway: true, vip: true, dhcp: false },
  tenant: { octet: 50, vlan: 50, gateway: false, vip: false, dhcp: false },
} as const;

/** Inputs of a generated lab inventory. */
export interface LabTopologyOptions {
  readonly name: string;
  readonly topology: string;
  /** First two octets of every lab network, e.g. "10.96". */
  readonly prefix16: string;
  /** First virtual BMC port: controllers use IPMI from here, computes Redfish from here + 100. */
  readonly bmcPort: number;
  readonly release?: string;
  /**
   * What the computes run: Nova's fake virt driver (default: instances are records) or libvirt with
   * QEMU's emulation (TCG), booting the guest image stackctl builds.
   */
  readonly compute?: LabCompute;
}

/** Nova's virt driver in a container lab, as `lab up --compute` names it. */
export const LAB_COMPUTE = {
  /** Nova's fake driver: servers go ACTIVE, nothing boots (scale tests, fast CI). */
  fake: 'fake',
  /** libvirt + QEMU TCG in the compute nodes: servers are real guests. */
  libvirt: 'libvirt',
} as const;
export type LabCompute = (typeof LAB_COMPUTE)[keyof typeof LAB_COMPUTE];

/** Check a topology name. */
export function topology(name: string): (typeof TOPOLOGIES)[TopologyName] {
  const t = (TOPOLOGIES as Record<string, (typeof TOPOLOGIES)[TopologyName]>)[name];
  if (!t) {
    throw new UsageError('E_UNKNOWN_TOPOLOGY', `no lab topology '${name}'`, {
      hint: `Topologies: ${Object.keys(TOPOLOGIES).join(', ')}.`,
    });
  }
  return t;
}

/** Check a /16 prefix such as 10.96. */
export function checkPrefix16(prefix: string): string {
  const m = /^(\d{1,3})\.(\d{1,3})$/.exec(prefix);
  if (!m || Number(m[1]) > 255 || Number(m[2]) > 255) {
    throw new UsageError('E_LAB_PREFIX', `'${prefix}' is not the first two octets of an IPv4 network`, {
      hint: 'For example --prefix 10.96 (the lab then uses 10.96.24.0/24, 10.96.20.0/24, ...).',
    });
  }
  return prefix;
}

/**
 * The inventory text of a container lab. Addresses: .10-.99 nodes (IPAM),
 * .250 VIP, .254 this machine (the Docker bridge), .1 on provisioning the
 * deploy host's registry container. Deterministic.
 */
export function labInventoryYaml(o: LabTopologyOptions): string {
  const t = topology(o.topology);
  const p = checkPrefix16(o.prefix16);
  const net = (octet: number, host: number): string => `${p}.${octet}.${host}`;
  const lines = [
    `# Container lab '${o.name}' (${o.topology}), written by \`stackctl lab up --kind container\`.`,
    '# Each network below is a Docker bridge network of the same subnet; .254 is this machine,',
    '# .1 on provisioning is the registry container. Edit with care: `lab up` keeps this file.',
    'cloud:',
    `  name: ${o.name}`,
    `  release: ${o.release ?? 'zed'}`,
    `  registry: ${net(LAB_NETWORKS.provisioning.octet, 1)}:5000`,
    '  # The lab registry speaks plain HTTP: the nodes list it under insecure-registries.',
    '  registry_insecure: true',
    '  settings:',
    ...(o.compute === LAB_COMPUTE.libvirt
      ? [
          '    # No nested KVM in the lab: libvirt runs guests under QEMU emulation (TCG).',
          '    nova_compute_driver: libvirt.LibvirtDriver',
          '    nova_virt_type: qemu',
          '    # Live migration between the computes over plain TCP: the lab network is this machine alone.',
          '    nova_live_migration_transport: tcp',
        ]
      : [
          '    # No KVM in the lab: Nova fake virt driver, everything above it is the real Nova.',
          '    nova_compute_driver: fake.FakeDriver',
          '    nova_virt_type: qemu',
        ]),
    "    # No openvswitch kernel module here: Open vSwitch's userspace datapath (no busy polling).",
    '    ovs_datapath_type: netdev',
    '  # Made at the end of the deploy so that `openstack server create` works at once.',
    '  resources:',
    '    flavors:',
    '      - { name: m1.tiny, vcpus: 1, ram_mb: 256, disk_gb: 1 }',
    '    images:',
    ...(o.compute === LAB_COMPUTE.libvirt
      ? [
          '      # The guest image (stackctl images build guest; deploy --guest-image): boots in seconds under TCG.',
          '      - { name: lab-guest, build: guest }',
        ]
      : [
          '      # The fake driver never reads the image: 1 MiB of zeros is enough.',
          '      - { name: lab-tiny, size_kb: 1024 }',
        ]),
    "    # Floating IPs on the lab's external network, reachable from this machine (its .254).",
    `    external_network: { name: public, floating_range: [${net(LAB_NETWORKS.external.octet, 200)}, ${net(LAB_NETWORKS.external.octet, 229)}] }`,
    '    tenant_network: { name: demo-net, cidr: 192.168.200.0/24, router: demo-router }',
    'networks:',
  ];
  for (const [name, n] of Object.entries(LAB_NETWORKS)) {
    const f = [`cidr: ${p}.${n.octet}.0/24`];
    if (n.gateway) f.push(`gateway: ${net(n.octet, 254)}`);
    if (n.vlan !== undefined) f.push(`vlan: ${n.vlan}`);
    if (n.vip) f.push(`vip: ${net(n.octet, 250)}`);
    if (n.dhcp) f.push(`dhcp_range: [${net(n.octet, 100)}, ${net(n.octet, 199)}]`);
    f.push(`allocation_range: [${net(n.octet, 10)}, ${net(n.octet, 99)}]`);
    lines.push(`  ${name}: { ${f.join(', ')} }`);
  }
  lines.push('nodes:');
  for (const n of labNodeEntries(t.controllers, t.computes, o.bmcPort, '00')) {
    // a container node runs sshd and dockerd from its start: installed by others, never PXE-booted
    lines.push(...n.lines, '    root_device: { min_size_gb: 8 }', '    preprovisioned: true');
  }
  lines.push(
    'upgrade:',
    "  # Every lab node shares this machine's cores, and a pull unpacks its layers on them:",
    '  # one node pulls at a time, so that the APIs keep answering during an upgrade.',
    '  pull: { concurrency: 1 }',
  );
  return lines.join('\n') + '\n';
}

/**
 * The inventory lines every lab node starts with (name, role, BMC, provisioning NIC), controllers
 * first: IPMI BMCs from `bmcPort`, Redfish BMCs for computes from `bmcPort + 100`, MACs
 * `52:54:00:<macTag>:10|20:<n>`.
 */
export function labNodeEntries(
  controllers: number,
  computes: number,
  bmcPort: number,
  macTag: string,
): { name: string; lines: string[] }[] {
  const out: { name: string; lines: string[] }[] = [];
  for (let i = 0; i < controllers + computes; i++) {
    const ctl = i < controllers;
    const idx = ctl ? i : i - controllers;
    const name = ctl ? `ctl-${idx}` : `cmp-${idx}`;
    const bmc = ctl
      ? `ipmi://127.0.0.1:${bmcPort + idx}`
      : `redfish+http://127.0.0.1:${bmcPort + 100 + idx}/redfish/v1/Systems/${name}`;
    const mac = `52:54:00:${macTag}:${ctl ? '10' : '20'}:${(idx + 1).toString(16).padStart(2, '0')}`;
    out.push({
      name,
      lines: [
        `  - name: ${name}`,
        `    role: ${ctl ? 'Controller' : 'Compute'}`,
        `    bmc: { address: '${bmc}', credentials: lab-bmc }`,
        `    nics: [ { mac: '${mac}', network: provisioning } ]`,
      ],
    });
  }
  return out;
}
