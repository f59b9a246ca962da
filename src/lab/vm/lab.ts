/**
 * The VM lab (DESIGN.md 5): simulated bare metal as QEMU VMs on a Linux
 * bridge of this machine, each behind a virtual BMC. `vmLabUp` creates only
 * what is missing and records every object in `<inventory>.lab/vm.json`
 * before creating it, so `vmLabDown` removes exactly those objects (and a
 * run interrupted half-way is finished or undone by running again).
 *
 * The nodes start powered off, with blank disks, as servers do on delivery:
 * `nodes enroll` and `nodes inspect` power them on through their BMCs.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { InputError } from '../../core/errors.js';
import { writeFileAtomic } from '../../core/fs.js';
import { formatIpv4, parseCidr4 } from '../../core/ipv4.js';
import { stopStaleDnsmasq } from '../../pxe/services.js';
import { labPaths, recordedCreated } from '../nodes/lab.js';
import { readLabMachines, writeLabMachines, type LabMachineRecord } from '../nodes/machines.js';
import { QEMU_FILES, QemuMachine, readCmdline, validateQemuOptions } from '../vbmc/qemu.js';
import { HostNetwork, VM_LAB_TOOLS, clashingRoutes, requireRoot, requireTools } from './host.js';
import { bridgeName, diskSerial, labTag, tapName, ulaPrefix, vlanLinkName, vmPaths } from './layout.js';

/** What the VM lab needs of a loaded inventory (the CLI builds it). */
export interface VmLabInput {
  readonly inventoryFile: string;
  /** cloud.name. */
  readonly name: string;
  readonly provisioning: { readonly cidr: string; readonly gateway: string };
  /**
   * The cloud's other networks: this machine gets an address on each, on the
   * bridge (untagged) or on a VLAN interface of it, so it reaches the nodes'
   * services there as on a site's networks.
   */
  readonly networks?: readonly LabNetwork[];
  readonly nodes: readonly {
    readonly name: string;
    /** MAC of the NIC on provisioning. */
    readonly mac: string;
    /** IPAM address on provisioning. */
    readonly address: string;
    readonly bmc: string;
  }[];
}

/** One more network of the lab, carried by the bridge. */
export interface LabNetwork {
  readonly name: string;
  readonly cidr: string;
  readonly vlan?: number;
  readonly gateway?: string;
}

/** This machine on one more network: the interface and its address. */
export interface VmLabNetworkPlan {
  readonly name: string;
  readonly cidr: string;
  /** The bridge itself (untagged) or its VLAN interface `svm<tag>v<vlan>`. */
  readonly link: string;
  readonly vlan?: number;
  /** The network's gateway, else its last address, with the prefix length. */
  readonly hostCidr: string;
}

/** Sizes of the VMs. */
export interface VmSizes {
  readonly memoryMiB: number;
  readonly cpus: number;
  readonly diskGiB: number;
}

/** One VM of the plan. */
export interface VmNodePlan {
  readonly node: string;
  readonly mac: string;
  readonly address: string;
  readonly bmc: string;
  readonly tap: string;
  readonly runDir: string;
  readonly disk: string;
  readonly diskSerial: string;
}

/** The lab's host objects, derived from the inventory and the state; pure. */
export interface VmLabPlan {
  readonly name: string;
  readonly tag: string;
  readonly bridge: string;
  readonly cidr: string;
  /** This machine's address on the bridge, with the prefix length (the deploy host). */
  readonly hostCidr: string;
  /** ULA /64 prefix (`fdxx:...::`) and this machine's address in it. */
  readonly ipv6Prefix: string;
  readonly hostCidr6: string;
  readonly networks: readonly VmLabNetworkPlan[];
  readonly nodes: readonly VmNodePlan[];
}

/**
 * What the lab created, recorded before each creation. Names, paths and
 * pids only: never a secret.
 */
export interface VmLabState {
  readonly version: 1;
  /** The bridge this lab created. */
  bridge?: string;
  /** Addresses this lab put on the bridge. */
  addresses: string[];
  /** iptables rules this lab inserted, each as [chain, ...match]. */
  rules: string[][];
  /** Tap device of each node. */
  taps: Record<string, string>;
  /** VLAN interfaces on the bridge this lab created, by network name. */
  vlans?: Record<string, string>;
  /** Disks and run folders. */
  files: string[];
  /** The virtual BMC process (`lab bmc serve`) lab up last started or found. */
  vbmcPid?: number;
  /** The registry container lab up started (lab down removes it). */
  registry?: string;
}

/** Record the registry container lab up started. */
export function recordVmRegistry(inventoryFile: string, container: string): void {
  saveVmState(inventoryFile, { ...readVmState(inventoryFile), registry: container });
}

/** The lab's state file. */
export const vmStateFile = (inventoryFile: string): string => join(labPaths(inventoryFile).labDir, 'vm.json');

/** Read the state; an absent file is an empty state. */
export function readVmState(inventoryFile: string): VmLabState {
  const f = vmStateFile(inventoryFile);
  if (!existsSync(f)) return { version: 1, addresses: [], rules: [], taps: {}, files: [] };
  return JSON.parse(readFileSync(f, 'utf8')) as VmLabState;
}

function saveVmState(inventoryFile: string, st: VmLabState): void {
  mkdirSync(labPaths(inventoryFile).labDir, { recursive: true });
  writeFileAtomic(vmStateFile(inventoryFile), JSON.stringify(st, null, 2) + '\n');
}

/** Derive the plan; taps already recorded keep their names, new nodes take the lowest free index. */
export function planVmLab(input: VmLabInput, st: VmLabState): VmLabPlan {
  const net = parseCidr4(input.provisioning.cidr);
  if (!net) {
    throw new InputError('E_LAB_CIDR', `provisioning network '${input.provisioning.cidr}' is not an IPv4 network`, {
      hint: 'networks.provisioning.cidr: a.b.c.d/prefix',
    });
  }
  const tag = labTag(input.inventoryFile);
  const labDir = labPaths(input.inventoryFile).labDir;
  const used = new Set(Object.values(st.taps));
  let next = 0;
  const nodes = input.nodes.map((n) => {
    let tap = st.taps[n.name];
    if (!tap) {
      while (used.has(tapName(tag, next))) next++;
      tap = tapName(tag, next);
      used.add(tap);
    }
    const index = Number(tap.slice(tap.lastIndexOf('t') + 1));
    return {
      node: n.name,
      mac: n.mac,
      address: n.address,
      bmc: n.bmc,
      tap,
      ...vmPaths(labDir, n.name),
      diskSerial: diskSerial(tag, index),
    };
  });
  const ipv6Prefix = ulaPrefix(net.text);
  const bridge = bridgeName(tag);
  const networks = (input.networks ?? []).map((n) => {
    const c = parseCidr4(n.cidr);
    if (!c) {
      throw new InputError('E_LAB_CIDR', `network ${n.name}: '${n.cidr}' is not an IPv4 network`, {
        hint: `networks.${n.name}.cidr: a.b.c.d/prefix`,
      });
    }
    return {
      name: n.name,
      cidr: `${formatIpv4(c.base)}/${c.prefix}`,
      link: n.vlan !== undefined ? vlanLinkName(tag, n.vlan) : bridge,
      ...(n.vlan !== undefined ? { vlan: n.vlan } : {}),
      hostCidr: `${n.gateway ?? formatIpv4(c.last - 1)}/${c.prefix}`,
    };
  });
  return {
    name: input.name,
    tag,
    bridge,
    networks,
    cidr: `${formatIpv4(net.base)}/${net.prefix}`,
    hostCidr: `${input.provisioning.gateway}/${net.prefix}`,
    ipv6Prefix,
    hostCidr6: `${ipv6Prefix}1/64`,
    nodes,
  };
}

/** The DOCKER-USER rule that lets traffic between the bridge's ports through (LAB-FACTS 5, gotcha 1). */
export function acceptRule(bridge: string): string[] {
  return ['DOCKER-USER', '-i', bridge, '-o', bridge, '-j', 'ACCEPT'];
}

/** Side effects of the VM lab, injectable (CONVENTIONS.md 8). */
export interface VmLabDeps {
  readonly host: HostNetwork;
  readonly log: (line: string) => void;
  /**
   * Start the virtual BMC process unless it runs (src/cli/lab.ts startBmcs);
   * with `restart`, stop a running one first (its machines changed).
   */
  readonly startBmcs: (restart: boolean) => Promise<{ pid: number; already: boolean }>;
  readonly stopBmcs: () => Promise<void>;
}

/** What a vmLabUp run did. */
export interface VmLabUpReport {
  readonly plan: VmLabPlan;
  /** Objects created by this run, e.g. `bridge svm1a2b3c`; empty when everything existed. */
  readonly created: string[];
  readonly vbmc: { readonly pid: number; readonly started: boolean };
}

/** Bring the VM lab up; re-entrant (CONVENTIONS.md 6). */
export async function vmLabUp(input: VmLabInput, deps: VmLabDeps, sizes: VmSizes): Promise<VmLabUpReport> {
  requireRoot('lab up --kind vm');
  requireTools(VM_LAB_TOOLS, 'lab up --kind vm');
  const { host, log } = deps;
  const file = input.inventoryFile;
  const st = readVmState(file);
  const plan = planVmLab(input, st);
  const created: string[] = [];
  const save = (): void => saveVmState(file, st);

  // check everything before creating anything
  for (const n of plan.nodes) {
    validateQemuOptions({
      name: n.node,
      runDir: n.runDir,
      disk: n.disk,
      diskSerial: n.diskSerial,
      nics: [{ mac: n.mac, tap: n.tap }],
      memoryMiB: sizes.memoryMiB,
      cpus: sizes.cpus,
    });
  }
  const bridgeKind = await host.linkKind(plan.bridge);
  if (bridgeKind !== undefined && st.bridge !== plan.bridge) {
    throw new InputError('E_LAB_FOREIGN_LINK', `interface ${plan.bridge} exists, but this lab did not create it`, {
      hint: `Remove it (ip link del ${plan.bridge}) if it is left over, or move the inventory file: the names derive from its path.`,
    });
  }
  const routes = await host.routes();
  const own = new Set([plan.bridge, ...plan.networks.map((n) => n.link)]);
  for (const [what, cidr] of [['provisioning', plan.cidr], ...plan.networks.map((n) => [n.name, n.cidr])] as const) {
    const clash = clashingRoutes(cidr, routes, plan.bridge).filter((r) => !own.has(r.dev));
    if (clash.length) {
      throw new InputError(
        'E_LAB_SUBNET_CLASH',
        `the ${what} network ${cidr} overlaps ${clash.map((r) => `${r.dst} on ${r.dev}`).join(', ')}`,
        { hint: `Choose other lab addresses: lab up --kind vm --prefix A.B (or edit networks.${what}).` },
      );
    }
  }
  for (const n of plan.networks) {
    if (n.link !== plan.bridge && st.vlans?.[n.name] !== n.link && (await host.linkExists(n.link))) {
      throw new InputError('E_LAB_FOREIGN_LINK', `interface ${n.link} exists, but this lab did not create it`, {
        hint: `Remove it (ip link del ${n.link}) if it is left over.`,
      });
    }
  }
  for (const n of plan.nodes) {
    if (st.taps[n.node] !== n.tap && (await host.linkExists(n.tap))) {
      throw new InputError('E_LAB_FOREIGN_LINK', `interface ${n.tap} exists, but this lab did not create it`, {
        hint: `Remove it (ip link del ${n.tap}) if it is left over.`,
      });
    }
  }

  if (bridgeKind === undefined) {
    st.bridge = plan.bridge;
    save();
    await host.createBridge(plan.bridge);
    created.push(`bridge ${plan.bridge}`);
    log(`bridge ${plan.bridge} created`);
  }
  const have = await host.addresses(plan.bridge);
  for (const cidr of [plan.hostCidr, plan.hostCidr6]) {
    if (have.includes(cidr)) continue;
    if (!st.addresses.includes(cidr)) st.addresses.push(cidr);
    save();
    await host.addAddress(plan.bridge, cidr);
    created.push(`address ${cidr}`);
    log(`${plan.bridge}: address ${cidr}`);
  }
  await host.setUp(plan.bridge);

  // this machine on the cloud's other networks: untagged on the bridge, or on a VLAN interface of it
  for (const n of plan.networks) {
    if (n.link !== plan.bridge && !(await host.linkExists(n.link))) {
      st.vlans = { ...(st.vlans ?? {}), [n.name]: n.link };
      save();
      await host.createVlan(plan.bridge, n.link, n.vlan!);
      created.push(`vlan ${n.link}`);
      log(`${n.name}: VLAN ${n.vlan} interface ${n.link}`);
    }
    await host.setUp(n.link);
    if ((await host.addresses(n.link)).includes(n.hostCidr)) continue;
    if (n.link === plan.bridge && !st.addresses.includes(n.hostCidr)) st.addresses.push(n.hostCidr);
    save();
    await host.addAddress(n.link, n.hostCidr);
    created.push(`address ${n.hostCidr}`);
    log(`${n.name}: address ${n.hostCidr} on ${n.link}`);
  }

  if (await host.chainExists('DOCKER-USER')) {
    const rule = acceptRule(plan.bridge);
    if (!(await host.ruleExists(rule))) {
      if (!st.rules.some((r) => r.join(' ') === rule.join(' '))) st.rules.push(rule);
      save();
      await host.insertRule(rule);
      created.push(`iptables ${rule.join(' ')}`);
      log(`iptables -I ${rule.join(' ')}`);
    }
  }

  const machines: Record<string, LabMachineRecord> = {};
  for (const n of plan.nodes) {
    if (!(await host.linkExists(n.tap))) {
      st.taps[n.node] = n.tap;
      save();
      await host.createTap(n.tap);
      created.push(`tap ${n.tap}`);
      log(`node ${n.node}: tap ${n.tap}`);
    }
    await host.setUp(n.tap, plan.bridge);
    if (!existsSync(n.runDir)) {
      if (!st.files.includes(n.runDir)) st.files.push(n.runDir);
      save();
      mkdirSync(n.runDir, { recursive: true });
    }
    if (!existsSync(n.disk)) {
      if (!st.files.includes(n.disk)) st.files.push(n.disk);
      save();
      await host.createDisk(n.disk, sizes.diskGiB);
      created.push(`disk ${n.disk}`);
      log(`node ${n.node}: disk ${n.disk} (${sizes.diskGiB} GiB qcow2, serial ${n.diskSerial})`);
    }
    machines[n.node] = {
      kind: 'qemu',
      runDir: n.runDir,
      disk: n.disk,
      diskSerial: n.diskSerial,
      memoryMiB: sizes.memoryMiB,
      cpus: sizes.cpus,
      nics: [{ mac: n.mac, tap: n.tap }],
    };
  }
  const before = JSON.stringify(readLabMachines(labPaths(file).labDir).nodes);
  writeLabMachines(labPaths(file).labDir, machines);

  // a running BMC process holds the machines it read at its start: restart it when they changed
  const r = await deps.startBmcs(before !== JSON.stringify(machines));
  st.vbmcPid = r.pid;
  save();
  return { plan, created, vbmc: { pid: r.pid, started: !r.already } };
}

/** What vmLabDown removed. */
export interface VmLabDownReport {
  readonly killed: { node: string; pid: number }[];
  readonly links: string[];
  readonly rules: string[];
  readonly files: string[];
}

/** Pid of the QEMU whose run folder this is, when it runs (the pid file and /proc agree). */
export async function qemuPid(runDir: string): Promise<number | undefined> {
  try {
    const pid = Number.parseInt(readFileSync(join(runDir, QEMU_FILES.pid), 'utf8'), 10);
    const argv = await readCmdline(pid);
    return argv?.some((a) => a.includes(join(runDir, QEMU_FILES.qmp))) ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Remove what vmLabUp recorded: the BMC process, the VMs (by the pid in
 * their run folder, checked against /proc), taps, iptables rules, bridge,
 * disks and `<inventory>.lab/` (but its `lab.json`, the record of what lab
 * up wrote next to the inventory), plus the node state files and the
 * known_hosts of the inventory (they describe machines that no longer exist). With `purge`,
 * also what lab up wrote next to the inventory, and `lab.json`. Nothing else.
 */
export async function vmLabDown(
  inventoryFile: string,
  deps: Pick<VmLabDeps, 'host' | 'log' | 'stopBmcs'> & {
    /** Remove a container (the registry lab up started). */
    readonly removeContainer?: (name: string) => Promise<void>;
  },
  opts: { readonly purge?: boolean } = {},
): Promise<VmLabDownReport> {
  const { host, log } = deps;
  const st = readVmState(inventoryFile);
  const paths = labPaths(inventoryFile);
  const report: VmLabDownReport = { killed: [], links: [], rules: [], files: [] };
  const save = (): void => {
    if (existsSync(paths.labDir)) saveVmState(inventoryFile, st);
  };
  await deps.stopBmcs();
  if (st.registry && deps.removeContainer) {
    await deps.removeContainer(st.registry);
    log(`registry ${st.registry} removed (this lab started it)`);
    delete st.registry;
    save();
  }

  for (const [node, m] of Object.entries(readLabMachines(paths.labDir).nodes)) {
    if (m.kind !== 'qemu') continue;
    const pid = await qemuPid(m.runDir);
    if (pid === undefined) continue;
    // destroy() adopts the process from the pid file (checking its command line) and kills it
    await new QemuMachine({ name: node, runDir: m.runDir }).destroy();
    report.killed.push({ node, pid });
    log(`node ${node}: QEMU pid ${pid} killed`);
  }

  // a `nodes inspect` killed before it could stop its dnsmasq leaves it bound to the bridge
  const stale = await stopStaleDnsmasq(`${inventoryFile.replace(/\.ya?ml$/, '')}.pxe`);
  if (stale !== undefined) log(`dnsmasq pid ${stale} (left by an interrupted run) stopped`);

  for (const [node, tap] of Object.entries(st.taps)) {
    if (await host.deleteLink(tap)) report.links.push(tap);
    delete st.taps[node];
    save();
  }
  for (const [name, link] of Object.entries(st.vlans ?? {})) {
    if (await host.deleteLink(link)) report.links.push(link);
    delete st.vlans![name];
    save();
  }
  for (const rule of [...st.rules]) {
    if (await host.deleteRule(rule)) report.rules.push(rule.join(' '));
    st.rules = st.rules.filter((r) => r !== rule);
    save();
  }
  if (st.bridge) {
    if (await host.deleteLink(st.bridge)) report.links.push(st.bridge);
    delete st.bridge;
    st.addresses = [];
    save();
  }
  if (report.links.length) log(`removed ${report.links.join(', ')}`);

  const base = inventoryFile.replace(/\.ya?ml$/, '');
  // without purge, the record of what lab up wrote next to the inventory stays, for a later purge
  const labEntries = opts.purge
    ? [paths.labDir]
    : existsSync(paths.labDir)
      ? readdirSync(paths.labDir)
          .filter((f) => join(paths.labDir, f) !== paths.stateFile)
          .map((f) => join(paths.labDir, f))
      : [];
  const files = [
    ...st.files,
    `${base}.nodes.json`,
    `${base}.nodes.journal`,
    `${base}.introspection.json`,
    `${base}.pxe`,
    // host keys a deploy recorded for the VMs: a new lab reuses the addresses with new keys
    paths.knownHosts,
    ...(opts.purge ? recordedCreated(inventoryFile) : []),
    ...labEntries,
  ];
  for (const f of files) {
    if (!existsSync(f)) continue;
    rmSync(f, { recursive: true, force: true });
    report.files.push(f);
  }
  return report;
}

/** One row of `lab status --kind vm` (power through the BMC is the CLI's part). */
export interface VmNodeStatus {
  readonly node: string;
  readonly mac: string;
  readonly address: string;
  readonly tap: string;
  /** True when the tap exists. */
  readonly tapUp: boolean;
  /** The VM's QEMU process, when it runs. */
  readonly qemuPid: number | undefined;
  readonly bmc: string;
}

/** Host-side state of each VM and of the bridge. */
export async function vmLabStatus(
  input: VmLabInput,
  host: HostNetwork,
): Promise<{ bridge: string; bridgeUp: boolean; nodes: VmNodeStatus[] }> {
  const plan = planVmLab(input, readVmState(input.inventoryFile));
  const nodes: VmNodeStatus[] = [];
  for (const n of plan.nodes) {
    nodes.push({
      node: n.node,
      mac: n.mac,
      address: n.address,
      tap: n.tap,
      tapUp: await host.linkExists(n.tap),
      qemuPid: await qemuPid(n.runDir),
      bmc: n.bmc,
    });
  }
  return { bridge: plan.bridge, bridgeUp: await host.linkExists(plan.bridge), nodes };
}

/** The provisioning interface and IPv6 prefix of a running VM lab, for the boot services; undefined when none. */
export function vmLabBootNetwork(inventoryFile: string): { interface: string; ipv6Prefix?: string } | undefined {
  const st = readVmState(inventoryFile);
  if (!st.bridge) return undefined;
  const six = st.addresses.find((a) => a.includes(':'));
  return { interface: st.bridge, ...(six ? { ipv6Prefix: six.slice(0, six.indexOf('::') + 2) } : {}) };
}
