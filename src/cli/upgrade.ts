import { resolve } from 'node:path';
import type { Command } from 'commander';
import { ExitCode, InputError, UsageError } from '../core/errors.js';
import { defaultReleasesDir } from '../core/paths.js';
import type { StepRunner } from '../orchestrator/engine.js';
import { NODE_HANDLERS, oneOffRunner } from '../orchestrator/handlers.js';
import {
  JournalFile,
  RunMode,
  checkLegacyUpgrade,
  checkOpen,
  journalFileFor,
  legacyUpgradeJournalFileFor,
  type Replay,
} from '../orchestrator/journal.js';
import { planDeploy, type ContainerWork, type DeployPlan } from '../orchestrator/planner.js';
import { loadRelease } from '../roles/release.js';
import { clusterCheck } from '../status/clusters.js';
import { clientCaFiles, clientContainers, cloudClient } from '../status/openstack-client.js';
import type { UpgradeContext } from '../upgrade/context.js';
import { formatUpgradePlan, upgradePlanToJson } from '../upgrade/format.js';
import { checkImagesPresent } from '../upgrade/images.js';
import { formatPinChanges, unpinnedImages } from '../images/pin.js';
import { PinSource } from '../images/pins.js';
import { planDigest } from '../upgrade/journal.js';
import { PauseAt, type UpgradeOptions, type UpgradePlan } from '../upgrade/model.js';
import { planUpgrade } from '../upgrade/planner.js';
import { PRECHECK_HANDLERS } from '../upgrade/prechecks.js';
import { RunOutcome, formatUpgradeReport, type UpgradeReport } from '../upgrade/report.js';
import { runUpgrade as runSteps } from '../upgrade/run.js';
import { hookHandler } from '../upgrade/run-hooks.js';
import { internalAdminEnv, loadAll, pinImages, planOf, registryAccess, type Loaded } from './context.js';
import { eventSink, nodeSessions } from './node-sessions.js';
import { RANGE, numberOption, secondsOption } from './numbers.js';
import { choiceOption, dryRunOption, inventoryOptions, maxFailPercentOption, type CommonOpts } from './options.js';
import { out, printIssues } from './output.js';
import { runWithProgress } from './progress.js';
import { withRunLock } from './run-lock.js';

export { formatUpgradeReport } from '../upgrade/report.js';

/** Options of `stackctl upgrade`. */
export interface UpgradeOpts extends CommonOpts {
  to: string;
  batch?: number;
  pauseAt?: string;
  maxFailPercent?: number;
  canary?: boolean;
  fastForward?: boolean;
  dryRun?: boolean;
  resume?: boolean;
  continue?: boolean;
  json?: boolean;
  checkImages?: string | boolean;
  /** Seconds. */
  taskTimeout?: number;
  /** Recreate containers whose workloads still run (EngineContext.allowWorkloadStop); this invocation only. */
  allowWorkloadStop?: boolean;
}

/** Seconds a migration or check may write nothing to its log before it is reported stuck. */
const TASK_TIMEOUT_S = 600;

/** Exit statuses of a run (docs/upgrade.md); usage, input and file errors keep theirs (2, 3, 4). */
export const UPGRADE_EXIT = {
  /** Every phase done; the inventory names the target release. */
  DONE: ExitCode.OK,
  /** A node action failed or the batches' failure budget was exceeded: fix, then --resume. */
  FAILED: ExitCode.REMOTE,
  /** Stopped at a declared pause: waiting for --continue. */
  PAUSED: 10,
} as const;

/** Side effects of the command (tests pass their own output sink). */
export interface UpgradeCliDeps {
  readonly write: (text: string) => void;
  /** Draw listr2 progress (a terminal and not --json). */
  readonly tty: boolean;
}

const defaultDeps = (): UpgradeCliDeps => ({ write: out, tty: Boolean(process.stdout.isTTY) });

/** The plan options from the command line, those not given taken from the open run being continued. */
function planOptions(o: UpgradeOpts, previous: UpgradePlan['options'] | undefined): UpgradeOptions {
  const pauseAt = o.pauseAt ?? previous?.pauseAt ?? PauseAt.NEVER;
  if (!(Object.values(PauseAt) as string[]).includes(pauseAt)) {
    throw new UsageError('E_OPTION', `--pause-at ${pauseAt} is not one of ${Object.values(PauseAt).join(', ')}`, {
      hint: 'For example --pause-at migration.',
    });
  }
  const batch = o.batch ?? (typeof previous?.batch === 'number' ? previous.batch : undefined);
  const maxFailPercent = o.maxFailPercent ?? previous?.maxFailPercent;
  const canary = o.canary ?? previous?.canary;
  const fastForward = o.fastForward ?? previous?.fastForward;
  return {
    pauseAt: pauseAt as PauseAt,
    ...(batch !== undefined ? { batch } : {}),
    ...(maxFailPercent !== undefined ? { maxFailPercent } : {}),
    ...(canary ? { canary: true } : {}),
    ...(fastForward ? { fastForward: true } : {}),
  };
}

/** The inventory the target's configs are rendered from: the cloud's, plus the fast-forward settings. */
export function targetInventory(all: Loaded, plan: UpgradePlan): Loaded['loaded']['inventory'] {
  const inv = all.loaded.inventory;
  if (!plan.fastForward) return inv;
  // What the moving services' files ask for during a fast-forward (upgrade.fast_forward_settings).
  const extra: Record<string, string | number | boolean> = {};
  for (const c of plan.changes)
    Object.assign(extra, all.catalog.services.get(c.service)?.upgrade.fast_forward_settings ?? {});
  return { ...inv, cloud: { ...inv.cloud, settings: { ...inv.cloud.settings, ...extra } } };
}

/**
 * `stackctl upgrade --to TARGET`: with --dry-run print the phases and act on
 * nothing; otherwise run them (or go on with the open run: --resume,
 * --continue). Returns the run's report; sets process.exitCode.
 */
export async function runUpgrade(
  o: UpgradeOpts,
  deps: UpgradeCliDeps = defaultDeps(),
): Promise<UpgradeReport | undefined> {
  let all = loadAll(o);
  if (!o.json) printIssues(all.warnings);
  const target = loadRelease(o.releases ? resolve(o.releases) : defaultReleasesDir(), o.to);
  const mode: RunMode = o.continue ? RunMode.CONTINUE : o.resume ? RunMode.RESUME : RunMode.NEW;
  const journalFile = journalFileFor(all.inventoryFile);
  let open: Replay | undefined = o.dryRun ? undefined : JournalFile.last(journalFile);
  if (open && closeFinished(open, all, journalFile, deps, o)) {
    if (mode !== RunMode.NEW) return undefined;
    open = JournalFile.last(journalFile);
  }
  const openUpgrade = open?.command === 'upgrade' && open.run && !open.ended ? open : undefined;
  const continuing =
    mode !== RunMode.NEW && openUpgrade ? (openUpgrade.options as UpgradePlan['options'] | undefined) : undefined;
  if (!o.dryRun && all.secrets && (mode === RunMode.NEW) === !openUpgrade) {
    // A run that goes on pins the images of both releases that have no pin yet (as a first deploy does),
    // so that the two plans compare digests; --dry-run asks no registry and shows unpinned images by tag.
    // (A refused run pins nothing: the journal and secrets checks below answer it first.)
    const fresh = [planOf(all).plan, planOf({ ...all, release: target }).plan].flatMap(unpinnedImages);
    const pinned = await pinImages(all, [...new Set(fresh)], {
      by: PinSource.UPGRADE,
      save: true,
      release: target.name,
    });
    all = pinned.all;
    if (!o.json) deps.write(formatPinChanges(pinned.changes));
  }
  // The deploy plans of the release the cloud runs and of the target (placeholders without secrets).
  const current = planOf(all);
  const currentDeploy = planDeploy(current.effective, all.catalog);
  const draft = planUpgrade({
    inventory: all.loaded.inventory,
    catalog: all.catalog,
    current: all.release,
    target,
    currentDeploy,
    targetDeploy: planDeploy(planOf({ ...all, release: target }).effective, all.catalog),
    options: planOptions(o, continuing),
  });
  // With a fast-forward the target's configs carry the moving services' fast-forward settings.
  const next = planOf({ ...all, release: target, loaded: { ...all.loaded, inventory: targetInventory(all, draft) } });
  const targetDeploy = planDeploy(next.effective, all.catalog);
  const plan = draft.fastForward
    ? planUpgrade({
        inventory: all.loaded.inventory,
        catalog: all.catalog,
        current: all.release,
        target,
        currentDeploy,
        targetDeploy,
        options: planOptions(o, continuing),
      })
    : draft;
  if (o.dryRun) {
    if (o.checkImages !== undefined && o.checkImages !== false) {
      const images = plan.phases.flatMap((p) =>
        p.steps.flatMap((s) => s.actions.flatMap((a) => (a.kind === 'check-images' ? a.images : []))),
      );
      const r = await checkImagesPresent(images, {
        ...(typeof o.checkImages === 'string' ? { address: o.checkImages } : {}),
        release: target.name,
      });
      if (!o.json) process.stderr.write(`${r.present.length} target image(s) present in the registry ${r.registry}\n`);
    }
    out(o.json ? upgradePlanToJson(plan) : formatUpgradePlan(plan));
    return undefined;
  }
  checkLegacyUpgrade(legacyUpgradeJournalFileFor(all.inventoryFile), o.inventory);
  const opening = {
    command: 'upgrade' as const,
    mode,
    target: target.name,
    options: plan.options,
    digest: planDigest(plan),
    inventory: o.inventory,
  };
  // Refuse a second run, or a --resume that does not fit, before anything else is asked for.
  checkOpen(JournalFile.last(journalFile), opening);
  if (!all.secrets) {
    throw new InputError('E_SECRETS_REQUIRED', `upgrade needs the secrets file ${all.secretsFile}`, {
      hint: `Run 'stackctl secrets generate -i ${o.inventory}' first: the target configs cannot be rendered with placeholders.`,
    });
  }
  const journal = new JournalFile(journalFile, opening);
  if (!o.json) {
    for (const w of plan.warnings) deps.write(`warning: ${w}\n`);
    if (mode !== RunMode.NEW) {
      const p = journal.previous;
      deps.write(
        `${mode === RunMode.CONTINUE ? 'continuing' : 'resuming'} run ${journal.run}: ${p.done.size} action(s) done, ` +
          `${p.pending.length} to do again${p.pausedAt ? `, paused before ${p.pausedAt.phase}` : ''}\n`,
      );
    }
  }

  const quietTimeoutMs = (o.taskTimeout ?? TASK_TIMEOUT_S) * 1000;
  const sessions = nodeSessions(all);
  const connect = sessions.connect;
  const visible = deps.tty && !o.json;
  const emit = eventSink(all.inventoryFile, { json: o.json, visible, write: deps.write });
  const credentials = internalAdminEnv(all, current.effective) ?? {};
  const index = (p: DeployPlan): Map<string, ContainerWork> =>
    new Map(p.steps.flatMap((st) => st.nodes.flatMap((n) => n.containers.map((c) => [`${c.node}/${c.name}`, c]))));
  const currentWorks = index(currentDeploy);
  const targetWorks = index(targetDeploy);
  const stop = new AbortController();
  const onSigint = (): void => stop.abort();
  process.once('SIGINT', onSigint);
  const now = Date.now;
  const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
  try {
    const ctx: UpgradeContext = {
      services: all.catalog.provides,
      inventory: all.loaded.inventory,
      inventoryFile: all.inventoryFile,
      registry: registryAccess(all),
      plan,
      current: all.release,
      target,
      currentDeploy,
      targetDeploy,
      targetRendered: next.rendered,
      connect,
      secret: (name) => all.secrets?.services.get(name),
      cloud: cloudClient({
        connect,
        plan: currentDeploy,
        credentials,
        containers: clientContainers(all.catalog.provides),
        caFiles: clientCaFiles(all.catalog.provides),
      }),
      targetWork: (node, container) => targetWorks.get(`${node}/${container}`),
      currentWork: (node, container) => currentWorks.get(`${node}/${container}`),
      oneOff: oneOffRunner({ cloud: targetDeploy.cloud, run: journal.run, connect, now, sleep, quietTimeoutMs }),
      quietTimeoutMs,
      emit,
      now,
      sleep,
      signal: stop.signal,
      run: journal.run,
      backups: new Map(),
      ...(o.allowWorkloadStop ? { allowWorkloadStop: true } : {}),
    };
    const runner: StepRunner = (tasks, n) => runWithProgress(tasks, n, visible);
    const report = await runSteps(ctx, {
      handlers: { ...NODE_HANDLERS, 'cluster-check': clusterCheck, ...PRECHECK_HANDLERS, hook: hookHandler },
      journal,
      mode,
      runner,
    });
    if (o.json) deps.write(JSON.stringify({ kind: 'upgrade.report', ...report }) + '\n');
    else deps.write(formatUpgradeReport(report, `stackctl upgrade -i ${o.inventory} --to ${target.name}`));
    process.exitCode =
      report.outcome === RunOutcome.DONE
        ? UPGRADE_EXIT.DONE
        : report.outcome === RunOutcome.PAUSED
          ? UPGRADE_EXIT.PAUSED
          : UPGRADE_EXIT.FAILED;
    return report;
  } finally {
    process.off('SIGINT', onSigint);
    await sessions.close();
  }
}

/**
 * An upgrade run whose every phase was done writes the target into the inventory, then closes
 * itself; a kill between the two leaves it open with the inventory already naming its target.
 * Such a run is closed here (it had finished), so the next upgrade or deploy is not refused.
 * Returns true when it closed one.
 */
function closeFinished(open: Replay, all: Loaded, journalFile: string, deps: UpgradeCliDeps, o: UpgradeOpts): boolean {
  if (open.command !== 'upgrade' || !open.run || open.ended || open.target !== all.release.name) return false;
  JournalFile.close(journalFile, open.run, true);
  if (!o.json)
    deps.write(
      `upgrade run ${open.run} to ${open.target} had finished (cloud.release already names ${open.target}) ` +
        'but was stopped before it closed its journal: closed now\n',
    );
  return true;
}

/** Register `stackctl upgrade`. */
export function registerUpgrade(program: Command): void {
  const cmd = inventoryOptions(program.command('upgrade'))
    .description('upgrade the cloud to a release manifest: an update (new tags) or a newer OpenStack release')
    .requiredOption('--to <release>', 'target release manifest (images/releases/<release>.yaml)');
  dryRunOption(cmd, 'print the phases and act on nothing');
  maxFailPercentOption(
    cmd,
    "failure budget of the compute batches, percent of their nodes (not given: the open run's, else 0)",
  );
  cmd
    .addOption(
      numberOption('--batch <n>', "computes upgraded at once (default: the role's update_serial)", {
        min: 1,
        max: 10_000,
      }),
    )
    .addOption(
      choiceOption(
        '--pause-at <point>',
        "stop there and wait for --continue (not given: the open run's, else never)",
        Object.values(PauseAt),
      ),
    )
    .option('--canary', 'upgrade one compute first, then pause')
    .option('--fast-forward', "a target that skips releases: each API down for its window, computes inside Nova's")
    .option(
      '--check-images [registry]',
      "with --dry-run: ask the registry (default: the plan's) for every target image",
    )
    .option('--resume', 'go on with the open run after a failure or a crash (actions done are not done again)')
    .option('--continue', 'go on with the open run past the pause it stopped at')
    .addOption(
      secondsOption(
        '--task-timeout',
        'a migration or check that writes nothing to its log for this long is reported stuck and left running',
        { min: 10, max: RANGE.seconds.max },
        TASK_TIMEOUT_S,
      ),
    )
    .option(
      '--allow-workload-stop',
      "recreate a container that runs users' workloads (nova_libvirt: the node's guests) although some still run: they stop with it (not kept for --resume)",
    )
    .option('--json', 'stable JSON for tools')
    // a dry run acts on nothing: it runs beside a run in progress
    .action(
      async (opts: UpgradeOpts) =>
        void (await (opts.dryRun ? runUpgrade(opts) : withRunLock(opts.inventory, () => runUpgrade(opts)))),
    );
}
