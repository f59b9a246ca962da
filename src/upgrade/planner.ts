/**
 * The upgrade planner: a pure, deterministic function of inventory, role
 * catalog, current and target release manifests and options. It derives the
 * phases from the service files' `upgrade` sections (migration kind,
 * commands, backup, rolling, skew rules, hooks) and acts on nothing.
 *
 * Order: prechecks -> pre-upgrade hooks -> pre-pull -> control plane, one
 * phase per service or per group of services that must move together, in
 * `requires` order except where a file's `upgrade.before` pulls a service
 * ahead (ovn-controller before ovn-central; deploy step, then name, breaks
 * ties) -> computes in batches -> post-upgrade hooks. Declared backups
 * (`upgrade.backup`) open their service's phase.
 *
 * A target that skips releases (more than one series ahead) is refused unless
 * planned as a fast-forward (`fastForward`): OpenStack's rolling guarantees hold
 * from one release to the next only, so each changed OpenStack service gets an
 * offline window (stopped everywhere, every migration in one go, started), and
 * computes that may not lag that far stop and start inside Nova's window.
 */
import { InputError, UsageError } from '../core/errors.js';
import type { Release } from '../roles/schema.js';
import {
  PauseAt,
  UpgradeKind,
  type FastForward,
  type ServiceChange,
  type UpgradeOptions,
  type UpgradePhase,
  type UpgradePlan,
} from './model.js';
import { nodesOf, planContext, svc, type PlanContext, type UpgradeInput } from './plan-context.js';
import {
  computeBatchPhases,
  computeBatches,
  controlPhaseId,
  controlPlanePhases,
  hookPhases,
  precheckPhase,
  pullPhase,
} from './plan-phases.js';
import { checkSkew, seriesOrdinal, type SkewViolation } from './skew.js';

export { DEFAULT_PULL_CONCURRENCY } from './plan-phases.js';
export type { UpgradeInput } from './plan-context.js';

/**
 * The plan would break a version-skew rule of a service file, or its target
 * skips releases and `--fast-forward` was not asked for (`skip`: what a
 * fast-forward would do with this cloud); nothing was done.
 */
export class SkewRefused extends InputError {
  readonly violations: readonly SkewViolation[];
  constructor(violations: readonly SkewViolation[], current: Release, target: Release, skip?: FastForward) {
    const name = (v: SkewViolation): string =>
      v.behind < 0
        ? `${v.service} would run ${-v.behind} release(s) ahead of ${v.relativeTo}`
        : `${v.service} would run ${v.behind} release(s) behind ${v.relativeTo} (allowed: ${v.allowed})`;
    const ahead = seriesOrdinal(target.series) - seriesOrdinal(current.series);
    const reasons = [
      ...(skip ? [`${target.name} is ${ahead} releases after ${current.name}, ${skipText(skip)}`] : []),
      ...violations.map((v) => `${name(v)} after phase ${v.after}`),
    ];
    super(
      'E_UPGRADE_SKEW',
      `upgrade ${current.name} (${current.openstack} ${current.series}) -> ${target.name} (${target.openstack} ${target.series}) refused: ` +
        reasons.join('; '),
      {
        hint: skip
          ? fastForwardHint(skip)
          : 'Upgrade through the releases in between, one at a time: upgrade.skew in each service file says how far ' +
            'it may lag the service it follows.',
        details: {
          from: { release: current.name, openstack: current.openstack, series: current.series },
          to: { release: target.name, openstack: target.openstack, series: target.series },
          violations: violations.map((v) => ({ ...v })),
          ...(skip ? { releasesAhead: ahead, fastForward: skip } : {}),
        },
      },
    );
    this.violations = violations;
  }
}

/** `skipping 4 (2023.1 antelope, ...)`. */
function skipText(ff: FastForward): string {
  return `skipping ${ff.skipped.length} (${ff.skipped.join(', ')})`;
}

/** Why a target that skips releases is refused, and what `--fast-forward` would do instead. */
function fastForwardHint(ff: FastForward): string {
  const riders = ff.riders.map((r) => `${r.service} stops and starts inside ${r.phase} (no evacuation, no batches)`);
  return (
    "OpenStack's rolling-upgrade guarantees (online migrations, RPC and compute version skew) hold from one " +
    'release to the next only, not across a skip. Either upgrade through the releases in between, one at a ' +
    'time, or plan it with --fast-forward: every API of ' +
    `${ff.windows.join(', ')} is down for its window (stopped on every node, backed up, every migration run ` +
    `once, restarted)${riders.length ? `; ${riders.join('; ')}` : ''}.`
  );
}

/**
 * Build the upgrade plan. Throws StackctlError (nothing is touched) when inputs do not allow one.
 * The parts, in plan order, are built in plan-phases.ts from one context (plan-context.ts).
 */
export function planUpgrade(input: UpgradeInput): UpgradePlan {
  const options = checkOptions(input.options ?? {});
  const kind = upgradeKind(input.current, input.target);
  const cx = planContext(input, options);
  const header = planHeader(cx, kind);
  const warnings = moveWarnings(cx);
  if (cx.changed.length === 0) {
    const none = `no image of this cloud changes between ${cx.current.name} and ${cx.target.name}`;
    return { ...header, changes: [], unchanged: cx.unchanged, phases: [], warnings: [...warnings, none] };
  }
  const batches = computeBatches(cx);
  const precheck = precheckPhase(cx, batches);
  const preUpgrade = hookPhases(cx, 'pre-upgrade');
  const pull = pullPhase(cx);
  const control = controlPlanePhases(cx);
  const compute = computeBatchPhases(cx, batches);
  const postUpgrade = hookPhases(cx, 'post-upgrade');
  const phases = [precheck, ...preUpgrade, pull, ...control.phases, ...compute.phases, ...postUpgrade];
  refuseSkew(cx, phases, batches);
  return {
    ...header,
    changes: serviceChanges(cx),
    unchanged: cx.unchanged,
    phases,
    warnings: [...warnings, ...batchOptionWarnings(cx, batches), ...control.warnings, ...compute.warnings],
  };
}

/** What every outcome of the plan says about the move itself. */
function planHeader(
  cx: PlanContext,
  kind: UpgradeKind,
): Pick<UpgradePlan, 'cloud' | 'kind' | 'from' | 'to' | 'releasesAhead' | 'fastForward' | 'options'> {
  return {
    cloud: cx.inventory.cloud.name,
    kind,
    from: summary(cx.current),
    to: summary(cx.target),
    releasesAhead: cx.releasesAhead,
    ...(cx.fastForward ? { fastForward: cx.ff } : {}),
    options: optionSummary(cx.options, cx.pauseAt, cx.fastForward),
  };
}

/** What the operator is told about the move: another distribution, the fast-forward, reconfigured services. */
function moveWarnings(cx: PlanContext): string[] {
  const { current, target, releasesAhead } = cx;
  const warnings: string[] = [];
  if (cx.distroChange) {
    warnings.push(
      `the images move from Debian ${current.distro.suite} to ${target.distro.suite}; the nodes' host OS is not upgraded`,
    );
  }
  if (cx.options.fastForward && !cx.fastForward) {
    warnings.push(
      `--fast-forward ignored: ${target.name} is ${releasesAhead === 0 ? `an update within ${current.openstack}` : `the release after ${current.name}`}, ` +
        'which skips nothing: it is planned as without the flag',
    );
  }
  if (cx.fastForward) warnings.push(...fastForwardWarnings(cx.ff));
  const reconfiguredOnly = [...cx.reconfigured].filter((s) => !cx.swapsOf.has(s));
  if (reconfiguredOnly.length)
    warnings.push(
      `${reconfiguredOnly.join(', ')}: the target configures ${reconfiguredOnly.length > 1 ? 'them' : 'it'} differently with the same image: ` +
        "not restarted by the upgrade; the next 'stackctl deploy' rolls the change",
    );
  return warnings;
}

/** Batch options that have nothing to act on: every batched service rides in a fast-forward window. */
function batchOptionWarnings(cx: PlanContext, batches: readonly string[][]): string[] {
  const { canary, batch } = cx.options;
  return cx.riders.size && !batches.length && (canary || batch !== undefined || cx.pauseAt === PauseAt.BATCH)
    ? [
        `--canary, --batch and --pause-at batch have no compute batch to act on: ${[...cx.riders.keys()].join(', ')} ` +
          'move(s) inside the control-plane windows',
      ]
    : [];
}

/**
 * Skew: walk the phases; a service may lag the one it follows only as far as its file allows (batched
 * services count as moved after the last batch). A target that skips releases is refused without
 * --fast-forward even when no skew rule breaks: the rolling plan's online migrations and
 * mixed-version restarts are only meant for N -> N+1.
 */
function refuseSkew(cx: PlanContext, phases: readonly UpgradePhase[], batches: readonly string[][]): void {
  const moves = phases.map((p) => ({
    id: p.id,
    services: p.kind === 'batches' && p.id !== `batch:${batches.length}` ? [] : p.services,
  }));
  const violations = checkSkew(cx.catalog, cx.used, moves, cx.fromOrd, cx.toOrd);
  const skipRefused = cx.releasesAhead > 1 && !cx.fastForward;
  if (violations.length || skipRefused) {
    throw new SkewRefused(violations, cx.current, cx.target, skipRefused ? cx.ff : undefined);
  }
}

/** Per changed service: its migration, nodes, tags and the phase that moves it. */
function serviceChanges(cx: PlanContext): ServiceChange[] {
  return cx.changed.map((s) => ({
    service: s,
    migration: svc(cx, s).upgrade.migration,
    nodes: nodesOf(cx, s),
    images: cx.tagChanges.get(s)!,
    phase: phaseIdOf(cx, s),
  }));
}

/** The phase that moves a changed service: the window it rides in, the first batch, or its group's phase. */
function phaseIdOf(cx: PlanContext, s: string): string {
  const rider = cx.riders.get(s);
  if (rider !== undefined) return rider;
  if (cx.batched.includes(s)) return 'batch:1';
  return controlPhaseId(cx.groups.find((g) => g.includes(s))!);
}

/** What the operator is told about a fast-forward plan. */
function fastForwardWarnings(ff: FastForward): string[] {
  return [
    `fast-forward, ${skipText(ff)}: no API stays up through its window; down in turn: ${ff.windows.join(', ')}`,
    ...ff.riders.map(
      (r) =>
        `${r.service} stops on every node with ${r.phase} and starts with it: no evacuation, its instances ` +
        'stay on their hosts and cannot be managed until the window ends',
    ),
    ...(ff.rolling.length
      ? [`${ff.rolling.join(', ')} declare(s) no migration and no skew rule: rolling restart, as in any upgrade`]
      : []),
  ];
}

/** Update within a release or a newer release; refuses a downgrade and manifests that disagree. */
export function upgradeKind(current: Release, target: Release): UpgradeKind {
  const from = seriesOrdinal(current.series);
  const to = seriesOrdinal(target.series);
  if (from === to) {
    if (current.openstack !== target.openstack) {
      throw new InputError(
        'E_RELEASE_MISMATCH',
        `releases ${current.name} and ${target.name} both say series ${target.series} but name different OpenStack releases (${current.openstack}, ${target.openstack})`,
        { hint: 'Fix openstack: or series: in one of the release manifests.' },
      );
    }
    return UpgradeKind.UPDATE;
  }
  if (to < from) {
    throw new InputError(
      'E_UPGRADE_DOWNGRADE',
      `${target.name} (${target.openstack} ${target.series}) is older than the running ${current.name} (${current.openstack} ${current.series})`,
      { hint: 'Downgrades are not supported: restore from the backups taken before the upgrade instead.' },
    );
  }
  return UpgradeKind.MAJOR;
}

/** Refuse options out of range, naming the flag. */
function checkOptions(o: UpgradeOptions): UpgradeOptions {
  if (o.batch !== undefined && (!Number.isInteger(o.batch) || o.batch < 1)) {
    throw new UsageError('E_OPTION', `--batch ${o.batch} is not a positive whole number`, {
      hint: 'For example --batch 2.',
    });
  }
  if (o.maxFailPercent !== undefined && !(o.maxFailPercent >= 0 && o.maxFailPercent <= 100)) {
    throw new UsageError('E_OPTION', `--max-fail-percent ${o.maxFailPercent} is not between 0 and 100`, {
      hint: 'For example --max-fail-percent 10.',
    });
  }
  if (o.pauseAt !== undefined && !Object.values(PauseAt).includes(o.pauseAt)) {
    throw new UsageError(
      'E_OPTION',
      `--pause-at ${String(o.pauseAt)} is not one of ${Object.values(PauseAt).join(', ')}`,
      {
        hint: 'For example --pause-at migration.',
      },
    );
  }
  return o;
}

/** A release as the plan names it. */
function summary(r: Release): UpgradePlan['from'] {
  return { release: r.name, openstack: r.openstack, series: r.series, suite: r.distro.suite };
}

/** The options the plan was made with; `fastForward` is whether the plan is one (the flag may be ignored). */
function optionSummary(o: UpgradeOptions, pauseAt: PauseAt, fastForward: boolean): UpgradePlan['options'] {
  return {
    batch: o.batch ?? 'role',
    pauseAt,
    maxFailPercent: o.maxFailPercent ?? 0,
    canary: o.canary ?? false,
    fastForward,
  };
}
