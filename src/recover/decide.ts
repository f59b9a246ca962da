/**
 * The decisions of a Galera recovery, pure: from the members' state
 * (members.ts), whether a primary component still runs, whether a cluster
 * may be founded, or which member restarts the cluster. What Galera's own
 * documentation, kolla-ansible's mariadb_recovery and OpenStack-Ansible's
 * galera_force_bootstrap do, with the lessons of Launchpad bug 1682153 (a
 * member stopped cleanly long ago has a positive seqno in grastate.dat, the
 * crashed ones -1: their real position is in InnoDB, never guessed):
 * - a member that cannot be read may hold the newest data: refuse, unless
 *   the operator names it as left out;
 * - members that hold different cluster UUIDs are different clusters: refuse;
 * - no member holds data: nothing to recover (only a first deploy founds);
 * - the member with the highest seqno restarts the cluster; every other one
 *   joins it (IST, or SST for a member with less or no data).
 */
import { BACKUP_DIR } from '../core/backups.js';
import { RemoteError } from '../core/errors.js';
import { isClusterUuid } from './grastate.js';
import { GALERA, isUp, knownPosition, type KnownPosition, type MemberState } from './members.js';

/** What the members' state calls for. */
export type Assessment =
  /** A primary component runs on `primary`: the members in `down` only have to join it. */
  | { readonly kind: 'primary'; readonly primary: readonly string[]; readonly down: readonly string[] }
  /** No member holds any data and every member was read (a first deploy): `node` founds the cluster. */
  | { readonly kind: 'found'; readonly node: string }
  /** No primary component; `holders` hold data: the most advanced of them restarts the cluster. */
  | { readonly kind: 'recover'; readonly holders: readonly string[]; readonly empty: readonly string[] };

/** The inputs of a decision. */
export interface AssessInput {
  /** Every member of the plan, in plan order. */
  readonly members: readonly MemberState[];
  /** The service's bootstrap node (the plan's first MariaDB node): founds a new cluster, wins ties. */
  readonly bootstrapNode: string;
  /** Members the operator leaves out (`--without`): neither read for a decision nor started. */
  readonly without: ReadonlySet<string>;
  /** A deploy may found a cluster when no member holds data; `stackctl recover galera` never does. */
  readonly mayFound: boolean;
  /** The recover command line for hints, e.g. `stackctl recover galera -i site.yaml`. */
  readonly recoverCommand: string;
}

/** The member that restarts the cluster, and the ones that join it. */
export interface Choice {
  readonly node: string;
  readonly position: KnownPosition;
  /** Every other member taken into account, in plan order. */
  readonly join: readonly string[];
}

const names = (ms: readonly { node: string }[]): string => ms.map((m) => m.node).join(', ');

/** The members taken into account. */
function considered(i: AssessInput): MemberState[] {
  return i.members.filter((m) => !i.without.has(m.node));
}

/** The cluster UUID a member's data belongs to, if it says one. */
export function clusterOf(m: MemberState): string | undefined {
  for (const u of [m.server?.stateUuid, m.disk?.grastate?.uuid]) if (isClusterUuid(u)) return u;
  return undefined;
}

/** Refuse when members hold data of different clusters. */
function checkOneCluster(members: readonly MemberState[], extra: ReadonlyMap<string, string | undefined>): void {
  const byUuid = new Map<string, string[]>();
  for (const m of members) {
    const u = extra.get(m.node) ?? clusterOf(m);
    if (isClusterUuid(u)) byUuid.set(u, [...(byUuid.get(u) ?? []), m.node]);
  }
  if (byUuid.size > 1) {
    const parts = [...byUuid].map(([u, ns]) => `${ns.join(', ')} ${ns.length > 1 ? 'hold' : 'holds'} cluster ${u}`);
    throw new RemoteError('E_GALERA_UUID_MISMATCH', `the Galera members disagree on the cluster: ${parts.join('; ')}`, {
      hint:
        "They are different clusters: find out which one holds the cloud's data and leave the others out with " +
        '--without (a member left out keeps its data until it is wiped and joins by a state transfer).',
      details: { clusters: Object.fromEntries(byUuid) },
    });
  }
}

/** What the members' state calls for; throws a RemoteError when no safe way exists. */
export function assess(i: AssessInput): Assessment {
  const members = considered(i);
  const primary = members.filter((m) => m.server?.clusterStatus === 'Primary');
  if (primary.length) {
    checkOneCluster(primary, new Map());
    return {
      kind: 'primary',
      primary: primary.map((m) => m.node),
      down: members.filter((m) => !isUp(m)).map((m) => m.node),
    };
  }
  const unreadable = members.filter((m) => m.error !== undefined);
  if (unreadable.length) {
    // SSH and Docker errors name their node already
    const list = unreadable.map((m) => (m.error!.startsWith(m.node) ? m.error! : `${m.node}: ${m.error}`)).join('; ');
    const them = unreadable.length > 1 ? 'they are' : 'it is';
    throw new RemoteError(
      'E_GALERA_MEMBER_UNREACHABLE',
      `no Galera member runs a primary component, and ${names(unreadable)} could not be read: ${list}. ` +
        'A member that cannot be read may hold the newest data, so no member restarts or founds the cluster',
      {
        hint:
          `Bring ${names(unreadable)} back: once every member is up again, Galera restores the cluster by itself ` +
          `(or run '${i.recoverCommand}'). If ${them} lost for good: '${i.recoverCommand} --without ` +
          `${unreadable.map((m) => m.node).join(',')}'.`,
        details: { unreachable: unreadable.map((m) => m.node) },
      },
    );
  }
  const holders = members.filter((m) => m.data);
  if (!holders.length) {
    if (i.mayFound && i.without.size === 0 && members.some((m) => m.node === i.bootstrapNode))
      return { kind: 'found', node: i.bootstrapNode };
    const out = i.without.size ? `, ${[...i.without].join(', ')} left out` : '';
    throw new RemoteError(
      'E_GALERA_NO_DATA',
      `no Galera member holds data (${names(members)} checked${out}): there is no cluster to recover, and a recovery never founds a new, empty one`,
      {
        hint:
          'A first deploy founds the cluster (stackctl deploy). If the data of every member was lost, restore a ' +
          `backup first (an upgrade dumps the databases before its migrations into ${BACKUP_DIR}/<run>/ ` +
          'on the database node; the upgrade report names each file).',
      },
    );
  }
  checkOneCluster(holders, new Map());
  return {
    kind: 'recover',
    holders: holders.map((m) => m.node),
    empty: members.filter((m) => !m.data).map((m) => m.node),
  };
}

/**
 * The most advanced member (highest seqno; ties: Galera's safe_to_bootstrap mark, then the service's
 * bootstrap node, then plan order), from each holder's position (`positions` fills in what the
 * member's state does not say, e.g. InnoDB's after a crash). Throws when a position is unknown.
 */
export function choose(i: AssessInput, positions: ReadonlyMap<string, KnownPosition | undefined>): Choice {
  const members = considered(i);
  const holders = members.filter((m) => m.data);
  const known = holders.map((m) => ({ m, p: positions.get(m.node) ?? knownPosition(m) }));
  const unknown = known.filter((k) => k.p === undefined);
  if (unknown.length) {
    throw new RemoteError(
      'E_GALERA_POSITION_UNKNOWN',
      `the Galera position of ${names(unknown.map((k) => k.m))} is unknown: grastate.dat says seqno -1 and InnoDB gave none`,
      {
        hint:
          `See what 'mariadbd --wsrep-recover' logged on ${names(unknown.map((k) => k.m))} (the container's command ` +
          `with the argument '${GALERA.recoverArgument}'). If that member's data is damaged, leave it out with --without: it joins ` +
          'by a full state transfer once the cluster runs.',
      },
    );
  }
  checkOneCluster(holders, new Map(known.map((k) => [k.m.node, k.p!.uuid])));
  const order = (node: string): number => members.findIndex((m) => m.node === node);
  const best = [...known].sort(
    (a, b) =>
      b.p!.seqno - a.p!.seqno ||
      Number(b.m.disk?.grastate?.safeToBootstrap === true) - Number(a.m.disk?.grastate?.safeToBootstrap === true) ||
      Number(b.m.node === i.bootstrapNode) - Number(a.m.node === i.bootstrapNode) ||
      order(a.m.node) - order(b.m.node),
  )[0]!;
  return {
    node: best.m.node,
    position: best.p!,
    join: members.filter((m) => m.node !== best.m.node).map((m) => m.node),
  };
}

/** `bootstrap ctl-1 (seqno 1234), then join ctl-0, ctl-2`. */
export function describeChoice(c: Choice): string {
  return `bootstrap ${c.node} (seqno ${c.position.seqno})${c.join.length ? `, then join ${c.join.join(', ')}` : ''}`;
}
