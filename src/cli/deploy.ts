import type { Command } from 'commander';
import { ExitCode, InputError, messageOf } from '../core/errors.js';
import { executeDeploy, predict, type DeployReport, type StepRunner } from '../orchestrator/executor.js';
import { countByClass, FAILURE_CLASSES } from '../orchestrator/failures.js';
import { formatNodeAction, formatPhases } from '../orchestrator/format.js';
import { JournalFile, RunMode, journalFileFor } from '../orchestrator/journal.js';
import { deployGuard } from '../recover/guard.js';
import { clusterCheck } from '../status/clusters.js';
import { parseSteps, planDeploy, type DeployPlan } from '../orchestrator/planner.js';
import { formatPinChanges } from '../images/pin.js';
import { PinSource } from '../images/pins.js';
import type { PlanResult } from '../roles/plan.js';
import { loadAll, planOf, planPinned } from './context.js';
import { provisionBeforeDeploy, withDeployNodeOptions, withoutNodes, type DeployNodesOpts } from './deploy-nodes.js';
import { eventSink, nodeSessions } from './node-sessions.js';
import { RANGE, numberOption, secondsOption } from './numbers.js';
import { dryRunOption, inventoryOptions, maxFailPercentOption, type CommonOpts } from './options.js';
import { out, printIssues, table } from './output.js';
import { runWithProgress } from './progress.js';
import { withRunLock } from './run-lock.js';
import { resolve } from 'node:path';
import { GUEST_ROOT_DISK_BYTES, loadGuestImage } from '../images/guest.js';
import type { GuestImageData } from '../orchestrator/identity.js';
import { DEFAULT_GUEST_IMAGE_DIR } from './images.js';

/** Options of `stackctl deploy`. */
export interface DeployOpts extends CommonOpts, DeployNodesOpts {
  dryRun?: boolean;
  resume?: boolean;
  services?: string;
  steps?: string;
  concurrency?: number;
  /** Percent of a role's nodes. */
  maxFailPercent?: number;
  /** Seconds. */
  taskTimeout?: number;
  json?: boolean;
  /** Folder of the built guest image (`build: guest` starter images; default .stackctl/guest). */
  guestImage?: string;
  /** Recreate containers whose workloads (guests) still run. */
  allowWorkloadStop?: boolean;
}

/** What deploy takes when an option is not given. */
export const DEPLOY_CLI_DEFAULTS = {
  concurrency: 8,
  maxFailPercent: 0,
  /** Seconds a run-once task may write nothing to its log before it is reported stuck. */
  taskTimeoutS: 600,
} as const;

/** Side effects of the command (tests pass their own output sink). */
export interface DeployCliDeps {
  readonly write: (text: string) => void;
  /** Draw listr2 progress (a terminal and not --json). */
  readonly tty: boolean;
}

const defaultDeps = (): DeployCliDeps => ({ write: out, tty: Boolean(process.stdout.isTTY) });

/**
 * `stackctl deploy`: converge the nodes to the plan, step by step. Returns
 * the report (undefined for a dry run); sets process.exitCode on failure.
 * The command holds the inventory's run lock around it (but for a dry run).
 */
export async function runDeploy(o: DeployOpts, deps: DeployCliDeps = defaultDeps()): Promise<DeployReport | undefined> {
  let all = loadAll(o);
  if (!o.json) printIssues(all.warnings);
  if (!all.secrets) {
    throw new InputError('E_SECRETS_REQUIRED', `deploy needs the secrets file ${all.secretsFile}`, {
      hint: `Run 'stackctl secrets generate -i ${o.inventory}' first: configs cannot be rendered with placeholders.`,
    });
  }
  const concurrency = o.concurrency ?? DEPLOY_CLI_DEFAULTS.concurrency;
  const budget = o.maxFailPercent ?? DEPLOY_CLI_DEFAULTS.maxFailPercent;
  const taskTimeoutS = o.taskTimeout ?? DEPLOY_CLI_DEFAULTS.taskTimeoutS;
  const services = o.services
    ?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const filter = {
    ...(services?.length ? { services } : {}),
    ...(o.steps ? { steps: parseSteps(o.steps) } : {}),
  };
  // An image this deploy needs without a pin is resolved from the registry once and pinned (its first
  // deploy); a pinned one never asks. A dry run asks no registry: it names the images a deploy would pin.
  const unpinned = (p: PlanResult): string[] => unpinnedOf(planDeploy(p.effective, all.catalog, filter));
  let planned: PlanResult;
  if (o.dryRun) {
    planned = planOf(all);
    const fresh = unpinned(planned);
    if (fresh.length && !o.json) deps.write(formatUnpinned(fresh));
  } else {
    const pinned = await planPinned(all, { by: PinSource.DEPLOY, save: true }, unpinned);
    all = pinned.all;
    planned = pinned.planned;
    if (pinned.changes.length)
      deps.write(
        o.json
          ? JSON.stringify({ kind: 'images.pinned', file: all.imagesFile, changes: pinned.changes }) + '\n'
          : formatPinChanges(pinned.changes),
      );
  }
  const { effective: plan, rendered } = planned;
  const deployPlan = planDeploy(plan, all.catalog, filter);

  const secret = (name: string) => all.secrets?.services.get(name);
  // The guest image a starter image names is read and checked against its build now, before any node
  // is touched: a missing build or a changed file stops the deploy here.
  const guestImage = o.dryRun ? undefined : guestImageOf(deployPlan, o.guestImage);
  // nodes not yet active are provisioned first (a dry run lists them: their hosts cannot be looked into yet)
  const unprovisioned = await provisionBeforeDeploy({ opts: o, all, concurrency, ...deps });
  const unprovisionedNodes = unprovisioned.map((p) => p.node);

  // Docker and files over one SSH connection per node, to its provisioning address.
  const sessions = nodeSessions(all);
  const connect = sessions.connect;
  const t0 = Date.now();
  try {
    if (o.dryRun) {
      const p = await predict(
        withoutNodes(deployPlan, unprovisionedNodes),
        { connect, secret, catalog: all.catalog },
        concurrency,
        o.allowWorkloadStop ? { allowWorkloadStop: true } : {},
      );
      if (o.json) {
        for (const r of p.rows) deps.write(JSON.stringify(r) + '\n');
        deps.write(JSON.stringify({ kind: 'deploy.order', phases: p.plan.phases, outages: p.plan.outages }) + '\n');
      } else {
        deps.write(
          table(
            ['STEP', 'NODE', 'OBJECT', 'NAME', 'ACTION', 'WHY'],
            p.rows.map((r) => [String(r.step), r.node, r.object, r.name, r.action, r.detail || '-']),
          ),
        );
        for (const [node, err] of p.unreachable) deps.write(`${node}: not looked at: ${messageOf(err)}\n`);
        if (p.plan.phases.length)
          deps.write(
            `\nORDER (one line per action; steps are barriers)\n${formatPhases(p.plan.phases, formatNodeAction)}`,
          );
        deps.write(formatOutages(p.plan.outages));
        const n = p.rows.filter((r) => r.action !== 'unchanged' && r.action !== 'done' && r.action !== 'check').length;
        deps.write(`dry run: ${n} change(s) predicted, nothing done (${((Date.now() - t0) / 1000).toFixed(1)} s)\n`);
      }
      return undefined;
    }

    const journal = new JournalFile(journalFileFor(all.inventoryFile), {
      command: 'deploy',
      mode: o.resume ? RunMode.RESUME : RunMode.NEW,
      target: all.release.name,
      inventory: o.inventory,
    });
    const visible = deps.tty && !o.json;
    const emit = eventSink(all.inventoryFile, { json: o.json, visible, write: deps.write });
    if (!o.json && o.resume) {
      const p = journal.previous;
      deps.write(
        journal.resumed
          ? `resuming run ${journal.run}: ${p.effectsDone.size} side effect(s) done, ${p.effectsPending.length} to re-check on the nodes\n`
          : 'nothing to resume (the last run ended, or an earlier version wrote it): deploying afresh\n',
      );
    }
    for (const a of deployPlan.unsupported) {
      if (!o.json) deps.write(`not yet performed by deploy: ${a.kind} ${a.service} on ${a.node}\n`);
    }
    const runner: StepRunner = visible
      ? (tasks, n) => runWithProgress(tasks, n, true)
      : async (tasks, n) => runWithProgress(tasks, n, false);
    const stop = new AbortController();
    const onSigint = (): void => stop.abort();
    process.once('SIGINT', onSigint);
    let report: DeployReport;
    try {
      report = await executeDeploy(
        deployPlan,
        {
          connect,
          rendered,
          journal,
          emit,
          runner,
          secret,
          ...(guestImage ? { guestImage: () => guestImage } : {}),
          catalog: all.catalog,
          clusterCheck,
          signal: stop.signal,
          quietTimeoutMs: taskTimeoutS * 1000,
          // The Galera clusters' checks: a deploy that leaves one down fails and names the recover command.
          guard: deployGuard(deployPlan, all.catalog.provides.clusterChecks, {
            connect,
            now: Date.now,
            sleep: (ms) => new Promise<void>((r) => setTimeout(r, ms)),
            emit,
            run: journal.run,
            inventoryFile: o.inventory,
          }),
        },
        { concurrency, failureBudgetPercent: budget, ...(o.allowWorkloadStop ? { allowWorkloadStop: true } : {}) },
      );
    } finally {
      process.off('SIGINT', onSigint);
    }
    if (o.json) deps.write(JSON.stringify({ kind: 'deploy.report', ...report }) + '\n');
    else deps.write(formatReport(report));
    if (!report.ok) process.exitCode = ExitCode.REMOTE;
    return report;
  } finally {
    await sessions.close();
  }
}

/** The images a deploy plan pulls (its containers' and its tasks') that have no pin: tag references. */
export function unpinnedOf(dp: DeployPlan): string[] {
  const refs = dp.steps.flatMap((st) => st.nodes.flatMap((n) => [...n.containers.map((c) => c.image), ...n.images]));
  return [...new Set(refs)].filter((r) => !r.includes('@')).sort();
}

/** What a dry run says of images without a pin. */
export function formatUnpinned(refs: readonly string[]): string {
  return (
    `${refs.length} image(s) not pinned yet: ${refs.join(', ')}\n` +
    '  a deploy asks the registry for their digests first and pins them (<inventory>.images.json); ' +
    'it then creates their containers from the pinned references, so containers running them by tag are recreated\n'
  );
}

/** The services whose APIs a deploy takes down, one line each. */
export function formatOutages(outages: DeployReport['outages']): string {
  return outages
    .map(
      (o) =>
        `outage: step ${o.step}: ${o.service} is recreated on ${o.nodes.join(', ')} ` +
        (o.reason === 'single-node'
          ? 'where it runs alone: down while it restarts'
          : 'at once (its file says it does not roll): down while it restarts') +
        '\n',
    )
    .join('');
}

/** The end-of-run summary: timings, and failures by class with their task path and log. */
export function formatReport(r: DeployReport): string {
  let s = formatOutages(r.outages);
  for (const f of r.failures) {
    s += `FAILED ${f.path} [${f.class}] ${f.code}: ${f.message}\n`;
    if (f.hint) s += `  hint: ${f.hint}\n`;
    if (f.log) s += `  last log lines:\n${f.log.replace(/^/gm, '    | ')}\n`;
  }
  if (r.aborted) {
    s += r.aborted.observe
      ? 'aborted before step 1 (looking at the nodes)'
      : r.aborted.host
        ? 'aborted in the host preparation, before step 1'
        : `aborted after step ${r.aborted.step}`;
    s += r.aborted.roles.length
      ? `: failure budget exceeded by ${r.aborted.roles.map((t) => `${t.role} (${t.failed}/${t.nodes})`).join(', ')}\n`
      : `: ${r.aborted.reason ?? 'run-once work failed'}\n`;
  }
  const counts = countByClass(r.failures);
  const classes = FAILURE_CLASSES.filter((c) => counts[c] > 0).map((c) => `${counts[c]} ${c}`);
  s += `deploy ${r.ok ? 'done' : 'FAILED'} in ${(r.ms / 1000).toFixed(1)} s: ${r.changes} change(s)`;
  s += `${classes.length ? `, failures: ${classes.join(', ')}` : ''}; run ${r.run}\n`;
  return s;
}

/** `stackctl deploy -i INV [--dry-run] [--resume] [--services a,b] [--steps 1-5] [--concurrency N] [--json]`. */
export function registerDeploy(program: Command): void {
  const cmd = withDeployNodeOptions(inventoryOptions(program.command('deploy'))).description(
    'provision the nodes not yet active, then deploy the plan onto the nodes in steps 1-5 (re-entrant; --dry-run shows what would change)',
  );
  dryRunOption(
    cmd,
    'show per node and container what would be created, recreated (and why) or left alone, act on nothing',
  );
  maxFailPercentOption(
    cmd,
    "abort when a role's failed share of nodes exceeds this",
    DEPLOY_CLI_DEFAULTS.maxFailPercent,
  );
  cmd
    .option('--resume', 'continue the last run after a crash, without repeating completed side effects')
    .option('--services <list>', 'only these services, comma separated')
    .option(
      '--guest-image <dir>',
      `the built guest image that starter images with build: guest upload (stackctl images build guest)`,
      DEFAULT_GUEST_IMAGE_DIR,
    )
    .option('--steps <range>', 'only these steps, e.g. 1-5, 2, 2,4')
    .addOption(
      numberOption(
        '--concurrency <n>',
        'nodes worked on at once within a step',
        RANGE.concurrency,
        DEPLOY_CLI_DEFAULTS.concurrency,
      ),
    )
    .addOption(
      secondsOption(
        '--task-timeout',
        'a run-once task (db sync...) that writes nothing to its log for this long is reported stuck and left running',
        { min: 10, max: RANGE.seconds.max },
        DEPLOY_CLI_DEFAULTS.taskTimeoutS,
      ),
    )
    .option(
      '--allow-workload-stop',
      "recreate a container that runs users' workloads (nova_libvirt: the node's guests) although some still run: they stop with it",
    )
    .option('--json', 'JSON-lines events and report on stdout')
    // a dry run changes nothing: it runs beside a deploy in progress
    .action(
      async (o: DeployOpts) => void (await (o.dryRun ? runDeploy(o) : withRunLock(o.inventory, () => runDeploy(o)))),
    );
}

/** The guest image the plan's step 5 uploads, read and checked; undefined when no starter image is one. */
function guestImageOf(plan: DeployPlan, dir: string | undefined): GuestImageData | undefined {
  const needed = plan.steps.some((st) =>
    st.runOnce.some((w) => w.kind === 'resources' && w.resources.images.some((i) => 'build' in i)),
  );
  if (!needed) return undefined;
  return { ...loadGuestImage(resolve(dir ?? DEFAULT_GUEST_IMAGE_DIR)), rootBytes: GUEST_ROOT_DISK_BYTES };
}
