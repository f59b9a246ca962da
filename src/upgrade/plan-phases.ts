/**
 * The phases of an upgrade plan, one builder per part, each reading the plan's
 * context (plan-context.ts); planner.ts puts them in order. Pure: a builder
 * returns its phases and what the operator is told about them.
 */
import { InputError } from '../core/errors.js';
import type { HookPoint } from '../inventory/schema.js';
import { rollingSerial } from '../orchestrator/converge.js';
import type { Service } from '../roles/schema.js';
import { resolveHook, serviceHooks, userHooksAt, type ResolvedHook } from './hooks.js';
import {
  PHASE_KINDS,
  PauseAt,
  type MigrationStage,
  type UpgradeAction,
  type UpgradePhase,
  type UpgradeStep,
} from './model.js';
import {
  bootstrap,
  nodesOf,
  nodesOfAny,
  servicesOn,
  svc,
  swapsOn,
  targetImageOf,
  type PlanContext,
} from './plan-context.js';

/** Nodes pulling at once when the inventory does not say (`upgrade.pull.concurrency`). */
export const DEFAULT_PULL_CONCURRENCY = 4;

/** The migration commands a fast-forward window runs, in this order, per migration kind. */
const WINDOW_STAGES: Readonly<Record<Service['upgrade']['migration'], readonly MigrationStage[]>> = {
  none: [],
  online: ['expand', 'migrate', 'contract'],
  offline: ['offline'],
};

/** Phases of one part of the plan, and the warnings they bring, in plan order. */
export interface PlanPart {
  readonly phases: readonly UpgradePhase[];
  readonly warnings: readonly string[];
}

/** One phase and the warnings it brings. */
interface BuiltPhase {
  readonly phase: UpgradePhase;
  readonly warnings: readonly string[];
}

/** The id of the phase that moves a control-plane group. */
export const controlPhaseId = (group: readonly string[]): string => `control:${group.join('+')}`;

/** The compute batches: per role, in inventory order, `--batch` or the role's update_serial nodes at a time. */
export function computeBatches(cx: PlanContext): string[][] {
  const batches: string[][] = [];
  const remaining = nodesOfAny(cx, cx.batched);
  if (cx.options.canary && remaining.length > 1) batches.push(remaining.splice(0, 1));
  for (const role of [...new Set(remaining.map((n) => cx.roleOf.get(n)!))]) {
    const nodes = remaining.filter((n) => cx.roleOf.get(n) === role);
    const size = cx.options.batch ?? cx.catalog.roles.get(role)!.update_serial;
    for (let i = 0; i < nodes.length; i += size) batches.push(nodes.slice(i, i + size));
  }
  return batches;
}

/** Prechecks: the cloud as it runs, the target's images and capacity, the target's own upgrade checks. */
export function precheckPhase(cx: PlanContext, batches: readonly string[][]): UpgradePhase {
  const largest = batches.reduce<readonly string[]>((a, b) => (b.length > a.length ? b : a), []);
  // A fast-forward's target code cannot read the schema it skips (Epoxy's nova-status fails on Zed's
  // tables): its checks run inside each window, once the migrations are done.
  const checks = cx.changed.filter((s) => !cx.windowed.has(s)).flatMap((s) => checksOf(cx, s));
  return phase(
    'precheck',
    'precheck',
    PHASE_KINDS.precheck,
    [],
    [
      step('the cloud as it runs', [
        { kind: 'check-reachable', nodes: cx.nodes },
        ...cx.used.map((s) => ({ kind: 'check-healthy' as const, service: s, nodes: nodesOf(cx, s) })),
        ...cx.used
          .filter((s) => cx.catalog.provides.clusterChecks.has(s))
          .map((s) => ({ kind: 'cluster-check' as const, service: s, nodes: nodesOf(cx, s) })),
      ]),
      step('the target', [
        { kind: 'check-images', images: [...cx.targetRefs].sort() },
        ...(batches.length && serviceHooks(cx.catalog, cx.batched, 'pre_batch').length
          ? [{ kind: 'check-capacity' as const, batch: largest }]
          : []),
      ]),
      ...(checks.length ? [step("the target's own upgrade checks", checks)] : []),
    ],
  );
}

/** The inventory's hooks at pre-upgrade or post-upgrade, on every node: one phase, none without hooks. */
export function hookPhases(cx: PlanContext, point: HookPoint & ('pre-upgrade' | 'post-upgrade')): UpgradePhase[] {
  const hooks = userHooksAt(cx.inventory, point);
  if (!hooks.length) return [];
  return [
    phase(
      point,
      point,
      PHASE_KINDS[point],
      [],
      [
        step(
          `${point} hooks`,
          hooks.map((h) => hookAction(h, point, cx.nodes)),
        ),
      ],
    ),
  ];
}

/** Pre-pull: every target image on every node, before anything stops; a few nodes at a time. */
export function pullPhase(cx: PlanContext): UpgradePhase {
  const pulls = cx.nodes
    .map((node) => ({
      kind: 'pull' as const,
      node,
      images: [...new Set(swapsOn(cx, cx.changed, node).map((w) => w.image))].sort(),
    }))
    .filter((a) => a.images.length > 0);
  const concurrency = cx.inventory.upgrade?.pull?.concurrency ?? DEFAULT_PULL_CONCURRENCY;
  return phase(
    'pull',
    'pull',
    PHASE_KINDS.pull,
    [],
    [
      pulls.length > concurrency
        ? { ...step(`pull, ${concurrency} node(s) at a time`, pulls), concurrency }
        : step('pull', pulls),
    ],
  );
}

/** The control plane, group by group in `requires` order. */
export function controlPlanePhases(cx: PlanContext): PlanPart {
  const built = cx.groups.map((group) => controlPhase(cx, group));
  return { phases: built.map((b) => b.phase), warnings: built.flatMap((b) => b.warnings) };
}

/**
 * A group's phase: a fast-forward window, a data reset (distribution change), or migrations and
 * restarts; first, while the old containers run, the backups its files declare (`upgrade.backup`).
 */
function controlPhase(cx: PlanContext, group: readonly string[]): BuiltPhase {
  const id = controlPhaseId(group);
  let built: BuiltPhase;
  if (group.some((s) => cx.windowed.has(s))) {
    const withIt = [...cx.riders].filter(([, p]) => p === id).map(([s]) => s);
    built = { phase: fastForwardWindow(cx, id, group, withIt), warnings: [] };
  } else if (cx.distroChange && group.some((s) => svc(cx, s).upgrade.distro_change)) {
    built = resetPhase(cx, id, group);
  } else {
    built = migrationPhase(cx, id, group);
  }
  const saves = group.flatMap((s) => declaredBackupSteps(cx, s));
  return {
    ...built,
    phase: {
      ...built.phase,
      title: built.phase.title + orderNote(cx, group),
      steps: [...saves, ...built.phase.steps, ...taskSteps(cx, built.phase.services)],
    },
  };
}

/**
 * The deploy's tasks of the services that moved (db_sync, bootstrap, cell mapping...), once they
 * run the new image, one step each in the target plan's order. A task's input hash includes its
 * container's, so every new image makes it due: the run-once handler runs it as a deploy would
 * (db_sync finds the schema the migrations left current) and records its marker. Without them the
 * first deploy after an upgrade ran them all again and its dry run predicted them as changes.
 */
function taskSteps(cx: PlanContext, services: readonly string[]): UpgradeStep[] {
  return cx.targetDeploy.steps.flatMap((st) =>
    st.runOnce
      .filter((w) => w.kind === 'task' && services.includes(w.service))
      .map((w) =>
        step(`task ${w.service}/${w.name} on ${w.node}, as a deploy runs it, with the new image`, [
          { kind: 'run-once' as const, node: w.node, service: w.service, work: 'task' as const, name: w.name },
        ]),
      ),
  );
}

/**
 * Why a group moves ahead of services it requires (`upgrade.before`), for the printed plan: it moves
 * on every node that runs it, computes included, before the phase of the services it names.
 */
function orderNote(cx: PlanContext, group: readonly string[]): string {
  const ahead = [...new Set(group.flatMap((s) => svc(cx, s).upgrade.before ?? []))].filter(
    (b) => cx.changed.includes(b) && !group.includes(b),
  );
  if (!ahead.length) return '';
  return `, before ${ahead.join(', ')} (upgrade.before), on every node that runs it: ${nodesOfAny(cx, group).join(', ')}`;
}

/**
 * The backups a service's file declares (`upgrade.backup`: OVN's Northbound and Southbound
 * databases...): once, on its first node, in its running old containers, before it moves.
 */
function declaredBackupSteps(cx: PlanContext, s: string): UpgradeStep[] {
  const commands = svc(cx, s).upgrade.backup ?? [];
  if (!commands.length) return [];
  const node = bootstrap(cx, s);
  return [
    step(`back up ${commands.map((c) => c.name).join(', ')} of ${s} on ${node}, before it moves`, [
      { kind: 'backup', service: s, node, databases: [], commands },
    ]),
  ];
}

/**
 * A fast-forward window: the group (and the batched services riding with it) stopped on every node
 * first, so no old process holds pooled connections or locks (a Zed keystone blocks db_sync on a
 * metadata lock); the backups; every migration command once, in order; then the new containers start
 * together and pass their health gate. Old and new code never run side by side.
 */
function fastForwardWindow(
  cx: PlanContext,
  id: string,
  group: readonly string[],
  withIt: readonly string[],
): UpgradePhase {
  const moving = [...group, ...withIt];
  const names = moving.join(', ');
  const nodes = nodesOfAny(cx, moving);
  const steps: UpgradeStep[] = [
    step(
      `stop ${names} on every node: the API${group.length > 1 ? 's are' : ' is'} down from here`,
      moving.flatMap((s) => stopEverywhere(cx, s)),
    ),
    ...group.flatMap((s) => backupSteps(cx, s)),
    ...group.flatMap((s) => WINDOW_STAGES[svc(cx, s).upgrade.migration].flatMap((stage) => migrateSteps(cx, s, stage))),
    ...(group.some((s) => checksOf(cx, s).length)
      ? [
          step(
            `the target's own upgrade checks, on the migrated schema`,
            group.flatMap((s) => checksOf(cx, s, true)),
          ),
        ]
      : []),
    step(
      `start the new ${names} containers on every node`,
      nodes.map((node) => ensure(cx, moving, node, true)),
    ),
    step(
      `health gate: ${names} up on every node (end of the window)`,
      nodes.map((node) => ({ kind: 'health' as const, node, services: servicesOn(cx, moving, node) })),
    ),
    ...riderHookSteps(cx, withIt),
  ];
  const title = `${PHASE_KINDS.control}: ${group.join(', ')}${withIt.length ? `, with ${withIt.join(', ')}` : ''} (fast-forward window)`;
  return phase(id, 'control', title, moving, steps, {
    availability: 'window',
    ...(cx.pauseAt === PauseAt.MIGRATION
      ? { pauseBefore: { reason: `fast-forward window of ${names}: the APIs go down on every node` } }
      : {}),
  });
}

/** The riders' post-batch hooks (nova-compute: nova-up, nova-enable) end the window as they end a batch. */
function riderHookSteps(cx: PlanContext, withIt: readonly string[]): UpgradeStep[] {
  if (!withIt.length) return [];
  const nodes = nodesOfAny(cx, withIt);
  return serviceHooks(cx.catalog, withIt, 'post_batch')
    .map((h) => resolveHook(h, cx.inventory, `the upgrade section of ${withIt.join(', ')}`))
    .map((h) => step(`post-batch hook ${h.name} (${withIt.join(', ')})`, [hookAction(h, 'post-batch', nodes)]));
}

/**
 * A service whose file says its data does not survive a change of distribution (RabbitMQ 3 -> 4
 * refuses the old data and never clusters with the old version): stopped on every node, its
 * volumes emptied, started again, the bootstrap node first when the file asks for it, each start
 * health gated. Old and new versions never run side by side.
 */
function resetPhase(cx: PlanContext, id: string, group: readonly string[]): BuiltPhase {
  const { current, target } = cx;
  const names = group.join(', ');
  const nodes = nodesOfAny(cx, group);
  for (const s of group) checkResetVolumes(s, svc(cx, s));
  const first = group.some((s) => svc(cx, s).bootstrap_first) ? [bootstrap(cx, group[0]!)] : [];
  const rounds = [first, nodes.filter((n) => !first.includes(n))].filter((r) => r.length);
  const steps: UpgradeStep[] = [
    step(
      `stop ${names} on every node and empty ${group.length > 1 ? 'their' : 'its'} data (${current.distro.suite} -> ${target.distro.suite})`,
      group.flatMap((s) => {
        const reset = svc(cx, s).upgrade.distro_change;
        return stopEverywhere(cx, s).map((a) => ({ ...a, ...(reset ? { resetVolumes: reset.reset_volumes } : {}) }));
      }),
    ),
    ...rounds.flatMap((round) => [
      step(
        `start the new ${names} on ${round.join(', ')}`,
        round.map((node) => ensure(cx, servicesOn(cx, group, node), node, true)),
      ),
      step(
        `health gate: ${names} on ${round.join(', ')}`,
        round.map((node) => ({ kind: 'health' as const, node, services: servicesOn(cx, group, node) })),
      ),
    ]),
  ];
  const warning =
    `${names}: the distribution changes (${current.distro.suite} -> ${target.distro.suite}): stopped on every node, ` +
    `data reset (${group.flatMap((s) => svc(cx, s).upgrade.distro_change?.reset_volumes ?? []).join(', ')}), started afresh`;
  return {
    phase: phase(id, 'control', `${PHASE_KINDS.control}: ${names} (distribution change: data reset)`, group, steps, {
      availability: 'all-at-once',
    }),
    warnings: [warning],
  };
}

/** Refuse a reset_volumes entry that names no named volume of the service's containers. */
function checkResetVolumes(s: string, service: Service): void {
  const declared = new Set(
    service.containers.flatMap((c) => (c.volumes ?? []).map((v) => v.split(':')[0]!).filter((v) => !v.startsWith('/'))),
  );
  const unknown = (service.upgrade.distro_change?.reset_volumes ?? []).filter((v) => !declared.has(v));
  if (unknown.length) {
    throw new InputError(
      'E_SERVICE_DEF',
      `service ${s}: upgrade.distro_change.reset_volumes names ${unknown.join(', ')}, which no container of the service mounts`,
      { hint: `Named volumes of ${s}: ${[...declared].join(', ') || '(none)'}; fix roles/services/${s}.yaml.` },
    );
  }
}

/**
 * A group as in any upgrade: each offline migration in its declared window (the API down on every
 * node), then the others expanded, restarted node by node behind HAProxy, migrated and contracted.
 */
function migrationPhase(cx: PlanContext, id: string, group: readonly string[]): BuiltPhase {
  const offline = group.filter((s) => svc(cx, s).upgrade.migration === 'offline');
  const live = group.filter((s) => svc(cx, s).upgrade.migration !== 'offline');
  const windows = offline.flatMap((s) => offlineWindowSteps(cx, s));
  const restart = onlineSteps(cx, live);
  const availability = offline.length
    ? 'window'
    : !restart.rolling
      ? 'all-at-once'
      : restart.singleNode
        ? 'single-node'
        : 'rolling';
  const pause =
    offline.length && cx.pauseAt === PauseAt.MIGRATION
      ? { reason: `offline migration of ${offline.join(', ')}: its API goes down on every node` }
      : undefined;
  return {
    phase: phase(id, 'control', `${PHASE_KINDS.control}: ${group.join(', ')}`, group, [...windows, ...restart.steps], {
      availability,
      ...(pause ? { pauseBefore: pause } : {}),
    }),
    warnings: restart.warnings,
  };
}

/** An offline migration: the declared window in which the service's APIs are down on every node. */
function offlineWindowSteps(cx: PlanContext, s: string): UpgradeStep[] {
  const nodes = nodesOf(cx, s);
  return [
    step(
      `stop ${s} on every node: its API is down from here`,
      nodes.map((node) => ({
        kind: 'stop' as const,
        service: s,
        node,
        containers: svc(cx, s).containers.map((c) => c.name),
      })),
    ),
    ...backupSteps(cx, s),
    ...migrateSteps(cx, s, 'offline'),
    step(
      `start the new ${s} containers on every node`,
      nodes.map((node) => ensure(cx, [s], node, true)),
    ),
    step(
      `health gate: ${s} up on every node (end of the window)`,
      nodes.map((node) => ({ kind: 'health' as const, node, services: [s] })),
    ),
  ];
}

/**
 * Online (or no) migrations: expand, restart node by node behind HAProxy, migrate, contract. With one
 * node to roll over, nothing takes over while that node restarts (an API behind HAProxy, and HAProxy
 * and keepalived themselves: the lab's major upgrade lost the VIP while they did).
 */
function onlineSteps(
  cx: PlanContext,
  live: readonly string[],
): { steps: UpgradeStep[]; rolling: boolean; singleNode: boolean; warnings: string[] } {
  const nodes = nodesOfAny(cx, live);
  const rolling = live.every((s) => svc(cx, s).upgrade.rolling);
  const singleNode = rolling && nodes.length === 1;
  if (!live.length) return { steps: [], rolling, singleNode, warnings: [] };
  const quorum = live.some((s) => svc(cx, s).cluster === 'quorum');
  const serial = rolling
    ? rollingSerial(
        quorum,
        nodes.map((n) => cx.roleOf.get(n)!),
        cx.catalog,
      )
    : nodes.length;
  const restarts: UpgradeStep[] = [];
  for (let i = 0; i < nodes.length; i += serial) {
    const round = nodes.slice(i, i + serial);
    restarts.push(
      step(
        rolling ? `restart on ${round.join(', ')}` : `restart on every node at once`,
        round.flatMap((node) => restartActions(cx, live, node, rolling)),
      ),
    );
  }
  const upgrade = (s: string): Service['upgrade'] => svc(cx, s).upgrade;
  const steps = [
    ...live.flatMap((s) => [
      ...(!upgrade(s).contract?.length && upgrade(s).expand?.length ? backupSteps(cx, s) : []),
      ...migrateSteps(cx, s, 'expand'),
    ]),
    ...restarts,
    ...live.flatMap((s) => migrateSteps(cx, s, 'migrate')),
    ...live
      .filter((s) => upgrade(s).contract?.length)
      .flatMap((s) => [...backupSteps(cx, s), ...migrateSteps(cx, s, 'contract')]),
  ];
  const warnings = singleNode
    ? [`${live.join(', ')} run(s) on one node only (${nodes[0]}): down while it restarts`]
    : [];
  return { steps, rolling, singleNode, warnings };
}

/** One node of a rolling round: drained from HAProxy, its containers swapped, health gated, enabled again. */
function restartActions(cx: PlanContext, live: readonly string[], node: string, rolling: boolean): UpgradeAction[] {
  const here = servicesOn(cx, live, node);
  const frontends = here.flatMap((s) => (svc(cx, s).haproxy ?? []).map((f) => f.name));
  const drain = rolling && frontends.length > 0;
  return [
    ...(drain ? [{ kind: 'drain' as const, node, frontends }] : []),
    ensure(cx, here, node, false),
    { kind: 'health', node, services: here },
    ...(drain ? [{ kind: 'enable' as const, node, frontends }] : []),
  ];
}

/** Computes in batches: pre-batch hooks (evacuation), swap, health gate, post-batch hooks. */
export function computeBatchPhases(cx: PlanContext, batches: readonly string[][]): PlanPart {
  if (!batches.length) return { phases: [], warnings: [] };
  const { batched, inventory } = cx;
  const where = `the upgrade section of ${batched.join(', ')}`;
  const pre = serviceHooks(cx.catalog, batched, 'pre_batch').map((h) => resolveHook(h, inventory, where));
  const post = serviceHooks(cx.catalog, batched, 'post_batch').map((h) => resolveHook(h, inventory, where));
  const preHooks = [...pre, ...userHooksAt(inventory, 'pre-batch').filter((h) => !pre.some((p) => p.name === h.name))];
  const postHooks = [
    ...post,
    ...userHooksAt(inventory, 'post-batch').filter((h) => !post.some((p) => p.name === h.name)),
  ];
  const everyBatched = nodesOfAny(cx, batched);
  const phases = batches.map((nodes, i) => {
    const steps: UpgradeStep[] = [
      // declared backups once, before the first batch moves anything
      ...(i === 0 ? batched.flatMap((s) => declaredBackupSteps(cx, s)) : []),
      ...preHooks.map((h) => step(`pre-batch hook ${h.name}`, [hookAction(h, 'pre-batch', nodes)])),
      step(
        `upgrade ${nodes.join(', ')}`,
        nodes.map((node) => ensure(cx, batched, node, false)),
      ),
      step(
        'health gate',
        nodes.map((node) => ({ kind: 'health' as const, node, services: servicesOn(cx, batched, node) })),
      ),
      ...postHooks.map((h) => step(`post-batch hook ${h.name}`, [hookAction(h, 'post-batch', nodes)])),
    ];
    const pause =
      i === 1 && cx.options.canary
        ? { reason: `canary batch ${batches[0]!.join(', ')} done` }
        : i > 0 && cx.pauseAt === PauseAt.BATCH
          ? { reason: `batch ${i} (${batches[i - 1]!.join(', ')}) done` }
          : undefined;
    return phase(
      `batch:${i + 1}`,
      'batches',
      `${PHASE_KINDS.batches}: batch ${i + 1}/${batches.length}`,
      batched,
      steps,
      {
        ...(pause ? { pauseBefore: pause } : {}),
      },
    );
  });
  // Evacuation (a pre-batch hook) needs hosts outside the batch to move the instances to.
  const warnings = batches
    .map((nodes, i) => ({ nodes, i }))
    .filter(({ nodes }) => pre.length > 0 && nodes.length === everyBatched.length)
    .map(
      ({ nodes, i }) =>
        `batch ${i + 1} holds every host of ${batched.join(', ')} (${nodes.join(', ')}): evacuation has nowhere to go, ` +
        'so its hook refuses unless the hosts are empty',
    );
  return { phases, warnings };
}

/** The engine's action that puts the target containers of `services` in place on a node. */
function ensure(cx: PlanContext, services: readonly string[], node: string, frontendGate: boolean): UpgradeAction {
  return {
    kind: 'ensure',
    node,
    services: servicesOn(cx, services, node),
    containers: swapsOn(cx, services, node),
    frontendGate,
  };
}

/** A service's changed containers stopped, node by node. */
function stopEverywhere(
  cx: PlanContext,
  s: string,
): { kind: 'stop'; service: string; node: string; containers: string[] }[] {
  return nodesOf(cx, s).map((node) => ({
    kind: 'stop' as const,
    service: s,
    node,
    containers: swapsOn(cx, [s], node).map((w) => w.name),
  }));
}

/** The target's own upgrade checks of a service (nova-status upgrade check...), once on its bootstrap node. */
function checksOf(cx: PlanContext, s: string, inWindow = false): UpgradeAction[] {
  const u = svc(cx, s).upgrade;
  return (u.check ?? []).map((command) => ({
    kind: 'check-service' as const,
    service: s,
    node: bootstrap(cx, s),
    image: targetImageOf(cx, s, 0),
    command,
    ...(inWindow ? { inWindow } : {}),
    ...(inWindow && u.fast_forward_waivers?.length ? { waive: u.fast_forward_waivers } : {}),
  }));
}

/** The backup step of a service whose file asks for one and that has databases. */
function backupSteps(cx: PlanContext, s: string): UpgradeStep[] {
  const database = cx.catalog.provides.database?.service;
  const dbNode = database ? cx.nodesOf.get(database)?.[0] : undefined;
  const dbs = (svc(cx, s).databases ?? []).map((d) => d.name);
  return svc(cx, s).upgrade.backup_database && dbs.length
    ? [
        step(`back up the ${s} database`, [
          { kind: 'backup', service: s, node: dbNode ?? bootstrap(cx, s), databases: dbs },
        ]),
      ]
    : [];
}

/** One step per command of a migration stage, run once on the bootstrap node with the target image. */
function migrateSteps(cx: PlanContext, s: string, stage: MigrationStage): UpgradeStep[] {
  return (svc(cx, s).upgrade[stage] ?? []).map((command) =>
    step(`${s}: ${stage} (once, on ${bootstrap(cx, s)})`, [
      {
        kind: 'migrate',
        stage,
        service: s,
        node: bootstrap(cx, s),
        container: svc(cx, s).containers[0]!.name,
        image: targetImageOf(cx, s, 0),
        command,
      },
    ]),
  );
}

/** A hook run at `point` for `nodes` (STACKCTL_BATCH_NODES), on the deploy host or the nodes. */
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

/** A barrier: its actions may run in parallel. */
function step(title: string, actions: readonly UpgradeAction[]): UpgradeStep {
  return { title, actions };
}

/** A phase; a compute batch holds a failure against the budget, every other phase stops the run. */
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
