import { existsSync, readFileSync } from 'node:fs';
import { InputError } from '../core/errors.js';
import { PROVISIONING } from '../pxe/dnsmasq.js';
import { NodeStateStore, nodesFileFor } from '../provision/machine.js';
import { ensureKeyPair } from '../lab/nodes/keys.js';
import { labPaths, recordCreated } from '../lab/nodes/lab.js';
import { topology } from '../lab/nodes/topology.js';
import { readCmdline } from '../lab/vbmc/qemu.js';
import { HostNetwork, VM_LAB_TOOLS, requireRoot, requireTools } from '../lab/vm/host.js';
import { VM_LAB_DEFAULTS, checkNodeCount, vmLabInventoryYaml, vmRegistryContainer } from '../lab/vm/layout.js';
import {
  readVmState,
  recordVmRegistry,
  vmLabDown,
  vmLabStatus,
  vmLabUp,
  type VmLabInput,
  type VmSizes,
} from '../lab/vm/lab.js';
import { buildImages } from '../images/build.js';
import { ensureRegistry } from '../images/registry.js';
import type { LocalEngine } from '../remote/docker-local.js';
import { loadAll, registryTls, type Loaded } from './context.js';
import { labPowers, runningBmcs, startBmcs, stopBmcs } from './lab.js';
import { inventoryOf, loadOpts, prepareLabInventory, type LabOpts } from './lab-inventory.js';
import { out, table } from './output.js';

/** Options of `lab up` that only the vm kind reads. */
export interface VmUpOpts {
  topology: string;
  nodes?: number;
  prefix?: string;
  bmcPort?: number;
  /** MiB. */
  memory?: number;
  cpus?: number;
  diskGb?: number;
  /** Loopback host:port this machine pushes to (default VM_REGISTRY_PUSH_ADDRESS). */
  registry?: string;
  /** Default stackctl-<name>-registry. */
  registryContainer?: string;
}

/** The VM lab's view of a loaded inventory. */
export function vmLabInput(all: Loaded): VmLabInput {
  const inv = all.loaded.inventory;
  const prov = inv.networks[PROVISIONING];
  if (!prov?.gateway) {
    throw new InputError('E_LAB_GATEWAY', 'networks.provisioning has no gateway: the VM lab puts this machine there', {
      hint: "Set networks.provisioning.gateway to the deploy host's address on the lab bridge.",
    });
  }
  return {
    inventoryFile: all.inventoryFile,
    name: inv.cloud.name,
    provisioning: { cidr: prov.cidr, gateway: prov.gateway },
    networks: Object.entries(inv.networks)
      .filter(([name]) => name !== PROVISIONING)
      .map(([name, n]) => ({
        name,
        cidr: n.cidr,
        ...(n.vlan !== undefined ? { vlan: n.vlan } : {}),
        ...(n.gateway ? { gateway: n.gateway } : {}),
      })),
    nodes: inv.nodes.map((n) => {
      const nic = n.nics.find((x) => x.network === PROVISIONING);
      const address = all.allocation.addresses.get(n.name)?.[PROVISIONING];
      if (!nic || !address) {
        throw new InputError('E_LAB_NODE_NIC', `node ${n.name} has no NIC or no address on provisioning`, {
          hint: 'Every VM lab node needs a NIC with network: provisioning.',
        });
      }
      return { name: n.name, mac: nic.mac.toLowerCase(), address, bmc: n.bmc.address };
    }),
  };
}

/**
 * The VM lab's registry: a container of its own, published on the bridge
 * address (`cloud.registry`, where the nodes pull from: the deploy writes
 * it into their dockerd's insecure-registries) and on a loopback address,
 * where this machine's dockerd pushes (loopback needs no TLS).
 */
async function ensureVmRegistry(all: Loaded, o: VmUpOpts, engine: LocalEngine): Promise<string> {
  const inv = all.loaded.inventory;
  const nodeSide = inv.cloud.registry ?? all.release.registry;
  const container = o.registryContainer ?? vmRegistryContainer(inv.cloud.name);
  await buildImages(engine, { release: all.release, only: ['registry'] });
  const reg = await ensureRegistry(engine, {
    release: all.release,
    address: o.registry ?? VM_REGISTRY_PUSH_ADDRESS,
    container,
    publishAlso: [nodeSide],
    labels: { 'org.stackctl.lab': inv.cloud.name },
    tls: registryTls(all),
  });
  if (reg.created) recordVmRegistry(all.inventoryFile, reg.container);
  if (reg.created)
    out(`registry ${reg.container}: push to ${reg.address}, nodes pull from ${nodeSide}
`);
  return reg.address;
}

/** Default loopback address this machine pushes the VM lab's images to. */
export const VM_REGISTRY_PUSH_ADDRESS = '127.0.0.1:5001';

/** `lab up --kind vm`. */
export async function runVmLabUp(o: LabOpts & VmUpOpts, deps: { bin: string; engine: LocalEngine }): Promise<void> {
  const bin = deps.bin;
  const nodes = o.nodes !== undefined ? checkNodeCount(o.nodes) : undefined;
  if (nodes === undefined) topology(o.topology);
  const sizes: VmSizes = {
    memoryMiB: o.memory ?? VM_LAB_DEFAULTS.memoryMiB,
    cpus: o.cpus ?? VM_LAB_DEFAULTS.cpus,
    diskGiB: o.diskGb ?? VM_LAB_DEFAULTS.diskGiB,
  };
  const bmcPort = o.bmcPort ?? VM_LAB_DEFAULTS.bmcPort;
  // before any file is written
  requireRoot('lab up --kind vm');
  requireTools(VM_LAB_TOOLS, 'lab up --kind vm');

  const started = Date.now();
  const all = prepareLabInventory(o, nodes !== undefined ? `${nodes} VM node(s)` : o.topology, () =>
    vmLabInventoryYaml({
      name: o.name,
      topology: o.topology,
      ...(nodes !== undefined ? { nodes } : {}),
      prefix16: o.prefix ?? VM_LAB_DEFAULTS.prefix16,
      bmcPort,
      diskGiB: sizes.diskGiB,
    }),
  );
  const file = all.inventoryFile;
  const paths = labPaths(file);
  await ensureKeyPair(paths.operatorKey, `stackctl-${all.loaded.inventory.cloud.name}-operator`);
  recordCreated(file, [paths.sshDir]);
  const report = await vmLabUp(
    vmLabInput(all),
    {
      host: new HostNetwork(),
      log: (l) => out(l + '\n'),
      startBmcs: async (restart) => {
        if (restart && (await stopBmcs(all))) out('virtual BMCs restarted: the machines changed\n');
        const r = await startBmcs(all, { timeoutS: 20, bin, roles: o.roles, releases: o.releases });
        if (!r.already) out(`virtual BMCs started (pid ${r.state.pid}); log ${r.logFile}\n`);
        return { pid: r.state.pid, already: r.already };
      },
      stopBmcs: async () => void (await stopBmcs(all)),
    },
    sizes,
  );
  const pushTo = await ensureVmRegistry(all, o, deps.engine);
  const inv = all.loaded.inventory;
  out(
    table(
      ['NODE', 'ROLE', 'MAC', 'TAP', 'ADDRESS', 'BMC'],
      report.plan.nodes.map((n) => [
        n.node,
        inv.nodes.find((x) => x.name === n.node)!.role,
        n.mac,
        n.tap,
        n.address,
        n.bmc,
      ]),
    ),
  );
  const s = ((Date.now() - started) / 1000).toFixed(1);
  out(
    report.created.length || report.vbmc.started
      ? `lab up (${s} s): bridge ${report.plan.bridge} ${report.plan.hostCidr}, ${report.created.length} object(s) created; ` +
          `the nodes are off: stackctl images push --registry ${pushTo}, then stackctl deploy -i ${file}\n`
      : `lab already up, nothing changed (${s} s)\n`,
  );
}

/** Stop the BMC process lab up recorded, when the inventory can no longer be loaded (checked against /proc). */
async function stopRecordedBmcs(file: string): Promise<void> {
  const pid = readVmState(file).vbmcPid;
  if (pid === undefined) return;
  const argv = await readCmdline(pid);
  if (!argv?.includes('serve') || !argv.includes(file)) return;
  process.kill(pid, 'SIGTERM');
  for (let i = 0; i < 100 && (await readCmdline(pid)); i++) await new Promise((r) => setTimeout(r, 50));
}

/** `lab down --kind vm`. */
export async function runVmLabDown(o: LabOpts & { purge?: boolean }, engine?: LocalEngine): Promise<void> {
  requireRoot('lab down --kind vm');
  const file = inventoryOf(o);
  const started = Date.now();
  let stop = (): Promise<void> => stopRecordedBmcs(file);
  if (existsSync(file)) {
    try {
      const all = loadAll(loadOpts(o, file));
      stop = async () => void (await stopBmcs(all));
    } catch {
      // an inventory that no longer loads must not keep its lab alive: the recorded pid is enough
    }
  }
  const r = await vmLabDown(
    file,
    {
      host: new HostNetwork(),
      log: (l) => out(l + '\n'),
      stopBmcs: stop,
      ...(engine ? { removeContainer: (name: string) => engine.removeContainer(name) } : {}),
    },
    { purge: o.purge ?? false },
  );
  out(
    `lab ${o.name} down (${((Date.now() - started) / 1000).toFixed(1)} s): ${r.killed.length} VM(s) stopped, ` +
      `${r.links.length} interface(s), ${r.rules.length} iptables rule(s), ${r.files.length} file(s) removed\n`,
  );
}

/** `lab status --kind vm`: each VM's power (through its BMC), provisioning state, QEMU process and tap. */
export async function runVmLabStatus(o: LabOpts & { json?: boolean }): Promise<void> {
  const all = loadAll(loadOpts(o, inventoryOf(o)));
  const st = await vmLabStatus(vmLabInput(all), new HostNetwork());
  const bmcs = runningBmcs(all);
  const store = NodeStateStore.open(nodesFileFor(all.inventoryFile));
  const powers = await labPowers(
    all,
    st.nodes.map((n) => n.node),
  );
  const rows = st.nodes.map((n) => ({ ...n, power: powers.get(n.node)!, state: store.get(n.node).state }));
  if (o.json) {
    out(
      JSON.stringify({ bridge: st.bridge, bridgeUp: st.bridgeUp, vbmcPid: bmcs?.pid ?? null, nodes: rows }, null, 2) +
        '\n',
    );
    return;
  }
  out(
    `bridge ${st.bridge}: ${st.bridgeUp ? 'up' : 'missing'}; virtual BMCs: ${bmcs ? `pid ${bmcs.pid}` : 'not running'}\n`,
  );
  out(
    table(
      ['NODE', 'STATE', 'POWER', 'QEMU', 'TAP', 'MAC', 'ADDRESS', 'BMC'],
      rows.map((r) => [
        r.node,
        r.state,
        r.power,
        r.qemuPid !== undefined ? `pid ${r.qemuPid}` : '-',
        r.tapUp ? r.tap : `${r.tap} (missing)`,
        r.mac,
        r.address,
        r.bmc,
      ]),
    ),
  );
}

/** The serial console of a lab VM (for diagnostics), or '' when it has none. */
export function vmConsole(inventoryFile: string, node: string): string {
  const f = `${labPaths(inventoryFile).labDir}/vm/${node}/serial.log`;
  return existsSync(f) ? readFileSync(f, 'utf8') : '';
}
