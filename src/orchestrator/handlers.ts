/**
 * The handlers of the engine's node actions, one per kind (engine.ts runs
 * them): host preparation, pulls, converging a node's configs and containers,
 * run-once work, load-balancer drain and enable, stops, health gates,
 * database backups and migrations in one-off containers. Every handler is
 * re-entrant against real state: a container's hash label, a file's sha256, a
 * run-once marker, an image present, a container already gone. The side
 * effects a deploy must never repeat go through the run scope's journal.
 */
import { BACKUP_DIR } from '../core/backups.js';
import { RemoteError, StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import { canonicalJson, sha256 } from '../core/hash.js';
import { mapLimit } from '../core/concurrency.js';
import type { Secret } from '../core/secret.js';
import { ESCAPERS } from '../roles/escape.js';
import {
  configsOf,
  containersOf,
  hostWorkOf,
  nodesRunning,
  runOnceOf,
  type EngineContext,
  type NodeAccess,
  type OneOffResult,
} from './context.js';
import { ActionFailed, planMismatch, type Handler, type Handlers, type RunScope } from './engine.js';
import { FailureClass } from './failures.js';
import { logTail as containerLogTail, runHealthcheck, waitHealthy as waitContainerHealthy } from './health.js';
import { hostSummary, prepareHost } from './host.js';
import { identityHash, runIdentityWork } from './identity.js';
import { EffectKind, type Effect } from './journal.js';
import { listWorkloads, workloadsStopped } from './workloads.js';
import { serviceCaFile } from '../certs/served.js';
import type { BackupCommand, NodeAction } from './model.js';
import type { ContainerWork, RunOnceWork } from './planner.js';
import {
  ContainerAction,
  LABEL,
  MARKER_DIR,
  containerSpec,
  diffConfig,
  diffContainer,
  healthDeadlineMs,
  parseSha256sum,
  type ContainerDiff,
} from './state.js';

/** Tuning of the handlers. */
export const HANDLER_DEFAULTS = {
  /** Lines of a failed container's log carried in the report. */
  logLines: 50,
  /** Seconds a container gets to stop before it is killed. */
  stopTimeoutS: 10,
  /** Poll interval while waiting for health, a task or the load balancer. */
  pollMs: 500,
  /**
   * How long a run-once task or one-off container (db_sync, a migration) may go without a new line
   * in its log before it is reported stuck; it is never killed for it (deploy --task-timeout,
   * upgrade --task-timeout raise it).
   */
  quietTimeoutMs: 10 * 60_000,
  /** How often a running task's log is looked at for progress. */
  progressPollMs: 10_000,
  /** How long a service that is healthy on its node gets to answer through the load balancer's VIP. */
  frontendTimeoutMs: 90_000,
  /** Deadline of SSH commands that only read state. */
  commandTimeoutMs: 30_000,
  /** How long a drained server gets for its sessions to end. */
  drainTimeoutMs: 30_000,
  /** How long requests in flight on a drained server get before its open sessions are closed. */
  drainGraceMs: 5_000,
  /** How long re-enabled servers get to be seen UP by the load balancer's checks. */
  enableTimeoutMs: 60_000,
  /** Deadline of a database dump. */
  backupTimeoutMs: 30 * 60_000,
  /** Where backups go on the database node: `<dir>/<run>/<service>-<time>.sql.gz`. */
  backupDir: BACKUP_DIR,
} as const;

type Of<K extends NodeAction['kind']> = Extract<NodeAction, { kind: K }>;

/** The end of a container's log, or a note that it could not be read. */
const logTail = (access: NodeAccess, name: string): Promise<string> =>
  containerLogTail(access.docker, name, HANDLER_DEFAULTS.logLines);

/** The registry part of an image reference (`host:port` before the first slash), or Docker Hub. */
export function registryOf(image: string): string {
  const first = image.split('/')[0]!;
  return image.includes('/') && /[.:]/.test(first) ? first : 'docker.io';
}

/** The journal effect of a pull. */
const pullEffect = (node: string, image: string): Effect => ({
  kind: EffectKind.PULL,
  node,
  target: image,
  hash: image,
});

/** Pull one image a node lacks (journaled); an image present is verified. Failures are retryable. */
async function ensureImage(access: NodeAccess, image: string, run: RunScope): Promise<boolean> {
  const e = pullEffect(access.node, image);
  if (await access.docker.imageExists(image)) {
    run.verify(e);
    return false;
  }
  try {
    await run.effect(e, () => access.docker.pullImage(image));
  } catch (err) {
    throw new ActionFailed(
      new RemoteError(
        'E_IMAGE_PULL',
        `${access.node}: cannot pull ${image} from registry ${registryOf(image)}: ${messageOf(err)}`,
        {
          hint: `Push it first (stackctl images push), and check that ${access.node} reaches ${registryOf(image)}. Nothing was stopped.`,
        },
      ),
      FailureClass.RETRYABLE,
      { path: run.where(access.node, `pull ${image}`) },
    );
  }
  return true;
}

/** Pull the images a node lacks. */
export const pull: Handler<Of<'pull'>, EngineContext> = async (a, ctx, run) => {
  const access = ctx.connect(a.node);
  let pulled = 0;
  for (const image of a.images) {
    const t = ctx.now();
    if (await ensureImage(access, image, run)) {
      pulled++;
      run.change({
        node: a.node,
        object: 'image',
        name: image,
        action: 'pulled',
        detail: registryOf(image),
        ms: ctx.now() - t,
      });
    }
  }
  return `${pulled} pulled, ${a.images.length - pulled} present`;
};

/**
 * The node's OS, for the services that declare a host preparation. It reads the node before it
 * changes anything (modules, a file, host units), so a re-run or `--resume` finishes it without
 * journal entries of its own; its changes are events. Failures are retryable.
 */
export const host: Handler<Of<'host'>, EngineContext> = async (a, ctx, run) => {
  const access = ctx.connect(a.node);
  let n = 0;
  for (const h of hostWorkOf(ctx.targetDeploy, a.node, a.services)) {
    const t = ctx.now();
    let made;
    try {
      made = await prepareHost(access, h);
    } catch (err) {
      throw new ActionFailed(err, FailureClass.RETRYABLE, { path: `step ${h.step}/${a.node}/host ${h.service}` });
    }
    n += made.length;
    for (const c of made)
      run.change({
        node: a.node,
        object: `host ${c.object}`,
        name: c.name,
        action: c.action,
        detail: h.service,
        ms: ctx.now() - t,
      });
    if (!made.length)
      run.change({ node: a.node, object: 'host', name: h.service, action: 'unchanged', detail: hostSummary(h) });
  }
  return n ? `${n} change(s)` : 'unchanged';
};

/** The journal effect of a config upload. */
const uploadEffect = (node: string, dest: string, hash: string): Effect => ({
  kind: EffectKind.UPLOAD,
  node,
  target: dest,
  hash,
});

/** The journal effect of a container's create or start. */
const containerEffect = (kind: EffectKind, w: ContainerWork): Effect => ({
  kind,
  node: w.node,
  target: w.name,
  hash: w.hash,
});

/** Wait until the service answers through the load balancer on the internal VIP (any status below 500). */
async function waitFrontend(ctx: EngineContext, access: NodeAccess, w: ContainerWork, url: string): Promise<void> {
  const deadline = ctx.now() + HANDLER_DEFAULTS.frontendTimeoutMs;
  // over TLS (tls.internal): verified with the cloud's CA in the service's config folder
  const ca = url.startsWith('https://') ? ['--cacert', serviceCaFile(w.service)] : [];
  let last = '';
  for (;;) {
    const r = await access.docker
      .exec(w.name, ['curl', '-s', '-o', '/dev/null', '-m', '5', '-w', '%{http_code}', ...ca, url], {
        timeoutMs: 10_000,
      })
      .catch((e: unknown) => ({ code: -1, stdout: '', stderr: messageOf(e) }));
    last = r.stdout.trim() || r.stderr.trim();
    const status = Number(r.stdout.trim());
    if (status >= 100 && status < 500) return;
    if (ctx.now() > deadline || ctx.signal?.aborted) {
      throw new TimeoutError(
        'E_FRONTEND_TIMEOUT',
        `${w.node}: ${w.name} is healthy but ${url} still answers '${last || 'nothing'}' through the load balancer after ${Math.round(HANDLER_DEFAULTS.frontendTimeoutMs / 1000)} s`,
        { hint: 'Check the load balancer frontend and backend of this service (its log) and the VIP.' },
      );
    }
    await ctx.sleep(HANDLER_DEFAULTS.pollMs);
  }
}

/** Right after our start: a restart since counts as a failure. */
function waitStarted(ctx: EngineContext, access: NodeAccess, w: ContainerWork): Promise<void> {
  return waitContainerHealthy(access, w, {
    now: ctx.now,
    sleep: ctx.sleep,
    pollMs: HANDLER_DEFAULTS.pollMs,
    logLines: HANDLER_DEFAULTS.logLines,
    restartsFail: true,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
  });
}

/** The health gate of a started container, then (when asked) its load-balancer frontend's. */
async function gateStarted(
  ctx: EngineContext,
  access: NodeAccess,
  w: ContainerWork,
  frontendGate: boolean,
  path: (what: string) => string,
): Promise<void> {
  try {
    await waitStarted(ctx, access, w);
  } catch (err) {
    throw new ActionFailed(err, FailureClass.HARD, { log: await logTail(access, w.name), path: path('health') });
  }
  if (frontendGate && w.frontend) {
    try {
      await waitFrontend(ctx, access, w, w.frontend);
    } catch (err) {
      throw new ActionFailed(err, FailureClass.HARD, { log: await logTail(access, w.name), path: path('frontend') });
    }
  }
}

/**
 * Before a container that runs users' workloads is recreated (stopping them): refuse while its
 * list names any, or cannot be read.
 */
async function refuseToStopWorkloads(access: NodeAccess, w: ContainerWork, why: string): Promise<void> {
  const stopped = workloadsStopped(w, await listWorkloads(access.docker, w));
  if (stopped)
    throw new StackctlError(
      'E_WORKLOADS_RUNNING',
      `${w.node}: ${w.name} would be recreated (${why || 'changed'}), ${stopped}`,
      {
        hint:
          `Move them away first: stackctl nodes maintenance on --node ${w.node}, run again, then ` +
          `stackctl nodes maintenance off --node ${w.node}. Or, to stop them with it, deploy with --allow-workload-stop.`,
      },
    );
}

/** refuseToStopWorkloads as the failure of the container's `workloads` action. */
async function refuseToStopWorkloadsAt(access: NodeAccess, w: ContainerWork, c: ContainerDiff, run: RunScope) {
  try {
    await refuseToStopWorkloads(access, w, c.changed.join(', '));
  } catch (err) {
    throw new ActionFailed(err, FailureClass.HARD, { path: run.where(w.node, `${w.name}/workloads`) });
  }
}

/** What the node's Docker says of a container of the plan (undefined: there is none). */
async function inspect(access: NodeAccess, run: RunScope, w: ContainerWork) {
  try {
    return await access.docker.inspectContainer(w.name);
  } catch (err) {
    throw new ActionFailed(err, FailureClass.RETRYABLE, { path: run.where(w.node, `${w.name}/inspect`) });
  }
}

/** One container of a node: create, recreate or start it and wait for its health; 1 if changed. */
async function ensureContainer(
  ctx: EngineContext,
  run: RunScope,
  access: NodeAccess,
  c: ContainerDiff,
  frontendGate: boolean,
): Promise<number> {
  const w = c.work;
  const path = (what: string): string => run.where(w.node, `${w.name}/${what}`);
  if (c.action === ContainerAction.UNCHANGED) {
    run.verify(containerEffect(EffectKind.CREATE, w));
    run.verify(containerEffect(EffectKind.START, w));
    // Started by a run that was stopped (killed) before its health gate: the gate is this run's.
    if (c.health === 'starting') await gateStarted(ctx, access, w, frontendGate, path);
    run.change({ node: w.node, object: 'container', name: w.name, action: 'unchanged' });
    return 0;
  }
  if (c.action === ContainerAction.START) run.verify(containerEffect(EffectKind.CREATE, w));
  const gate = w.after ? run.gate(w.after, w.name) : undefined;
  if (gate) {
    const tw = ctx.now();
    await gate.opened;
    run.change({
      node: w.node,
      object: 'container',
      name: w.name,
      action: 'waited',
      detail: `for ${w.after}`,
      ms: ctx.now() - tw,
    });
  }
  const t = ctx.now();
  // (asked again right before the stop: one may have started while the node's files went up)
  if (c.action === ContainerAction.RECREATE && w.definition.workloads && !ctx.allowWorkloadStop)
    await refuseToStopWorkloadsAt(access, w, c, run);
  if (c.action !== ContainerAction.START) await ensureImage(access, w.image, run);
  if (c.action === ContainerAction.RECREATE) {
    try {
      await run.effect(
        { kind: EffectKind.REMOVE, node: w.node, target: w.name, hash: c.currentHash ?? 'unlabelled' },
        async () => {
          await access.docker.stopContainer(w.name, { timeoutS: HANDLER_DEFAULTS.stopTimeoutS });
          await access.docker.removeContainer(w.name, { force: true });
        },
      );
    } catch (err) {
      throw new ActionFailed(err, FailureClass.HARD, { path: path('remove') });
    }
  }
  if (c.action !== ContainerAction.START) {
    try {
      await run.effect(containerEffect(EffectKind.CREATE, w), () =>
        access.docker.createContainer(containerSpec(ctx.targetDeploy.cloud, w)),
      );
    } catch (err) {
      throw new ActionFailed(err, FailureClass.RETRYABLE, { path: path('create') });
    }
  }
  try {
    await run.effect(containerEffect(EffectKind.START, w), () => access.docker.startContainer(w.name));
  } catch (err) {
    // Undo the create, so the next run starts from a clean slate.
    const log = await logTail(access, w.name);
    const rolledBack = await access.docker.removeContainer(w.name, { force: true }).then(
      () => true,
      () => false,
    );
    throw new ActionFailed(err, rolledBack ? FailureClass.ROLLED_BACK : FailureClass.ROLLBACK_FAILED, {
      log,
      path: path('start'),
    });
  }
  // What a start needs beyond Docker (Galera: a founding permit, or the cluster restarted from its members).
  let guarded = 0;
  if (ctx.guard?.covers(w)) {
    try {
      guarded = await ctx.guard.started(access, w);
    } catch (err) {
      throw new ActionFailed(err, FailureClass.HARD, { path: path('start') });
    }
  }
  await gateStarted(ctx, access, w, frontendGate, path);
  const action = { create: 'created', recreate: 'recreated', start: 'started' }[c.action];
  run.change({
    node: w.node,
    object: 'container',
    name: w.name,
    action,
    detail: c.changed.join(', '),
    ms: ctx.now() - t,
  });
  return 1 + guarded;
}

/**
 * Converge a node to the target plan for some services: their config files where the content
 * differs (atomic uploads), then each named container as its hash says, health gated.
 */
export const ensure: Handler<Of<'ensure'>, EngineContext> = async (a, ctx, run) => {
  const access = ctx.connect(a.node);
  const works = a.containers.map((c) => {
    const w = ctx.targetWork(a.node, c.name);
    if (!w || w.hash !== c.hash)
      throw planMismatch(a.node, `container ${c.name} (hash ${c.hash.slice(0, 12)}) is not in the target plan`);
    return w;
  });
  // What each container is to become, from Docker's word on it before anything of the node changes.
  const diffs: ContainerDiff[] = [];
  for (const w of works) diffs.push(diffContainer(w, await inspect(access, run, w)));
  // A recreate that would stop workloads is refused before the node's new files go up too (a
  // container that mounts its folder whole would hand them to the workloads it starts next).
  if (!ctx.allowWorkloadStop)
    for (const c of diffs)
      if (c.action === ContainerAction.RECREATE && c.work.definition.workloads)
        await refuseToStopWorkloadsAt(access, c.work, c, run);
  const configs = configsOf(ctx.targetDeploy, a.node, a.services);
  const uploaded = new Set<string>();
  let n = 0;
  if (configs.length) {
    let sums: Map<string, string>;
    try {
      const r = await access.exec(['sha256sum', '--', ...configs.map((c) => c.dest)], {
        timeoutMs: HANDLER_DEFAULTS.commandTimeoutMs,
      });
      sums = parseSha256sum(r.stdout); // missing files only go to stderr
    } catch (err) {
      throw new ActionFailed(err, FailureClass.RETRYABLE, { path: run.where(a.node, 'configs') });
    }
    for (const c of configs) {
      const d = diffConfig(c, sums.get(c.dest));
      const e = uploadEffect(a.node, c.dest, c.sha256);
      if (d.action === 'unchanged') {
        run.verify(e);
        continue;
      }
      const data = ctx.targetRendered.get(a.node)?.get(c.dest);
      if (data === undefined)
        throw new ActionFailed(
          new StackctlError('E_RENDERED_MISSING', `${a.node}: no rendered content for ${c.dest}`, {
            hint: 'This is a bug: the plan lists the file but did not render it.',
          }),
          FailureClass.RETRYABLE,
        );
      const t = ctx.now();
      try {
        await run.effect(e, () => access.files.upload({ data }, c.dest, { mode: parseInt(c.mode, 8) }));
      } catch (err) {
        // The upload is atomic: the old file (if any) is still in place.
        throw new ActionFailed(err, FailureClass.RETRYABLE, { path: run.where(a.node, `config ${c.dest}`) });
      }
      n++;
      uploaded.add(c.dest);
      run.change({
        node: a.node,
        object: 'config',
        name: c.dest,
        action: 'uploaded',
        detail: d.detail,
        ms: ctx.now() - t,
      });
    }
  }
  for (const c of diffs) n += await ensureContainer(ctx, run, access, c, a.frontendGate);
  // Running containers that re-read a file uploaded now: their health check passes once they serve it.
  const recreated = new Set(works.map((w) => w.name));
  for (const w of a.services.flatMap((svc) => containersOf(ctx.targetDeploy, svc, a.node))) {
    const files = Object.keys(w.reloads ?? {}).filter((f) => uploaded.has(f));
    if (files.length && !recreated.has(w.name)) await waitReloaded(ctx, access, run, w, files);
  }
  return n ? `${n} change(s)` : 'unchanged';
};

/**
 * Wait until a running container serves the files it re-reads in place (its health check, run here
 * until it passes, says so), bounded like a start's health gate. Fails with its log.
 */
async function waitReloaded(
  ctx: EngineContext,
  access: NodeAccess,
  run: RunScope,
  w: ContainerWork,
  files: readonly string[],
): Promise<void> {
  const t = ctx.now();
  const deadline = t + healthDeadlineMs(w);
  let code: number | undefined;
  while ((code = await runHealthcheck(access.docker, w)) !== 0) {
    if (ctx.now() > deadline || ctx.signal?.aborted)
      throw new ActionFailed(
        new TimeoutError(
          'E_RELOAD_TIMEOUT',
          `${w.node}: container ${w.name} (${w.service}) does not serve the new ${files.join(', ')} within ` +
            `${Math.round(healthDeadlineMs(w) / 1000)} s (its health check ${code === undefined ? 'did not finish' : `exits ${code}`})`,
          {
            hint: 'It keeps serving what it had: its log below says why it did not take the new content (e.g. refused as invalid); fix the template or inventory and deploy again.',
          },
        ),
        FailureClass.HARD,
        { log: await logTail(access, w.name), path: run.where(w.node, `${w.name}/reload`) },
      );
    await ctx.sleep(HANDLER_DEFAULTS.pollMs);
  }
  run.change({
    node: w.node,
    object: 'container',
    name: w.name,
    action: 'reloaded',
    detail: files.join(', '),
    ms: ctx.now() - t,
  });
}

/**
 * Wait for a task or one-off container to end. It may run as long as it makes progress (a new
 * line in its log within `quietMs`); one that goes quiet for longer is reported stuck, and left
 * running: a re-run or `--resume` finds it and waits for it again (it is never killed or removed
 * while it runs: a migration cut in the middle is worse than a slow one).
 */
async function waitToEnd(
  access: NodeAccess,
  name: string,
  what: string,
  o: {
    readonly now: () => number;
    readonly sleep: (ms: number) => Promise<void>;
    readonly quietMs: number;
    readonly signal?: AbortSignal;
  },
): Promise<{ code: number; log: string }> {
  let lastLog = '';
  let lastProgress = o.now();
  let nextLook = o.now() + HANDLER_DEFAULTS.progressPollMs;
  for (;;) {
    const info = await access.docker.inspectContainer(name);
    if (!info?.state.running) return { code: info?.state.exitCode ?? -1, log: await logTail(access, name) };
    if (o.now() >= nextLook) {
      nextLook = o.now() + HANDLER_DEFAULTS.progressPollMs;
      const tail = await access.docker
        .logs(name, { tail: 5 })
        .then((l) => l.stdout + l.stderr)
        .catch(() => lastLog);
      if (tail !== lastLog) {
        lastLog = tail;
        lastProgress = o.now();
      }
    }
    if (o.now() - lastProgress > o.quietMs || o.signal?.aborted) {
      throw new TimeoutError(
        'E_TASK_STUCK',
        `${access.node}: ${name} (${what}) still runs and wrote nothing for ${Math.round(o.quietMs / 1000)} s`,
        {
          hint:
            `It was left running. Look at 'docker logs ${name}' on ${access.node}; if it is working, run the command ` +
            'again with --resume (it waits for it instead of starting another) and, for a slow one, a longer --task-timeout.',
          details: { node: access.node, log: await logTail(access, name) },
        },
      );
    }
    await o.sleep(HANDLER_DEFAULTS.pollMs);
  }
}

/** Where a run-once work's marker lives on its node. */
export const markerFile = (w: RunOnceWork): string => `${MARKER_DIR}/${w.service}.${w.kind}.${w.name}`;

/** The hash a run-once work records when done (a registration's includes its password's digest). */
export function workHash(w: RunOnceWork, secret: (name: string) => Secret | undefined): string {
  return w.kind === 'register' ? identityHash(w, secret) : w.hash;
}

/** The input hash recorded on the node for run-once work, if any. */
export async function markerOf(access: NodeAccess, w: RunOnceWork): Promise<string | undefined> {
  const r = await access.exec(['cat', markerFile(w)], { timeoutMs: HANDLER_DEFAULTS.commandTimeoutMs });
  return r.code === 0 ? r.stdout.trim() : undefined;
}

/** The journal's effect kind of each kind of run-once work. */
const WORK_EFFECT: Readonly<Record<RunOnceWork['kind'], EffectKind>> = {
  task: EffectKind.TASK,
  database: EffectKind.DATABASE,
  register: EffectKind.REGISTER,
  resources: EffectKind.REGISTER,
};

/** A task container that failed, with the end of its log. */
class TaskFailed extends RemoteError {
  constructor(
    message: string,
    readonly log: string,
  ) {
    super('E_TASK_FAILED', message, { hint: 'The task log below says why; fix it and deploy again (or --resume).' });
  }
}

/**
 * A one-shot container from the task's borrowed container definition. A killed run may have left
 * this very task (its hash label) running: it is waited for, not started again; finished well, it
 * is done. Anything else of that name is removed and the task runs afresh.
 */
async function runTask(
  ctx: EngineContext,
  access: NodeAccess,
  w: Extract<RunOnceWork, { kind: 'task' }>,
): Promise<string> {
  const name = `stackctl-${w.service}-${w.name}`;
  const left = await access.docker.inspectContainer(name);
  const ours = left !== undefined && left.labels[LABEL.hash] === w.hash;
  const adopted =
    ours && left.state.running
      ? 'running'
      : ours && left.state.status === 'exited' && left.state.exitCode === 0
        ? 'finished'
        : undefined;
  if (!adopted) {
    const base = containerSpec(ctx.targetDeploy.cloud, w.container);
    await access.docker.removeContainer(name, { force: true }); // a failed or foreign leftover
    const { healthcheck: _h, ...rest } = base;
    await access.docker.createContainer({
      ...rest,
      name,
      command: w.command,
      restart: 'no',
      labels: { [LABEL.cloud]: ctx.targetDeploy.cloud, [LABEL.service]: w.service, [LABEL.hash]: w.hash },
    });
    await access.docker.startContainer(name);
  }
  const r = await waitToEnd(access, name, `task ${w.service}/${w.name}`, {
    now: ctx.now,
    sleep: ctx.sleep,
    quietMs: ctx.quietTimeoutMs ?? HANDLER_DEFAULTS.quietTimeoutMs,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
  });
  if (r.code !== 0) {
    await access.docker.removeContainer(name, { force: true }).catch(() => undefined);
    throw new TaskFailed(`${w.node}: task ${w.service}/${w.name} exited with ${r.code}`, r.log);
  }
  await access.docker.removeContainer(name, { force: true });
  return adopted === 'running'
    ? 'started before a kill: waited for'
    : adopted === 'finished'
      ? 'ended well before a kill'
      : '';
}

/** A MariaDB string literal: the escaper templates use for SQL (src/roles/escape.ts). */
const sqlString = ESCAPERS.sql.escape;

/** Create a database and its user through the database service's client; the SQL (with the password) goes over stdin. */
async function createDatabase(
  ctx: EngineContext,
  access: NodeAccess,
  w: Extract<RunOnceWork, { kind: 'database' }>,
): Promise<void> {
  const db = ctx.services.database;
  if (!db)
    throw new StackctlError(
      'E_NO_DATABASE_SERVICE',
      `database ${w.name}: no service of the catalog provides a database`,
      {
        hint: 'Declare provides.database in the database service file (roles/services/).',
      },
    );
  const pw = ctx.secret(w.passwordSecret);
  if (!pw) {
    throw new StackctlError('E_SECRET_MISSING', `secret '${w.passwordSecret}' (database ${w.name}) is missing`, {
      hint: "Run 'stackctl secrets generate' for this inventory.",
    });
  }
  const user = sqlString(w.user);
  const sql = [
    `CREATE DATABASE IF NOT EXISTS \`${w.name}\`;`,
    `CREATE USER IF NOT EXISTS ${user}@'%' IDENTIFIED BY ${sqlString(pw.reveal())};`,
    `ALTER USER ${user}@'%' IDENTIFIED BY ${sqlString(pw.reveal())};`,
    `GRANT ALL PRIVILEGES ON \`${w.name}\`.* TO ${user}@'%';`,
    'FLUSH PRIVILEGES;',
  ].join('\n');
  const r = await access.exec(['docker', 'exec', '-i', db.container, ...db.client], {
    timeoutMs: HANDLER_DEFAULTS.commandTimeoutMs,
    stdin: sql + '\n',
  });
  // A syntax error quotes the SQL near it, which may hold the password.
  let redacted = r.stderr;
  for (const v of [pw.reveal(), sqlString(pw.reveal()).slice(1, -1)]) redacted = redacted.split(v).join('<redacted>');
  redacted = redacted.trim().slice(-400);
  if (r.code !== 0) {
    throw new RemoteError('E_DATABASE_CREATE', `${access.node}: creating database ${w.name} failed: ${redacted}`, {
      hint: `Is ${db.container} running and healthy on ${access.node}? See its log.`,
    });
  }
}

/** Run-once work on its node: a database, a task, a registration; once per input hash (its marker). */
export const runOnce: Handler<Of<'run-once'>, EngineContext> = async (a, ctx, run) => {
  const w = runOnceOf(ctx.targetDeploy, a.node, a.service, a.work, a.name);
  if (!w) throw planMismatch(a.node, `run-once ${a.work} ${a.service}/${a.name} is not in the target plan`);
  const access = ctx.connect(w.node);
  const hash = workHash(w, (n) => ctx.secret(n));
  const e: Effect = { kind: WORK_EFFECT[w.kind], node: w.node, target: `${w.service}/${w.name}`, hash };
  const path = run.where(w.node, `${w.kind} ${w.service}/${w.name}`);
  if ((await markerOf(access, w)) === hash) {
    run.verify(e);
    run.change({ node: w.node, object: w.kind, name: `${w.service}/${w.name}`, action: 'unchanged' });
    return 'done before';
  }
  const t = ctx.now();
  let detail = '';
  try {
    await run.effect(e, async () => {
      if (w.kind === 'task') detail = await runTask(ctx, access, w);
      else if (w.kind === 'database') await createDatabase(ctx, access, w);
      else {
        if (!ctx.targetDeploy.identity || !ctx.services.identity)
          throw new StackctlError(
            'E_NO_IDENTITY_SERVICE',
            `${w.service}/${w.name}: the plan has no identity service to register with`,
            {
              hint: 'Declare provides.identity in the identity service file and place it on a role.',
            },
          );
        const done = await runIdentityWork(
          access,
          w,
          ctx.targetDeploy.identity,
          ctx.services.identity.clientContainer,
          (n) => ctx.secret(n),
          ctx.guestImage?.(),
        );
        detail = done
          .filter((x) => x.action !== 'unchanged')
          .map((x) => `${x.object} ${x.name} ${x.action}`)
          .join(', ');
      }
      await access.exec(
        [
          'sh',
          '-c',
          'mkdir -p "$1" && printf "%s\\n" "$2" > "$3.tmp" && mv "$3.tmp" "$3"',
          'sh',
          MARKER_DIR,
          hash,
          markerFile(w),
        ],
        { timeoutMs: HANDLER_DEFAULTS.commandTimeoutMs },
      );
    });
  } catch (err) {
    throw new ActionFailed(err, FailureClass.HARD, { ...(err instanceof TaskFailed ? { log: err.log } : {}), path });
  }
  run.change({
    node: w.node,
    object: w.kind,
    name: `${w.service}/${w.name}`,
    action: 'ran',
    detail,
    ms: ctx.now() - t,
  });
  return detail ? `ran: ${detail}` : 'ran';
};

/** The load balancer as the service files declare it; refused when none does. */
function loadBalancer(ctx: EngineContext) {
  const lb = ctx.services.loadBalancer;
  if (!lb)
    throw new StackctlError(
      'E_NO_LOAD_BALANCER',
      'the plan drains backends, but no service of the catalog provides a load balancer',
      {
        hint: 'Declare provides.load_balancer in the load balancer service file (roles/services/).',
      },
    );
  return lb;
}

/** Send commands to a node's load balancer admin socket; resolves with its answer. */
async function adminSocket(ctx: EngineContext, access: NodeAccess, commands: readonly string[]): Promise<string> {
  const lb = loadBalancer(ctx);
  const r = await access.docker.exec(
    lb.container,
    // Non-interactive, HAProxy reads one line per connection: commands go on it separated by ';'.
    ['sh', '-c', 'printf "%s\\n" "$1" | socat stdio unix-connect:"$0"', lb.adminSocket, commands.join('; ')],
    { timeoutMs: HANDLER_DEFAULTS.commandTimeoutMs },
  );
  if (r.code !== 0) {
    throw new RemoteError(
      'E_HAPROXY_ADMIN',
      `${access.node}: load balancer admin socket ${lb.adminSocket} failed: ${(r.stderr || r.stdout).trim().slice(-300)}`,
      { hint: `Is the ${lb.container} container running on ${access.node}? See 'docker logs ${lb.container}'.` },
    );
  }
  return r.stdout;
}

/** Current sessions per `backend/server` from `show stat` (CSV: pxname, svname, qcur, qmax, scur, ...). */
export function sessionsOf(csv: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of csv.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const f = line.split(',');
    if (f.length > 4) out.set(`${f[0]}/${f[1]}`, Number(f[4]) || 0);
  }
  return out;
}

/** Check status per `backend/server` from `show stat` (column 18: UP, DOWN, MAINT, DRAIN, `UP 1/2`...). */
export function serverStatusOf(csv: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of csv.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const f = line.split(',');
    if (f.length > 17) out.set(`${f[0]}/${f[1]}`, f[17]!);
  }
  return out;
}

/** `set server` states of the drain and enable actions. */
const SERVER_STATE = { drain: 'drain', enable: 'ready' } as const;

/** Set the state of the node's servers on every load balancer; returns the notes (missing backends). */
async function setServers(
  ctx: EngineContext,
  a: Of<'drain'> | Of<'enable'>,
  commands: (frontend: string) => string[],
): Promise<{ lbs: string[]; notes: string[] }> {
  const lbs = nodesRunning(ctx.currentDeploy, loadBalancer(ctx).service);
  const notes: string[] = [];
  await mapLimit(lbs, lbs.length || 1, async (lb) => {
    const answer = await adminSocket(ctx, ctx.connect(lb), a.frontends.flatMap(commands));
    // One answer per command; success is an empty line, a missing backend or server says so.
    for (const line of answer.split('\n').map((l) => l.trim())) {
      if (/^No such (backend|server)/i.test(line)) notes.push(`${lb}: ${line}`);
    }
  });
  return { lbs, notes: [...new Set(notes)] };
}

/**
 * Drain the node's servers in its frontends on every load balancer, so new connections go to the
 * other nodes, then close the sessions still open on them (pooled database connections never end
 * by themselves: their clients reconnect, through the load balancer, to another node), and wait
 * for them to be gone (30 s at most).
 */
export const drain: Handler<Of<'drain'>, EngineContext> = async (a, ctx) => {
  const { lbs, notes } = await setServers(ctx, a, (f) => [`set server ${f}/${a.node} state ${SERVER_STATE.drain}`]);
  const t0 = ctx.now();
  const deadline = t0 + HANDLER_DEFAULTS.drainTimeoutMs;
  let left = 0;
  let shut = false;
  for (;;) {
    left = 0;
    for (const lb of lbs) {
      const s = sessionsOf(await adminSocket(ctx, ctx.connect(lb), ['show stat']));
      for (const f of a.frontends) left += s.get(`${f}/${a.node}`) ?? 0;
    }
    if (left === 0 || ctx.now() >= deadline || ctx.signal?.aborted) break;
    if (!shut && ctx.now() - t0 >= HANDLER_DEFAULTS.drainGraceMs) {
      // Requests in flight end within the grace; what is still open then (pooled database
      // connections, which never end by themselves) is closed: its clients reconnect elsewhere.
      await setServers(ctx, a, (f) => [`shutdown sessions server ${f}/${a.node}`]);
      shut = true;
    }
    await ctx.sleep(HANDLER_DEFAULTS.pollMs);
  }
  let detail = `drained on ${lbs.length} load balancer node(s)`;
  if (shut) detail += ', sessions still open after the grace closed';
  if (left) detail += `, ${left} session(s) still open after ${HANDLER_DEFAULTS.drainTimeoutMs / 1000} s`;
  if (notes.length) detail += `; not found: ${notes.join('; ')}`;
  return detail;
};

/**
 * Put the node's servers back in service on every load balancer, and wait until its own checks
 * say UP: the next node of a rolling restart is drained only once this one serves.
 */
export const enable: Handler<Of<'enable'>, EngineContext> = async (a, ctx) => {
  const { lbs, notes } = await setServers(ctx, a, (f) => [`set server ${f}/${a.node} state ${SERVER_STATE.enable}`]);
  const deadline = ctx.now() + HANDLER_DEFAULTS.enableTimeoutMs;
  let notUp: string[] = [];
  for (;;) {
    notUp = [];
    for (const lb of lbs) {
      const s = serverStatusOf(await adminSocket(ctx, ctx.connect(lb), ['show stat']));
      for (const f of a.frontends) {
        const st = s.get(`${f}/${a.node}`);
        // a server missing there was already noted by setServers
        if (st !== undefined && !st.startsWith('UP') && st !== 'no check') notUp.push(`${lb}: ${f}/${a.node} ${st}`);
      }
    }
    if (!notUp.length || ctx.now() >= deadline || ctx.signal?.aborted) break;
    await ctx.sleep(HANDLER_DEFAULTS.pollMs);
  }
  if (notUp.length) {
    throw new StackctlError(
      'E_BACKEND_NOT_UP',
      `${a.node}: the load balancer does not see its backends up ${HANDLER_DEFAULTS.enableTimeoutMs / 1000} s after re-enabling them: ${notUp.join('; ')}`,
      {
        hint: `The container is healthy on ${a.node} but the load balancer's check fails: see its log and the service's.`,
      },
    );
  }
  return `ready and UP on ${lbs.length} load balancer node(s)${notes.length ? `; not found: ${notes.join('; ')}` : ''}`;
};

/** Stop and remove containers; those already gone are fine. */
export const stop: Handler<Of<'stop'>, EngineContext> = async (a, ctx) => {
  const docker = ctx.connect(a.node).docker;
  let stopped = 0;
  for (const name of a.containers) {
    if (!(await docker.inspectContainer(name))) continue;
    await docker.stopContainer(name, { timeoutS: HANDLER_DEFAULTS.stopTimeoutS });
    await docker.removeContainer(name, { force: true });
    stopped++;
  }
  const done = `${stopped} stopped and removed, ${a.containers.length - stopped} already gone`;
  if (!a.resetVolumes?.length) return done;
  for (const v of a.resetVolumes) {
    try {
      await docker.removeVolume(v);
    } catch (err) {
      throw new RemoteError(
        'E_VOLUME_RESET',
        `${a.node}: cannot empty volume ${v} of ${a.service}: ${messageOf(err)}`,
        {
          hint: `Check with 'docker volume inspect ${v}' on ${a.node} that no other container uses it, then run the command again with --resume.`,
          cause: err,
        },
      );
    }
  }
  return `${done}; volume(s) ${a.resetVolumes.join(', ')} emptied`;
};

/**
 * Wait until a container is healthy (its healthcheck, or running for 2 s without one). Restarts Docker
 * made before are not held against it: this gate also checks containers the run did not start.
 */
export function waitHealthy(ctx: EngineContext, w: ContainerWork): Promise<void> {
  return waitContainerHealthy(ctx.connect(w.node), w, {
    now: ctx.now,
    sleep: ctx.sleep,
    pollMs: HANDLER_DEFAULTS.pollMs,
    logLines: HANDLER_DEFAULTS.logLines,
    restartsFail: false,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
  });
}

/**
 * Health gate: every target container of the services on the node is healthy. One the run left
 * alone and found unwell goes to the deploy's guard when it covers it (a Galera member: the cluster
 * is asked, and restarted where that is safe); its failure names the container's health.
 */
export const health: Handler<Of<'health'>, EngineContext> = async (a, ctx, run) => {
  const works = a.services.flatMap((s) => containersOf(ctx.targetDeploy, s, a.node));
  const guard = ctx.guard;
  const guarded = guard ? works.filter((w) => a.unwell?.includes(w.name) && guard.covers(w)) : [];
  // The guarded first: the others of the service (a cluster's check container) wait for their server.
  let changes = 0;
  await Promise.all(
    guarded.map(async (w) => {
      try {
        changes += await guard!.unchanged(ctx.connect(a.node), w);
      } catch (err) {
        throw new ActionFailed(err, FailureClass.HARD, { path: run.where(a.node, `${w.name}/health`) });
      }
    }),
  );
  // found not serving the files it re-reads (a run killed after their upload): its own check decides,
  // since Docker's verdict lags an interval behind
  const reloading = works.filter((w) => w.reloads && a.unwell?.includes(w.name));
  await Promise.all(
    works.filter((w) => !guarded.includes(w) && !reloading.includes(w)).map((w) => waitHealthy(ctx, w)),
  );
  for (const w of reloading) await waitReloaded(ctx, ctx.connect(a.node), run, w, Object.keys(w.reloads!));
  return `${works.length} container(s) healthy${changes ? `, ${changes} change(s)` : ''}`;
};

/** `20261122T213000Z`: an ISO 8601 time that is a plain file name. */
function fileTime(ms: number): string {
  return new Date(ms)
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
}

/** The database service as the service files declare it; refused when none does. */
function database(ctx: EngineContext) {
  const db = ctx.services.database;
  if (!db)
    throw new StackctlError('E_NO_DATABASE_SERVICE', 'the plan backs up a database, but no service provides one', {
      hint: 'Declare provides.database in the database service file (roles/services/).',
    });
  return db;
}

/**
 * Dump the service's databases on the database node, gzipped, written to a temporary file then
 * renamed; the password stays in the client config on the node (never in argv).
 */
export const backup: Handler<Of<'backup'>, EngineContext> = async (a, ctx) => {
  if (a.commands?.length) return commandBackups(a, ctx, a.commands);
  const db = database(ctx);
  const dir = `${HANDLER_DEFAULTS.backupDir}/${ctx.run ?? 'manual'}`;
  const path = `${dir}/${a.service}-${fileTime(ctx.now())}.sql.gz`;
  const script = [
    'dir="$1"; out="$2"; shift 2',
    'mkdir -p "$dir" && chmod 700 "$dir" || exit 1',
    '( docker exec -i "$@"; echo $? > "$out.rc" ) | gzip > "$out.tmp"',
    'rc=$(cat "$out.rc"); rm -f "$out.rc"',
    'if [ "$rc" = 0 ]; then chmod 600 "$out.tmp" && mv "$out.tmp" "$out"; else rm -f "$out.tmp"; exit "$rc"; fi',
  ].join('\n');
  const r = await ctx
    .connect(a.node)
    .exec(['sh', '-c', script, 'sh', dir, path, db.container, ...db.dump, ...a.databases], {
      timeoutMs: HANDLER_DEFAULTS.backupTimeoutMs,
    });
  if (r.code !== 0) {
    throw new RemoteError(
      'E_BACKUP_FAILED',
      `${a.node}: backup of ${a.service} (${a.databases.join(', ')}) failed: ${r.stderr.trim().slice(-400)}`,
      {
        hint: `Nothing of ${a.service} was migrated. Is ${db.container} healthy on ${a.node}, with room in ${HANDLER_DEFAULTS.backupDir}?`,
      },
    );
  }
  ctx.backups?.set(a.service, `${a.node}:${path}`);
  return `${a.node}:${path}`;
};

/**
 * The node's shell side of a declared backup: the command's standard output into a temporary
 * file of a root-only folder, refused when empty, then renamed; prints the file's size in bytes.
 */
export const COMMAND_BACKUP_SCRIPT = [
  'dir="$1"; out="$2"; shift 2',
  'mkdir -p "$dir" && chmod 700 "$dir" || exit 1',
  'umask 077',
  'docker exec "$@" > "$out.tmp" || { rc=$?; rm -f "$out.tmp"; exit "$rc"; }',
  'size=$(wc -c < "$out.tmp")',
  'if [ "$size" -eq 0 ]; then rm -f "$out.tmp"; echo "the command wrote nothing" >&2; exit 3; fi',
  'mv "$out.tmp" "$out" && echo "$size"',
].join('\n');

/**
 * A service's declared backups (`upgrade.backup` of its file), one after the other in its running
 * old containers on the node: `<dir>/<run>/<service>-<time>-<name>`, root only. The detail names
 * every file with its size (the event log and the report carry it).
 */
async function commandBackups(
  a: Of<'backup'>,
  ctx: EngineContext,
  commands: readonly BackupCommand[],
): Promise<string> {
  const dir = `${HANDLER_DEFAULTS.backupDir}/${ctx.run ?? 'manual'}`;
  const time = fileTime(ctx.now());
  const saved: string[] = [];
  for (const c of commands) {
    const path = `${dir}/${a.service}-${time}-${c.name}`;
    const r = await ctx
      .connect(a.node)
      .exec(['sh', '-c', COMMAND_BACKUP_SCRIPT, 'sh', dir, path, c.container, ...c.command], {
        timeoutMs: HANDLER_DEFAULTS.backupTimeoutMs,
      });
    const size = /^(\d+)\s*$/.exec(r.stdout.trim())?.[1];
    if (r.code !== 0 || size === undefined) {
      throw new RemoteError(
        'E_BACKUP_FAILED',
        `${a.node}: backup ${c.name} of ${a.service} (${c.command.join(' ')} in ${c.container}) failed: ` +
          `${r.code !== 0 ? `exit ${r.code}: ${r.stderr.trim().slice(-400)}` : `no size reported: ${r.stdout.trim().slice(-200)}`}`,
        {
          hint:
            `Nothing of ${a.service} was moved${saved.length ? ` (saved so far: ${saved.join(', ')})` : ''}. ` +
            `Is ${c.container} running and healthy on ${a.node}, with room in ${HANDLER_DEFAULTS.backupDir}? ` +
            'Then run again with --resume.',
        },
      );
    }
    saved.push(`${a.node}:${path} (${size} bytes)`);
  }
  const detail = saved.join(', ');
  ctx.backups?.set(a.service, detail);
  return detail;
}

/**
 * Where each container of a service stands: `node/name image (state)`, or for one stopped and
 * removed (an offline window) `node/name absent (current release IMAGE, target IMAGE)`, so that
 * the report says which version each node is at.
 */
async function serviceState(ctx: EngineContext, service: string): Promise<string> {
  const out: string[] = [];
  for (const w of containersOf(ctx.targetDeploy, service)) {
    const info = await ctx
      .connect(w.node)
      .docker.inspectContainer(w.name)
      .catch(() => undefined);
    const current = ctx.currentWork(w.node, w.name)?.image;
    const absent = `absent (${current ? `current release ${current}, ` : ''}target ${w.image})`;
    out.push(`${w.node}/${w.name} ${info ? `${info.image} (${info.state.status})` : absent}`);
  }
  return out.join(', ');
}

/**
 * Refuse a contract migration while any container of the service runs an image other than the
 * target's: old code would lose the columns it still reads.
 */
export async function assertContractSafe(ctx: EngineContext, service: string): Promise<void> {
  const old: string[] = [];
  for (const w of containersOf(ctx.targetDeploy, service)) {
    const info = await ctx.connect(w.node).docker.inspectContainer(w.name);
    if (info?.state.running && info.image !== w.image) old.push(`${w.node}/${w.name} (${info.image})`);
  }
  if (old.length) {
    throw new RemoteError(
      'E_CONTRACT_REFUSED',
      `${service}: contract migration refused: ${old.length} container(s) still run an old image: ${old.join(', ')}`,
      {
        hint: `Every ${service} container must run the target image before its database is contracted; look at why they were not replaced, then run again with --resume.`,
        details: { service, containers: old },
      },
    );
  }
}

/** A database migration, once, in a one-off container of the target image. */
export const migrate: Handler<Of<'migrate'>, EngineContext> = async (a, ctx) => {
  if (a.stage === 'contract') await assertContractSafe(ctx, a.service);
  const work = ctx.targetWork(a.node, a.container) ?? ctx.currentWork(a.node, a.container);
  if (!work) throw planMismatch(a.node, `no container ${a.container} of ${a.service} in the plans`);
  const r = await ctx.oneOff(a.node, work, a.image, a.command, { name: `${a.service}-${a.stage}` });
  if (r.code !== 0) {
    const state = await serviceState(ctx, a.service);
    const saved = ctx.backups?.get(a.service);
    throw new RemoteError(
      'E_MIGRATION_FAILED',
      `${a.node}: ${a.stage} migration of ${a.service} (${a.command.join(' ')}) exited with ${r.code}; ${a.service} containers: ${state}`,
      {
        hint: `${saved ? `The backup taken before it is ${saved}. ` : ''}Fix the cause shown in the log, then run again with --resume: the migration runs again.`,
        details: { service: a.service, log: r.log },
      },
    );
  }
  if (r.adopted === 'running') return `${a.stage} done (started before the kill: waited for, not run again)`;
  if (r.adopted === 'finished') return `${a.stage} done (started before the kill, ended well: not run again)`;
  return `${a.stage} done`;
};

/** What a one-off container runner needs. */
export interface OneOffDeps {
  readonly cloud: string;
  /** The run: a run resumed after a kill finds its own one-off containers by it. */
  readonly run?: string;
  readonly connect: (node: string) => NodeAccess;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  /** How long it may go without a new log line (default HANDLER_DEFAULTS.quietTimeoutMs). */
  readonly quietTimeoutMs?: number;
}

/**
 * The context's `oneOff`: a container borrowing `work`'s definition (volumes, configs, network)
 * with another image and command, no restart, no healthcheck, removed afterwards; bounded by a
 * deadline.
 */
export function oneOffRunner(deps: OneOffDeps): EngineContext['oneOff'] {
  return async (node, work, image, command, opts = {}): Promise<OneOffResult> => {
    const access = deps.connect(node);
    const name = `stackctl-upgrade-${opts.name ?? work.name}`.replace(/[^a-zA-Z0-9_.-]/g, '-');
    const { healthcheck: _h, ...spec } = containerSpec(deps.cloud, work);
    // The run, image and command: what a resumed run recognises as its own.
    const digest = sha256(canonicalJson({ run: deps.run ?? '', image, command }));
    // This run, killed, may have left this very container: still running (a migration half done: wait
    // for it rather than cut it), or finished well (done: not again). Anything else is removed.
    const left = await access.docker.inspectContainer(name);
    const ours = left !== undefined && left.labels[LABEL.oneOff] === digest;
    const adopted =
      ours && left.state.running
        ? 'running'
        : ours && left.state.status === 'exited' && left.state.exitCode === 0
          ? 'finished'
          : undefined; // never started (killed between create and start), or failed: run afresh
    if (!adopted) {
      await access.docker.removeContainer(name, { force: true });
      // NOTE: the prechecks run the target's own checks before the pull phase: fetch that one image first.
      if (!(await access.docker.imageExists(image))) await access.docker.pullImage(image);
      await access.docker.createContainer({
        ...spec,
        name,
        image,
        command,
        restart: 'no',
        labels: { [LABEL.cloud]: deps.cloud, [LABEL.service]: work.service, [LABEL.oneOff]: digest },
      });
      await access.docker.startContainer(name);
    }
    // A stuck one is left running (E_TASK_STUCK): --resume finds it by its label and waits again.
    const r = await waitToEnd(access, name, `${work.service}: ${command.join(' ')}`, {
      now: deps.now,
      sleep: deps.sleep,
      quietMs: opts.timeoutMs ?? deps.quietTimeoutMs ?? HANDLER_DEFAULTS.quietTimeoutMs,
    });
    await access.docker.removeContainer(name, { force: true }).catch(() => undefined);
    return { code: r.code, log: r.log, ...(adopted ? { adopted } : {}) };
  };
}

/** The handlers of this file, by action kind (cluster-check is status's: src/status/cluster-check.ts). */
export const NODE_HANDLERS: Omit<Handlers<NodeAction, EngineContext>, 'cluster-check'> = {
  host,
  pull,
  ensure,
  'run-once': runOnce,
  drain,
  enable,
  stop,
  health,
  backup,
  migrate,
};
