/**
 * Clustered services as their members see them. A service file's
 * `cluster_check` names a command run in one of its containers on every
 * member and how its output is read (`kind`); this table holds, per kind, the
 * reading and the verdict against the plan's number of members. Status, the
 * upgrade's prechecks and the engine's `cluster-check` action (between the
 * members of a rolling restart) all ask the same way.
 */
import { RemoteError, TimeoutError, messageOf } from '../core/errors.js';
import { mapLimit } from '../core/concurrency.js';
import type { EngineContext } from '../orchestrator/context.js';
import type { Handler } from '../orchestrator/engine.js';
import type { NodeAction } from '../orchestrator/model.js';
import type { ClusterCheck } from '../roles/schema.js';
import { describeGaleraMember, evaluateGalera, galeraMember } from './galera.js';
import type {
  ClusterMember,
  ClusterView,
  Finding,
  GaleraMember,
  OvsdbMember,
  RabbitMember,
  ViewState,
} from './model.js';
import { describeOvsdbMember, evaluateOvsdb, ovsdbMember } from './ovsdb.js';

export type { ClusterMember, ClusterView } from './model.js';
import { describeRabbitMember, evaluateRabbit, rabbitMember } from './rabbitmq.js';

/** The members of one cluster kind and the verdict over them. */
interface ClusterReader<M extends { readonly node: string; readonly error?: string }> {
  /** One member from the command's output on its node. */
  readonly member: (node: string, output: string) => M;
  readonly evaluate: (
    expected: number,
    members: readonly M[],
  ) => { view: { state: ViewState; expected: number; members: readonly M[] }; findings: Finding[] };
  /** One line per member for people. */
  readonly describe: (m: M) => string;
  /** What a healthy cluster of this kind is, for messages. */
  readonly whole: string;
}

/** Per kind of `cluster_check`: how its output is read (a new kind fails to compile until it is here). */
export const CLUSTER_READERS: {
  readonly galera: ClusterReader<GaleraMember>;
  readonly rabbitmq: ClusterReader<RabbitMember>;
  readonly ovsdb: ClusterReader<OvsdbMember>;
} = {
  galera: {
    member: galeraMember,
    evaluate: evaluateGalera,
    describe: describeGaleraMember,
    whole: 'every member Synced in one Primary component of the planned size',
  },
  rabbitmq: {
    member: rabbitMember,
    evaluate: evaluateRabbit,
    describe: describeRabbitMember,
    whole: 'every broker running in one partition-free cluster without alarms',
  },
  ovsdb: {
    member: ovsdbMember,
    evaluate: evaluateOvsdb,
    describe: describeOvsdbMember,
    whole:
      'both OVN databases served by every member: standalone with one, else RAFT members of the planned size with a leader',
  },
};

/** Runs the check's command on a node; the output, or an error text. */
export type AskMember = (node: string) => Promise<{ stdout: string } | { error: string }>;

/** Ask every member and judge the cluster; never throws (an unanswered member is a finding). */
export async function readCluster(
  service: string,
  check: ClusterCheck,
  nodes: readonly string[],
  ask: AskMember,
  concurrency = 16,
): Promise<{ view: ClusterView; findings: Finding[] }> {
  const reader = CLUSTER_READERS[check.kind] as ClusterReader<ClusterMember>;
  const members = await mapLimit(nodes, concurrency, async (node): Promise<ClusterMember> => {
    const r = await ask(node);
    return 'error' in r ? { node, error: r.error } : reader.member(node, r.stdout);
  });
  const { view, findings } = reader.evaluate(nodes.length, members);
  return {
    view: { service, kind: check.kind, state: view.state, expected: view.expected, members: view.members },
    findings: findings.map((f) => ({ ...f, subject: service })),
  };
}

/** One line per member of a view. */
export function describeMembers(v: ClusterView): string {
  const reader = CLUSTER_READERS[v.kind] as ClusterReader<ClusterMember>;
  return v.members.map((m) => reader.describe(m)).join('; ');
}

/** Tuning of the cluster-check action. */
export const CLUSTER_CHECK_DEFAULTS = {
  /** How long a cluster gets to be whole again after one of its members restarted. */
  timeoutMs: 180_000,
  /** Deadline of the command on one member. */
  commandTimeoutMs: 60_000,
  pollMs: 2_000,
} as const;

/**
 * The engine's `cluster-check` action: every member asked, the cluster judged. In a precheck phase
 * it answers at once (nothing has stopped: a broken cluster is refused as it is); elsewhere (between
 * the members of a rolling restart) it waits until the cluster is whole again, within a deadline.
 */
export const clusterCheck: Handler<Extract<NodeAction, { kind: 'cluster-check' }>, EngineContext> = async (
  a,
  ctx,
  run,
) => {
  const check = ctx.services.clusterChecks.get(a.service);
  if (!check) return `${a.service} declares no cluster_check: nothing to ask`;
  const once = run.phase.kind === 'precheck';
  const ask: AskMember = async (node) => {
    try {
      const r = await ctx
        .connect(node)
        .docker.exec(check.container, check.command, { timeoutMs: CLUSTER_CHECK_DEFAULTS.commandTimeoutMs });
      if (r.code !== 0)
        return { error: `${check.command[0]} exited with ${r.code}: ${(r.stderr || r.stdout).trim().slice(-300)}` };
      return { stdout: r.stdout };
    } catch (err) {
      return { error: messageOf(err) };
    }
  };
  const deadline = ctx.now() + CLUSTER_CHECK_DEFAULTS.timeoutMs;
  const t0 = ctx.now();
  for (;;) {
    const { view, findings } = await readCluster(a.service, check, a.nodes, ask);
    if (view.state === 'ok') {
      const standalone = view.members.every((m) => 'wsrepOn' in m && m.wsrepOn === false);
      return standalone
        ? `${a.service} standalone (one member, no replication)`
        : `${a.service} cluster whole: ${view.expected} member(s)${once ? '' : ` (${((ctx.now() - t0) / 1000).toFixed(1)} s)`}`;
    }
    if (once || ctx.now() > deadline || ctx.signal?.aborted) {
      const reader = CLUSTER_READERS[check.kind] as ClusterReader<ClusterMember>;
      const Err = once ? RemoteError : TimeoutError;
      throw new Err(
        'E_CLUSTER_INCOMPLETE',
        `${a.service}: the cluster is not whole (${view.expected} member(s) planned)${once ? '' : ` after ${Math.round(CLUSTER_CHECK_DEFAULTS.timeoutMs / 1000)} s`}: ${describeMembers(view)}`,
        {
          hint:
            `A whole cluster has ${reader.whole}. ` +
            (once
              ? 'Repair it (stackctl status shows each member; stackctl deploy) before anything restarts a member. Nothing was stopped.'
              : 'The member restarted last did not rejoin: look at its log before anything else restarts; the run stopped here.'),
          details: { service: a.service, expected: view.expected, members: view.members, findings },
        },
      );
    }
    await ctx.sleep(CLUSTER_CHECK_DEFAULTS.pollMs);
  }
};
