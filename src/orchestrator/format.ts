/**
 * Printing the engine's actions and plans: one formatter and one journal
 * subject per action kind (a new kind fails to compile until it has both).
 * `deploy --dry-run` and `upgrade --dry-run` print phases the same way.
 */
import type { Subjects } from './engine.js';
import type { AnyAction, Availability, NodeAction, Phase } from './model.js';

const list = (xs: readonly string[]): string => xs.join(', ');
const argv = (xs: readonly string[]): string => xs.join(' ');

/** The subject of a node action in its journal key: node, service on node... */
export const NODE_SUBJECTS: Subjects<NodeAction> = {
  host: (a) => `${a.services.join(',')}@${a.node}`,
  pull: (a) => a.node,
  ensure: (a) => `${a.services.join(',')}@${a.node}`,
  'run-once': (a) => `${a.work} ${a.service}/${a.name}@${a.node}`,
  drain: (a) => a.node,
  enable: (a) => a.node,
  stop: (a) => `${a.service}@${a.node}`,
  health: (a) => `${a.services.join(',')}@${a.node}`,
  'cluster-check': (a) => `${a.service}@${a.nodes.join(',')}`,
  backup: (a) => `${a.service}@${a.node}`,
  migrate: (a) => `${a.service}@${a.node} ${a.stage} ${argv(a.command)}`,
};

/** One line per node action kind. */
export const NODE_ACTION_FORMAT: {
  readonly [K in NodeAction['kind']]: (a: Extract<NodeAction, { kind: K }>) => string;
} = {
  host: (a) => `${a.node}: prepare the host OS for ${list(a.services)}`,
  pull: (a) => `${a.node}: pull ${list(a.images)}`,
  ensure: (a) =>
    `${a.node}: ${list(a.services)}: configs, then ${
      a.containers.length
        ? a.containers
            .map((c) => `${c.name}${c.from && c.from !== c.image ? ` ${c.from} -> ${c.image}` : ''}`)
            .join('; ')
        : 'no container'
    }${a.frontendGate ? ' (then through the load balancer)' : ''}`,
  'run-once': (a) => `${a.node}: ${a.work} ${a.service}/${a.name}`,
  drain: (a) => `${a.node}: drain load balancer backends ${list(a.frontends)}`,
  enable: (a) => `${a.node}: re-enable load balancer backends ${list(a.frontends)}, wait until UP`,
  stop: (a) =>
    `${a.node}: stop ${list(a.containers)} (${a.service})` +
    (a.resetVolumes?.length ? `, then empty volume(s) ${list(a.resetVolumes)}` : ''),
  health: (a) => `${a.node}: health gate ${list(a.services)}`,
  'cluster-check': (a) => `${a.service} cluster whole: ${a.nodes.length} member(s) (${list(a.nodes)})`,
  backup: (a) =>
    a.commands?.length
      ? `${a.node}: save ${a.commands.map((c) => `${c.name} (${c.container}: ${argv(c.command)})`).join('; ')} (${a.service})`
      : `${a.node}: dump ${list(a.databases)} (${a.service})`,
  migrate: (a) => `${a.node}: ${a.stage} ${argv(a.command)} (${a.service}, image ${a.image})`,
};

/** Format a node action. */
export function formatNodeAction(a: NodeAction): string {
  return (NODE_ACTION_FORMAT[a.kind] as (x: NodeAction) => string)(a);
}

/** How the APIs of a phase's services fare, in words. */
export const AVAILABILITY_TEXT: Readonly<Record<Availability, string>> = {
  rolling: 'rolling: the API stays up behind the load balancer',
  window: 'migration window: the API is down on every node',
  'single-node': 'one node serves the API: it is down while that node restarts',
  'all-at-once': 'all nodes at once',
};

/** The phases as text: numbered phases and steps, one line per action, pauses and availability. */
export function formatPhases<A extends AnyAction>(phases: readonly Phase<A>[], format: (a: A) => string): string {
  let s = '';
  phases.forEach((p, i) => {
    if (p.pauseBefore) s += `  -- pause: ${p.pauseBefore.reason}; run the command again with --continue to go on\n`;
    const avail = p.availability ? ` [${AVAILABILITY_TEXT[p.availability]}]` : '';
    s += `${String(i + 1).padStart(2)}. ${p.id}: ${p.title}${avail}\n`;
    p.steps.forEach((st, j) => {
      s += `      ${i + 1}.${j + 1} ${st.title}\n`;
      for (const a of st.actions) s += `            ${format(a)}\n`;
    });
  });
  return s;
}
