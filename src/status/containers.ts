/**
 * A planned container against what Docker says about it: state, health,
 * image and config. The config verdict is the deploy's own (diffContainer in
 * orchestrator/state.ts), so `status` says "outdated" exactly when `deploy`
 * would recreate the container.
 */
import { ContainerAction, diffConfig, diffContainer, parseSha256sum } from '../orchestrator/state.js';
import type { ConfigWork, ContainerWork } from '../orchestrator/planner.js';
import { runHealthcheck } from '../orchestrator/health.js';
import type { ContainerEngine, ContainerInfo } from '../remote/index.js';
import { short } from '../images/pin.js';
import {
  ConfigState,
  ContainerState,
  Health,
  Severity,
  type ConfigFileDrift,
  type ContainerStatus,
  type Finding,
} from './model.js';

/** Docker's `State.Status` -> ours (anything else counts as exited). */
const DOCKER_STATE: Readonly<Record<string, ContainerState>> = {
  running: ContainerState.RUNNING,
  exited: ContainerState.EXITED,
  created: ContainerState.CREATED,
  restarting: ContainerState.RESTARTING,
  paused: ContainerState.PAUSED,
  dead: ContainerState.DEAD,
  removing: ContainerState.EXITED,
};

/** Docker's `State.Health.Status` -> ours. */
const DOCKER_HEALTH: Readonly<Record<string, Health>> = {
  healthy: Health.HEALTHY,
  unhealthy: Health.UNHEALTHY,
  starting: Health.STARTING,
};

/**
 * The tag of an image reference for people (`reg:5000/ns/img:tag` -> `tag`, else `latest`); a pinned
 * reference shows its digest shortened (`tag@sha256:0123456789ab`).
 */
export function tagOf(ref: string): string {
  const at = ref.indexOf('@');
  const name = (at >= 0 ? ref.slice(0, at) : ref).slice(ref.lastIndexOf('/', at >= 0 ? at : undefined) + 1);
  const colon = name.lastIndexOf(':');
  const tag = colon >= 0 ? name.slice(colon + 1) : at >= 0 ? '' : 'latest';
  if (at < 0) return tag;
  const digest = short(ref.slice(at + 1));
  return tag ? `${tag}@${digest}` : digest;
}

/** The digest a pinned reference names (`…@sha256:…`), or undefined for a tag reference. */
export function pinnedDigestOf(ref: string): string | undefined {
  const at = ref.indexOf('@');
  return at >= 0 ? ref.slice(at + 1) : undefined;
}

/**
 * Status of one planned container from its inspect result (undefined: no such container), the
 * RepoDigests of the image it runs (undefined: not looked at) and, when Docker's health was still
 * `starting`, the result of its healthcheck command run by status (checkNow).
 */
export function containerStatus(
  work: ContainerWork,
  info: ContainerInfo | undefined,
  imageDigests?: readonly string[],
  checkedNow?: ContainerStatus['checkedNow'],
): ContainerStatus {
  const wanted = { wanted: work.image, wantedTag: tagOf(work.image) };
  if (!info) {
    return {
      name: work.name,
      service: work.service,
      state: ContainerState.MISSING,
      health: Health.NONE,
      image: { ...wanted, matches: false },
      config: { state: ConfigState.UNKNOWN, changed: [] },
    };
  }
  const state = DOCKER_STATE[info.state.status] ?? ContainerState.EXITED;
  const docker =
    state === ContainerState.RUNNING ? (DOCKER_HEALTH[info.state.health ?? ''] ?? Health.NONE) : Health.NONE;
  const now = docker === Health.STARTING ? checkedNow : undefined;
  const health = now?.passed ? Health.HEALTHY : docker;
  const diff = diffContainer(work, info);
  const outdated = diff.action === ContainerAction.RECREATE;
  const pinned = pinnedDigestOf(work.image);
  // What runs against the pin: the digests Docker recorded for the image the container runs.
  const digest =
    pinned && imageDigests
      ? {
          digest: {
            pinned,
            running: imageDigests.map((d) => d.slice(d.indexOf('@') + 1)),
            matches: imageDigests.some((d) => d.endsWith(`@${pinned}`)),
          },
        }
      : {};
  return {
    name: work.name,
    service: work.service,
    state,
    health,
    ...(state === ContainerState.RUNNING ? {} : { exitCode: info.state.exitCode }),
    ...(now ? { checkedNow: now } : {}),
    ...(info.restartCount > 0 ? { restarts: { count: info.restartCount, lastStart: info.state.startedAt } } : {}),
    image: {
      running: info.image,
      runningTag: tagOf(info.image),
      ...wanted,
      matches: info.image === work.image,
      ...digest,
    },
    config: { state: outdated ? ConfigState.OUTDATED : ConfigState.CURRENT, changed: outdated ? diff.changed : [] },
  };
}

/** What is wrong with one container, if anything. */
export function containerFindings(node: string, c: ContainerStatus): Finding[] {
  const f = (severity: Severity, message: string): Finding => ({ severity, node, subject: c.name, message });
  if (c.state === ContainerState.MISSING) return [f(Severity.UNHEALTHY, 'missing (a deploy would create it)')];
  const out: Finding[] = [];
  if (c.state !== ContainerState.RUNNING) {
    out.push(f(Severity.UNHEALTHY, `${c.state}${c.exitCode === undefined ? '' : ` (exit code ${c.exitCode})`}`));
  } else if (c.health === Health.UNHEALTHY || c.health === Health.STARTING) {
    const now = c.checkedNow
      ? ` (its check, run now, ${c.checkedNow.exitCode === undefined ? 'did not finish' : `exits ${c.checkedNow.exitCode}`})`
      : '';
    out.push(f(Severity.UNHEALTHY, `running but ${c.health}${now}`));
  }
  if (!c.image.matches) {
    out.push(f(Severity.DRIFT, `runs ${c.image.running ?? '?'}, the plan wants ${c.image.wanted}`));
  } else if (c.image.digest && !c.image.digest.matches) {
    const running = c.image.digest.running.map(short).join(', ') || 'no registry digest';
    out.push(f(Severity.DRIFT, `runs an image with ${running}, not the pinned ${short(c.image.digest.pinned)}`));
  }
  if (c.config.state === ConfigState.OUTDATED) {
    out.push(f(Severity.DRIFT, `a deploy would recreate it (${c.config.changed.join(', ')})`));
  }
  return out;
}

/** Planned config files whose content on the node differs, from `sha256sum` output. */
export function configDrift(configs: readonly ConfigWork[], sha256sumOutput: string): ConfigFileDrift[] {
  const sums = parseSha256sum(sha256sumOutput);
  return configs
    .map((c) => diffConfig(c, sums.get(c.dest)))
    .filter((d) => d.action !== 'unchanged')
    .map((d) => ({ path: d.work.dest, detail: d.detail }));
}

/** A finding per drifted config file. */
export function configFindings(node: string, drift: readonly ConfigFileDrift[]): Finding[] {
  return drift.map((d) => ({
    severity: Severity.DRIFT,
    node,
    subject: d.path,
    message: `config file ${d.detail} (a deploy would upload it)`,
  }));
}

/** What status needs of a node to run a healthcheck command in a container. */
export interface CheckAccess {
  readonly docker: Pick<ContainerEngine, 'exec'>;
}

/**
 * A running container whose Docker health is still `starting` gets its healthcheck command run
 * now, as the deploy's gate runs it: Docker's own first check comes an interval (10 s or more)
 * after a start, so a status right after a deploy would otherwise call a container that passed
 * the deploy's gate unhealthy. Undefined when nothing was run (no check, or Docker has a verdict).
 */
export async function checkNow(
  access: CheckAccess,
  work: ContainerWork,
  info: ContainerInfo | undefined,
): Promise<ContainerStatus['checkedNow']> {
  if (!work.definition.healthcheck || !info?.state.running || info.state.health !== 'starting') return undefined;
  const code = await runHealthcheck(access.docker, work); // undefined: did not finish in time, or could not be run
  return code === undefined ? { passed: false } : { passed: code === 0, exitCode: code };
}
