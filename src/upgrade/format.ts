/**
 * Printing an upgrade plan: one formatter per action kind (a new kind fails
 * to compile until it can be printed), a human rendering and stable JSON.
 */
import { AVAILABILITY_TEXT, NODE_ACTION_FORMAT, formatPhases } from '../orchestrator/format.js';
import type { UpgradeAction, UpgradePlan } from './model.js';

const list = (xs: readonly string[]): string => xs.join(', ');
const argv = (xs: readonly string[]): string => xs.join(' ');

/** One line per action kind. */
export const ACTION_FORMAT: {
  readonly [K in UpgradeAction['kind']]: (a: Extract<UpgradeAction, { kind: K }>) => string;
} = {
  ...NODE_ACTION_FORMAT,
  'check-reachable': (a) => `every node answers over SSH and Docker: ${list(a.nodes)}`,
  'check-healthy': (a) => `${a.service} healthy on ${list(a.nodes)}`,
  'check-images': (a) => `${a.images.length} target image(s) present in the registry: ${list(a.images)}`,
  'check-capacity': (a) => `the other hosts can hold the instances of a batch of ${a.batch.length} (${list(a.batch)})`,
  'check-service': (a) =>
    `${a.node}: ${argv(a.command)} (${a.service}, target image ${a.image})` +
    (a.waive?.length ? `; may fail in this window: ${a.waive.join(', ')}` : ''),
  hook: (a) =>
    `hook ${a.hook} (${a.source}${a.command ? `: ${argv(a.command)}` : ''}) on ${a.runOn}, nodes ${list(a.nodes)}`,
};

/** Format any action. */
export function formatAction(a: UpgradeAction): string {
  return (ACTION_FORMAT[a.kind] as (x: UpgradeAction) => string)(a);
}

/** The human rendering of `upgrade --dry-run`. */
export function formatUpgradePlan(plan: UpgradePlan): string {
  const { from, to } = plan;
  const kind =
    plan.kind === 'update'
      ? `update within OpenStack ${from.openstack}`
      : `major upgrade, ${plan.releasesAhead} release(s) ahead${plan.fastForward ? ', fast-forward' : ''}`;
  let s = `Upgrade of cloud ${plan.cloud} (${kind}): ${from.release} (${from.openstack} ${from.series}, ${from.suite}) -> ${to.release} (${to.openstack} ${to.series}, ${to.suite})\n`;
  const o = plan.options;
  s +=
    `Options: batch ${o.batch === 'role' ? "the role's update_serial" : o.batch}, pause at ${o.pauseAt}, ` +
    `max fail ${o.maxFailPercent}%, canary ${o.canary ? 'yes' : 'no'}${o.fastForward ? ', fast-forward' : ''}\n`;
  if (plan.fastForward) s += fastForwardText(plan.fastForward);
  for (const w of plan.warnings) s += `warning: ${w}\n`;
  s += '\nCHANGES\n';
  for (const c of plan.changes) {
    const tags = Object.entries(c.images)
      .map(([k, [a, b]]) => `${k} ${a} -> ${b}`)
      .join(', ');
    s += `  ${c.service.padEnd(16)} ${c.migration.padEnd(8)} ${c.phase.padEnd(44)} ${tags}\n`;
  }
  if (!plan.changes.length) s += '  (nothing changes)\n';
  s += `Unchanged (left running): ${plan.unchanged.length ? list(plan.unchanged) : '(none)'}\n`;
  s += '\nPHASES\n';
  s += formatPhases(plan.phases, formatAction);
  return s;
}

/** The fast-forward lines of the plan's header: what is skipped, what goes down, what rides along. */
function fastForwardText(ff: NonNullable<UpgradePlan['fastForward']>): string {
  let s =
    `Fast-forward: skips ${ff.skipped.length} release(s) (${list(ff.skipped)}); the rolling guarantees hold ` +
    `from one release to the next only, so every API is down for its window: ${list(ff.windows)}\n`;
  for (const r of ff.riders) s += `  ${r.service} stops and starts inside ${r.phase} (no evacuation, no batches)\n`;
  if (ff.rolling.length) s += `  rolling as in any upgrade (no migration, no skew rule): ${list(ff.rolling)}\n`;
  return s;
}

/** How a phase's APIs fare, in words (the engine's table). */
export const availabilityText = AVAILABILITY_TEXT;

/** Stable JSON of the plan (declaration order, plan order). */
export function upgradePlanToJson(plan: UpgradePlan): string {
  return JSON.stringify(plan, null, 2) + '\n';
}
