/**
 * The deploy's guard of the Galera clusters (the engine's `DeployGuard`,
 * src/orchestrator/context.ts), for the server container of each cluster of
 * several members: the services whose file's `cluster_check` is of kind
 * galera, and the container it names. The engine calls it:
 * - `started`: after the deploy created or started a member (the container
 *   handler, before the health gate);
 * - `unchanged`: for a member the deploy leaves alone but found unwell
 *   (restarting, or its health check failing), in place of the health gate.
 * A member that is down is explained by the cluster's own state
 * (recover/galera.ts): no primary component, who holds which position,
 * start.sh's and Galera's last words; where it is safe the deploy restarts
 * the cluster itself:
 * - every member was read, none runs a primary component, and the data
 *   agrees on one cluster: the most advanced member restarts it and the
 *   others join (what `stackctl recover galera` does);
 * - no member holds any data (a first deploy): the bootstrap node's start.sh,
 *   which never founds a cluster on its own, gets its founding permit;
 * - otherwise the deploy fails with the reason and the recover command to run.
 * Calls are serialised per cluster, so members checked at once trigger one recovery.
 * Other containers are not its business: Docker's health gate alone.
 */
import { RemoteError, StackctlError, messageOf } from '../core/errors.js';
import type { StackctlEvent } from '../core/events.js';
import type { DeployGuard, NodeAccess } from '../orchestrator/context.js';
import { waitHealthy } from '../orchestrator/health.js';
import type { ContainerWork, DeployPlan } from '../orchestrator/planner.js';
import type { ClusterCheck } from '../roles/schema.js';
import { assess } from './decide.js';
import { recoverGalera, readMembers, waitSynced, grantFounding, type GaleraCluster } from './galera.js';
import type { GaleraAccess, MemberState } from './members.js';
import { describeMember } from './format.js';

/** Tuning of the guard. */
export const GUARD_DEFAULTS = {
  /** Lines of log carried in a failure. */
  logLines: 50,
  pollMs: 500,
  /**
   * How long a cluster whose members all came back gets to restore its primary component by
   * itself (pc.recovery) before the deploy restarts it.
   */
  settleMs: 60_000,
  settlePollMs: 3000,
} as const;

/** Side effects of the guard. */
export interface GuardDeps {
  readonly connect: (node: string) => GaleraAccess;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  readonly emit?: (e: StackctlEvent) => void;
  /** The inventory file, for the recover command in hints. */
  readonly inventoryFile?: string;
  /** The deploy run, named in a founding permit (start.sh logs it). */
  readonly run?: string;
}

/** The services whose file's `cluster_check` is of kind galera, and that check (catalog order). */
export function galeraServices(checks: ReadonlyMap<string, ClusterCheck>): [string, ClusterCheck][] {
  return [...checks].filter(([, c]) => c.kind === 'galera');
}

/**
 * The Galera clusters of a deploy plan: for each Galera service (`galeraServices`), the container its
 * `cluster_check` names on two members or more.
 */
export function galeraClusters(plan: DeployPlan, checks: ReadonlyMap<string, ClusterCheck>): GaleraCluster[] {
  const out: GaleraCluster[] = [];
  for (const [service, check] of galeraServices(checks)) {
    const members: ContainerWork[] = [];
    for (const st of plan.steps)
      for (const nw of st.nodes)
        for (const c of nw.containers) if (c.service === service && c.name === check.container) members.push(c);
    if (members.length < 2) continue; // one server runs without replication (wsrep_on = OFF)
    // The bootstrap node is the one the others wait for (`after`), else the first in plan order.
    const bootstrapNode = members.find((m) => m.after)?.after ?? members[0]!.node;
    out.push({ cloud: plan.cloud, service, members, query: check.command, bootstrapNode });
  }
  return out;
}

/**
 * The command that recovers a Galera service, for hints: `--service` only when the service files
 * declare more than one.
 */
export function recoverCommandOf(
  inventoryFile: string | undefined,
  service: string,
  checks: ReadonlyMap<string, ClusterCheck>,
): string {
  const several = galeraServices(checks).length > 1;
  return `stackctl recover galera -i ${inventoryFile ?? '<inventory>'}${several ? ` --service ${service}` : ''}`;
}

/** The part of the guard for the members of one cluster. */
interface ClusterGuard {
  readonly covers: (w: ContainerWork) => boolean;
  readonly unchanged: (access: NodeAccess, w: ContainerWork) => Promise<number>;
  readonly started: (w: ContainerWork) => Promise<number>;
}

/** The guard of one deploy run: `checks` are the service files' (the catalog's `provides.clusterChecks`). */
export function deployGuard(plan: DeployPlan, checks: ReadonlyMap<string, ClusterCheck>, deps: GuardDeps): DeployGuard {
  const guards = galeraClusters(plan, checks).map((c) =>
    clusterGuard(c, recoverCommandOf(deps.inventoryFile, c.service, checks), deps),
  );
  const guardOf = (w: ContainerWork): ClusterGuard | undefined => guards.find((g) => g.covers(w));

  return {
    covers: (w) => guardOf(w) !== undefined,

    async unchanged(access, w) {
      const g = guardOf(w);
      if (g) return g.unchanged(access, w);
      await waitHealthy(access, w, {
        now: deps.now,
        sleep: deps.sleep,
        pollMs: GUARD_DEFAULTS.pollMs,
        logLines: GUARD_DEFAULTS.logLines,
        restartsFail: false,
      });
      return 0;
    },

    async started(_access, w) {
      return guardOf(w)?.started(w) ?? 0;
    },
  };
}

/** The guard of one Galera cluster's members. */
function clusterGuard(cluster: GaleraCluster, recoverCommand: string, deps: GuardDeps): ClusterGuard {
  let queue: Promise<unknown> = Promise.resolve();
  /** Run `f` after every earlier call: members checked at once trigger one recovery. */
  const serial = <T>(f: () => Promise<T>): Promise<T> => {
    const p = queue.then(f, f);
    queue = p.catch(() => undefined);
    return p;
  };
  /** A line of the recovery as a deploy event, on the member it is about (`ctl-1: starting <container>`). */
  const say = (node: string, line: string): void => {
    const m = /^(\S+): (.*)$/.exec(line);
    const about = m && cluster.members.some((w) => w.node === m[1]) ? m : undefined;
    deps.emit?.({
      kind: 'deploy.change',
      step: cluster.members[0]?.step ?? 0,
      node: about ? about[1]! : node,
      object: 'cluster',
      name: 'galera',
      action: 'recovery',
      detail: about ? about[2]! : line,
      ms: 0,
    });
  };
  const isMember = (w: ContainerWork): boolean =>
    cluster.members.some((m) => m.node === w.node && m.name === w.name && m.service === w.service);

  /** One line per member: its container, disk, position and last log line. */
  const diagnosis = (members: readonly MemberState[]): string =>
    members.map((m) => `  ${describeMember(m)}`).join('\n');

  /**
   * No member is up: wait for pc.recovery when every member with data is running again and holds
   * its last primary view; then decide and act. Resolves to the changes made.
   */
  const ensureCluster = (trigger: string): Promise<number> =>
    serial(async () => {
      const c = cluster;
      let members = await readMembers(c, deps);
      if (members.some((m) => m.server?.clusterStatus === 'Primary')) return 0;
      const settling = (ms: readonly MemberState[]): boolean =>
        ms.every((m) => m.error === undefined) &&
        ms.some((m) => m.data) &&
        ms
          .filter((m) => m.data)
          .every((m) => m.disk?.gvwstate && ['running', 'restarting'].includes(m.container.status));
      const until = deps.now() + GUARD_DEFAULTS.settleMs;
      while (settling(members) && deps.now() < until) {
        await deps.sleep(GUARD_DEFAULTS.settlePollMs);
        members = await readMembers(c, deps);
        if (members.some((m) => m.server?.clusterStatus === 'Primary')) return 0;
      }
      let a: ReturnType<typeof assess>;
      try {
        a = assess({
          members,
          bootstrapNode: c.bootstrapNode,
          without: new Set(),
          mayFound: true,
          recoverCommand,
        });
      } catch (err) {
        throw withDiagnosis(err, members);
      }
      if (a.kind === 'primary') return 0;
      if (a.kind === 'found') {
        if (a.node !== trigger) return 0; // the bootstrap node founds; this member joins it once it answers
        await grantFounding(
          c,
          a.node,
          `deploy run ${deps.run ?? '?'}: no member holds data (${members.map((m) => m.node).join(', ')} read)`,
          {
            ...deps,
            say: (l) => say(a.node, l),
          },
        );
        return 1;
      }
      try {
        const r = await recoverGalera(c, { ...deps, say: (l) => say(trigger, l) }, { mayFound: true, recoverCommand });
        return r.changed ? 1 : 0;
      } catch (err) {
        throw withDiagnosis(err, members);
      }
    });

  /** The error, its message followed by every member's state. */
  const withDiagnosis = (err: unknown, members: readonly MemberState[]): StackctlError => {
    const e = err instanceof StackctlError ? err : undefined;
    const log = members.flatMap((m) => m.log.map((l) => `${m.node}: ${l}`)).join('\n');
    return new RemoteError(e?.code ?? 'E_GALERA_DOWN', `Galera: ${messageOf(err)}\n${diagnosis(members)}`, {
      ...(e?.hint ? { hint: e.hint } : {}),
      details: { ...(e?.details ?? {}), ...(log ? { log } : {}) },
    });
  };

  /** A Galera member that is not up: the cluster's diagnosis, a recovery where safe, then this member's own wait. */
  const galeraMember = async (w: ContainerWork): Promise<number> => {
    const made = await ensureCluster(w.node);
    try {
      await waitSynced(cluster, w.node, deps);
    } catch (err) {
      throw withDiagnosis(err, await readMembers(cluster, deps));
    }
    return made;
  };

  return {
    covers: isMember,

    async unchanged(access, w) {
      const info = await access.docker.inspectContainer(w.name);
      if (info?.state.health === 'healthy') return 0;
      const hc = w.definition.healthcheck;
      if (info?.state.running && info.state.status !== 'restarting' && hc) {
        const r = await access.docker
          .exec(w.name, hc.test, { timeoutMs: (hc.timeout_s ?? 5) * 1000 })
          .catch(() => ({ code: -1 }));
        if (r.code === 0) return 0;
      }
      return galeraMember(w);
    },

    async started(w) {
      // A member that joins a running primary component needs nothing; otherwise the cluster decides.
      const members = await readMembers(cluster, deps);
      if (members.some((m) => m.server?.clusterStatus === 'Primary')) return 0;
      return ensureCluster(w.node);
    },
  };
}
