/**
 * A container's health gate and log tail, shared by the deploy executor
 * (right after it starts a container) and the upgrade (after a swap, and as
 * a phase's own gate). Health is Docker's status, or the healthcheck command
 * run by us, since Docker waits a whole interval before its first check.
 */
import { RemoteError, TimeoutError } from '../core/errors.js';
import type { ContainerEngine, ContainerInfo } from '../remote/index.js';
import type { ContainerWork } from './planner.js';
import { healthDeadlineMs } from './state.js';

/** What the gate needs of a node: its container engine. */
export interface HealthAccess {
  readonly docker: Pick<ContainerEngine, 'inspectContainer' | 'logs' | 'exec'>;
}

/** The clock and knobs of a wait. */
export interface HealthWait {
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  readonly pollMs: number;
  /** Lines of log kept in errors. */
  readonly logLines: number;
  /** Ends the wait early (an operator's interrupt). */
  readonly signal?: AbortSignal;
  /**
   * True right after our own start: a container Docker restarted since (its
   * restart policy turns an exit into `restarting`) has failed as well.
   */
  readonly restartsFail: boolean;
}

/** The end of a container's log, or a note that it could not be read. */
export async function logTail(docker: Pick<ContainerEngine, 'logs'>, name: string, lines: number): Promise<string> {
  try {
    const l = await docker.logs(name, { tail: lines });
    return (l.stdout + l.stderr)
      .split('\n')
      .slice(-lines - 1)
      .join('\n');
  } catch {
    return '(log unavailable)';
  }
}

/**
 * Run the container's healthcheck command once, bounded by its own timeout (default 5 s):
 * its exit code, or undefined when it did not finish in time or could not be run.
 */
export async function runHealthcheck(
  docker: Pick<ContainerEngine, 'exec'>,
  w: ContainerWork,
): Promise<number | undefined> {
  const hc = w.definition.healthcheck;
  if (!hc) return undefined;
  return docker.exec(w.name, hc.test, { timeoutMs: (hc.timeout_s ?? 5) * 1000 }).then(
    (r): number | undefined => r.code,
    () => undefined,
  );
}

/** Wait until the container is healthy (its healthcheck, or running for 2 s without one); errors carry its log. */
export async function waitHealthy(access: HealthAccess, w: ContainerWork, o: HealthWait): Promise<void> {
  const deadline = o.now() + healthDeadlineMs(w);
  const hc = w.definition.healthcheck;
  const startedAt = o.now();
  for (;;) {
    const info: ContainerInfo | undefined = await access.docker.inspectContainer(w.name);
    const exited =
      !info ||
      ['exited', 'dead'].includes(info.state.status) ||
      (o.restartsFail && (info.state.status === 'restarting' || info.restartCount > 0));
    if (exited) {
      throw new RemoteError(
        'E_CONTAINER_EXITED',
        `${w.node}: container ${w.name} (${w.service}) ${info ? `exited with ${info.state.exitCode}` : 'is missing'}`,
        {
          hint: 'Its log below says why; fix the service file or template and deploy again.',
          details: { node: w.node, log: info ? await logTail(access.docker, w.name, o.logLines) : '' },
        },
      );
    }
    if (info.state.health === 'healthy') return;
    if (info.state.running) {
      if (hc) {
        if ((await runHealthcheck(access.docker, w)) === 0) return;
      } else if (o.now() - startedAt >= 2000) return;
    }
    if (o.now() > deadline || o.signal?.aborted) {
      throw new TimeoutError(
        'E_HEALTH_TIMEOUT',
        `${w.node}: container ${w.name} (${w.service}) not healthy within ${Math.round(healthDeadlineMs(w) / 1000)} s`,
        {
          hint: 'The container was left running for inspection; its log below says why.',
          details: { node: w.node, log: await logTail(access.docker, w.name, o.logLines) },
        },
      );
    }
    await o.sleep(o.pollMs);
  }
}
