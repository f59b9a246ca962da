/**
 * The hosts before the services: `stackctl deploy` first takes every node of
 * the inventory that is not yet active through the node lifecycle (enroll ->
 * inspect -> provision), so that one command goes from powered-off machines
 * to deployed services. Nodes already active are left alone (no BMC is asked
 * anything), and so are the nodes the inventory marks `preprovisioned: true`:
 * hosts installed by others (a container lab's nodes, a site's existing
 * servers) are never PXE-booted.
 *
 * Re-entrant like the node commands: each node carries on from its persisted
 * state; a node caught in the middle of an operation is taken up again only
 * with `resume`.
 */
import { StackctlError, TimeoutError, UsageError, summarizeFailure } from '../../core/errors.js';
import type { Inventory } from '../../inventory/schema.js';
import type { BootServices } from '../../pxe/services.js';
import type { SshPool } from '../../remote/ssh.js';
import type { DeployDeps } from '../deploy.js';
import type { InspectDeps } from '../inspect.js';
import { SSH_CHECK_TIMEOUT_MS } from '../provision.js';
import { NodeState } from '../states.js';
import { enrollNode, inspectNode } from './lifecycle.js';
import { provisionNode, targetOf } from './provision-node.js';
import type { NodeSession } from './session.js';

/** What a node still needs before the services can be deployed on it. */
export const NodePhase = {
  /** Check its BMC (enroll -> manageable). */
  ENROLL: 'enroll',
  /** Boot the ramdisk and store the hardware report (manageable). */
  INSPECT: 'inspect',
  /** Clean, write the host image, boot it, prove SSH and Docker (-> active). */
  PROVISION: 'provision',
} as const;
export type NodePhase = (typeof NodePhase)[keyof typeof NodePhase];

const ALL_PHASES: readonly NodePhase[] = [NodePhase.ENROLL, NodePhase.INSPECT, NodePhase.PROVISION];
const FROM_INSPECT: readonly NodePhase[] = [NodePhase.INSPECT, NodePhase.PROVISION];
const ONLY_PROVISION: readonly NodePhase[] = [NodePhase.PROVISION];

/**
 * The phases left from each state. `resume` marks the states an interrupted
 * run leaves behind: taken up again only with --resume, as the node
 * commands do. A manageable node that was inspected already skips the
 * inspection (see nodesToProvision). Undeploying has no row: an undeploy in
 * progress is finished with `nodes undeploy --resume`, never turned into a
 * deploy.
 */
export const PHASES_FROM: Readonly<Partial<Record<NodeState, { phases: readonly NodePhase[]; resume?: true }>>> = {
  [NodeState.ENROLL]: { phases: ALL_PHASES },
  [NodeState.VERIFYING]: { phases: ALL_PHASES, resume: true },
  [NodeState.MANAGEABLE]: { phases: FROM_INSPECT },
  [NodeState.INSPECTING]: { phases: FROM_INSPECT, resume: true },
  [NodeState.INSPECT_WAIT]: { phases: FROM_INSPECT, resume: true },
  [NodeState.INSPECT_FAILED]: { phases: FROM_INSPECT },
  [NodeState.CLEANING]: { phases: ONLY_PROVISION, resume: true },
  [NodeState.CLEAN_WAIT]: { phases: ONLY_PROVISION, resume: true },
  [NodeState.CLEAN_FAILED]: { phases: ONLY_PROVISION },
  [NodeState.AVAILABLE]: { phases: ONLY_PROVISION },
  [NodeState.DEPLOYING]: { phases: ONLY_PROVISION, resume: true },
  [NodeState.DEPLOY_WAIT]: { phases: ONLY_PROVISION, resume: true },
  [NodeState.DEPLOY_FAILED]: { phases: ONLY_PROVISION },
  [NodeState.ERROR]: { phases: ONLY_PROVISION },
};

/** One node deploy must bring to active first. */
export interface PendingNode {
  readonly node: string;
  readonly state: NodeState;
  readonly phases: readonly NodePhase[];
}

/**
 * The nodes to provision before the services, with what each still needs;
 * pure. Active and preprovisioned nodes are not listed. Throws for a node
 * that cannot be taken up from its state (undeploying; mid-operation
 * without `resume`).
 */
export function nodesToProvision(
  inventory: Pick<Inventory, 'nodes'>,
  state: (node: string) => NodeState,
  inspected: (node: string) => boolean,
  resume: boolean,
): PendingNode[] {
  const out: PendingNode[] = [];
  for (const n of inventory.nodes) {
    if (n.preprovisioned) continue;
    const st = state(n.name);
    if (st === NodeState.ACTIVE) continue;
    const row = PHASES_FROM[st];
    if (!row || (row.resume && !resume)) {
      throw new UsageError(
        'E_NODE_STATE',
        `node '${n.name}' is in state '${st}': deploy cannot provision it from there`,
        {
          hint: row
            ? 'An interrupted run left it there: carry on with stackctl deploy --resume.'
            : `Finish the operation first: stackctl nodes undeploy --node ${n.name} --resume --yes.`,
          details: { node: n.name, state: st },
        },
      );
    }
    const phases = st === NodeState.MANAGEABLE && inspected(n.name) ? ONLY_PROVISION : row.phases;
    out.push({ node: n.name, state: st, phases });
  }
  return out;
}

/** How long a freshly booted node may take until its dockerd answers (TCG VMs: ~30 s, more when loaded). */
export const DOCKER_READY_TIMEOUT_MS = 300_000;

/** What bringing a node up needs: the session, the running boot services, the workflows' dependencies. */
export interface BringUp {
  readonly session: NodeSession;
  readonly services: Pick<BootServices, 'observed'>;
  readonly inspect: InspectDeps;
  readonly deploy: DeployDeps;
  /** SSH to the nodes once they run their disk: the SSH check, then dockerd. */
  readonly pool: SshPool;
  readonly resume: boolean;
}

/**
 * Take one pending node through its phases to active, then wait for its
 * dockerd (the service steps talk to it at once). Throws the phase's failure;
 * resolves to what was done, in a line.
 */
export async function bringUpNode(b: BringUp, p: PendingNode, update: (status: string) => void): Promise<string> {
  const s = b.session;
  const done: string[] = [];
  if (p.phases.includes(NodePhase.ENROLL)) {
    update('enroll: checking the BMC');
    await enrollNode(s, p.node, update);
    done.push('enrolled');
  }
  if (p.phases.includes(NodePhase.INSPECT)) {
    update('inspect');
    await inspectNode(s, b.inspect, b.services, p.node, update, 'deploy: inspect');
    done.push('inspected');
  }
  update('provision');
  const target = targetOf(s.site, p.node);
  const r = await provisionNode(s, b.deploy, target, {
    resume: b.resume,
    ssh: { pool: b.pool, timeoutMs: SSH_CHECK_TIMEOUT_MS },
  });
  update('waiting for dockerd');
  await dockerReady(b.pool, p.node, target.ip);
  done.push(r.summary);
  return done.join('; ');
}

/** Wait until the node's dockerd answers over SSH: the service steps talk to it at once. */
async function dockerReady(pool: SshPool, node: string, address: string): Promise<void> {
  const target = { node, host: address, port: 22, user: 'root' };
  const until = Date.now() + DOCKER_READY_TIMEOUT_MS;
  let last = '';
  while (Date.now() < until) {
    try {
      const r = await pool.exec(target, ['docker', 'info', '--format', '{{.ServerVersion}}'], { timeoutMs: 60_000 });
      if (r.code === 0) return;
      last = r.stderr.trim();
    } catch (e) {
      last = summarizeFailure(e).message;
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
  throw new TimeoutError(
    'E_DEPLOY_DOCKER',
    `node '${node}' (${address}) is active but its dockerd did not answer within ${DOCKER_READY_TIMEOUT_MS / 1000} s: ${last}`,
    {
      hint: 'Log in and look at `systemctl status docker` and `journalctl -u docker` on the node.',
      details: { node, address },
    },
  );
}

/** The error that stops a deploy before its first step: nodes that could not be brought up, each with its error. */
export function provisionFailed(failures: readonly { node: string; code: string; message: string }[]): StackctlError {
  return new StackctlError(
    'E_DEPLOY_PROVISION',
    `${failures.length} node(s) could not be provisioned, no service was deployed: ` +
      failures.map((f) => `${f.node} (${f.code}: ${f.message})`).join('; '),
    {
      hint:
        'See stackctl nodes show NODE for each node and its history; fix the cause and run stackctl deploy again ' +
        '(each node carries on from its state).',
      details: { failed: failures.map((f) => f.node) },
    },
  );
}
