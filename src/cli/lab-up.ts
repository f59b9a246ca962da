import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { UsageError } from '../core/errors.js';
import { stackctlScript } from '../core/paths.js';
import { buildImages, formatBuildEvent } from '../images/build.js';
import { localEngine, type LocalEngine } from '../remote/docker-local.js';
import { DEFAULT_REGISTRY_ADDRESS, ensureRegistry, REGISTRY_CONTAINER } from '../images/registry.js';
import { servedMode } from '../images/registry-tls.js';
import { labDown, labStatus, labUp, labPaths, type LabInput } from '../lab/nodes/lab.js';
import { LAB_COMPUTE, TOPOLOGIES, labInventoryYaml, topology, type LabCompute } from '../lab/nodes/topology.js';
import { VM_LAB_DEFAULTS } from '../lab/vm/layout.js';
import { loadAll, registryTls, type Loaded } from './context.js';
import { labPowers, startBmcs, stopBmcs } from './lab.js';
import { inventoryOf, loadOpts, prepareLabInventory, type LabOpts } from './lab-inventory.js';
import { VM_REGISTRY_PUSH_ADDRESS, runVmLabDown, runVmLabStatus, runVmLabUp, type VmUpOpts } from './lab-vm.js';
import { RANGE, numberOption, secondsOption } from './numbers.js';
import { out, table } from './output.js';
import { withRunLock } from './run-lock.js';

/** Kinds of lab node: containers (provisioned hosts) and QEMU VMs (bare metal to provision). */
const KINDS = ['container', 'vm'] as const;

interface UpOpts extends LabOpts, VmUpOpts {
  topology: string;
  /** container: Nova's virt driver on the computes (default fake). */
  compute?: string;
  /** Default per kind: 10.96 for containers, 10.97 for VMs. */
  prefix?: string;
  /** Default per kind: 6230 for containers, 7230 for VMs. */
  bmcPort?: number;
  /** Default per kind: 127.0.0.1:5000 for containers, 127.0.0.1:5001 for VMs. */
  registry?: string;
  /** Default per kind: stackctl-registry for containers, stackctl-<name>-registry for VMs. */
  registryContainer?: string;
  /** Seconds. */
  timeout: number;
}

/** Side effects of the lab commands (CONVENTIONS.md 8). */
export interface LabCliDeps {
  readonly engine: LocalEngine;
  /** The stackctl script the background BMC process runs. */
  readonly bin: string;
}

const defaultDeps = (): LabCliDeps => ({ engine: localEngine(), bin: stackctlScript() });

/** The --compute choice, checked. */
function labCompute(value: string | undefined): LabCompute {
  const all = Object.values(LAB_COMPUTE) as string[];
  if (value === undefined) return LAB_COMPUTE.fake;
  if (!all.includes(value)) {
    throw new UsageError('E_USAGE', `unknown lab compute '${value}'`, { hint: `Use one of: ${all.join(', ')}.` });
  }
  return value as LabCompute;
}

function checkKind(kind: string): void {
  if (!(KINDS as readonly string[]).includes(kind)) {
    throw new UsageError('E_LAB_KIND', `lab node kind '${kind}' is not handled by this command`, {
      hint: `Kinds: ${KINDS.join(', ')}.`,
    });
  }
}

/** LabInput of a loaded inventory. */
export function labInput(all: Loaded): LabInput {
  const inv = all.loaded.inventory;
  return {
    inventoryFile: all.inventoryFile,
    name: inv.cloud.name,
    registry: inv.cloud.registry ?? all.release.registry,
    registryInsecure: inv.cloud.registry_insecure === true,
    release: all.release,
    networks: all.loaded.networks,
    ...(inv.cloud.resources?.external_network
      ? { floatingNetwork: inv.cloud.resources.external_network.network ?? 'external' }
      : {}),
    nodes: inv.nodes.map((n) => ({
      name: n.name,
      role: n.role,
      addresses: all.allocation.addresses.get(n.name) ?? {},
    })),
  };
}

/** `lab up`: inventory, secrets, images, networks, nodes, BMCs; re-entrant. */
export async function runLabUp(o: UpOpts, deps: LabCliDeps = defaultDeps()): Promise<void> {
  checkKind(o.kind);
  if (o.kind === 'vm') return runVmLabUp(o, deps);
  topology(o.topology);
  const compute = labCompute(o.compute);
  const prefix = o.prefix ?? '10.96';
  const bmcPort = o.bmcPort ?? 6230;
  const all = prepareLabInventory(o, o.topology, () =>
    labInventoryYaml({ name: o.name, topology: o.topology, prefix16: prefix, bmcPort, compute }),
  );
  const inv = all.loaded.inventory;
  const file = all.inventoryFile;

  const { engine } = deps;
  await buildImages(engine, {
    release: all.release,
    only: ['node', 'registry'],
    onEvent: (e) => {
      if (e.kind === 'image.start' || (e.kind === 'rootfs.done' && !e.cached)) out(formatBuildEvent(e) + '\n');
    },
  });
  const started = Date.now();
  const tls = registryTls(all);
  const report = await labUp(
    { ...labInput(all), ...(tls ? { registryCa: tls.caPem } : {}) },
    {
      engine,
      log: (l) => out(l + '\n'),
      ensureRegistry: async () => {
        const reg = await ensureRegistry(engine, {
          release: all.release,
          address: o.registry ?? DEFAULT_REGISTRY_ADDRESS,
          container: o.registryContainer ?? REGISTRY_CONTAINER,
          labels: { 'org.stackctl.lab': inv.cloud.name },
          tls,
        });
        if (reg.reconfigured) out(`registry ${reg.container} now serves ${servedMode(tls)}\n`);
        return reg;
      },
      startBmcs: async () => {
        const r = await startBmcs(all, {
          timeoutS: 20,
          bin: deps.bin,
          roles: o.roles,
          releases: o.releases,
        });
        if (!r.already) out(`virtual BMCs started (pid ${r.state.pid}); log ${r.logFile}\n`);
      },
      stopBmcs: async () => void (await stopBmcs(all)),
    },
    { readyTimeoutS: o.timeout },
  );
  out(
    table(
      ['NODE', 'ROLE', 'CONTAINER', 'ADDRESSES', 'BMC'],
      report.plan.nodes.map((n) => [
        n.node,
        n.role,
        n.container,
        Object.entries(n.addresses)
          .map(([k, v]) => `${k}=${v}`)
          .join(' '),
        inv.nodes.find((x) => x.name === n.node)!.bmc.address,
      ]),
    ),
  );
  const changed =
    report.createdNetworks.length +
    report.createdContainers.length +
    report.startedContainers.length +
    report.reconfigured.length;
  const p = labPaths(file);
  out(
    `${changed ? 'lab up' : 'lab already up, nothing changed'} (${((Date.now() - started) / 1000).toFixed(1)} s); ` +
      `ssh -i ${p.operatorKey} -o UserKnownHostsFile=${p.knownHosts} root@${report.plan.nodes[0]?.sshAddress ?? ''}\n`,
  );
}

/** `lab down`: remove what `lab up` created. */
export async function runLabDown(o: LabOpts & { purge?: boolean }, deps: LabCliDeps = defaultDeps()): Promise<void> {
  checkKind(o.kind);
  if (o.kind === 'vm') return runVmLabDown(o, deps.engine);
  const file = inventoryOf(o);
  let name = o.name;
  let stop = async (): Promise<void> => undefined;
  if (existsSync(file)) {
    const all = loadAll(loadOpts(o, file));
    name = all.loaded.inventory.cloud.name;
    stop = async () => void (await stopBmcs(all));
  }
  const r = await labDown(
    { inventoryFile: file, name },
    { engine: deps.engine, log: (l) => out(l + '\n'), stopBmcs: stop },
    {
      purge: o.purge ?? false,
    },
  );
  out(
    `lab ${name} down: ${r.containers.length} container(s), ${r.networks.length} network(s)` +
      `${r.registryRemoved ? ', the registry' : ''}, ${r.files.length} file(s) removed\n`,
  );
}

/** `lab status`: container state, power through the BMC, SSH. */
export async function runLabStatus(o: LabOpts & { json?: boolean }, deps: LabCliDeps = defaultDeps()): Promise<void> {
  checkKind(o.kind);
  if (o.kind === 'vm') return runVmLabStatus(o);
  const all = loadAll(loadOpts(o, inventoryOf(o)));
  const rows = await labStatus(labInput(all), deps.engine);
  const powers = await labPowers(
    all,
    rows.map((r) => r.node),
  );
  const result = rows.map((r) => ({ ...r, power: powers.get(r.node)! }));
  if (o.json) out(JSON.stringify(result, null, 2) + '\n');
  else
    out(
      table(
        ['NODE', 'CONTAINER', 'STATE', 'POWER', 'ADDRESS', 'SSH'],
        result.map((r) => [r.node, r.container, r.state, r.power, r.address, r.ssh ? 'ok' : 'no answer']),
      ),
    );
}

const common = (cmd: Command): Command =>
  cmd
    .option('--kind <kind>', 'kind of lab node: container (provisioned hosts) or vm (QEMU bare metal)', 'container')
    .option('--name <name>', 'lab name: cloud name, prefix of Docker objects, default inventory <name>.yaml', 'lab')
    .option('-i, --inventory <file>', 'the lab inventory (default: ./<name>.yaml)')
    .option('--roles <dir>', 'roles folder (default: the roles shipped with stackctl)')
    .option('--releases <dir>', 'release manifests folder (default: images/releases shipped with stackctl)');

/** `stackctl lab up|down|status --kind container|vm`: a data centre of container or VM nodes on this machine. */
export function registerLabUp(lab: Command): void {
  common(lab.command('up'))
    .description('create the lab: inventory, secrets, networks, node containers or VMs, virtual BMCs (re-entrant)')
    .option('--topology <name>', `topology preset: ${Object.keys(TOPOLOGIES).join(', ')}`, '1ctl-1comp')
    .addOption(
      numberOption('--nodes <n>', 'vm: N nodes (ctl-0 and N-1 computes) instead of a topology', {
        min: 1,
        max: VM_LAB_DEFAULTS.maxNodes,
      }),
    )
    .option('--out <file>', 'where to write the inventory (same as -i)')
    .option(
      '--compute <driver>',
      "container: what the computes run: fake (Nova's fake driver, default) or libvirt (QEMU TCG guests; " +
        'the deploy uploads the guest image of stackctl images build guest)',
    )
    .option(
      '--prefix <a.b>',
      'first two octets of the lab networks (container: a.b.24.0/24 provisioning; vm: a.b.124.0/24); default 10.96, vm 10.97',
    )
    .addOption(
      numberOption('--bmc-port <port>', 'first virtual BMC port (computes: +100); default 6230, vm 7230', {
        min: 1,
        max: 65000,
      }),
    )
    .addOption(numberOption('--memory <MiB>', 'vm: guest memory', { min: 256, max: 8192 }, VM_LAB_DEFAULTS.memoryMiB))
    .addOption(
      numberOption(
        '--cpus <n>',
        'vm: virtual CPUs (the deployed OS needs 2 under TCG)',
        { min: 1, max: 4 },
        VM_LAB_DEFAULTS.cpus,
      ),
    )
    .addOption(
      numberOption(
        '--disk-gb <GiB>',
        'vm: size of each (sparse qcow2) disk',
        { min: 1, max: 1024 },
        VM_LAB_DEFAULTS.diskGiB,
      ),
    )
    .option(
      '--registry <host:port>',
      `host address the registry is published on (default ${DEFAULT_REGISTRY_ADDRESS}; vm: ${VM_REGISTRY_PUSH_ADDRESS}, and the bridge address for the VMs)`,
    )
    .option(
      '--registry-container <name>',
      `registry container name (default ${REGISTRY_CONTAINER}; vm: stackctl-<name>-registry)`,
    )
    .addOption(secondsOption('--timeout', 'how long to wait for the nodes to answer SSH', RANGE.seconds, 60))
    .action((o: UpOpts & { out?: string }) => {
      const opts = { ...o, inventory: o.out ?? o.inventory };
      // the inventory may not exist yet: lab up writes it
      return withRunLock(inventoryOf(opts), () => runLabUp(opts), { creates: true });
    });

  common(lab.command('down'))
    .description(
      'remove the lab: containers or VMs, networks (bridge, taps, iptables rule), the registry if the lab started it, <inventory>.lab/',
    )
    .option('--purge', 'also remove the inventory, secrets, IPAM state and operator key that lab up wrote')
    .action((o: LabOpts & { purge?: boolean }) => withRunLock(inventoryOf(o), () => runLabDown(o), { creates: true }));

  common(lab.command('status'))
    .description(
      "each node's container or VM, power (through its virtual BMC) and SSH reachability (container) or provisioning state (vm)",
    )
    .option('--json', 'machine-readable output')
    .action(async (o: LabOpts & { json?: boolean }) => runLabStatus(o));
}
