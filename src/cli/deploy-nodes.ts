/**
 * The hosts before the services: `stackctl deploy` first takes every node of
 * the inventory that is not yet active through the node lifecycle (enroll ->
 * inspect -> provision, the workflows of `stackctl nodes`), so that one
 * command goes from powered-off machines to deployed services. Nodes already
 * active are left alone (no BMC is asked anything), and so are the nodes the
 * inventory marks `preprovisioned: true`: hosts installed by others (a
 * container lab's nodes, a site's existing servers) are never PXE-booted.
 *
 * Re-entrant like the node commands: each node carries on from its persisted
 * state; a node caught in the middle of an operation is taken up again only
 * with `--resume`. With `--dry-run`, only the table of what would be done.
 */
import type { Command } from 'commander';
import { StackctlError, TimeoutError, UsageError, summarizeFailure } from '../core/errors.js';
import type { Inventory } from '../inventory/schema.js';
import type { DeployPlan } from '../orchestrator/planner.js';
import { AgentResults, DEPLOY_DEFAULTS } from '../provision/deploy.js';
import { IntrospectionStore, introspectionFileFor, introspectionReportHandler } from '../provision/inspect.js';
import { NodeStateStore, nodesFileFor } from '../provision/machine.js';
import { SSH_CHECK_TIMEOUT_MS } from '../provision/provision.js';
import { NodeState } from '../provision/states.js';
import { openPool } from '../remote/index.js';
import type { SshPool } from '../remote/ssh.js';
import type { Loaded } from './context.js';
import { DEFAULT_HOST_IMAGE_DIR } from './images.js';
import { enrollNode, inspectNode } from './nodes-lifecycle.js';
import { provisionDeps, provisionNode, stageBootFiles, targetOf } from './nodes-provision.js';
import { bootNetwork, openSession, runBootServices, type BootOpts } from './nodes-session.js';
import { fanOut, type NodeOutcome } from './fanout.js';
import { table } from './output.js';
import { RANGE, secondsOption } from './numbers.js';
import { hostImageOption } from './options.js';
import { DEFAULT_RAMDISK_DIR } from './ramdisk.js';

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
 * inspection (see nodePhases). Undeploying has no row: an undeploy in
 * progress is finished with `nodes undeploy --resume`, never turned into a
 * deploy.
 */
const PHASES_FROM: Readonly<Partial<Record<NodeState, { phases: readonly NodePhase[]; resume?: true }>>> = {
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

/** The plan without the work of some nodes (a dry run cannot look into hosts not installed yet). */
export function withoutNodes(plan: DeployPlan, nodes: readonly string[]): DeployPlan {
  if (!nodes.length) return plan;
  const skip = new Set(nodes);
  return {
    ...plan,
    steps: plan.steps.map((st) => ({
      ...st,
      nodes: st.nodes.filter((n) => !skip.has(n.node)),
      runOnce: st.runOnce.filter((w) => !skip.has(w.node)),
    })),
  };
}

/** Options `stackctl deploy` takes for the nodes it provisions. */
export interface DeployNodesOpts {
  ramdisk?: string;
  hostImage?: string;
  interface?: string;
  /** Seconds. */
  provisionTimeout?: number;
}

/** Add the provisioning options to `stackctl deploy`. */
export function withDeployNodeOptions(cmd: Command): Command {
  cmd.option('--ramdisk <dir>', 'nodes to provision: the deploy ramdisk', DEFAULT_RAMDISK_DIR);
  return hostImageOption(cmd, 'nodes to provision: the host OS image', DEFAULT_HOST_IMAGE_DIR)
    .option('--interface <name>', 'nodes to provision: provisioning interface for dnsmasq (default: the VM lab bridge)')
    .addOption(
      secondsOption(
        '--provision-timeout',
        'nodes to provision: longest wait for each boot of a node',
        RANGE.seconds,
        DEPLOY_DEFAULTS.timeoutMs / 1000,
      ),
    );
}

/** What runs and prints the node phases (the deploy command's). */
export interface DeployNodesContext {
  readonly opts: DeployNodesOpts & {
    inventory: string;
    secrets?: string;
    roles?: string;
    releases?: string;
    dryRun?: boolean;
    resume?: boolean;
    json?: boolean;
  };
  readonly all: Loaded;
  readonly concurrency: number;
  readonly write: (text: string) => void;
  /** Draw listr2 progress. */
  readonly tty: boolean;
}

/** How long a freshly booted node may take until its dockerd answers (TCG VMs: ~30 s, more when loaded). */
export const DOCKER_READY_TIMEOUT_MS = 300_000;

/**
 * Bring every node that is not active (and not preprovisioned) to active
 * before the service steps. Resolves to the nodes that still need it: none
 * after a real run (a failure throws), the pending ones after a dry run.
 */
export async function provisionBeforeDeploy(ctx: DeployNodesContext): Promise<PendingNode[]> {
  const { opts, all } = ctx;
  const store = NodeStateStore.open(nodesFileFor(all.inventoryFile));
  const introspection = IntrospectionStore.open(introspectionFileFor(all.inventoryFile));
  const pending = nodesToProvision(
    all.loaded.inventory,
    (n) => store.get(n).state,
    (n) => introspection.get(n) !== undefined,
    Boolean(opts.resume),
  );
  if (!pending.length) return [];
  if (opts.dryRun) {
    if (opts.json) {
      for (const p of pending) ctx.write(JSON.stringify({ kind: 'deploy.provision', ...p }) + '\n');
    } else {
      ctx.write(
        table(
          ['NODE', 'STATE', 'BEFORE THE SERVICES'],
          pending.map((p) => [p.node, p.state, p.phases.join(', ')]),
        ),
      );
      ctx.write(
        `dry run: ${pending.length} node(s) would be provisioned first; ` +
          'their containers and configs are all created once they are active\n',
      );
    }
    return pending;
  }
  await provisionPending(ctx, pending);
  return [];
}

/** Boot services for the run, then each node's phases in parallel under the limit. */
async function provisionPending(ctx: DeployNodesContext, pending: readonly PendingNode[]): Promise<void> {
  const { opts } = ctx;
  const bootOpts: BootOpts = {
    inventory: opts.inventory,
    ...(opts.secrets ? { secrets: opts.secrets } : {}),
    ...(opts.roles ? { roles: opts.roles } : {}),
    ...(opts.releases ? { releases: opts.releases } : {}),
    ...(opts.interface ? { interface: opts.interface } : {}),
    ...(opts.json ? { json: true } : {}),
    concurrency: ctx.concurrency,
    httpPort: 0,
    timeout: opts.provisionTimeout ?? DEPLOY_DEFAULTS.timeoutMs / 1000,
  };
  const timeoutMs = bootOpts.timeout * 1000;
  if (!opts.json) {
    ctx.write(`provisioning ${pending.length} node(s) before the services: ${pending.map((p) => p.node).join(', ')}\n`);
  }
  const s = openSession(bootOpts, ctx.tty || Boolean(opts.json));
  let outcomes: NodeOutcome[] = [];
  try {
    const net = bootNetwork(s, bootOpts);
    const staged = stageBootFiles(s, opts);
    const results = new AgentResults();
    const introspection = IntrospectionStore.open(introspectionFileFor(s.all.inventoryFile));
    const services = await runBootServices(s, bootOpts, net, staged.files, (r) => {
      introspectionReportHandler(introspection)(r);
      results.handler(r);
    });
    const pool = openPool(s.all.inventoryFile);
    const updates = new Map<string, (status: string) => void>();
    const deps = provisionDeps(s, staged, services, results, timeoutMs, updates);
    const inspectDeps = {
      nodes: s.store,
      introspection,
      boot: services.server,
      power: (node: string) => s.driver(node),
      timeoutMs,
      pollMs: 1000,
    };
    try {
      outcomes = await fanOut(
        {
          command: 'deploy: provision',
          outcomes: pending.map((p): NodeOutcome => ({ node: p.node, ok: false })),
          concurrency: ctx.concurrency,
          visible: ctx.tty && !opts.json,
          emit: s.emit,
        },
        async (o, update) => {
          const p = pending.find((x) => x.node === o.node)!;
          updates.set(p.node, update);
          try {
            const done: string[] = [];
            if (p.phases.includes(NodePhase.ENROLL)) {
              update('enroll: checking the BMC');
              await enrollNode(s, p.node, update);
              done.push('enrolled');
            }
            if (p.phases.includes(NodePhase.INSPECT)) {
              update('inspect');
              await inspectNode(s, inspectDeps, services, p.node, update, 'deploy: inspect');
              done.push('inspected');
            }
            update('provision');
            const target = targetOf(s.all, p.node);
            const r = await provisionNode(s, deps, target, {
              resume: Boolean(opts.resume),
              ssh: { pool, timeoutMs: SSH_CHECK_TIMEOUT_MS },
            });
            update('waiting for dockerd');
            await dockerReady(pool, p.node, target.ip);
            done.push(r.summary);
            if (!ctx.tty && !opts.json) ctx.write(`${p.node}: ${done.join('; ')}\n`);
            return done.join('; ');
          } catch (e) {
            const f = summarizeFailure(e);
            if (!ctx.tty && !opts.json) ctx.write(`${p.node}: FAILED ${f.code}: ${f.message}\n`);
            throw e;
          }
        },
      );
    } finally {
      await pool.close().catch(() => undefined);
      await services.close();
    }
  } finally {
    await s.close();
  }
  const failures = outcomes.filter((o) => !o.ok);
  if (failures.length) {
    throw new StackctlError(
      'E_DEPLOY_PROVISION',
      `${failures.length} node(s) could not be provisioned, no service was deployed: ` +
        failures.map((f) => `${f.node} (${f.error?.code}: ${f.error?.message})`).join('; '),
      {
        hint:
          'See stackctl nodes show NODE for each node and its history; fix the cause and run stackctl deploy again ' +
          '(each node carries on from its state).',
        details: { failed: failures.map((f) => f.node) },
      },
    );
  }
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
