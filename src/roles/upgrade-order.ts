/**
 * The order in which an upgrade moves services, as the service files declare
 * it: a service moves after the services it `requires`, except those it names
 * in `upgrade.before`, which it moves ahead of instead (OVN's chassis agent
 * before its databases and ovn-northd, though it needs them to deploy). The
 * catalog checks that the two together leave no cycle; the upgrade planner
 * orders its phases by it. Pure.
 */

/** What the order reads of a service file. */
export interface OrderedService {
  readonly name: string;
  readonly step: number;
  readonly requires?: readonly string[];
  readonly upgrade: { readonly before?: readonly string[] };
}

/** One edge of the order: `first` moves before `then`, and why. */
export interface OrderEdge {
  readonly first: string;
  readonly then: string;
  /** `requires`: `then` requires `first`; `before`: `first` names `then` in upgrade.before. */
  readonly why: 'requires' | 'before';
}

/**
 * Every edge of the upgrade order between known services: `requires` reversed (what is required
 * moves first) unless the requirer names it in `upgrade.before`, then each `upgrade.before`.
 */
export function upgradeOrderEdges(services: ReadonlyMap<string, OrderedService>): OrderEdge[] {
  const edges: OrderEdge[] = [];
  for (const s of services.values()) {
    const before = s.upgrade.before ?? [];
    for (const r of s.requires ?? [])
      if (services.has(r) && !before.includes(r)) edges.push({ first: r, then: s.name, why: 'requires' });
    for (const b of before) if (services.has(b)) edges.push({ first: s.name, then: b, why: 'before' });
  }
  return edges;
}

/** A cycle of the order as the edges that close it, or undefined when there is none. */
export function orderCycle(services: ReadonlyMap<string, OrderedService>): OrderEdge[] | undefined {
  const out = new Map<string, OrderEdge[]>();
  for (const e of upgradeOrderEdges(services)) out.set(e.first, [...(out.get(e.first) ?? []), e]);
  const state = new Map<string, 'open' | 'done'>();
  const path: OrderEdge[] = [];
  const visit = (s: string): OrderEdge[] | undefined => {
    state.set(s, 'open');
    for (const e of out.get(s) ?? []) {
      if (state.get(e.then) === 'open') {
        const start = path.findIndex((p) => p.first === e.then);
        return [...path.slice(start < 0 ? path.length : start), e];
      }
      if (state.has(e.then)) continue;
      path.push(e);
      const found = visit(e.then);
      if (found) return found;
      path.pop();
    }
    state.set(s, 'done');
    return undefined;
  };
  for (const s of [...services.keys()].sort()) {
    if (state.has(s)) continue;
    const found = visit(s);
    if (found) return found;
  }
  return undefined;
}

/** `ovn-central -(requires)-> neutron-server -(before)-> ovn-central`. */
export function cycleText(cycle: readonly OrderEdge[]): string {
  return cycle.map((e) => `${e.first} -(${e.why})->`).join(' ') + ` ${cycle[cycle.length - 1]!.then}`;
}

/**
 * For each service, the services that must move after it, directly or through others (unknown to
 * `services` or not: the order is the catalog's, whichever of them an upgrade changes).
 */
export function movesAfter(services: ReadonlyMap<string, OrderedService>): Map<string, Set<string>> {
  const out = new Map<string, string[]>();
  for (const e of upgradeOrderEdges(services)) out.set(e.first, [...(out.get(e.first) ?? []), e.then]);
  const after = new Map<string, Set<string>>();
  const reach = (s: string, seen: Set<string>): void => {
    for (const t of out.get(s) ?? [])
      if (!seen.has(t)) {
        seen.add(t);
        reach(t, seen);
      }
  };
  for (const s of services.keys()) {
    const seen = new Set<string>();
    reach(s, seen);
    after.set(s, seen);
  }
  return after;
}

/**
 * The deploy step a service ranks with when an upgrade breaks ties: its own, or the lowest of the
 * services it moves before (directly or through their own `before`), so that a service pulled ahead
 * of another moves where that one would have, not at its own later step.
 */
export function orderStep(services: ReadonlyMap<string, OrderedService>, name: string): number {
  const seen = new Set<string>([name]);
  const queue = [name];
  let step = services.get(name)!.step;
  while (queue.length) {
    const s = queue.shift()!;
    for (const b of services.get(s)?.upgrade.before ?? []) {
      const t = services.get(b);
      if (!t || seen.has(b)) continue;
      seen.add(b);
      step = Math.min(step, t.step);
      queue.push(b);
    }
  }
  return step;
}
