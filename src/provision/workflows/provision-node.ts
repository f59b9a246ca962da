/**
 * Provision and undeploy, one node at a time, on a session whose boot
 * services run: the steps `stackctl nodes provision|undeploy` run per node
 * and `stackctl deploy` runs for the nodes it provisions first. Per node: the
 * deploy target from the inventory, the workflow of src/provision/provision.ts,
 * and its result as a summary line and figures, or as the error that failed it.
 */
import { StackctlError, UsageError, type ExitCode } from '../../core/errors.js';
import type { StackctlEvent } from '../../core/events.js';
import { parseCidr4 } from '../../core/ipv4.js';
import { PROVISIONING } from '../../pxe/dnsmasq.js';
import type { BootServices } from '../../pxe/services.js';
import { ensureClientKey, sshFilesFor } from '../../remote/index.js';
import type { SshPool } from '../../remote/ssh.js';
import {
  bootTrailFrom,
  type AgentResults,
  type CarriedNetwork,
  type DeployDeps,
  type DeployTarget,
} from '../deploy.js';
import { provisionNodes, undeployNodes, type ProvisionResult } from '../provision.js';
import { NodeEvent, NodeState } from '../states.js';
import type { StagedBootFiles } from './boot.js';
import type { NodeSession, Site } from './session.js';

/** The node operations of `stackctl nodes provision|undeploy`. */
export type NodeOperation = 'provision' | 'undeploy';

/** The states each operation starts from, and those `--resume` carries on. */
const ACCEPTED: Readonly<Record<NodeOperation, { start: NodeState[]; resume: NodeState[] }>> = {
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

/** Refuse (E_NODE_STATE) a node the operation cannot start from, or carry on (with `resume`), with what to do. */
export function checkStartState(state: NodeState, node: string, action: NodeOperation, resume: boolean): void {
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
 * registry its dockerd pulls from, listed as insecure (plain HTTP) only when
 * the inventory says so (`cloud.registry_insecure`), else trusted with the
 * cloud's CA when stackctl's registry serves TLS.
 */
export function targetOf(site: Site, node: string): DeployTarget {
  const inv = site.inventory;
  const n = inv.nodes.find((x) => x.name === node)!;
  const net = inv.networks[PROVISIONING]!;
  const addresses = site.addresses.get(node) ?? {};
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
    insecureRegistries: inv.cloud.registry_insecure ? [site.registry] : [],
    ...(site.registryCa && !inv.cloud.registry_insecure
      ? { registryTrust: { registry: site.registry, ca: site.registryCa } }
      : {}),
  };
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

/**
 * The deploy workflow's dependencies for a session; `updates` gets each
 * node's progress line from the workflow's events.
 */
export function provisionDeps(
  s: NodeSession,
  staged: StagedBootFiles,
  services: BootServices,
  results: AgentResults,
  timeoutMs: number,
  updates: ReadonlyMap<string, (status: string) => void>,
): DeployDeps {
  const ssh = sshFilesFor(s.site.inventoryFile);
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

/** What one node's operation resolves to: its summary line and the figures for --json. */
export interface NodeOperationResult {
  readonly summary: string;
  readonly details: Record<string, unknown>;
}

/**
 * Provision one node from manageable (cleaned first), clean failed,
 * available, deploy failed or error (and, with `resume`, from the middle of a
 * cleaning or deploy) to active; proves SSH when given a pool. Throws the
 * failure as the error the runner records; resolves to a summary line and
 * the figures for --json.
 */
export async function provisionNode(
  s: NodeSession,
  deps: DeployDeps,
  target: DeployTarget,
  opts: { readonly resume: boolean; readonly ssh?: { readonly pool: SshPool; readonly timeoutMs: number } },
): Promise<NodeOperationResult> {
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

/**
 * Undeploy one node (active, deploy failed or error; with `resume`, carry on
 * with an undeploy or cleaning in progress) to available: power off, boot the
 * ramdisk, wipe the disks. Its figures go to `figures` whether it succeeded or
 * not; throws the failure, resolves to a summary line.
 */
export async function undeployNode(
  deps: DeployDeps,
  target: DeployTarget,
  opts: { readonly resume: boolean; readonly figures?: (details: Record<string, unknown>) => void },
): Promise<string> {
  const t0 = Date.now();
  const [r] = await undeployNodes({ targets: [target], deps, resume: opts.resume, events: deps.events! });
  opts.figures?.({ phases: r!.phases, bytesServed: r!.bytesServed, ms: Date.now() - t0 });
  if (!r!.ok) failed(r!);
  return summary(r!);
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
