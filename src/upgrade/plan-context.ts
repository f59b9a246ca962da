/**
 * What the upgrade planner knows before it writes a phase, built once from its
 * inputs (planner.ts): what runs where, what changes, the options, and what a
 * fast-forward does with this cloud. The phase builders (plan-phases.ts) read
 * it and nothing else. Pure.
 */
import { InputError, StackctlError } from '../core/errors.js';
import type { Inventory } from '../inventory/schema.js';
import type { Catalog } from '../roles/catalog.js';
import { containersOf } from '../orchestrator/context.js';
import type { DeployPlan } from '../orchestrator/planner.js';
import type { Release, Service } from '../roles/schema.js';
import { movesAfter, orderStep } from '../roles/upgrade-order.js';
import { PauseAt, type FastForward, type TargetContainer, type UpgradeOptions } from './model.js';
import { isBatched, isVersioned, moveTogether, mustMoveWith, seriesOrdinal, skippedSeries } from './skew.js';

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

/** A target container and the node it goes on. */
export type NodeSwap = TargetContainer & { readonly node: string };

/** Everything the phases of one plan are built from. */
export interface PlanContext {
  readonly inventory: Inventory;
  readonly catalog: Catalog;
  readonly current: Release;
  readonly target: Release;
  readonly targetDeploy: DeployPlan;

  // The options, checked.
  readonly options: UpgradeOptions;
  readonly pauseAt: PauseAt;

  // The move.
  /** Ordinals of the current and target series. */
  readonly fromOrd: number;
  readonly toOrd: number;
  /** Series the target is ahead of the current (0 for an update). */
  readonly releasesAhead: number;
  /** The images move to another Debian suite. */
  readonly distroChange: boolean;

  // What runs where: read off the target's deploy plan.
  /** node -> its role. */
  readonly roleOf: ReadonlyMap<string, string>;
  /** The nodes of the plan, in inventory order. */
  readonly nodes: readonly string[];
  /** service -> the nodes that run it, in inventory order. */
  readonly nodesOf: ReadonlyMap<string, readonly string[]>;
  /** The services of the cloud, in deploy order (step, then name). */
  readonly used: readonly string[];

  // What changes: a container of the target plan whose image differs from the current plan's.
  /** service -> its target containers whose image changes, on every node. */
  readonly swapsOf: ReadonlyMap<string, readonly NodeSwap[]>;
  /** service -> image key -> [current tag, target tag]. */
  readonly tagChanges: ReadonlyMap<string, Readonly<Record<string, [string, string]>>>;
  /** Every image the target plan runs. */
  readonly targetRefs: ReadonlySet<string>;
  /** Services with a container the target configures differently with the same image. */
  readonly reconfigured: ReadonlySet<string>;
  /** Services with a changed image, in deploy order; `unchanged`: the others. */
  readonly changed: readonly string[];
  readonly unchanged: readonly string[];
  /** The changed control-plane services, in groups that move together, in upgrade order (`requires`, `upgrade.before`). */
  readonly groups: readonly (readonly string[])[];

  // Fast-forward facts.
  /** What --fast-forward does with this cloud: computed always, a refused skip-level plan names it. */
  readonly ff: FastForward;
  /** The plan is a fast-forward one (the flag, and a target that skips releases). */
  readonly fastForward: boolean;
  /** Services planned as a fast-forward window. */
  readonly windowed: ReadonlySet<string>;
  /** Batched service -> the id of the window it moves in. */
  readonly riders: ReadonlyMap<string, string>;
  /** The changed services that move in compute batches (riders excepted). */
  readonly batched: readonly string[];
}

/** Build the context of a plan from its inputs and its checked options. */
export function planContext(input: UpgradeInput, options: UpgradeOptions): PlanContext {
  const { inventory, catalog, current, target, currentDeploy, targetDeploy } = input;
  const fromOrd = seriesOrdinal(current.series);
  const toOrd = seriesOrdinal(target.series);
  const releasesAhead = toOrd - fromOrd;
  const where = placement(inventory, catalog, targetDeploy);
  const changes = changesOf(where.used, current, target, currentDeploy, targetDeploy);
  const changed = where.used.filter((s) => changes.swapsOf.has(s));
  const control = changed.filter((s) => !isBatched(catalog, s));
  refuseBatchedBefore(catalog, changed, control);
  const groups = orderGroups(catalog, control, moveTogether(catalog, control));
  const ff = fastForwardOf(
    catalog,
    groups,
    changed.filter((s) => isBatched(catalog, s)),
    fromOrd,
    toOrd,
  );
  const fastForward = options.fastForward === true && releasesAhead > 1;
  const riders = new Map(fastForward ? ff.riders.map((r) => [r.service, r.phase]) : []);
  return {
    inventory,
    catalog,
    current,
    target,
    targetDeploy,
    options,
    pauseAt: options.pauseAt ?? PauseAt.NEVER,
    fromOrd,
    toOrd,
    releasesAhead,
    distroChange: current.distro.suite !== target.distro.suite,
    ...where,
    ...changes,
    changed,
    unchanged: where.used.filter((s) => !changes.swapsOf.has(s)),
    groups,
    ff,
    fastForward,
    windowed: new Set(fastForward ? ff.windows : []),
    riders,
    batched: changed.filter((s) => isBatched(catalog, s) && !riders.has(s)),
  };
}

/** A service's file. */
export function svc(cx: PlanContext, name: string): Service {
  return cx.catalog.services.get(name)!;
}

/** The nodes that run a service of the plan. */
export function nodesOf(cx: PlanContext, service: string): readonly string[] {
  return cx.nodesOf.get(service)!;
}

/** The node that runs a service's run-once commands: its first. */
export function bootstrap(cx: PlanContext, service: string): string {
  return nodesOf(cx, service)[0]!;
}

/** The services of a list that run on a node. */
export function servicesOn(cx: PlanContext, services: readonly string[], node: string): string[] {
  return services.filter((s) => nodesOf(cx, s).includes(node));
}

/** The nodes, in inventory order, that run any of the services. */
export function nodesOfAny(cx: PlanContext, services: readonly string[]): string[] {
  return cx.nodes.filter((n) => services.some((s) => nodesOf(cx, s).includes(n)));
}

/** The target containers of `services` whose image changes on a node. */
export function swapsOn(cx: PlanContext, services: readonly string[], node: string): TargetContainer[] {
  return services.flatMap((s) =>
    cx.swapsOf
      .get(s)!
      .filter((w) => w.node === node)
      .map(({ node: _n, ...c }) => c),
  );
}

/** The target image of a service's n-th container (in its file's order). */
export function targetImageOf(cx: PlanContext, s: string, n: number): string {
  const name = svc(cx, s).containers[n]!.name;
  const w = containersOf(cx.targetDeploy, s).find((c) => c.name === name) ?? containersOf(cx.targetDeploy, s)[0]!;
  return w.image;
}

/** Where each service runs (inventory order), and the services in deploy order. */
function placement(
  inventory: Inventory,
  catalog: Catalog,
  targetDeploy: DeployPlan,
): Pick<PlanContext, 'roleOf' | 'nodes' | 'nodesOf' | 'used'> {
  const roleOf = new Map(targetDeploy.steps.flatMap((st) => st.nodes.map((n) => [n.node, n.role] as const)));
  const nodes = inventory.nodes.map((n) => n.name).filter((n) => roleOf.has(n));
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
      nodes.filter((n) => list.includes(n)),
    );
  const step = (name: string): number => catalog.services.get(name)!.step;
  const used = [...nodesOf.keys()].sort((a, b) => step(a) - step(b) || a.localeCompare(b));
  return { roleOf, nodes, nodesOf, used };
}

/** The containers whose image changes between the two deploy plans, and those reconfigured only. */
function changesOf(
  used: readonly string[],
  current: Release,
  target: Release,
  currentDeploy: DeployPlan,
  targetDeploy: DeployPlan,
): Pick<PlanContext, 'swapsOf' | 'tagChanges' | 'targetRefs' | 'reconfigured'> {
  const swapsOf = new Map<string, NodeSwap[]>();
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
  return { swapsOf, tagChanges, targetRefs, reconfigured };
}

/**
 * Groups in upgrade order (Kahn): after the services they require (directly or through services
 * this upgrade leaves alone), except those they name in `upgrade.before`, which move after them
 * (src/roles/upgrade-order.ts). Ties are broken by deploy step, a service pulled ahead by `before`
 * ranking with the step of what it precedes, then by name. A group that holds a service and one it
 * must precede is refused: the skew rules that join them contradict the `before`.
 */
function orderGroups(catalog: Catalog, services: readonly string[], groups: readonly string[][]): string[][] {
  const after = movesAfter(catalog.services);
  groups.forEach((g) => {
    for (const a of g)
      for (const b of svcOf(catalog, a).upgrade.before ?? [])
        if (g.includes(b)) {
          throw new InputError(
            'E_UPGRADE_ORDER',
            `${a} must move before ${b} (upgrade.before), but the skew rules move ${g.join(', ')} in one phase`,
            { hint: `Drop ${b} from upgrade.before in roles/services/${a}.yaml, or the skew rule that joins them.` },
          );
        }
  });
  const deps = groups.map((g, i) => {
    const d = new Set<number>();
    groups.forEach((h, j) => {
      if (j !== i && h.some((x) => g.some((s) => after.get(x)?.has(s)))) d.add(j);
    });
    return d;
  });
  const rank = (i: number): [number, string] => {
    const g = groups[i]!;
    return [Math.min(...g.map((s) => orderStep(catalog.services, s))), [...g].sort()[0]!];
  };
  const done = new Set<number>();
  const out: string[][] = [];
  while (out.length < groups.length) {
    const ready = groups
      .map((_, i) => i)
      .filter((i) => !done.has(i) && [...deps[i]!].every((d) => done.has(d)))
      .sort((a, b) => rank(a)[0] - rank(b)[0] || rank(a)[1].localeCompare(rank(b)[1]));
    if (!ready.length) {
      throw new StackctlError(
        'E_REQUIRES_CYCLE',
        `services ${services.join(', ')} require each other in a cycle (with their upgrade.before)`,
        { hint: 'Fix requires: or upgrade.before in roles/services/.' },
      );
    }
    done.add(ready[0]!);
    out.push(groups[ready[0]!]!);
  }
  return out;
}

/**
 * Refuse a batched service (nova-compute) that names a control-plane service in `upgrade.before`:
 * compute batches run after the whole control plane, so the order cannot be kept.
 */
function refuseBatchedBefore(catalog: Catalog, changed: readonly string[], control: readonly string[]): void {
  for (const s of changed.filter((x) => !control.includes(x))) {
    const ahead = (svcOf(catalog, s).upgrade.before ?? []).filter((b) => control.includes(b));
    if (ahead.length)
      throw new InputError(
        'E_UPGRADE_ORDER',
        `${s} moves in compute batches, after the control plane, so it cannot move before ${ahead.join(', ')} (upgrade.before)`,
        {
          hint:
            `Drop ${ahead.join(', ')} from upgrade.before in roles/services/${s}.yaml, or let ${s} move as a ` +
            'control-plane service (no batch hooks, no skew rule that lets it lag).',
        },
      );
  }
}

/** A service's file, from the catalog. */
function svcOf(catalog: Catalog, name: string): Service {
  return catalog.services.get(name)!;
}

/**
 * What a fast-forward does with this cloud: the groups holding an OpenStack service (a migration or
 * a skew rule) become windows; a batched service that could not lag the target's distance moves
 * inside the window of the service its rule is relative to; the others roll as in any upgrade.
 */
function fastForwardOf(
  catalog: Catalog,
  groups: readonly (readonly string[])[],
  lagging: readonly string[],
  fromOrd: number,
  toOrd: number,
): FastForward {
  const windowGroups = groups.filter((g) => g.some((s) => isVersioned(catalog, s)));
  const ridersOf = lagging.flatMap((s) => {
    const leader = mustMoveWith(catalog, s, toOrd - fromOrd);
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
