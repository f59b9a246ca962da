/**
 * `stackctl nodes provision|undeploy`: write the host OS image to nodes
 * (manageable or available -> active) and tear deployments down (active ->
 * available), through src/provision/provision.ts. The boot services run for
 * the command; the boot server serves the ramdisk and the image from
 * `<inventory>.pxe/files/`, where the image is staged once, named by its
 * checksum. Per node: listr2 progress from the workflow's events, the wall
 * time of each phase and the bytes served, in the table and in `--json`.
 */
import type { Command } from 'commander';
import { copyFileSync, existsSync, linkSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { IoError, StackctlError, UsageError, type ExitCode } from '../core/errors.js';
import type { StackctlEvent } from '../core/events.js';
import { HOST_OUTPUTS, readHostManifest } from '../images/host.js';
import { introspectionFileFor, introspectionReportHandler, IntrospectionStore } from '../provision/inspect.js';
import { AgentResults, bootTrailFrom, DEPLOY_DEFAULTS, stageImage, type DeployDeps } from '../provision/deploy.js';
import type { CarriedNetwork, DeployImage, DeployTarget } from '../provision/deploy.js';
import { provisionNodes, undeployNodes, SSH_CHECK_TIMEOUT_MS, type ProvisionResult } from '../provision/provision.js';
import { NodeEvent, NodeState } from '../provision/states.js';
import { parseCidr4 } from '../core/ipv4.js';
import { PROVISIONING } from '../pxe/dnsmasq.js';
import { readRamdiskManifest } from '../pxe/services.js';
import type { BootServices } from '../pxe/services.js';
import { ensureClientKey, openPool, sshFilesFor } from '../remote/index.js';
import type { SshPool } from '../remote/ssh.js';
import type { Loaded } from './context.js';
import { DEFAULT_HOST_IMAGE_DIR } from './images.js';
import {
  bootNetwork,
  bootNumbers,
  eachLifecycle,
  openSession,
  pxeDirOf,
  runBootServices,
  warnStaleRamdisk,
  withBootOptions,
  withSelection,
  type BootOpts,
  type Session,
} from './nodes-session.js';
import { DEFAULT_RAMDISK_DIR } from './ramdisk.js';
import { selectNodes } from './targets.js';
import { withRunLock } from './run-lock.js';

type ProvisionOpts = BootOpts & {
  ramdisk?: string;
  image?: string;
  resume?: boolean;
  sshCheck: boolean;
  sshTimeout?: string;
};

/** The states each command starts from, and those `--resume` carries on. */
const ACCEPTED: Readonly<Record<'provision' | 'undeploy', { start: NodeState[]; resume: NodeState[] }>> = {
  provision: {
    start: [
      NodeState.MANAGEABLE,
      NodeState.CLEAN_FAILED,
      NodeState.AVAILABLE,
      NodeState.DEPLOY_FAILED,
      NodeState.ERROR,
      NodeState.ACTIVE,
    ],
    resume: [NodeState.CLEANING, NodeState.CLEAN_WAIT, NodeState.DEPLOYING, NodeState.DEPLOY_WAIT],
  },
  undeploy: {
    start: [NodeState.ACTIVE, NodeState.DEPLOY_FAILED, NodeState.ERROR],
    resume: [NodeState.UNDEPLOYING, NodeState.CLEANING, NodeState.CLEAN_WAIT],
  },
};

function checkState(s: Session, node: string, action: 'provision' | 'undeploy', resume: boolean): void {
  const state = s.store.get(node).state;
  const a = ACCEPTED[action];
  if (a.start.includes(state) || (resume && a.resume.includes(state))) return;
  throw new UsageError('E_NODE_STATE', `node '${node}' is in state '${state}': it cannot be ${action}ed from there`, {
    hint: a.resume.includes(state)
      ? `An interrupted ${action}: carry on with --resume.`
      : state === NodeState.ENROLL
        ? `Enroll and inspect it first: stackctl nodes enroll --node ${node}; stackctl nodes inspect --node ${node}`
        : `${action} starts from ${a.start.join(', ')}.`,
    details: { node, state },
  });
}

/**
 * The deploy target of an inventory node: provisioning MAC and address, root
 * device hints, its addresses on the other networks of its role (carried by
 * the provisioning NIC, tagged where the network has a VLAN), and the
 * registry its dockerd pulls from.
 */
export function targetOf(all: Loaded, node: string): DeployTarget {
  const inv = all.loaded.inventory;
  const n = inv.nodes.find((x) => x.name === node)!;
  const net = inv.networks[PROVISIONING]!;
  const addresses = all.allocation.addresses.get(node) ?? {};
  const networks: CarriedNetwork[] = Object.entries(addresses)
    .filter(([name]) => name !== PROVISIONING && inv.networks[name])
    .map(([name, ip]) => {
      const def = inv.networks[name]!;
      return {
        name,
        ip,
        prefix: parseCidr4(def.cidr)!.prefix,
        ...(def.vlan !== undefined ? { vlan: def.vlan } : {}),
      };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
  return {
    node,
    mac: n.nics.find((x) => x.network === PROVISIONING)!.mac.toLowerCase(),
    ip: addresses[PROVISIONING]!,
    prefix: parseCidr4(net.cidr)!.prefix,
    ...(net.gateway ? { gateway: net.gateway } : {}),
    ...(inv.cloud.domain ? { domain: inv.cloud.domain } : {}),
    ...(n.root_device ? { rootDevice: n.root_device } : {}),
    ...(networks.length ? { networks } : {}),
    insecureRegistries: inv.cloud.registry_insecure ? [inv.cloud.registry ?? all.release.registry] : [],
  };
}

/** Link (or copy) a file into the boot files folder unless an equal-sized one is there. */
function place(src: string, dir: string, name: string): void {
  const dest = join(dir, name);
  if (existsSync(dest) && statSync(dest).size === statSync(src).size) return;
  rmSync(dest, { force: true });
  try {
    linkSync(src, dest);
  } catch {
    copyFileSync(src, dest);
  }
}

/** One line of a result: phases and bytes. */
function summary(r: ProvisionResult): string {
  const phases = Object.entries(r.phases)
    .map(([k, v]) => `${k} ${((v ?? 0) / 1000).toFixed(1)} s`)
    .join(', ');
  return `${r.state}: ${phases || 'nothing to do'}; ${(r.bytesServed / 1048576).toFixed(1)} MiB served`;
}

/** Progress lines from the workflow's events. */
function progressOf(e: StackctlEvent): string | undefined {
  if (e.kind === 'node.state') return e.to;
  if (e.kind === 'provision.phase' && e.phase !== 'total') return `${e.phase} done (${(e.ms / 1000).toFixed(1)} s)`;
  if (e.kind === 'pxe.agent-command') return `agent: ${e.command}`;
  return undefined;
}

async function runProvision(action: 'provision' | 'undeploy', opts: ProvisionOpts): Promise<void> {
  const { timeoutMs } = bootNumbers(opts);
  const sshTimeoutS = Number(opts.sshTimeout ?? SSH_CHECK_TIMEOUT_MS / 1000);
  if (!Number.isFinite(sshTimeoutS) || sshTimeoutS <= 0) {
    throw new UsageError('E_OPTION', `--ssh-timeout must be a number of seconds, not '${opts.sshTimeout}'`, {
      hint: 'For example --ssh-timeout 300 on a busy host.',
    });
  }
  const s = openSession(opts, false);
  try {
    const names = selectNodes(s.all, opts);
    const resume = Boolean(opts.resume);
    for (const n of names) checkState(s, n, action, resume);
    const net = bootNetwork(s, opts);
    const staged = stageBootFiles(s, opts);
    const results = new AgentResults();
    const introspection = IntrospectionStore.open(introspectionFileFor(s.all.inventoryFile));
    const services = await runBootServices(s, opts, net, staged.files, (r) => {
      introspectionReportHandler(introspection)(r);
      results.handler(r);
    });
    const pool = action === 'provision' && opts.sshCheck ? openPool(s.all.inventoryFile) : undefined;
    // per node: the progress line follows the workflow's events
    const updates = new Map<string, (status: string) => void>();
    const deps = provisionDeps(s, staged, services, results, timeoutMs, updates);
    try {
      await eachLifecycle(s, opts, action, names, async (node, update, outcome) => {
        updates.set(node, update);
        const target = targetOf(s.all, node);
        if (action === 'provision') {
          const r = await provisionNode(s, deps, target, {
            resume,
            ...(pool ? { ssh: { pool, timeoutMs: sshTimeoutS * 1000 } } : {}),
          });
          outcome.details = r.details;
          return r.summary;
        }
        const t0 = Date.now();
        const [r] = await undeployNodes({ targets: [target], deps, resume, events: deps.events! });
        outcome.details = { phases: r!.phases, bytesServed: r!.bytesServed, ms: Date.now() - t0 };
        if (!r!.ok) return failed(r!);
        return summary(r!);
      });
    } finally {
      await pool?.close().catch(() => undefined);
      await services.close();
    }
  } finally {
    await s.close();
  }
}

/** The boot files of a provisioning run, in `<inventory>.pxe/files/`, and the staged host image. */
export interface StagedBootFiles {
  readonly files: { readonly dir: string; readonly kernel: string; readonly initrd: string };
  readonly image: DeployImage;
}

/**
 * Put the ramdisk's kernel and initramfs and the host image into the boot
 * server's folder (links, or one copy each): the inspection and the deploy of
 * a run share it.
 */
export function stageBootFiles(s: Session, opts: { ramdisk?: string; image?: string }): StagedBootFiles {
  const ramdiskDir = resolve(opts.ramdisk ?? DEFAULT_RAMDISK_DIR);
  const ramdisk = readRamdiskManifest(ramdiskDir);
  warnStaleRamdisk(ramdiskDir);
  const imageDir = resolve(opts.image ?? DEFAULT_HOST_IMAGE_DIR);
  const manifest = readHostManifest(imageDir);
  if (!manifest) {
    throw new IoError('E_IMAGE_MISSING', `no host image in ${imageDir} (${HOST_OUTPUTS.manifest} is missing)`, {
      hint: `Build it: stackctl images build host --out ${imageDir}`,
    });
  }
  const files = join(pxeDirOf(s), 'files');
  mkdirSync(files, { recursive: true, mode: 0o755 });
  place(join(ramdiskDir, ramdisk.kernel), files, ramdisk.kernel);
  place(join(ramdiskDir, ramdisk.initrd), files, ramdisk.initrd);
  const image = stageImage(files, {
    path: join(imageDir, HOST_OUTPUTS.image),
    sha256: manifest.image.sha256,
    rawBytes: manifest.raw.size,
  });
  return { files: { dir: files, kernel: ramdisk.kernel, initrd: ramdisk.initrd }, image };
}

/**
 * The deploy workflow's dependencies for a session; `updates` gets each
 * node's progress line from the workflow's events.
 */
export function provisionDeps(
  s: Session,
  staged: StagedBootFiles,
  services: BootServices,
  results: AgentResults,
  timeoutMs: number,
  updates: ReadonlyMap<string, (status: string) => void>,
): DeployDeps {
  const ssh = sshFilesFor(s.all.inventoryFile);
  const { publicKey } = ensureClientKey(ssh.privateKeyFile);
  const events = {
    emit: (e: StackctlEvent): void => {
      s.emit(e);
      const line = 'node' in e ? progressOf(e) : undefined;
      if (line && 'node' in e) updates.get(e.node)?.(line);
    },
  };
  return {
    nodes: s.store,
    boot: services.server,
    results,
    power: (node) => s.driver(node),
    image: staged.image,
    authorizedKey: publicKey.line,
    knownHostsFile: ssh.knownHostsFile,
    bootTrail: bootTrailFrom(services.dnsmasq.paths.log, services.server),
    events,
    timeoutMs,
    pollMs: 1000,
  };
}

/**
 * Provision one node from manageable (cleaned first), clean failed,
 * available, deploy failed or error (and, with `resume`, from the middle of a
 * cleaning or deploy) to active; proves SSH when given a pool. Throws the
 * failure as the error the runner records; resolves to a summary line and
 * the figures for --json.
 */
export async function provisionNode(
  s: Session,
  deps: DeployDeps,
  target: DeployTarget,
  opts: { readonly resume: boolean; readonly ssh?: { readonly pool: SshPool; readonly timeoutMs: number } },
): Promise<{ summary: string; details: Record<string, unknown> }> {
  const node = target.node;
  const events = deps.events!;
  const t0 = Date.now();
  let cleaned: ProvisionResult | undefined;
  // manageable -> available is cleaning, as on every undeploy: the next tenant sees no old disk
  if (s.store.get(node).state === NodeState.CLEAN_FAILED) {
    s.store.apply(node, NodeEvent.MANAGE, 'provision: clean again');
  }
  if (s.store.get(node).state === NodeState.MANAGEABLE) s.store.apply(node, NodeEvent.PROVIDE, 'provision');
  const st = s.store.get(node).state;
  if (st === NodeState.CLEANING || st === NodeState.CLEAN_WAIT) {
    [cleaned] = await undeployNodes({ targets: [target], deps, resume: true, events });
    if (!cleaned!.ok) return failed(cleaned!);
  }
  const [r] = await provisionNodes({
    targets: [target],
    deps,
    resume: opts.resume,
    events,
    ...(opts.ssh ? { ssh: opts.ssh } : {}),
  });
  const details = {
    // the whole cleaning (power-on, ramdisk, wipe), not only the agent's wipe
    phases: { ...(cleaned ? { clean: cleaned.phases.total } : {}), ...r!.phases },
    bytesServed: r!.bytesServed + (cleaned?.bytesServed ?? 0),
    ...(r!.uname ? { uname: r!.uname } : {}),
    ms: Date.now() - t0,
  };
  if (!r!.ok) failed(r!);
  return { summary: summary(r!) + (r!.uname ? `; ${r!.uname.split(' ').slice(0, 3).join(' ')}` : ''), details };
}

/** A failed result as the error the runner records (code, message, hint and exit status kept). */
function failed(r: ProvisionResult): never {
  const e = r.error;
  throw new StackctlError(e?.code ?? 'E_PROVISION', e?.message ?? `node '${r.node}' ended in state '${r.state}'`, {
    ...(e?.hint ? { hint: e.hint } : {}),
    ...(e?.exit !== undefined ? { exitCode: e.exit as ExitCode } : {}),
    details: { node: r.node, state: r.state },
  });
}

/** Add provision and undeploy to `stackctl nodes`. */
export function registerProvision(nodes: Command): void {
  const common = (cmd: Command): Command =>
    withBootOptions(withSelection(cmd, '4'), DEPLOY_DEFAULTS.timeoutMs / 1000)
      .option('--ramdisk <dir>', 'the deploy ramdisk (stackctl images build-ramdisk)', DEFAULT_RAMDISK_DIR)
      .option('--image <dir>', 'the host OS image (stackctl images build host)', DEFAULT_HOST_IMAGE_DIR)
      .option('--resume', 'carry on with nodes an interrupted run left in the middle of the operation');

  common(nodes.command('provision'))
    .description(
      'write the host OS image to each node (manageable nodes are cleaned first) and boot it: -> active; ' +
        'then log in by SSH with the host key the node made and reported during the deploy',
    )
    .option('--no-ssh-check', 'do not prove SSH access after the deploy')
    .option('--ssh-timeout <seconds>', 'disk boot to SSH answering, per node', String(SSH_CHECK_TIMEOUT_MS / 1000))
    .action((opts: ProvisionOpts) => withRunLock(opts.inventory, () => runProvision('provision', opts)));

  common(nodes.command('undeploy'))
    .description('power the node off, wipe its disks (partition tables and disk ends) in the ramdisk: -> available')
    .action((opts: ProvisionOpts) =>
      withRunLock(opts.inventory, () => runProvision('undeploy', { ...opts, sshCheck: false })),
    );
}
