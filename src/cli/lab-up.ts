import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createDriver } from '../bmc/registry.js';
import { UsageError, messageOf } from '../core/errors.js';
import { writeFileAtomic } from '../core/fs.js';
import { packageRoot } from '../core/paths.js';
import { buildImages, formatBuildEvent } from '../images/build.js';
import { localEngine, type LocalEngine } from '../remote/docker-local.js';
import { DEFAULT_REGISTRY_ADDRESS, ensureRegistry, REGISTRY_CONTAINER } from '../images/registry.js';
import { saveIpamState } from '../inventory/ipam.js';
import { generateSecrets } from '../inventory/secrets.js';
import { labDown, labStatus, labUp, labPaths, recordCreated, type LabInput } from '../lab/nodes/lab.js';
import { labInventoryYaml, topology } from '../lab/nodes/topology.js';
import { secretsFileFor } from '../inventory/secrets.js';
import { secretSpecs } from '../roles/catalog.js';
import { loadAll, type Loaded } from './context.js';
import { runningBmcs, startBmcs, stopBmcs } from './lab.js';
import { out, printIssues, table } from './output.js';
import { bmcTargets } from './targets.js';

/** Kinds of lab node; only containers are built here (QEMU VMs have their own commands). */
const KINDS = ['container'] as const;

interface LabOpts {
  kind: string;
  name: string;
  inventory?: string;
  roles?: string;
  releases?: string;
}

interface UpOpts extends LabOpts {
  topology: string;
  prefix: string;
  bmcPort: string;
  registry: string;
  registryContainer: string;
  timeout: string;
}

/** Side effects of the lab commands (CONVENTIONS.md 8). */
export interface LabCliDeps {
  readonly engine: LocalEngine;
  /** The stackctl script the background BMC process runs. */
  readonly bin: string;
}

/**
 * The script `lab bmc serve` runs from: this process's when it is stackctl,
 * else (stackctl used as a library, e.g. by tests) the built one of the package.
 */
function defaultBin(): string {
  const argv1 = process.argv[1] ?? '';
  return /bin\.js$/.test(argv1) ? argv1 : join(packageRoot(), 'dist', 'src', 'cli', 'bin.js');
}

const defaultDeps = (): LabCliDeps => ({ engine: localEngine(), bin: defaultBin() });

function checkKind(kind: string): void {
  if (!(KINDS as readonly string[]).includes(kind)) {
    throw new UsageError('E_LAB_KIND', `lab node kind '${kind}' is not handled by this command`, {
      hint: `Kinds: ${KINDS.join(', ')}.`,
    });
  }
}

const inventoryOf = (o: LabOpts): string => resolve(o.inventory ?? `${o.name}.yaml`);
const loadOpts = (o: LabOpts, inventory: string) => ({
  inventory,
  ...(o.roles ? { roles: o.roles } : {}),
  ...(o.releases ? { releases: o.releases } : {}),
});

/** LabInput of a loaded inventory. */
export function labInput(all: Loaded): LabInput {
  const inv = all.loaded.inventory;
  return {
    inventoryFile: all.inventoryFile,
    name: inv.cloud.name,
    registry: inv.cloud.registry ?? all.release.registry,
    release: all.release,
    networks: all.loaded.networks,
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
  topology(o.topology);
  const file = inventoryOf(o);
  const created: string[] = [];
  if (!existsSync(file)) {
    writeFileAtomic(
      file,
      labInventoryYaml({ name: o.name, topology: o.topology, prefix16: o.prefix, bmcPort: Number(o.bmcPort) }),
    );
    created.push(file);
    out(`wrote ${file} (${o.topology})\n`);
  } else out(`using ${file}\n`);

  // `stackctl secrets generate`: every lab BMC is on loopback, so all credentials can be made here.
  let all = loadAll(loadOpts(o, file));
  const inv = all.loaded.inventory;
  const used = new Set(inv.nodes.flatMap((n) => all.catalog.roles.get(n.role)!.services));
  const bmcRefs = new Map<string, { lab: boolean; nodes: string[] }>();
  for (const n of inv.nodes) {
    const ref = bmcRefs.get(n.bmc.credentials) ?? { lab: true, nodes: [] };
    ref.nodes.push(n.name);
    bmcRefs.set(n.bmc.credentials, ref);
  }
  const sec = generateSecrets(all.secretsFile, secretSpecs(all.catalog, used), bmcRefs);
  if (sec.created) created.push(sec.file);
  if (sec.added.length) out(`${sec.file}: ${sec.added.length} secret(s) added\n`);
  all = loadAll(loadOpts(o, file));
  printIssues(all.warnings);
  if (all.allocation.changed || !existsSync(all.ipamFile)) {
    if (!existsSync(all.ipamFile)) created.push(all.ipamFile);
    saveIpamState(all.ipamFile, all.allocation.state);
  }
  created.push(file.replace(/\.ya?ml$/, '') + '.events.jsonl');
  if (existsSync(secretsFileFor(file)) && created.length) recordCreated(file, created);

  const { engine } = deps;
  await buildImages(engine, {
    release: all.release,
    only: ['node', 'registry'],
    onEvent: (e) => {
      if (e.kind === 'image.start' || (e.kind === 'rootfs.done' && !e.cached)) out(formatBuildEvent(e) + '\n');
    },
  });
  const started = Date.now();
  const report = await labUp(
    labInput(all),
    {
      engine,
      log: (l) => out(l + '\n'),
      ensureRegistry: () =>
        ensureRegistry(engine, {
          release: all.release,
          address: o.registry,
          container: o.registryContainer,
          labels: { 'org.stackctl.lab': inv.cloud.name },
        }),
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
    { readyTimeoutS: Number(o.timeout) },
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
  const changed = report.createdNetworks.length + report.createdContainers.length + report.startedContainers.length;
  const p = labPaths(file);
  out(
    `${changed ? 'lab up' : 'lab already up, nothing changed'} (${((Date.now() - started) / 1000).toFixed(1)} s); ` +
      `ssh -i ${p.operatorKey} -o UserKnownHostsFile=${p.knownHosts} root@${report.plan.nodes[0]?.sshAddress ?? ''}\n`,
  );
}

/** `lab down`: remove what `lab up` created. */
export async function runLabDown(o: LabOpts & { purge?: boolean }, deps: LabCliDeps = defaultDeps()): Promise<void> {
  checkKind(o.kind);
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
  const all = loadAll(loadOpts(o, inventoryOf(o)));
  const rows = await labStatus(labInput(all), deps.engine);
  const bmcUp = runningBmcs(all) !== undefined;
  const targets = all.secrets
    ? bmcTargets(
        all,
        rows.map((r) => r.node),
      )
    : [];
  const result = [];
  for (const r of rows) {
    let power = 'no BMC running';
    const t = targets.find((x) => x.node === r.node);
    if (bmcUp && t) {
      const d = createDriver(t);
      try {
        power = await d.powerState();
      } catch (e) {
        power = `error: ${messageOf(e)}`;
      } finally {
        await d.close();
      }
    }
    result.push({ ...r, power });
  }
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
    .option('--kind <kind>', 'kind of lab node: container', 'container')
    .option('--name <name>', 'lab name: cloud name, prefix of Docker objects, default inventory <name>.yaml', 'lab')
    .option('-i, --inventory <file>', 'the lab inventory (default: ./<name>.yaml)')
    .option('--roles <dir>', 'roles folder (default: the roles shipped with stackctl)')
    .option('--releases <dir>', 'release manifests folder (default: images/releases shipped with stackctl)');

/** `stackctl lab up|down|status --kind container`: a data centre of container nodes on this machine. */
export function registerLabUp(lab: Command): void {
  common(lab.command('up'))
    .description('create the lab: inventory, secrets, networks, node containers, virtual BMCs (re-entrant)')
    .option('--topology <name>', 'topology preset: 1ctl-1comp, 3ctl-2comp', '1ctl-1comp')
    .option('--out <file>', 'where to write the inventory (same as -i)')
    .option('--prefix <a.b>', 'first two octets of the lab networks (a.b.24.0/24 provisioning, ...)', '10.96')
    .option('--bmc-port <port>', 'first virtual BMC port (computes: +100)', '6230')
    .option('--registry <host:port>', 'host address the registry is published on', DEFAULT_REGISTRY_ADDRESS)
    .option('--registry-container <name>', 'registry container name', REGISTRY_CONTAINER)
    .option('--timeout <seconds>', 'how long to wait for the nodes to answer SSH', '60')
    .action(async (o: UpOpts & { out?: string }) => runLabUp({ ...o, inventory: o.out ?? o.inventory }));

  common(lab.command('down'))
    .description('remove the lab: containers, networks, the registry if the lab started it, <inventory>.lab/')
    .option('--purge', 'also remove the inventory, secrets, IPAM state and operator key that lab up wrote')
    .action(async (o: LabOpts & { purge?: boolean }) => runLabDown(o));

  common(lab.command('status'))
    .description("each node's container state, power (through its virtual BMC) and SSH reachability")
    .option('--json', 'machine-readable output')
    .action(async (o: LabOpts & { json?: boolean }) => runLabStatus(o));
}
