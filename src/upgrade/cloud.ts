/**
 * The OpenStack client of an upgrade: `openstack …` run in a running
 * container that carries the client (the identity service's, else the compute API's) on the first
 * controller that answers, with the admin credentials in the exec
 * environment (never in argv, logs or errors). The node that answered is
 * remembered; when it stops answering the next one is tried.
 */
import { RemoteError, StackctlError, messageOf } from '../core/errors.js';
import type { Secret } from '../core/secret.js';
import type { NodeAccess } from '../orchestrator/context.js';
import type { DeployPlan } from '../orchestrator/planner.js';
import type { CloudClient } from './context.js';

/** Knobs of the client. */
export const CLOUD_CLIENT_DEFAULTS = {
  /** Deadline of one `openstack` command (keystone token, then the API call). */
  timeoutMs: 120_000,
  /** Characters of stderr an error quotes. */
  stderrTail: 600,
} as const;

/** Side effects and inputs of the client. */
export interface CloudClientDeps {
  readonly connect: (node: string) => NodeAccess;
  /** The deploy plan whose containers are running (the current one during prechecks). */
  readonly plan: DeployPlan;
  /** OS_* variables of the admin user (see roles/credentials.ts adminCredentials). */
  readonly credentials: Readonly<Record<string, string | Secret>>;
  /** Containers that carry the client, in order of preference (status/openstack.ts clientContainers). */
  readonly containers: readonly string[];
}

/** Where the client can run: node and container, in plan order then in the containers' order. */
export function clientCandidates(
  plan: DeployPlan,
  containers: readonly string[],
): { node: string; container: string }[] {
  const onNode = new Map<string, Set<string>>();
  for (const st of plan.steps)
    for (const nw of st.nodes)
      for (const c of nw.containers) {
        if (!containers.includes(c.name)) continue;
        let s = onNode.get(nw.node);
        if (!s) onNode.set(nw.node, (s = new Set()));
        s.add(c.name);
      }
  const out: { node: string; container: string }[] = [];
  for (const [node, names] of onNode)
    for (const container of containers) if (names.has(container)) out.push({ node, container });
  return out;
}

const tail = (s: string, n: number): string => {
  const t = s.trim();
  return t.length > n ? '…' + t.slice(-n) : t;
};

/**
 * The CloudClient of an upgrade. A node whose SSH or Docker fails, or whose
 * client container is not running, is skipped for the next one; a command that
 * runs and exits non-zero rejects (E_OPENSTACK_CLIENT) without trying elsewhere:
 * another controller would give the same answer.
 */
export function cloudClient(deps: CloudClientDeps): CloudClient {
  const candidates = clientCandidates(deps.plan, deps.containers);
  let preferred: { node: string; container: string } | undefined;

  return {
    async openstack(args, opts = {}) {
      const timeoutMs = opts.timeoutMs ?? CLOUD_CLIENT_DEFAULTS.timeoutMs;
      const shown = `openstack ${args.join(' ')}`;
      const order = preferred ? [preferred, ...candidates.filter((c) => c !== preferred)] : candidates;
      const skipped: string[] = [];
      for (const at of order) {
        let r: { code: number; stdout: string; stderr: string };
        try {
          const docker = deps.connect(at.node).docker;
          const info = await docker.inspectContainer(at.container);
          if (!info?.state.running) {
            skipped.push(`${at.node}/${at.container}: ${info ? info.state.status : 'missing'}`);
            continue;
          }
          r = await docker.exec(at.container, ['openstack', ...args], { env: deps.credentials, timeoutMs });
        } catch (err) {
          skipped.push(
            `${at.node}/${at.container}: ${err instanceof StackctlError ? err.code + ': ' : ''}${messageOf(err)}`,
          );
          if (preferred === at) preferred = undefined;
          continue;
        }
        preferred = at;
        if (r.code !== 0) {
          throw new RemoteError(
            'E_OPENSTACK_CLIENT',
            `${shown} failed on ${at.node}/${at.container} (exit ${r.code}): ${tail(r.stderr || r.stdout, CLOUD_CLIENT_DEFAULTS.stderrTail)}`,
            {
              hint: 'Run the same command by hand in that container (with the admin credentials) to see the whole answer.',
              details: { command: ['openstack', ...args], node: at.node, container: at.container, exitCode: r.code },
            },
          );
        }
        return r.stdout;
      }
      throw new RemoteError(
        'E_OPENSTACK_CLIENT',
        `${shown}: no controller could run the client (${skipped.join('; ') || `no ${deps.containers.join(' or ')} container in the plan`})`,
        {
          hint: `A running ${deps.containers.join(' or ')} container is needed: stackctl status shows which are down.`,
          details: { command: ['openstack', ...args], tried: skipped },
        },
      );
    },
  };
}
