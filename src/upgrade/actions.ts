/**
 * What the upgrade actions do on the nodes: pull, drain and re-enable HAProxy
 * backends, recreate containers with the target definition (through the
 * deploy executor, so uploads, health and the frontend gate are the deploy's),
 * stop, health gates, database backups and migrations in one-off containers.
 * Every handler is idempotent against real state: a swap looks at the
 * container's hash label, a stop of a missing container is done, a pull of a
 * present image is nothing.
 */
import { RemoteError, StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import { canonicalJson, sha256 } from '../core/hash.js';
import { mapLimit } from '../core/concurrency.js';
import {
  DATABASE_SERVER,
  EXECUTOR_DEFAULTS,
  executeDeploy,
  plainRunner,
  type NodeAccess,
} from '../orchestrator/executor.js';
import { logTail as containerLogTail, waitHealthy as waitContainerHealthy } from '../orchestrator/health.js';
import { MemoryJournal } from '../orchestrator/journal.js';
import type { ContainerWork, DeployPlan, DeployStep } from '../orchestrator/planner.js';
import { LABEL, containerSpec } from '../orchestrator/state.js';
import type { ActionHandler, ActionHandlers, OneOffResult, UpgradeContext } from './context.js';
import type { ContainerSwap, UpgradeAction } from './model.js';
import { containersOf } from './runner.js';

/** Tuning of the actions. */
export const ACTION_DEFAULTS = {
  /** How long a drained server gets for its sessions to end. */
  drainTimeoutMs: 30_000,
  /** Deadline of a one-off container (migration, upgrade check). */
  oneOffTimeoutMs: 10 * 60_000,
  /** Deadline of a database dump. */
  backupTimeoutMs: 30 * 60_000,
  /** Where backups go on the database node: `<dir>/<run>/<service>-<time>.sql.gz`. */
  backupDir: '/var/lib/stackctl/backups',
} as const;

/** HAProxy as the template (roles/templates/haproxy/haproxy.cfg.hbs) sets it up: `listen <frontend>`, `server <node>`. */
export const HAPROXY = {
  container: 'haproxy',
  service: 'haproxy',
  socket: '/run/haproxy/admin.sock',
} as const;

/** `set server` states of the drain and enable actions. */
const SERVER_STATE = { drain: 'drain', enable: 'ready' } as const;

type Of<K extends UpgradeAction['kind']> = Extract<UpgradeAction, { kind: K }>;

/** The end of a container's log, or a note that it could not be read. */
const logTail = (access: NodeAccess, name: string): Promise<string> =>
  containerLogTail(access.docker, name, EXECUTOR_DEFAULTS.logLines);

/** Pull the images a node lacks. */
export const pull: ActionHandler<Of<'pull'>> = async (a, ctx) => {
  const docker = ctx.connect(a.node).docker;
  let pulled = 0;
  for (const image of a.images) {
    if (await docker.imageExists(image)) continue;
    try {
      await docker.pullImage(image);
    } catch (err) {
      throw new RemoteError('E_IMAGE_PULL', `${a.node}: cannot pull ${image}: ${messageOf(err)}`, {
        hint: `Push it first (stackctl images push --release ${ctx.target.name}) and check that ${a.node} reaches the registry. Nothing was stopped.`,
      });
    }
    pulled++;
  }
  return `${pulled} pulled, ${a.images.length - pulled} present`;
};

/** Nodes running HAProxy in the current plan. */
function haproxyNodes(ctx: UpgradeContext): string[] {
  return [...new Set(containersOf(ctx.currentDeploy, HAPROXY.service).map((w) => w.node))].sort();
}

/** Send commands to a node's HAProxy admin socket; resolves with its answer. */
async function adminSocket(access: NodeAccess, commands: readonly string[]): Promise<string> {
  const r = await access.docker.exec(
    HAPROXY.container,
    // Non-interactive, HAProxy reads one line per connection: commands go on it separated by ';'.
    ['sh', '-c', 'printf "%s\\n" "$1" | socat stdio unix-connect:"$0"', HAPROXY.socket, commands.join('; ')],
    { timeoutMs: EXECUTOR_DEFAULTS.commandTimeoutMs },
  );
  if (r.code !== 0) {
    throw new RemoteError(
      'E_HAPROXY_ADMIN',
      `${access.node}: HAProxy admin socket ${HAPROXY.socket} failed: ${(r.stderr || r.stdout).trim().slice(-300)}`,
      {
        hint: `Is the ${HAPROXY.container} container running on ${access.node}? See 'docker logs ${HAPROXY.container}'.`,
      },
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

/** Set the state of the node's servers on every HAProxy; returns the notes (missing backends). */
async function setServers(
  ctx: UpgradeContext,
  a: Of<'drain'> | Of<'enable'>,
  state: (typeof SERVER_STATE)[keyof typeof SERVER_STATE],
): Promise<{ lbs: string[]; notes: string[] }> {
  const lbs = haproxyNodes(ctx);
  const notes: string[] = [];
  await mapLimit(lbs, lbs.length || 1, async (lb) => {
    const answer = await adminSocket(
      ctx.connect(lb),
      a.frontends.map((f) => `set server ${f}/${a.node} state ${state}`),
    );
    // One answer per command; success is an empty line, a missing backend or server says so.
    for (const line of answer.split('\n').map((l) => l.trim())) {
      if (/^No such (backend|server)/i.test(line)) notes.push(`${lb}: ${line}`);
    }
  });
  return { lbs, notes };
}

/** Drain the node's servers in its frontends on every HAProxy, then wait for their sessions to end (30 s at most). */
export const drain: ActionHandler<Of<'drain'>> = async (a, ctx) => {
  const { lbs, notes } = await setServers(ctx, a, SERVER_STATE.drain);
  const deadline = ctx.now() + ACTION_DEFAULTS.drainTimeoutMs;
  let left = 0;
  for (;;) {
    left = 0;
    for (const lb of lbs) {
      const s = sessionsOf(await adminSocket(ctx.connect(lb), ['show stat']));
      for (const f of a.frontends) left += s.get(`${f}/${a.node}`) ?? 0;
    }
    if (left === 0 || ctx.now() >= deadline || ctx.signal?.aborted) break;
    await ctx.sleep(EXECUTOR_DEFAULTS.pollMs);
  }
  let detail = `drained on ${lbs.length} HAProxy node(s)`;
  if (left) detail += `, ${left} session(s) still open after ${ACTION_DEFAULTS.drainTimeoutMs / 1000} s`;
  if (notes.length) detail += `; not found: ${notes.join('; ')}`;
  return detail;
};

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

/**
 * Put the node's servers back in service on every HAProxy, and wait until HAProxy's own
 * checks say UP: the next node of a rolling restart is drained only once this one serves.
 */
export const enable: ActionHandler<Of<'enable'>> = async (a, ctx) => {
  const { lbs, notes } = await setServers(ctx, a, SERVER_STATE.enable);
  const deadline = ctx.now() + ACTION_DEFAULTS.drainTimeoutMs;
  let notUp: string[] = [];
  for (;;) {
    notUp = [];
    for (const lb of lbs) {
      const s = serverStatusOf(await adminSocket(ctx.connect(lb), ['show stat']));
      for (const f of a.frontends) {
        const st = s.get(`${f}/${a.node}`);
        // a server missing there was already noted by setServers
        if (st !== undefined && !st.startsWith('UP') && st !== 'no check') notUp.push(`${lb}: ${f}/${a.node} ${st}`);
      }
    }
    if (!notUp.length || ctx.now() >= deadline || ctx.signal?.aborted) break;
    await ctx.sleep(EXECUTOR_DEFAULTS.pollMs);
  }
  if (notUp.length) {
    throw new StackctlError(
      'E_BACKEND_NOT_UP',
      `${a.node}: HAProxy does not see its backends up ${ACTION_DEFAULTS.drainTimeoutMs / 1000} s after re-enabling them: ${notUp.join('; ')}`,
      {
        hint: `The container is healthy on ${a.node} but HAProxy's check fails: see 'docker logs haproxy' and the service's log.`,
      },
    );
  }
  return `ready and UP on ${lbs.length} HAProxy node(s)${notes.length ? `; not found: ${notes.join('; ')}` : ''}`;
};

/**
 * A deploy plan for one node holding only the target containers of `swaps`
 * and the target configs of their services, in their deploy steps.
 */
export function swapPlan(
  ctx: UpgradeContext,
  node: string,
  swaps: readonly ContainerSwap[],
  opts: { readonly frontendGate?: boolean } = {},
): DeployPlan {
  const names = new Set(swaps.map((s) => s.container));
  const services = new Set(swaps.map((s) => s.service));
  const steps: DeployStep[] = [];
  const found = new Set<string>();
  for (const st of ctx.targetDeploy.steps) {
    const nw = st.nodes.find((n) => n.node === node);
    if (!nw) continue;
    const containers = nw.containers
      .filter((c) => names.has(c.name))
      // NOTE: a drained node's backend gets no new requests through HAProxy: gating on the VIP would wait for the
      // other nodes (or, on one node, time out). The enable action waits for HAProxy to see the backend UP instead.
      .map(({ frontend, ...c }) => (opts.frontendGate === false || !frontend ? c : { ...c, frontend }));
    const configs = nw.configs.filter((c) => services.has(c.service));
    // the target release's host preparation of these services (checked again, done where missing)
    const host = nw.host.filter((h) => services.has(h.service));
    for (const c of containers) found.add(c.name);
    if (!containers.length && !configs.length) continue;
    steps.push({
      step: st.step,
      title: st.title,
      nodes: [{ node, role: nw.role, host, configs, containers, images: [] }],
      runOnce: [],
    });
  }
  const missing = [...names].filter((n) => !found.has(n));
  if (missing.length) {
    throw new StackctlError(
      'E_TARGET_MISSING',
      `${node}: the target deploy plan has no container ${missing.join(', ')} on this node`,
      { hint: 'This is a bug: the upgrade plan and the target deploy plan disagree.' },
    );
  }
  return { cloud: ctx.targetDeploy.cloud, steps, unsupported: [] };
}

/** Recreate containers with their target definition through the deploy executor (uploads, health, frontend gate). */
const recreate = async (
  node: string,
  swaps: readonly ContainerSwap[],
  ctx: UpgradeContext,
  frontendGate: boolean,
): Promise<string> => {
  const report = await executeDeploy(
    swapPlan(ctx, node, swaps, { frontendGate }),
    {
      connect: ctx.connect,
      rendered: ctx.targetRendered,
      journal: new MemoryJournal(),
      emit: ctx.emit,
      secret: ctx.secret,
      runner: plainRunner,
      now: ctx.now,
      sleep: ctx.sleep,
    },
    { concurrency: 1, failureBudgetPercent: 0 },
  );
  const f = report.failures[0];
  if (f) {
    throw new RemoteError('E_SWAP_FAILED', `${node}: ${f.path}: ${f.code}: ${f.message}`, {
      ...(f.hint ? { hint: f.hint } : {}),
      details: { node, ...(f.log ? { log: f.log } : {}) },
    });
  }
  return report.changes ? `${report.changes} change(s): ${swaps.map((s) => s.to).join(', ')}` : 'already on target';
};

/** Stop and remove the old containers, create and start the target ones, wait healthy. */
export const swap: ActionHandler<Of<'swap'>> = async (a, ctx) => recreate(a.node, a.containers, ctx, false);

/** Create and start the target containers (their old ones were stopped by a `stop` action). */
export const start: ActionHandler<Of<'start'>> = async (a, ctx) => recreate(a.node, a.containers, ctx, true);

/** Stop and remove containers; those already gone are fine. */
export const stop: ActionHandler<Of<'stop'>> = async (a, ctx) => {
  const docker = ctx.connect(a.node).docker;
  let stopped = 0;
  for (const name of a.containers) {
    if (!(await docker.inspectContainer(name))) continue;
    await docker.stopContainer(name, { timeoutS: EXECUTOR_DEFAULTS.stopTimeoutS });
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
          hint: `Check with 'docker volume inspect ${v}' on ${a.node} that no other container uses it, then run 'stackctl upgrade --resume'.`,
          cause: err,
        },
      );
    }
  }
  return `${done}; volume(s) ${a.resetVolumes.join(', ')} emptied`;
};

/**
 * Wait until a container is healthy (its healthcheck, or running for 2 s without one). Restarts Docker
 * made before are not held against it: this gate also checks containers the upgrade did not start.
 */
export function waitHealthy(ctx: UpgradeContext, w: ContainerWork): Promise<void> {
  return waitContainerHealthy(ctx.connect(w.node), w, {
    now: ctx.now,
    sleep: ctx.sleep,
    pollMs: EXECUTOR_DEFAULTS.pollMs,
    logLines: EXECUTOR_DEFAULTS.logLines,
    restartsFail: false,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
  });
}

/** Health gate: every target container of the services on the node is healthy. */
export const health: ActionHandler<Of<'health'>> = async (a, ctx) => {
  const works = a.services.flatMap((s) => containersOf(ctx.targetDeploy, s).filter((w) => w.node === a.node));
  await Promise.all(works.map((w) => waitHealthy(ctx, w)));
  return `${works.length} container(s) healthy`;
};

/** `20261122T213000Z`: an ISO 8601 time that is a plain file name. */
function fileTime(ms: number): string {
  return new Date(ms)
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
}

/**
 * Dump the service's databases on the database node, gzipped, written to a
 * temporary file then renamed; the password stays in the client config on
 * the node (never in argv).
 */
export const backup: ActionHandler<Of<'backup'>> = async (a, ctx) => {
  const dir = `${ACTION_DEFAULTS.backupDir}/${ctx.run ?? 'manual'}`;
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
    .exec(
      [
        'sh',
        '-c',
        script,
        'sh',
        dir,
        path,
        DATABASE_SERVER.container,
        'mariadb-dump',
        `--defaults-extra-file=${DATABASE_SERVER.clientConfig}`,
        '--single-transaction',
        '--databases',
        ...a.databases,
      ],
      { timeoutMs: ACTION_DEFAULTS.backupTimeoutMs },
    );
  if (r.code !== 0) {
    throw new RemoteError(
      'E_BACKUP_FAILED',
      `${a.node}: backup of ${a.service} (${a.databases.join(', ')}) failed: ${r.stderr.trim().slice(-400)}`,
      {
        hint: `Nothing of ${a.service} was migrated. Is ${DATABASE_SERVER.container} healthy on ${a.node}, with room in ${ACTION_DEFAULTS.backupDir}?`,
      },
    );
  }
  ctx.backups?.set(a.service, `${a.node}:${path}`);
  return `${a.node}:${path}`;
};

/**
 * Where each container of a service stands: `node/name image (state)`, or for one stopped and
 * removed (an offline window) `node/name absent (current release IMAGE, target IMAGE)`, so that
 * the report says which version each node is at.
 */
async function serviceState(ctx: UpgradeContext, service: string): Promise<string> {
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

/** A database migration, once, in a one-off container of the target image. */
export const migrate: ActionHandler<Of<'migrate'>> = async (a, ctx) => {
  const work = ctx.targetWork(a.node, a.container) ?? ctx.currentWork(a.node, a.container);
  if (!work) {
    throw new StackctlError('E_TARGET_MISSING', `${a.node}: no container ${a.container} of ${a.service} in the plans`, {
      hint: 'This is a bug: the upgrade plan and the deploy plans disagree.',
    });
  }
  const r = await ctx.oneOff(a.node, work, a.image, a.command, { name: `${a.service}-${a.stage}` });
  if (r.code !== 0) {
    const state = await serviceState(ctx, a.service);
    const saved = ctx.backups?.get(a.service);
    throw new RemoteError(
      'E_MIGRATION_FAILED',
      `${a.node}: ${a.stage} migration of ${a.service} (${a.command.join(' ')}) exited with ${r.code}; ${a.service} containers: ${state}`,
      {
        hint: `${saved ? `The backup taken before it is ${saved}. ` : ''}Fix the cause shown in the log, then 'stackctl upgrade --resume' runs the migration again.`,
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
  /** The upgrade run: a run resumed after a kill finds its own one-off containers by it. */
  readonly run?: string;
  readonly connect: (node: string) => NodeAccess;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
}

/**
 * The context's `oneOff`: a container borrowing `work`'s definition (volumes,
 * configs, network) with another image and command, no restart, no
 * healthcheck, removed afterwards; bounded by a deadline.
 */
export function oneOffRunner(deps: OneOffDeps): UpgradeContext['oneOff'] {
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
    const timeoutMs = opts.timeoutMs ?? ACTION_DEFAULTS.oneOffTimeoutMs;
    const deadline = deps.now() + timeoutMs;
    try {
      for (;;) {
        const info = await access.docker.inspectContainer(name);
        if (!info?.state.running)
          return {
            code: info?.state.exitCode ?? -1,
            log: await logTail(access, name),
            ...(adopted ? { adopted } : {}),
          };
        if (deps.now() > deadline) {
          throw new TimeoutError(
            'E_ONE_OFF_TIMEOUT',
            `${node}: ${name} (${work.service}: ${command.join(' ')}) still runs after ${Math.round(timeoutMs / 1000)} s`,
            { hint: 'Its log below says where it stands.', details: { log: await logTail(access, name) } },
          );
        }
        await deps.sleep(EXECUTOR_DEFAULTS.pollMs);
      }
    } finally {
      await access.docker.removeContainer(name, { force: true }).catch(() => undefined);
    }
  };
}

/** The handlers of this file, by action kind. */
export const NODE_HANDLERS: Pick<
  ActionHandlers,
  'pull' | 'drain' | 'enable' | 'swap' | 'start' | 'stop' | 'health' | 'backup' | 'migrate'
> = { pull, drain, enable, swap, start, stop, health, backup, migrate };
