/**
 * Printing an upgrade plan: one formatter per action kind (a new kind fails
 * to compile until it can be printed), a human rendering and stable JSON.
 */
import type { UpgradeAction, UpgradePlan } from './model.js';

const list = (xs: readonly string[]): string => xs.join(', ');
const argv = (xs: readonly string[]): string => xs.join(' ');
const swaps = (xs: readonly { container: string; to: string }[]): string =>
  xs.map((w) => `${w.container} -> ${w.to}`).join('; ');

/** One line per action kind. */
export const ACTION_FORMAT: {
  readonly [K in UpgradeAction['kind']]: (a: Extract<UpgradeAction, { kind: K }>) => string;
} = {
  'check-reachable': (a) => `every node answers over SSH and Docker: ${list(a.nodes)}`,
  'check-healthy': (a) => `${a.service} healthy on ${list(a.nodes)}`,
  'check-galera': (a) => `Galera synced, cluster size ${a.nodes.length} (${list(a.nodes)})`,
  'check-rabbitmq': (a) => `RabbitMQ cluster complete, ${a.nodes.length} members (${list(a.nodes)})`,
  'check-images': (a) => `${a.images.length} target image(s) present in the registry: ${list(a.images)}`,
  'check-capacity': (a) => `the other hosts can hold the instances of a batch of ${a.batch.length} (${list(a.batch)})`,
  'check-service': (a) =>
    `${a.node}: ${argv(a.command)} (${a.service}, target image ${a.image})` +
    (a.waive?.length ? `; may fail in this window: ${a.waive.join(', ')}` : ''),
  pull: (a) => `${a.node}: pull ${list(a.images)}`,
  hook: (a) =>
    `hook ${a.hook} (${a.source}${a.command ? `: ${argv(a.command)}` : ''}) on ${a.runOn}, nodes ${list(a.nodes)}`,
  drain: (a) => `${a.node}: drain HAProxy backends ${list(a.frontends)}`,
  swap: (a) => `${a.node}: recreate ${swaps(a.containers)}`,
  stop: (a) =>
    `${a.node}: stop ${list(a.containers)} (${a.service})` +
    (a.resetVolumes?.length ? `, then empty volume(s) ${list(a.resetVolumes)}` : ''),
  start: (a) => `${a.node}: start ${swaps(a.containers)}`,
  health: (a) => `${a.node}: health gate ${list(a.services)}`,
  enable: (a) => `${a.node}: re-enable HAProxy backends ${list(a.frontends)}`,
  backup: (a) => `${a.node}: mariadb-dump ${list(a.databases)} (${a.service})`,
  migrate: (a) => `${a.node}: ${a.stage} ${argv(a.command)} (${a.service}, image ${a.image})`,
};

/** Format any action. */
export function formatAction(a: UpgradeAction): string {
  return (ACTION_FORMAT[a.kind] as (x: UpgradeAction) => string)(a);
}

/** The human rendering of `upgrade --plan`. */
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
  plan.phases.forEach((p, i) => {
    if (p.pauseBefore) s += `  -- pause: ${p.pauseBefore.reason}; run 'stackctl upgrade --continue' to go on\n`;
    const avail = p.availability ? ` [${availabilityText[p.availability]}]` : '';
    s += `${String(i + 1).padStart(2)}. ${p.id}: ${p.title}${avail}\n`;
    p.steps.forEach((st, j) => {
      s += `      ${i + 1}.${j + 1} ${st.title}\n`;
      for (const a of st.actions) s += `            ${formatAction(a)}\n`;
    });
  });
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

const availabilityText = {
  rolling: 'rolling: the API stays up behind HAProxy',
  window: 'migration window: the API is down on every node',
  'single-node': 'one node serves the API: it is down while that node restarts',
  'all-at-once': 'all nodes at once',
} as const;

/** Stable JSON of the plan (declaration order, plan order). */
export function upgradePlanToJson(plan: UpgradePlan): string {
  return JSON.stringify(plan, null, 2) + '\n';
}
