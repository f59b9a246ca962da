/**
 * The upgrade planner: a pure, deterministic function of inventory, role
 * catalog, current and target release manifests and options. It derives the
 * phases from the service files' `upgrade` sections (migration kind,
 * commands, backup, rolling, skew rules, hooks) and acts on nothing.
 *
 * Order: prechecks -> pre-upgrade hooks -> pre-pull -> control plane, one
 * phase per service or per group of services that must move together, in
 * `requires` order (deploy step, then name, breaks ties) -> computes in
 * batches -> post-upgrade hooks.
 *
 * A target that skips releases (more than one series ahead) is refused unless
 * planned as a fast-forward (`fastForward`): OpenStack's rolling guarantees hold
 * from one release to the next only, so each changed OpenStack service gets an
 * offline window (stopped everywhere, every migration in one go, started), and
 * computes that may not lag that far stop and start inside Nova's window.
 */
import { InputError, StackctlError, UsageError } from '../core/errors.js';
import type { HookPoint, Inventory } from '../inventory/schema.js';
import type { Catalog } from '../roles/catalog.js';
import { containersOf } from '../orchestrator/context.js';
import { rollingSerial } from '../orchestrator/converge.js';
import type { DeployPlan } from '../orchestrator/planner.js';
import type { Release, Service } from '../roles/schema.js';
import { resolveHook, serviceHooks, userHooksAt, type ResolvedHook } from './hooks.js';
import {
  PHASE_KINDS,
  PauseAt,
  UpgradeKind,
  type FastForward,
  type MigrationStage,
  type UpgradeAction,
  type UpgradeOptions,
  type UpgradePhase,
  type UpgradePlan,
  type UpgradeStep,
  type ServiceChange,
  type TargetContainer,
} from './model.js';
import {
  checkSkew,
  isBatched,
  isVersioned,
  moveTogether,
  mustMoveWith,
  seriesOrdinal,
  skippedSeries,
  type SkewViolation,
} from './skew.js';

/** Nodes pulling at once when the inventory does not say (`upgrade.pull.concurrency`). */
export const DEFAULT_PULL_CONCURRENCY = 4;

/** Inputs of the planner. */
export interface UpgradeInput {
  readonly inventory: Inventory;
  readonly catalog: Catalog;
  /** The release the cloud runs (the inventory's cloud.release). */
  readonly current: Release;
  /** The release to move to. */
  readonly target: Release;
  /** The deploy plan of the cloud as it runs (the inventory with the current release). */
  readonly currentDeploy: DeployPlan;
  /** The deploy plan of the target release: what every container becomes. */
  readonly targetDeploy: DeployPlan;
  readonly options?: UpgradeOptions;
}

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

/** The migration commands a fast-forward window runs, in this order, per migration kind. */
const WINDOW_STAGES: Readonly<Record<Service['upgrade']['migration'], readonly MigrationStage[]>> = {
  none: [],
  online: ['expand', 'migrate', 'contract'],
  offline: ['offline'],
};

/** Build the upgrade plan. Throws StackctlError (nothing is touched) when inputs do not allow one. */
export function planUpgrade(input: UpgradeInput): UpgradePlan {
  const { inventory: inv, catalog, current, target } = input;
  const opts = checkOptions(input.options ?? {});
  const pauseAt = opts.pauseAt ?? PauseAt.NEVER;
  const kind = upgradeKind(current, target);
  const fromOrd = seriesOrdinal(current.series);
  const toOrd = seriesOrdinal(target.series);
  const distroChange = current.distro.suite !== target.distro.suite;

  // Where each service runs (plan order), and the services in deploy order: read off the two deploy plans.
  const { currentDeploy, targetDeploy } = input;
  const roleOf = new Map(targetDeploy.steps.flatMap((st) => st.nodes.map((n) => [n.node, n.role] as const)));
  const nodeOrder = inv.nodes.map((n) => n.name).filter((n) => roleOf.has(n));
  const nodesOf = new Map<string, string[]>();
  for (const st of targetDeploy.steps)
    for (const n of st.nodes)
      for (const c of n.containers) {
        const list = nodesOf.get(c.service) ?? [];
        if (!list.includes(n.node)) list.push(n.node);
        nodesOf.set(c.service, list);
      }
  for (const [s, list] of nodesOf)
    nodesOf.set(
      s,
      nodeOrder.filter((n) => list.includes(n)),
    );
  const svc = (name: string): Service => catalog.services.get(name)!;
  const used = [...nodesOf.keys()].sort((a, b) => svc(a).step - svc(b).step || a.localeCompare(b));
  const bootstrap = (s: string): string => nodesOf.get(s)![0]!;

  // What changes: a container of the target plan whose image differs from the current plan's.
  const swapsOf = new Map<string, (TargetContainer & { readonly node: string })[]>(); // service -> on every node
  const tagChanges = new Map<string, Record<string, [string, string]>>();
  const targetRefs = new Set<string>();
  const reconfigured = new Set<string>();
  for (const s of used) {
    for (const w of containersOf(targetDeploy, s)) {
      targetRefs.add(w.image);
      const cur = containersOf(currentDeploy, s, w.node).find((c) => c.name === w.name);
      if (cur?.image === w.image) {
        if (cur.hash !== w.hash) reconfigured.add(s);
        continue;
      }
      const key = w.definition.image;
      const tags = tagChanges.get(s) ?? {};
      tags[key] = [current.images[key]?.tag ?? '(none)', target.images[key]?.tag ?? '(none)'];
      tagChanges.set(s, tags);
      const list = swapsOf.get(s) ?? [];
      list.push({
        node: w.node,
        name: w.name,
        service: s,
        image: w.image,
        hash: w.hash,
        ...(cur ? { from: cur.image } : {}),
      });
      swapsOf.set(s, list);
    }
  }
  const changed = used.filter((s) => swapsOf.has(s));
  const unchanged = used.filter((s) => !swapsOf.has(s));
  const control = changed.filter((s) => !isBatched(catalog, s));
  const groups = orderGroups(catalog, control, moveTogether(catalog, control));
  const releasesAhead = toOrd - fromOrd;
  // What --fast-forward does with this cloud; computed always: a refused skip-level plan names it.
  const ff = fastForwardOf(
    groups,
    changed.filter((s) => isBatched(catalog, s)),
  );
  const fastForward = opts.fastForward === true && releasesAhead > 1;
  const windowed = new Set(fastForward ? ff.windows : []);
  const riders = new Map(fastForward ? ff.riders.map((r) => [r.service, r.phase]) : []);
  const batched = changed.filter((s) => isBatched(catalog, s) && !riders.has(s));
  const swapsOn = (services: readonly string[], node: string): TargetContainer[] =>
    services.flatMap((s) =>
      swapsOf
        .get(s)!
        .filter((w) => w.node === node)
        .map(({ node: _n, ...c }) => c),
    );
  /** The engine's action that puts the target containers of `services` in place on a node. */
  const ensure = (services: readonly string[], node: string, frontendGate: boolean): UpgradeAction => ({
    kind: 'ensure',
    node,
    services: services.filter((s) => nodesOf.get(s)!.includes(node)),
    containers: swapsOn(services, node),
    frontendGate,
  });

  const phases: UpgradePhase[] = [];
  const warnings: string[] = [];
  const phaseOf = new Map<string, string>();
  if (current.distro.suite !== target.distro.suite) {
    warnings.push(
      `the images move from Debian ${current.distro.suite} to ${target.distro.suite}; the nodes' host OS is not upgraded`,
    );
  }
  if (opts.fastForward && !fastForward) {
    warnings.push(
      `--fast-forward ignored: ${target.name} is ${releasesAhead === 0 ? `an update within ${current.openstack}` : `the release after ${current.name}`}, ` +
        'which skips nothing: it is planned as without the flag',
    );
  }
  if (fastForward) warnings.push(...fastForwardWarnings(ff));
  const reconfiguredOnly = [...reconfigured].filter((s) => !swapsOf.has(s));
  if (reconfiguredOnly.length)
    warnings.push(
      `${reconfiguredOnly.join(', ')}: the target configures ${reconfiguredOnly.length > 1 ? 'them' : 'it'} differently with the same image: ` +
        "not restarted by the upgrade; the next 'stackctl deploy' rolls the change",
    );

  // What every outcome of the plan says about the move itself.
  const header = {
    cloud: inv.cloud.name,
    kind,
    from: summary(current),
    to: summary(target),
    releasesAhead,
    ...(fastForward ? { fastForward: ff } : {}),
    options: optionSummary(opts, pauseAt, fastForward),
  };
  if (changed.length === 0) {
    return {
      ...header,
      changes: [],
      unchanged,
      phases: [],
      warnings: [...warnings, `no image of this cloud changes between ${current.name} and ${target.name}`],
    };
  }

  // Compute batches: per role, in inventory order, `--batch` or the role's update_serial nodes at a time.
  const batchNodes = nodeOrder.filter((n) => batched.some((s) => nodesOf.get(s)!.includes(n)));
  const batches: string[][] = [];
  const remaining = [...batchNodes];
  if (opts.canary && remaining.length > 1) batches.push(remaining.splice(0, 1));
  for (const role of [...new Set(remaining.map((n) => roleOf.get(n)!))]) {
    const nodes = remaining.filter((n) => roleOf.get(n) === role);
    const size = opts.batch ?? catalog.roles.get(role)!.update_serial;
    for (let i = 0; i < nodes.length; i += size) batches.push(nodes.slice(i, i + size));
  }
  if (riders.size && !batches.length && (opts.canary || opts.batch !== undefined || pauseAt === PauseAt.BATCH)) {
    warnings.push(
      `--canary, --batch and --pause-at batch have no compute batch to act on: ${[...riders.keys()].join(', ')} ` +
        'move(s) inside the control-plane windows',
    );
  }

  // Prechecks.
  const everyNode = nodeOrder;
  const largest = batches.reduce<string[]>((a, b) => (b.length > a.length ? b : a), []);
  /** The target's own upgrade checks of a service (nova-status upgrade check...), once on its bootstrap node. */
  const checksOf = (s: string, inWindow = false): UpgradeAction[] =>
    (svc(s).upgrade.check ?? []).map((command) => ({
      kind: 'check-service' as const,
      service: s,
      node: bootstrap(s),
      image: targetImageOf(s, 0),
      command,
      ...(inWindow ? { inWindow } : {}),
      ...(inWindow && svc(s).upgrade.fast_forward_waivers?.length
        ? { waive: svc(s).upgrade.fast_forward_waivers! }
        : {}),
    }));
  // A fast-forward's target code cannot read the schema it skips (Epoxy's nova-status fails on Zed's
  // tables): its checks run inside each window, once the migrations are done.
  const checks: UpgradeAction[] = changed.filter((s) => !windowed.has(s)).flatMap((s) => checksOf(s));
  phases.push(
    phase(
      'precheck',
      'precheck',
      PHASE_KINDS.precheck,
      [],
      [
        step('the cloud as it runs', [
          { kind: 'check-reachable', nodes: everyNode },
          ...used.map((s) => ({ kind: 'check-healthy' as const, service: s, nodes: nodesOf.get(s)! })),
          ...used
            .filter((s) => catalog.provides.clusterChecks.has(s))
            .map((s) => ({ kind: 'cluster-check' as const, service: s, nodes: nodesOf.get(s)! })),
        ]),
        step('the target', [
          { kind: 'check-images', images: [...targetRefs].sort() },
          ...(batches.length && serviceHooks(catalog, batched, 'pre_batch').length
            ? [{ kind: 'check-capacity' as const, batch: largest }]
            : []),
        ]),
        ...(checks.length ? [step("the target's own upgrade checks", checks)] : []),
      ],
    ),
  );

  const hookPhase = (point: HookPoint & ('pre-upgrade' | 'post-upgrade')): void => {
    const hooks = userHooksAt(inv, point);
    if (hooks.length) {
      phases.push(
        phase(
          point,
          point,
          PHASE_KINDS[point],
          [],
          [
            step(
              `${point} hooks`,
              hooks.map((h) => hookAction(h, point, everyNode)),
            ),
          ],
        ),
      );
    }
  };
  hookPhase('pre-upgrade');

  // Pre-pull: every target image on every node, before anything stops; a few nodes at a time.
  const pulls = everyNode
    .map((node) => ({
      kind: 'pull' as const,
      node,
      images: [...new Set(swapsOn(changed, node).map((w) => w.image))].sort(),
    }))
    .filter((a) => a.images.length > 0);
  const pullConcurrency = inv.upgrade?.pull?.concurrency ?? DEFAULT_PULL_CONCURRENCY;
  phases.push(
    phase(
      'pull',
      'pull',
      PHASE_KINDS.pull,
      [],
      [
        pulls.length > pullConcurrency
          ? { ...step(`pull, ${pullConcurrency} node(s) at a time`, pulls), concurrency: pullConcurrency }
          : step('pull', pulls),
      ],
    ),
  );

  // Control plane, group by group in requires order.
  const database = catalog.provides.database?.service;
  const dbNode = database ? nodesOf.get(database)?.[0] : undefined;
  /** The backup step of a service whose file asks for one and that has databases. */
  const backupSteps = (s: string): UpgradeStep[] => {
    const dbs = (svc(s).databases ?? []).map((d) => d.name);
    return svc(s).upgrade.backup_database && dbs.length
      ? [
          step(`back up the ${s} database`, [
            { kind: 'backup', service: s, node: dbNode ?? bootstrap(s), databases: dbs },
          ]),
        ]
      : [];
  };
  /** One step per command of a migration stage, run once on the bootstrap node with the target image. */
  const migrateSteps = (s: string, stage: MigrationStage): UpgradeStep[] =>
    (svc(s).upgrade[stage] ?? []).map((command) =>
      step(`${s}: ${stage} (once, on ${bootstrap(s)})`, [
        {
          kind: 'migrate',
          stage,
          service: s,
          node: bootstrap(s),
          container: svc(s).containers[0]!.name,
          image: targetImageOf(s, 0),
          command,
        },
      ]),
    );
  for (const group of groups) {
    const id = `control:${group.join('+')}`;
    if (group.some((s) => windowed.has(s))) {
      const withIt = [...riders].filter(([, p]) => p === id).map(([s]) => s);
      for (const s of [...group, ...withIt]) phaseOf.set(s, id);
      phases.push(fastForwardWindow(id, group, withIt));
      continue;
    }
    for (const s of group) phaseOf.set(s, id);
    if (distroChange && group.some((s) => svc(s).upgrade.distro_change)) {
      phases.push(resetPhase(id, group));
      continue;
    }
    const offline = group.filter((s) => svc(s).upgrade.migration === 'offline');
    const live = group.filter((s) => svc(s).upgrade.migration !== 'offline');
    const steps: UpgradeStep[] = [];
    const backup = (s: string): void => void steps.push(...backupSteps(s));
    const migrate = (s: string, stage: MigrationStage): void => void steps.push(...migrateSteps(s, stage));

    // Offline migrations: the declared window in which the service's APIs are down on every node.
    for (const s of offline) {
      const nodes = nodesOf.get(s)!;
      steps.push(
        step(
          `stop ${s} on every node: its API is down from here`,
          nodes.map((node) => ({
            kind: 'stop' as const,
            service: s,
            node,
            containers: svc(s).containers.map((c) => c.name),
          })),
        ),
      );
      backup(s);
      migrate(s, 'offline');
      steps.push(
        step(
          `start the new ${s} containers on every node`,
          nodes.map((node) => ensure([s], node, true)),
        ),
      );
      steps.push(
        step(
          `health gate: ${s} up on every node (end of the window)`,
          nodes.map((node) => ({ kind: 'health' as const, node, services: [s] })),
        ),
      );
    }

    // Online (or no) migrations: expand, restart node by node behind HAProxy, migrate, contract.
    const liveNodes = everyNode.filter((n) => live.some((s) => nodesOf.get(s)!.includes(n)));
    const rolling = live.every((s) => svc(s).upgrade.rolling);
    // rolling, but with one node to roll over: nothing takes over while that node restarts (an API behind
    // HAProxy, and HAProxy and keepalived themselves: the lab's major upgrade lost the VIP while they did)
    const singleNode = rolling && liveNodes.length === 1;
    if (live.length) {
      for (const s of live) {
        if (!svc(s).upgrade.contract?.length && svc(s).upgrade.expand?.length) backup(s);
        migrate(s, 'expand');
      }
      const nodes = liveNodes;
      const quorum = live.some((s) => svc(s).cluster === 'quorum');
      const serial = rolling
        ? rollingSerial(
            quorum,
            nodes.map((n) => roleOf.get(n)!),
            catalog,
          )
        : nodes.length;
      if (singleNode) {
        warnings.push(`${live.join(', ')} run(s) on one node only (${nodes[0]}): down while it restarts`);
      }
      for (let i = 0; i < nodes.length; i += serial) {
        const round = nodes.slice(i, i + serial);
        const actions: UpgradeAction[] = [];
        for (const node of round) {
          const here = live.filter((s) => nodesOf.get(s)!.includes(node));
          const frontends = here.flatMap((s) => (svc(s).haproxy ?? []).map((f) => f.name));
          if (rolling && frontends.length) actions.push({ kind: 'drain', node, frontends });
          actions.push(ensure(here, node, false));
          actions.push({ kind: 'health', node, services: here });
          if (rolling && frontends.length) actions.push({ kind: 'enable', node, frontends });
        }
        steps.push(step(rolling ? `restart on ${round.join(', ')}` : `restart on every node at once`, actions));
      }
      for (const s of live) migrate(s, 'migrate');
      for (const s of live) {
        if (svc(s).upgrade.contract?.length) {
          backup(s);
          migrate(s, 'contract');
        }
      }
    }

    const availability = offline.length ? 'window' : !rolling ? 'all-at-once' : singleNode ? 'single-node' : 'rolling';
    const pause =
      offline.length && pauseAt === PauseAt.MIGRATION
        ? { reason: `offline migration of ${offline.join(', ')}: its API goes down on every node` }
        : undefined;
    phases.push(
      phase(id, 'control', `${PHASE_KINDS.control}: ${group.join(', ')}`, group, steps, {
        availability,
        ...(pause ? { pauseBefore: pause } : {}),
      }),
    );
  }

  // Computes in batches: pre-batch hooks (evacuation), swap, health gate, post-batch hooks.
  if (batches.length) {
    const pre = serviceHooks(catalog, batched, 'pre_batch').map((h) =>
      resolveHook(h, inv, `the upgrade section of ${batched.join(', ')}`),
    );
    const post = serviceHooks(catalog, batched, 'post_batch').map((h) =>
      resolveHook(h, inv, `the upgrade section of ${batched.join(', ')}`),
    );
    const preUser = userHooksAt(inv, 'pre-batch').filter((h) => !pre.some((p) => p.name === h.name));
    const postUser = userHooksAt(inv, 'post-batch').filter((h) => !post.some((p) => p.name === h.name));
    const everyBatched = new Set(batchNodes);
    batches.forEach((nodes, i) => {
      const id = `batch:${i + 1}`;
      const steps: UpgradeStep[] = [
        ...[...pre, ...preUser].map((h) => step(`pre-batch hook ${h.name}`, [hookAction(h, 'pre-batch', nodes)])),
        step(
          `upgrade ${nodes.join(', ')}`,
          nodes.map((node) => ensure(batched, node, false)),
        ),
        step(
          'health gate',
          nodes.map((node) => ({
            kind: 'health' as const,
            node,
            services: batched.filter((s) => nodesOf.get(s)!.includes(node)),
          })),
        ),
        ...[...post, ...postUser].map((h) => step(`post-batch hook ${h.name}`, [hookAction(h, 'post-batch', nodes)])),
      ];
      const pause =
        i === 1 && opts.canary
          ? { reason: `canary batch ${batches[0]!.join(', ')} done` }
          : i > 0 && pauseAt === PauseAt.BATCH
            ? { reason: `batch ${i} (${batches[i - 1]!.join(', ')}) done` }
            : undefined;
      phases.push(
        phase(id, 'batches', `${PHASE_KINDS.batches}: batch ${i + 1}/${batches.length}`, batched, steps, {
          ...(pause ? { pauseBefore: pause } : {}),
        }),
      );
      if (pre.length && nodes.length === everyBatched.size) {
        warnings.push(
          `batch ${i + 1} holds every host of ${batched.join(', ')} (${nodes.join(', ')}): evacuation has nowhere to go, ` +
            'so its hook refuses unless the hosts are empty',
        );
      }
    });
    for (const s of batched) phaseOf.set(s, 'batch:1');
  }
  hookPhase('post-upgrade');

  // Skew: walk the phases; a service may lag the one it follows only as far as its file allows.
  const moves = phases.map((p) => ({
    id: p.id,
    services: p.kind === 'batches' && p.id !== `batch:${batches.length}` ? [] : p.services,
  }));
  const violations = checkSkew(catalog, used, moves, fromOrd, toOrd);
  // A target that skips releases is refused without --fast-forward even when no skew rule breaks:
  // the rolling plan's online migrations and mixed-version restarts are only meant for N -> N+1.
  const skipRefused = releasesAhead > 1 && !fastForward;
  if (violations.length || skipRefused) {
    throw new SkewRefused(violations, current, target, skipRefused ? ff : undefined);
  }

  const changes: ServiceChange[] = changed.map((s) => ({
    service: s,
    migration: svc(s).upgrade.migration,
    nodes: nodesOf.get(s)!,
    images: tagChanges.get(s)!,
    phase: phaseOf.get(s)!,
  }));
  return {
    ...header,
    changes,
    unchanged,
    phases,
    warnings,
  };

  /**
   * A service whose file says its data does not survive a change of distribution (RabbitMQ 3 -> 4
   * refuses the old data and never clusters with the old version): stopped on every node, its
   * volumes emptied, started again, the bootstrap node first when the file asks for it, each start
   * health gated. Old and new versions never run side by side.
   */
  function resetPhase(id: string, group: readonly string[]): UpgradePhase {
    const names = group.join(', ');
    const nodes = everyNode.filter((n) => group.some((s) => nodesOf.get(s)!.includes(n)));
    for (const s of group) {
      const declared = new Set(
        svc(s).containers.flatMap((c) =>
          (c.volumes ?? []).map((v) => v.split(':')[0]!).filter((v) => !v.startsWith('/')),
        ),
      );
      const unknown = (svc(s).upgrade.distro_change?.reset_volumes ?? []).filter((v) => !declared.has(v));
      if (unknown.length) {
        throw new InputError(
          'E_SERVICE_DEF',
          `service ${s}: upgrade.distro_change.reset_volumes names ${unknown.join(', ')}, which no container of the service mounts`,
          { hint: `Named volumes of ${s}: ${[...declared].join(', ') || '(none)'}; fix roles/services/${s}.yaml.` },
        );
      }
    }
    const first = group.some((s) => svc(s).bootstrap_first) ? [bootstrap(group[0]!)] : [];
    const rounds = [first, nodes.filter((n) => !first.includes(n))].filter((r) => r.length);
    const here = (node: string): string[] => group.filter((s) => nodesOf.get(s)!.includes(node));
    const steps: UpgradeStep[] = [
      step(
        `stop ${names} on every node and empty ${group.length > 1 ? 'their' : 'its'} data (${current.distro.suite} -> ${target.distro.suite})`,
        group.flatMap((s) =>
          nodesOf.get(s)!.map((node) => ({
            kind: 'stop' as const,
            service: s,
            node,
            containers: swapsOn([s], node).map((w) => w.name),
            ...(svc(s).upgrade.distro_change ? { resetVolumes: svc(s).upgrade.distro_change!.reset_volumes } : {}),
          })),
        ),
      ),
      ...rounds.flatMap((round) => [
        step(
          `start the new ${names} on ${round.join(', ')}`,
          round.map((node) => ensure(here(node), node, true)),
        ),
        step(
          `health gate: ${names} on ${round.join(', ')}`,
          round.map((node) => ({ kind: 'health' as const, node, services: here(node) })),
        ),
      ]),
    ];
    warnings.push(
      `${names}: the distribution changes (${current.distro.suite} -> ${target.distro.suite}): stopped on every node, ` +
        `data reset (${group.flatMap((s) => svc(s).upgrade.distro_change?.reset_volumes ?? []).join(', ')}), started afresh`,
    );
    return phase(id, 'control', `${PHASE_KINDS.control}: ${names} (distribution change: data reset)`, group, steps, {
      availability: 'all-at-once',
    });
  }

  /** The target image of a service's n-th container (in its file's order). */
  function targetImageOf(s: string, n: number): string {
    const name = svc(s).containers[n]!.name;
    const w = containersOf(targetDeploy, s).find((c) => c.name === name) ?? containersOf(targetDeploy, s)[0]!;
    return w.image;
  }

  /**
   * What a fast-forward does with this cloud: the groups holding an OpenStack service (a migration or
   * a skew rule) become windows; a batched service that could not lag the target's distance moves
   * inside the window of the service its rule is relative to; the others roll as in any upgrade.
   */
  function fastForwardOf(groups: readonly string[][], lagging: readonly string[]): FastForward {
    const windowGroups = groups.filter((g) => g.some((s) => isVersioned(catalog, s)));
    const ridersOf = lagging.flatMap((s) => {
      const leader = mustMoveWith(catalog, s, releasesAhead);
      const g = windowGroups.find((x) => leader !== undefined && x.includes(leader));
      return g ? [{ service: s, phase: `control:${g.join('+')}` }] : [];
    });
    return {
      skipped: skippedSeries(fromOrd, toOrd),
      windows: windowGroups.flat(),
      riders: ridersOf,
      rolling: groups.filter((g) => !windowGroups.includes(g)).flat(),
    };
  }

  /**
   * A fast-forward window: the group (and the batched services riding with it) stopped on every node
   * first, so no old process holds pooled connections or locks (a Zed keystone blocks db_sync on a
   * metadata lock); the backups; every migration command once, in order; then the new containers start
   * together and pass their health gate. Old and new code never run side by side.
   */
  function fastForwardWindow(id: string, group: readonly string[], withIt: readonly string[]): UpgradePhase {
    const moving = [...group, ...withIt];
    const names = moving.join(', ');
    const nodes = everyNode.filter((n) => moving.some((s) => nodesOf.get(s)!.includes(n)));
    const steps: UpgradeStep[] = [
      step(
        `stop ${names} on every node: the API${group.length > 1 ? 's are' : ' is'} down from here`,
        moving.flatMap((s) =>
          nodesOf.get(s)!.map((node) => ({
            kind: 'stop' as const,
            service: s,
            node,
            containers: swapsOn([s], node).map((w) => w.name),
          })),
        ),
      ),
      ...group.flatMap(backupSteps),
      ...group.flatMap((s) => WINDOW_STAGES[svc(s).upgrade.migration].flatMap((stage) => migrateSteps(s, stage))),
      ...(group.some((s) => checksOf(s).length)
        ? [
            step(
              `the target's own upgrade checks, on the migrated schema`,
              group.flatMap((s) => checksOf(s, true)),
            ),
          ]
        : []),
      step(
        `start the new ${names} containers on every node`,
        nodes.map((node) => ensure(moving, node, true)),
      ),
      step(
        `health gate: ${names} up on every node (end of the window)`,
        nodes.map((node) => ({
          kind: 'health' as const,
          node,
          services: moving.filter((s) => nodesOf.get(s)!.includes(node)),
        })),
      ),
    ];
    // The riders' post-batch hooks (nova-compute: nova-up, nova-enable) end the window as they end a batch.
    const riderNodes = everyNode.filter((n) => withIt.some((s) => nodesOf.get(s)!.includes(n)));
    const riderHooks = withIt.length
      ? serviceHooks(catalog, withIt, 'post_batch').map((h) =>
          resolveHook(h, inv, `the upgrade section of ${withIt.join(', ')}`),
        )
      : [];
    steps.push(
      ...riderHooks.map((h) =>
        step(`post-batch hook ${h.name} (${withIt.join(', ')})`, [hookAction(h, 'post-batch', riderNodes)]),
      ),
    );
    const title = `${PHASE_KINDS.control}: ${group.join(', ')}${withIt.length ? `, with ${withIt.join(', ')}` : ''} (fast-forward window)`;
    return phase(id, 'control', title, moving, steps, {
      availability: 'window',
      ...(pauseAt === PauseAt.MIGRATION
        ? { pauseBefore: { reason: `fast-forward window of ${names}: the APIs go down on every node` } }
        : {}),
    });
  }
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

/** Groups in `requires` order (Kahn), ties broken by deploy step then name. */
function orderGroups(catalog: Catalog, services: readonly string[], groups: readonly string[][]): string[][] {
  const groupOf = new Map<string, number>();
  groups.forEach((g, i) => g.forEach((s) => groupOf.set(s, i)));
  const deps = groups.map((g) => {
    const d = new Set<number>();
    for (const s of g)
      for (const r of catalog.services.get(s)!.requires ?? []) {
        const j = groupOf.get(r);
        if (j !== undefined && !g.includes(r)) d.add(j);
      }
    return d;
  });
  const rank = (i: number): [number, string] => {
    const g = groups[i]!;
    return [Math.min(...g.map((s) => catalog.services.get(s)!.step)), [...g].sort()[0]!];
  };
  const done = new Set<number>();
  const out: string[][] = [];
  while (out.length < groups.length) {
    const ready = groups
      .map((_, i) => i)
      .filter((i) => !done.has(i) && [...deps[i]!].every((d) => done.has(d)))
      .sort((a, b) => rank(a)[0] - rank(b)[0] || rank(a)[1].localeCompare(rank(b)[1]));
    if (!ready.length) {
      throw new StackctlError('E_REQUIRES_CYCLE', `services ${services.join(', ')} require each other in a cycle`, {
        hint: 'Fix requires: in roles/services/.',
      });
    }
    done.add(ready[0]!);
    out.push(groups[ready[0]!]!);
  }
  return out;
}

function hookAction(h: ResolvedHook, point: HookPoint, nodes: readonly string[]): UpgradeAction {
  return {
    kind: 'hook',
    hook: h.name,
    point,
    source: h.source,
    runOn: h.runOn,
    nodes,
    ...(h.command ? { command: h.command } : {}),
  };
}

function step(title: string, actions: readonly UpgradeAction[]): UpgradeStep {
  return { title, actions };
}

function phase(
  id: string,
  kind: UpgradePhase['kind'],
  title: string,
  services: readonly string[],
  steps: readonly UpgradeStep[],
  extra: Pick<UpgradePhase, 'availability' | 'pauseBefore'> = {},
): UpgradePhase {
  return { id, kind, title, services, ...extra, onFailure: kind === 'batches' ? 'budget' : 'stop', steps };
}

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
