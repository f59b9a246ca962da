/**
 * Galera recovery, shared by `stackctl recover galera` and the deploy
 * (guard.ts): read every member (members.ts), decide (decide.ts), then act:
 * - a primary component runs: start the members that are stopped (they join it);
 * - nothing anywhere and every member read (a first deploy): hand the
 *   bootstrap node's waiting start.sh its founding permit;
 * - a full outage: stop every member's container, read each position
 *   (grastate.dat, or InnoDB's through `mariadbd --wsrep-recover`), mark the
 *   most advanced member safe_to_bootstrap, start it (start.sh restarts the
 *   cluster from it), wait until it is Primary and Synced, then start the
 *   others one at a time, each joining by IST or SST.
 * With `dryRun` nothing is stopped, started or written: positions that need a
 * stopped server are read only on members whose container is not running.
 */
import { RemoteError, TimeoutError, messageOf } from '../core/errors.js';
import { mapLimit } from '../core/concurrency.js';
import type { ContainerWork } from '../orchestrator/planner.js';
import { healthDeadlineMs } from '../orchestrator/state.js';
import { assess, choose, clusterOf, describeChoice, type Assessment, type Choice } from './decide.js';
import {
  GALERA,
  SAFE_TO_BOOTSTRAP_SCRIPT,
  askServer,
  dataVolumeOf,
  explainingLines,
  isUp,
  knownPosition,
  readMember,
  readPosition,
  type GaleraAccess,
  type KnownPosition,
  type MemberState,
} from './members.js';

/** Tuning of a recovery. */
export const RECOVER_DEFAULTS = {
  /**
   * Seconds a container gets to shut mariadbd down cleanly. No member serves anything (none is in a
   * primary component), and a server waiting for one may not stop before its wait ends: the position
   * of a member killed is read from InnoDB all the same.
   */
  stopTimeoutS: 20,
  /** How long start.sh of an empty member gets to reach its wait (peers pinged first, 3 s each). */
  waitingLineMs: 90_000,
  pollMs: 2000,
  /** Members read at once. */
  concurrency: 8,
} as const;

/** A Galera cluster of the plan. */
export interface GaleraCluster {
  readonly cloud: string;
  /** The service whose file's `cluster_check` is of kind galera. */
  readonly service: string;
  /** The Galera container of every member (the one its `cluster_check` names), in plan order. */
  readonly members: readonly ContainerWork[];
  /** The argv of its `cluster_check`, run in a member's container: the server's wsrep status. */
  readonly query: readonly string[];
  /** The service's bootstrap node. */
  readonly bootstrapNode: string;
}

/** Side effects of a recovery (CONVENTIONS.md 8). */
export interface RecoverDeps {
  readonly connect: (node: string) => GaleraAccess;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  /** One line of progress. */
  readonly say: (line: string) => void;
}

/** Options of a recovery. */
export interface RecoverOptions {
  /** Members left out: not read for the decision, never started. */
  readonly without?: ReadonlySet<string>;
  readonly dryRun?: boolean;
  /** A deploy may found the cluster when no member holds data. */
  readonly mayFound?: boolean;
  /** The recover command line for hints. */
  readonly recoverCommand: string;
  /** Text of a founding permit (logged by start.sh): who decided and why. */
  readonly permitText?: string;
}

/** What a recovery found and did. */
export interface RecoverReport {
  readonly members: readonly MemberState[];
  /** Positions read beyond the members' state (InnoDB's), by node. */
  readonly positions: ReadonlyMap<string, KnownPosition | undefined>;
  readonly assessment: Assessment;
  /** For a full outage: the member chosen (undefined in a dry run that could not read every position). */
  readonly choice?: Choice;
  /** One line: what was (or, in a dry run, would be) done. */
  readonly summary: string;
  /** Whether anything was changed on the nodes. */
  readonly changed: boolean;
}

/** Read every member of the cluster (in parallel). */
export async function readMembers(cluster: GaleraCluster, deps: Pick<RecoverDeps, 'connect'>): Promise<MemberState[]> {
  return mapLimit(cluster.members, RECOVER_DEFAULTS.concurrency, async (w) => {
    let access: GaleraAccess;
    try {
      access = deps.connect(w.node);
    } catch (err) {
      return {
        node: w.node,
        error: messageOf(err),
        container: { status: 'missing', restartCount: 0 },
        data: false,
        log: [],
      };
    }
    return readMember(access, w, cluster.query);
  });
}

/** The member's work item. */
function workOf(cluster: GaleraCluster, node: string): ContainerWork {
  const w = cluster.members.find((m) => m.node === node);
  if (!w) throw new Error(`no Galera member ${node}`);
  return w;
}

/** Wait until the member is Primary and Synced; the error names its state and log. */
export async function waitSynced(
  cluster: GaleraCluster,
  node: string,
  deps: Pick<RecoverDeps, 'connect' | 'now' | 'sleep'>,
): Promise<void> {
  const w = workOf(cluster, node);
  const access = deps.connect(node);
  const deadline = deps.now() + healthDeadlineMs(w);
  let last: MemberState['server'];
  for (;;) {
    last = await askServer(access.docker, w.name, cluster.query);
    if (last && isUp({ server: last })) return;
    if (deps.now() > deadline) {
      const log = await explainingLines(access.docker, w.name);
      throw new TimeoutError(
        'E_GALERA_RECOVERY_TIMEOUT',
        `${node}: Galera not Primary and Synced within ${Math.round(healthDeadlineMs(w) / 1000)} s ` +
          `(${last ? `${last.clusterStatus ?? '?'}, ${last.localState ?? '?'}` : 'the server does not answer'})`,
        {
          hint: `Its log says why (docker logs ${w.name} on ${node}); the members already up keep running.`,
          details: { node, log: log.join('\n') },
        },
      );
    }
    await deps.sleep(RECOVER_DEFAULTS.pollMs);
  }
}

/** Start a member's container (created by a deploy; a missing one cannot be started here). */
async function startMember(cluster: GaleraCluster, node: string, deps: RecoverDeps): Promise<void> {
  const w = workOf(cluster, node);
  const access = deps.connect(node);
  const info = await access.docker.inspectContainer(w.name);
  if (!info) {
    throw new RemoteError('E_GALERA_CONTAINER_MISSING', `${node}: there is no ${w.name} container to start`, {
      hint: 'Run stackctl deploy: it creates the container, which then joins the running cluster.',
    });
  }
  if (!info.state.running) {
    deps.say(`${node}: starting ${w.name}`);
    await access.docker.startContainer(w.name);
  }
}

/** Hand the member's waiting start.sh its founding permit, once it waits (its log says so). */
export async function grantFounding(
  cluster: GaleraCluster,
  node: string,
  text: string,
  deps: RecoverDeps,
): Promise<void> {
  const w = workOf(cluster, node);
  const access = deps.connect(node);
  const deadline = deps.now() + RECOVER_DEFAULTS.waitingLineMs;
  for (;;) {
    const info = await access.docker.inspectContainer(w.name);
    const l = info?.state.running ? await access.docker.logs(w.name, { tail: 50 }) : undefined;
    if (l && GALERA.waitingLine.test(l.stdout + l.stderr)) break;
    if (deps.now() > deadline) {
      throw new TimeoutError(
        'E_GALERA_NOT_WAITING',
        `${node}: ${w.name} did not reach start.sh's wait for a founding permit within ${RECOVER_DEFAULTS.waitingLineMs / 1000} s`,
        {
          hint: `Its log says where it stands (docker logs ${w.name} on ${node}).`,
          details: { node, log: (await explainingLines(access.docker, w.name)).join('\n') },
        },
      );
    }
    await deps.sleep(RECOVER_DEFAULTS.pollMs);
  }
  const r = await access.docker.exec(w.name, [
    'sh',
    '-c',
    'printf "%s\\n" "$2" > "$1.tmp" && mv "$1.tmp" "$1"',
    'sh',
    GALERA.permit,
    text,
  ]);
  if (r.code !== 0) {
    throw new RemoteError(
      'E_GALERA_PERMIT',
      `${node}: writing the founding permit failed: ${r.stderr.trim().slice(-300)}`,
      {
        hint: `Is ${w.name} running on ${node}?`,
      },
    );
  }
  deps.say(`${node}: no member holds data: founding permit handed to ${w.name}`);
}

/** Positions of the holders that their state does not give, read where the server is stopped. */
async function readPositions(
  cluster: GaleraCluster,
  members: readonly MemberState[],
  holders: readonly string[],
  deps: RecoverDeps,
  stoppedOnly: boolean,
): Promise<Map<string, KnownPosition | undefined>> {
  const out = new Map<string, KnownPosition | undefined>();
  await mapLimit(holders, RECOVER_DEFAULTS.concurrency, async (node) => {
    const m = members.find((x) => x.node === node)!;
    const known = knownPosition(m);
    if (known) return void out.set(node, known);
    if (stoppedOnly && m.container.status !== 'exited' && m.container.status !== 'created') return;
    const r = await readPosition(deps.connect(node), workOf(cluster, node), { cloud: cluster.cloud, ...deps });
    const p = r.position;
    deps.say(`${node}: InnoDB position ${p ? `${p.uuid}:${p.seqno}` : 'none'} (mariadbd --wsrep-recover)`);
    out.set(node, p && p.seqno >= 0 ? { ...p, source: 'innodb' } : undefined);
  });
  return out;
}

/** Read, decide and (unless a dry run) act. Throws a StackctlError when no safe way exists. */
export async function recoverGalera(
  cluster: GaleraCluster,
  deps: RecoverDeps,
  opts: RecoverOptions,
): Promise<RecoverReport> {
  const without = opts.without ?? new Set<string>();
  const input = (members: readonly MemberState[]) => ({
    members,
    bootstrapNode: cluster.bootstrapNode,
    without,
    mayFound: opts.mayFound ?? false,
    recoverCommand: opts.recoverCommand,
  });
  let members = await readMembers(cluster, deps);
  const a = assess(input(members));
  const none = new Map<string, KnownPosition | undefined>();

  if (a.kind === 'primary') {
    const unread = a.down.filter((n) => members.find((m) => m.node === n)!.error !== undefined);
    const down = a.down.filter((n) => !unread.includes(n));
    const startable = down.filter((n) => {
      const s = members.find((m) => m.node === n)!.container.status;
      return s === 'exited' || s === 'created';
    });
    const unreadText = unread.length ? `; ${unread.join(', ')} could not be read (they join once back)` : '';
    const summary =
      (startable.length
        ? `a primary component runs on ${a.primary.join(', ')}: start ${startable.join(', ')} (they join it)`
        : down.length
          ? `a primary component runs on ${a.primary.join(', ')}; ${down.join(', ')} not yet Synced`
          : `a primary component runs on ${a.primary.join(', ')}, every member Synced: nothing to recover`) +
      unreadText;
    if (opts.dryRun) return { members, positions: none, assessment: a, summary, changed: false };
    for (const n of startable) await startMember(cluster, n, deps);
    for (const n of down) await waitSynced(cluster, n, deps);
    return { members, positions: none, assessment: a, summary, changed: startable.length > 0 };
  }

  if (a.kind === 'found') {
    const summary = `no member holds data: ${a.node} founds the cluster`;
    if (opts.dryRun) return { members, positions: none, assessment: a, summary, changed: false };
    await startMember(cluster, a.node, deps);
    await grantFounding(cluster, a.node, opts.permitText ?? 'no member holds data', deps);
    await waitSynced(cluster, a.node, deps);
    return { members, positions: none, assessment: a, summary, changed: true };
  }

  if (opts.dryRun) {
    const positions = await readPositions(cluster, members, a.holders, deps, true);
    let choice: Choice | undefined;
    let summary: string;
    const unknown = a.holders.filter((n) => !positions.get(n));
    if (unknown.length) {
      summary =
        `the member to bootstrap is chosen once ${unknown.join(', ')} ${unknown.length > 1 ? 'are' : 'is'} stopped ` +
        '(the recovery stops every member, then reads its position from InnoDB)';
    } else {
      choice = choose(input(members), positions);
      summary = describeChoice(choice);
    }
    return { members, positions, assessment: a, ...(choice ? { choice } : {}), summary, changed: false };
  }

  // A full outage: every member's server down, so that each position can be read from its own files.
  const considered = cluster.members.map((w) => w.node).filter((n) => !without.has(n));
  await mapLimit(considered, RECOVER_DEFAULTS.concurrency, async (node) => {
    const w = workOf(cluster, node);
    const access = deps.connect(node);
    const info = await access.docker.inspectContainer(w.name);
    if (info && (info.state.running || info.state.status === 'restarting')) {
      deps.say(`${node}: stopping ${w.name}`);
      await access.docker.stopContainer(w.name, { timeoutS: RECOVER_DEFAULTS.stopTimeoutS });
    }
  });
  members = await readMembers(cluster, deps); // grastate.dat after the clean shutdowns
  const after = assess(input(members));
  if (after.kind !== 'recover') {
    throw new RemoteError('E_GALERA_CHANGED', `the Galera members changed while they were stopped (${after.kind})`, {
      hint: `Run '${opts.recoverCommand} --dry-run' to see where they stand now.`,
    });
  }
  const positions = await readPositions(cluster, members, after.holders, deps, false);
  const choice = choose(input(members), positions);
  const summary = describeChoice(choice);
  deps.say(`decision: ${summary}`);
  const chosen = workOf(cluster, choice.node);
  const access = deps.connect(choice.node);
  const r = await access.exec(['sh', '-c', SAFE_TO_BOOTSTRAP_SCRIPT, 'sh', dataVolumeOf(chosen)], {
    timeoutMs: 30_000,
  });
  if (r.code !== 0) {
    throw new RemoteError(
      'E_GALERA_SAFE_TO_BOOTSTRAP',
      `${choice.node}: marking grastate.dat safe_to_bootstrap failed: ${r.stderr.trim().slice(-300)}`,
      { hint: `Check the volume ${dataVolumeOf(chosen)} on ${choice.node}; nothing was started.` },
    );
  }
  deps.say(
    `${choice.node}: grastate.dat marked safe_to_bootstrap (cluster ${clusterOf(members.find((m) => m.node === choice.node)!) ?? choice.position.uuid})`,
  );
  await startMember(cluster, choice.node, deps);
  await waitSynced(cluster, choice.node, deps);
  deps.say(`${choice.node}: Primary and Synced`);
  for (const node of choice.join) {
    if (!(await deps.connect(node).docker.inspectContainer(workOf(cluster, node).name))) {
      deps.say(`${node}: no ${workOf(cluster, node).name} container: stackctl deploy creates it, and it joins then`);
      continue;
    }
    await startMember(cluster, node, deps);
    await waitSynced(cluster, node, deps);
    deps.say(`${node}: joined, Synced`);
  }
  return { members: await readMembers(cluster, deps), positions, assessment: after, choice, summary, changed: true };
}
