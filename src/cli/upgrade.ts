import { resolve } from 'node:path';
import type { Command } from 'commander';
import { ExitCode, InputError, UsageError } from '../core/errors.js';
import type { StepRunner } from '../orchestrator/executor.js';
import { IDENTITY_ADMIN_PASSWORD, planDeploy, type ContainerWork, type DeployPlan } from '../orchestrator/planner.js';
import { adminCredentials } from '../roles/credentials.js';
import { NODE_HANDLERS, oneOffRunner } from '../upgrade/actions.js';
import { cloudClient } from '../upgrade/cloud.js';
import type { UpgradeContext } from '../upgrade/context.js';
import {
  RunMode,
  UpgradeJournal,
  checkOpen,
  planDigest,
  upgradeJournalFileFor,
  type RunOptions,
} from '../upgrade/journal.js';
import { PRECHECK_HANDLERS } from '../upgrade/prechecks.js';
import { hookHandler } from '../upgrade/run-hooks.js';
import { RunOutcome, runUpgrade as runSteps, type UpgradeReport } from '../upgrade/runner.js';
import { defaultReleasesDir } from '../core/paths.js';
import { loadRelease } from '../roles/release.js';
import { formatUpgradePlan, upgradePlanToJson } from '../upgrade/format.js';
import { checkImagesPresent } from '../upgrade/images.js';
import { PauseAt, type UpgradeOptions, type UpgradePlan } from '../upgrade/model.js';
import { planUpgrade } from '../upgrade/planner.js';
import { loadAll, planOf, type Loaded } from './context.js';
import { eventSink, nodeSessions } from './node-sessions.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { out, printIssues } from './output.js';
import { runWithProgress } from './progress.js';
import { withRunLock } from './run-lock.js';

/** Options of `stackctl upgrade`. */
export interface UpgradeOpts extends CommonOpts {
  to: string;
  batch?: string;
  pauseAt?: string;
  maxFailPercent?: string;
  canary?: boolean;
  fastForward?: boolean;
  plan?: boolean;
  resume?: boolean;
  continue?: boolean;
  json?: boolean;
  checkImages?: string | boolean;
}

function wholeNumber(text: string | undefined, what: string): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n)) {
    throw new UsageError('E_OPTION', `${what} must be a whole number, not '${text}'`, {
      hint: `For example ${what} 2.`,
    });
  }
  return n;
}

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
function planOptions(o: UpgradeOpts, previous: RunOptions | undefined): UpgradeOptions {
  const pauseAt = o.pauseAt ?? previous?.pauseAt ?? PauseAt.NEVER;
  if (!(Object.values(PauseAt) as string[]).includes(pauseAt)) {
    throw new UsageError('E_OPTION', `--pause-at ${pauseAt} is not one of ${Object.values(PauseAt).join(', ')}`, {
      hint: 'For example --pause-at migration.',
    });
  }
  const batch = wholeNumber(o.batch, '--batch') ?? (typeof previous?.batch === 'number' ? previous.batch : undefined);
  const maxFailPercent = wholeNumber(o.maxFailPercent, '--max-fail-percent') ?? previous?.maxFailPercent;
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

/**
 * Settings of the target's configs during a fast-forward, where a service runs them: the target's
 * Nova starts while the computes' service records still carry the old version (they are stopped
 * in the same window), which Nova refuses without this workaround. The next deploy drops it.
 */
const FAST_FORWARD_SETTINGS: Readonly<Record<string, Readonly<Record<string, boolean>>>> = {
  'nova-api': { nova_disable_compute_service_check_for_ffu: true },
};

/** The inventory the target's configs are rendered from: the cloud's, plus the fast-forward settings. */
export function targetInventory(all: Loaded, plan: UpgradePlan): Loaded['loaded']['inventory'] {
  const inv = all.loaded.inventory;
  if (!plan.fastForward) return inv;
  const used = new Set(plan.changes.map((c) => c.service));
  const extra = Object.entries(FAST_FORWARD_SETTINGS)
    .filter(([service]) => used.has(service))
    .reduce<Record<string, boolean>>((acc, [, settings]) => ({ ...acc, ...settings }), {});
  return { ...inv, cloud: { ...inv.cloud, settings: { ...inv.cloud.settings, ...extra } } };
}

/**
 * `stackctl upgrade --to TARGET`: with --plan print the phases and act on
 * nothing; otherwise run them (or go on with the open run: --resume,
 * --continue). Returns the run's report; sets process.exitCode.
 */
export async function runUpgrade(
  o: UpgradeOpts,
  deps: UpgradeCliDeps = defaultDeps(),
): Promise<UpgradeReport | undefined> {
  const all = loadAll(o);
  if (!o.json) printIssues(all.warnings);
  const target = loadRelease(o.releases ? resolve(o.releases) : defaultReleasesDir(), o.to);
  const mode: RunMode = o.continue ? RunMode.CONTINUE : o.resume ? RunMode.RESUME : RunMode.NEW;
  const journalFile = upgradeJournalFileFor(all.inventoryFile);
  const open = o.plan ? undefined : UpgradeJournal.last(journalFile);
  const continuing = mode !== RunMode.NEW && open?.run && !open.ended ? open.options : undefined;
  const plan = planUpgrade({
    inventory: all.loaded.inventory,
    catalog: all.catalog,
    current: all.release,
    target,
    options: planOptions(o, continuing),
  });
  if (o.plan) {
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
  const opening = {
    mode,
    target: target.name,
    options: plan.options,
    digest: planDigest(plan),
    inventory: o.inventory,
  };
  // Refuse a second run, or a --resume that does not fit, before anything else is asked for.
  checkOpen(open ?? UpgradeJournal.last(journalFile), opening);
  if (!all.secrets) {
    throw new InputError('E_SECRETS_REQUIRED', `upgrade needs the secrets file ${all.secretsFile}`, {
      hint: `Run 'stackctl secrets generate -i ${o.inventory}' first: the target configs cannot be rendered with placeholders.`,
    });
  }
  const current = planOf(all);
  const next = planOf({ ...all, release: target, loaded: { ...all.loaded, inventory: targetInventory(all, plan) } });
  const currentDeploy = planDeploy(current.effective, all.catalog);
  const targetDeploy = planDeploy(next.effective, all.catalog);
  const journal = new UpgradeJournal(journalFile, opening);
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

  const sessions = nodeSessions(all);
  const connect = sessions.connect;
  const visible = deps.tty && !o.json;
  const emit = eventSink(all.inventoryFile, { json: o.json, visible, write: deps.write });
  const password = all.secrets.services.get(IDENTITY_ADMIN_PASSWORD);
  const credentials =
    (password &&
      adminCredentials(current.effective, password, {
        iface: 'internal',
        region: all.loaded.inventory.cloud.region ?? 'RegionOne',
      })?.env) ||
    {};
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
      inventory: all.loaded.inventory,
      inventoryFile: all.inventoryFile,
      plan,
      current: all.release,
      target,
      currentDeploy,
      targetDeploy,
      targetRendered: next.rendered,
      connect,
      secret: (name) => all.secrets?.services.get(name),
      cloud: cloudClient({ connect, plan: currentDeploy, credentials }),
      targetWork: (node, container) => targetWorks.get(`${node}/${container}`),
      currentWork: (node, container) => currentWorks.get(`${node}/${container}`),
      oneOff: oneOffRunner({ cloud: targetDeploy.cloud, run: journal.run, connect, now, sleep }),
      emit,
      now,
      sleep,
      signal: stop.signal,
      run: journal.run,
      backups: new Map(),
    };
    const runner: StepRunner = (tasks, n) => runWithProgress(tasks, n, visible);
    const report = await runSteps(ctx, {
      handlers: { ...PRECHECK_HANDLERS, hook: hookHandler, ...NODE_HANDLERS },
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

/** The end-of-run report: phase durations, the pause, failures with hints and logs, backups. */
export function formatUpgradeReport(r: UpgradeReport, command: string): string {
  let s = '\nPHASES\n';
  for (const p of r.phases) {
    if (p.state === 'not-run') continue;
    s += `  ${p.id.padEnd(40)} ${p.state.padEnd(8)} ${p.ms ? `${(p.ms / 1000).toFixed(1)} s` : ''}\n`;
  }
  for (const f of r.failures) {
    s += `FAILED ${f.phase} ${f.action} ${f.subject}: ${f.code}: ${f.message}\n`;
    if (f.hint) s += `  hint: ${f.hint}\n`;
    if (f.log) s += `  last log lines:\n${f.log.replace(/^/gm, '    | ')}\n`;
  }
  for (const n of r.notSwapped) s += `not upgraded: ${n.node} (${n.phase}): ${n.reason}\n`;
  if (r.budget) {
    s +=
      `failure budget: ${r.budget.failedNodes.length}/${r.budget.batchNodes} batch node(s) failed ` +
      `(${r.budget.failedNodes.join(', ')}), allowed ${r.budget.maxFailPercent}%: ` +
      `${r.budget.exceeded ? 'exceeded, the remaining batches were not run' : 'within budget'}\n`;
  }
  for (const b of r.backups) s += `backup: ${b}\n`;
  const took = `${(r.ms / 1000).toFixed(1)} s; run ${r.run}`;
  if (r.outcome === RunOutcome.PAUSED && r.pause) {
    s += `upgrade to ${r.target} PAUSED before ${r.pause.phase}: ${r.pause.reason} (${took})\n`;
    s += `  run '${command} --continue' to go on\n`;
  } else if (r.outcome === RunOutcome.FAILED && r.refused) {
    s += `upgrade to ${r.target} REFUSED by the prechecks, nothing was changed (${took})\n  fix the cause above, then run the upgrade again\n`;
  } else if (r.outcome === RunOutcome.FAILED) {
    s += `upgrade to ${r.target} FAILED (${took})\n  fix the cause above, then run '${command} --resume'\n`;
  } else {
    s += `upgrade to ${r.target} done in ${took}; cloud.release is now ${r.target}\n`;
  }
  return s;
}

/** Register `stackctl upgrade`. */
export function registerUpgrade(program: Command): void {
  inventoryOptions(program.command('upgrade'))
    .description('upgrade the cloud to a release manifest: an update (new tags) or a newer OpenStack release')
    .requiredOption('--to <release>', 'target release manifest (images/releases/<release>.yaml)')
    .option('--plan', 'print the phases and act on nothing')
    .option('--batch <n>', "computes upgraded at once (default: the role's update_serial)")
    .option('--pause-at <point>', `stop and wait for --continue: ${Object.values(PauseAt).join(', ')} (default never)`)
    .option('--max-fail-percent <p>', 'failure budget of the compute batches, percent of their nodes (default 0)')
    .option('--canary', 'upgrade one compute first, then pause')
    .option('--fast-forward', "a target that skips releases: each API down for its window, computes inside Nova's")
    .option('--check-images [registry]', "with --plan: ask the registry (default: the plan's) for every target image")
    .option('--resume', 'go on with the open run after a failure or a crash (actions done are not done again)')
    .option('--continue', 'go on with the open run past the pause it stopped at')
    .option('--json', 'stable JSON for tools')
    // --plan acts on nothing: it runs beside a run in progress
    .action(
      async (opts: UpgradeOpts) =>
        void (await (opts.plan ? runUpgrade(opts) : withRunLock(opts.inventory, () => runUpgrade(opts)))),
    );
}
