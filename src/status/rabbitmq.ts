/**
 * RabbitMQ as each broker sees its cluster (`rabbitmqctl cluster_status
 * --formatter json`): parsing and the verdict against the plan.
 */
import { judgeMembers } from './cluster-members.js';
import { ViewState, type Finding, type RabbitMember, type RabbitView } from './model.js';

/** The command run in each rabbitmq container. */
export const RABBITMQ_COMMAND = ['rabbitmqctl', 'cluster_status', '--formatter', 'json'] as const;

/** The fields of rabbitmqctl's JSON that matter here (RabbitMQ 3.10 and later). */
interface ClusterStatusJson {
  cluster_name?: unknown;
  disk_nodes?: unknown;
  running_nodes?: unknown;
  partitions?: unknown;
  alarms?: unknown;
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x) => typeof x === 'string') : []);

/** One member from the command's output; a member with `error` when it is not that JSON. */
export function rabbitMember(node: string, output: string): RabbitMember {
  let j: ClusterStatusJson;
  try {
    j = JSON.parse(output) as ClusterStatusJson;
  } catch {
    return { node, error: `unreadable rabbitmqctl output: ${output.trim().slice(0, 200)}` };
  }
  if (typeof j !== 'object' || j === null || !Array.isArray(j.running_nodes)) {
    return { node, error: 'rabbitmqctl output has no running_nodes' };
  }
  // partitions: { "rabbit@a": ["rabbit@b", ...] } (an empty object when none)
  const partitions =
    typeof j.partitions === 'object' && j.partitions !== null
      ? [...new Set(Object.values(j.partitions as Record<string, unknown>).flatMap(strings))].sort()
      : [];
  const alarms = Array.isArray(j.alarms) ? j.alarms.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))) : [];
  return {
    node,
    ...(typeof j.cluster_name === 'string' ? { clusterName: j.cluster_name } : {}),
    diskNodes: strings(j.disk_nodes).sort(),
    runningNodes: strings(j.running_nodes).sort(),
    partitions,
    alarms,
  };
}

/** The view and its findings, for the plan's `expected` brokers. */
export function evaluateRabbit(
  expected: number,
  members: readonly RabbitMember[],
): { view: RabbitView; findings: Finding[] } {
  if (expected === 0) return { view: { state: ViewState.NOT_DEPLOYED, expected, members: [] }, findings: [] };
  const { findings, state } = judgeMembers(members, (m, bad) => {
    const running = m.runningNodes ?? [];
    if (running.length !== expected) bad(m.node, `${running.length} running node(s), the plan has ${expected}`);
    const stopped = (m.diskNodes ?? []).filter((n) => !running.includes(n));
    if (stopped.length) bad(m.node, `cluster members not running: ${stopped.join(', ')}`);
    if (m.partitions?.length) bad(m.node, `network partition with ${m.partitions.join(', ')}`);
    if (m.alarms?.length) bad(m.node, `alarms: ${m.alarms.join(', ')}`);
  });
  return { view: { state, expected, members }, findings };
}

/** One line per member for the human output. */
export function describeRabbitMember(m: RabbitMember): string {
  if (m.error !== undefined) return `${m.node}: ${m.error}`;
  return `${m.node}: running ${(m.runningNodes ?? []).join(', ') || 'none'} (members ${(m.diskNodes ?? []).length})`;
}
