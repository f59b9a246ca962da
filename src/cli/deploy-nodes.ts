/**
 * `stackctl deploy` brings the hosts up before the services: the nodes not
 * yet active (and not `preprovisioned: true`) go through enroll -> inspect ->
 * provision first (src/provision/workflows/before-deploy.ts says which and
 * does it per node); this file gives deploy its options for them, runs them
 * in parallel with the command's progress, and prints the table of a dry run.
 */
import type { Command } from 'commander';
import { resolve } from 'node:path';
import { summarizeFailure } from '../core/errors.js';
import type { DeployPlan } from '../orchestrator/planner.js';
import { AgentResults, DEPLOY_DEFAULTS } from '../provision/deploy.js';
import { IntrospectionStore, introspectionFileFor, introspectionReportHandler } from '../provision/inspect.js';
import { NodeStateStore, nodesFileFor } from '../provision/machine.js';
import {
  bringUpNode,
  nodesToProvision,
  provisionFailed,
  type PendingNode,
} from '../provision/workflows/before-deploy.js';
import { stageBootFiles } from '../provision/workflows/boot.js';
import { inspectDepsOf } from '../provision/workflows/lifecycle.js';
import { provisionDeps } from '../provision/workflows/provision-node.js';
import { openPool } from '../remote/index.js';
import type { Loaded } from './context.js';
import { fanOut, type NodeOutcome } from './fanout.js';
import { DEFAULT_HOST_IMAGE_DIR } from './images.js';
import { bootNetwork, openSession, runBootServices, warnStaleRamdisk, type BootOpts } from './nodes-session.js';
import { RANGE, secondsOption } from './numbers.js';
import { hostImageOption } from './options.js';
import { table } from './output.js';
import { DEFAULT_RAMDISK_DIR } from './ramdisk.js';

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
    const ramdiskDir = resolve(opts.ramdisk ?? DEFAULT_RAMDISK_DIR);
    warnStaleRamdisk(ramdiskDir);
    const staged = stageBootFiles(s, { ramdiskDir, imageDir: resolve(opts.hostImage ?? DEFAULT_HOST_IMAGE_DIR) });
    const results = new AgentResults();
    const introspection = IntrospectionStore.open(introspectionFileFor(s.all.inventoryFile));
    const services = await runBootServices(s, bootOpts, net, staged.files, (r) => {
      introspectionReportHandler(introspection)(r);
      results.handler(r);
    });
    const pool = openPool(s.all.inventoryFile);
    const updates = new Map<string, (status: string) => void>();
    const bringUp = {
      session: s,
      services,
      inspect: inspectDepsOf(s, services, introspection, timeoutMs),
      deploy: provisionDeps(s, staged, services, results, timeoutMs, updates),
      pool,
      resume: Boolean(opts.resume),
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
          updates.set(o.node, update);
          try {
            const done = await bringUpNode(
              bringUp,
              pending.find((p) => p.node === o.node)!,
              update,
            );
            if (!ctx.tty && !opts.json) ctx.write(`${o.node}: ${done}\n`);
            return done;
          } catch (e) {
            const f = summarizeFailure(e);
            if (!ctx.tty && !opts.json) ctx.write(`${o.node}: FAILED ${f.code}: ${f.message}\n`);
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
    throw provisionFailed(
      failures.map((f) => ({ node: f.node, code: f.error?.code ?? 'E_INTERNAL', message: f.error?.message ?? '' })),
    );
  }
}
