import { resolve } from 'node:path';
import type { Command } from 'commander';
import { UsageError } from '../core/errors.js';
import { defaultReleasesDir } from '../core/paths.js';
import { loadRelease } from '../roles/release.js';
import { formatUpgradePlan, upgradePlanToJson } from '../upgrade/format.js';
import { checkImagesPresent } from '../upgrade/images.js';
import { PauseAt } from '../upgrade/model.js';
import { planUpgrade } from '../upgrade/planner.js';
import { loadAll } from './context.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { out, printIssues } from './output.js';

/** Options of `stackctl upgrade`. */
export interface UpgradeOpts extends CommonOpts {
  to: string;
  batch?: string;
  pauseAt?: string;
  maxFailPercent?: string;
  canary?: boolean;
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

/** `stackctl upgrade --to TARGET --plan`: print the phases; acts on nothing. */
export async function runUpgrade(o: UpgradeOpts): Promise<void> {
  if (!o.plan || o.resume || o.continue) {
    const which = o.resume ? '--resume' : o.continue ? '--continue' : 'running an upgrade';
    throw new UsageError('E_NOT_IMPLEMENTED', `${which} is not implemented yet: stackctl upgrade only plans (--plan)`, {
      hint: `Run 'stackctl upgrade -i ${o.inventory} --to ${o.to} --plan' to see the phases; nothing is changed.`,
    });
  }
  const pauseAt = o.pauseAt ?? PauseAt.NEVER;
  if (!(Object.values(PauseAt) as string[]).includes(pauseAt)) {
    throw new UsageError('E_OPTION', `--pause-at ${pauseAt} is not one of ${Object.values(PauseAt).join(', ')}`, {
      hint: 'For example --pause-at migration.',
    });
  }
  const all = loadAll(o);
  if (!o.json) printIssues(all.warnings);
  const target = loadRelease(o.releases ? resolve(o.releases) : defaultReleasesDir(), o.to);
  const batch = wholeNumber(o.batch, '--batch');
  const maxFailPercent = wholeNumber(o.maxFailPercent, '--max-fail-percent');
  const plan = planUpgrade({
    inventory: all.loaded.inventory,
    catalog: all.catalog,
    current: all.release,
    target,
    options: {
      pauseAt: pauseAt as PauseAt,
      ...(batch !== undefined ? { batch } : {}),
      ...(maxFailPercent !== undefined ? { maxFailPercent } : {}),
      ...(o.canary ? { canary: true } : {}),
    },
  });
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
}

/** Register `stackctl upgrade`. */
export function registerUpgrade(program: Command): void {
  inventoryOptions(program.command('upgrade'))
    .description('upgrade the cloud to a release manifest: an update (new tags) or a newer OpenStack release')
    .requiredOption('--to <release>', 'target release manifest (images/releases/<release>.yaml)')
    .option('--plan', 'print the phases and act on nothing')
    .option('--batch <n>', "computes upgraded at once (default: the role's update_serial)")
    .option('--pause-at <point>', `stop and wait for --continue: ${Object.values(PauseAt).join(', ')}`, PauseAt.NEVER)
    .option('--max-fail-percent <p>', 'failure budget of the compute batches, percent of their nodes', '0')
    .option('--canary', 'upgrade one compute first, then pause')
    .option('--check-images [registry]', "with --plan: ask the registry (default: the plan's) for every target image")
    .option('--resume', 'continue an interrupted upgrade (not implemented yet)')
    .option('--continue', 'go on after a pause (not implemented yet)')
    .option('--json', 'stable JSON for tools')
    .action(async (opts: UpgradeOpts) => runUpgrade(opts));
}
