/**
 * Version-skew rules of the service files (`upgrade.skew`): which services
 * must move in the same phase, and how far a service may lag the one it is
 * relative to while the upgrade runs. Pure.
 */
import { InputError } from '../core/errors.js';
import type { Catalog } from '../roles/catalog.js';

/**
 * Ordinal of an OpenStack series (`2022.2` -> 4045): OpenStack releases twice
 * a year, so consecutive releases differ by one.
 */
export function seriesOrdinal(series: string): number {
  const m = /^(\d{4})\.([12])$/.exec(series);
  if (!m) {
    throw new InputError('E_SERIES', `'${series}' is not an OpenStack series (YYYY.1 or YYYY.2)`, {
      hint: 'Set series: in the release manifest, e.g. 2022.2 for Zed, 2025.1 for Epoxy.',
      details: { series },
    });
  }
  return Number(m[1]) * 2 + Number(m[2]) - 1;
}

/** Names of the OpenStack series, for messages (a series missing here is named by its number alone). */
export const SERIES_NAMES: Readonly<Record<string, string>> = {
  '2022.1': 'yoga',
  '2022.2': 'zed',
  '2023.1': 'antelope',
  '2023.2': 'bobcat',
  '2024.1': 'caracal',
  '2024.2': 'dalmatian',
  '2025.1': 'epoxy',
  '2025.2': 'flamingo',
};

/** The series of an ordinal (the inverse of seriesOrdinal). */
export function seriesOf(ordinal: number): string {
  const year = Math.floor(ordinal / 2);
  return `${year}.${ordinal - 2 * year + 1}`;
}

/** The series strictly between two ordinals, named where known: `['2023.1 antelope', ...]`. */
export function skippedSeries(from: number, to: number): string[] {
  const out: string[] = [];
  for (let o = from + 1; o < to; o++) {
    const series = seriesOf(o);
    out.push(SERIES_NAMES[series] ? `${series} ${SERIES_NAMES[series]}` : series);
  }
  return out;
}

/**
 * A service that declares a database migration or a version-skew rule is
 * OpenStack code whose rolling-upgrade guarantees (online migrations, RPC
 * versions, compute service versions) hold from one release to the next only.
 * The others (HAProxy, keepalived, memcached, MariaDB, RabbitMQ) carry no such
 * rule, and a fast-forward plan leaves them rolling: stopping them everywhere
 * would take down every API at once and make Galera and RabbitMQ re-form.
 */
export function isVersioned(catalog: Catalog, service: string): boolean {
  const u = catalog.services.get(service)!.upgrade;
  return u.migration !== 'none' || u.skew !== undefined;
}

/**
 * The service a batched service must move with when the target is
 * `releasesAhead` releases ahead: its `relative_to`, when moving after it in
 * batches would leave it further behind than `max_releases_behind`. Undefined
 * when its rule holds (or it has none): it keeps its batches.
 */
export function mustMoveWith(catalog: Catalog, service: string, releasesAhead: number): string | undefined {
  const skew = catalog.services.get(service)!.upgrade.skew;
  return skew?.relative_to !== undefined && releasesAhead > skew.max_releases_behind ? skew.relative_to : undefined;
}

/**
 * A service that may lag (skew max_releases_behind >= 1 relative to another
 * service) or carries batch hooks moves in batches after the control plane.
 */
export function isBatched(catalog: Catalog, service: string): boolean {
  const u = catalog.services.get(service)!.upgrade;
  return (
    ((u.skew?.max_releases_behind ?? 0) >= 1 && u.skew?.relative_to !== undefined) ||
    (u.hooks?.pre_batch?.length ?? 0) > 0 ||
    (u.hooks?.post_batch?.length ?? 0) > 0
  );
}

/**
 * Groups of control-plane services that move in one phase: joined by
 * `upgrade_with`, and by `relative_to` with `max_releases_behind: 0` (a
 * service that may not lag at all moves with the one it follows). Only
 * services in `services` count; groups keep the order of `services`.
 */
export function moveTogether(catalog: Catalog, services: readonly string[]): string[][] {
  const parent = new Map(services.map((s) => [s, s]));
  const find = (s: string): string => {
    let r = s;
    while (parent.get(r) !== r) r = parent.get(r)!;
    parent.set(s, r);
    return r;
  };
  const join = (a: string, b: string): void => {
    if (!parent.has(a) || !parent.has(b)) return;
    const ra = find(a);
    const rb = find(b);
    if (ra !== rb) parent.set(rb, ra);
  };
  for (const s of services) {
    const skew = catalog.services.get(s)!.upgrade.skew;
    for (const w of skew?.upgrade_with ?? []) join(s, w);
    if (skew?.relative_to && skew.max_releases_behind === 0) join(s, skew.relative_to);
  }
  const groups = new Map<string, string[]>();
  for (const s of services) {
    const r = find(s);
    let g = groups.get(r);
    if (!g) groups.set(r, (g = []));
    g.push(s);
  }
  return [...groups.values()];
}

/** One violation of a skew rule at some point of the plan. */
export interface SkewViolation {
  readonly service: string;
  readonly relativeTo: string;
  readonly allowed: number;
  /** Releases the service is behind (negative: ahead). */
  readonly behind: number;
  /** Id of the phase after which it happens. */
  readonly after: string;
}

/**
 * Walk the phases in order: after each, services it moved run the target
 * series. Every service with a `relative_to` rule must be at most
 * `max_releases_behind` releases behind it, and never ahead of it. Each
 * service is reported once, at the first phase that breaks its rule.
 */
export function checkSkew(
  catalog: Catalog,
  services: readonly string[],
  phases: readonly { readonly id: string; readonly services: readonly string[] }[],
  from: number,
  to: number,
): SkewViolation[] {
  const version = new Map(services.map((s) => [s, from]));
  const out: SkewViolation[] = [];
  for (const phase of phases) {
    for (const s of phase.services) version.set(s, to);
    for (const s of services) {
      const skew = catalog.services.get(s)!.upgrade.skew;
      if (!skew?.relative_to || !version.has(skew.relative_to)) continue;
      const behind = version.get(skew.relative_to)! - version.get(s)!;
      if ((behind > skew.max_releases_behind || behind < 0) && !out.some((v) => v.service === s)) {
        out.push({
          service: s,
          relativeTo: skew.relative_to,
          allowed: skew.max_releases_behind,
          behind,
          after: phase.id,
        });
      }
    }
  }
  return out;
}
