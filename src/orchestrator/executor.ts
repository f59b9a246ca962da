/**
 * The deploy executor: performs a DeployPlan on real nodes.
 *
 * - Steps are barriers: step N+1 starts when every node finished step N.
 * - Within a step, nodes run in parallel under a concurrency limit, in two
 *   phases: observe + pull on every node first (so a missing image fails the
 *   step before any container of it was stopped), then apply.
 * - A role's failed share of nodes is checked against the failure budget
 *   after each phase; exceeding it aborts the deploy.
 * - Every side effect is journaled before and after; the real state (labels,
 *   file hashes, markers) decides what to do, so re-runs and `--resume` do
 *   only what is left.
 * - Run-once work (databases, bootstrap tasks) runs after the step's node
 *   work on the service's bootstrap node, once per input hash.
 */
import { RemoteError, StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import type { StackctlEvent } from '../core/events.js';
import { mapLimit } from '../core/concurrency.js';
import type { Secret } from '../core/secret.js';
import type { ContainerEngine, ExecOptions, ExecResult, RemoteCommand } from '../remote/index.js';
import type { UploadOptions, UploadSource } from '../remote/index.js';
import { logTail as containerLogTail, waitHealthy as waitContainerHealthy } from './health.js';
import { deployGuard, guardLog } from '../recover/guard.js';
import { hostSummary, prepareHost, type HostChange } from './host.js';
import { identityHash, runIdentityWork } from './identity.js';
import { EffectKind, effectKey, type Effect, type JournalSink } from './journal.js';
import { FailureClass, failureOf, rolesOverBudget, tallyRoles, type Failure, type RoleTally } from './failures.js';
import type { ContainerWork, DeployPlan, DeployStep, NodeWork, RunOnceWork } from './planner.js';
import {
  ContainerAction,
  MARKER_DIR,
  LABEL,
  containerSpec,
  diffConfig,
  diffContainer,
  parseSha256sum,
  type ConfigDiff,
  type ContainerDiff,
} from './state.js';

/** Tuning of the executor. */
export const EXECUTOR_DEFAULTS = {
  concurrency: 8,
  /** Percent of a role's nodes that may fail in a step before the deploy aborts (exceeds = abort). */
  failureBudgetPercent: 0,
  /** Lines of a failed container's log carried in the report. */
  logLines: 50,
  /** Seconds a container gets to stop before it is killed. */
  stopTimeoutS: 10,
  /** Poll interval while waiting for health or a task. */
  pollMs: 500,
  /** Deadline of a run-once task container. */
  taskTimeoutMs: 10 * 60_000,
  /** How long a service that is healthy on its node gets to answer through HAProxy's VIP. */
  frontendTimeoutMs: 90_000,
  /** Deadline of SSH commands that only read state. */
  commandTimeoutMs: 30_000,
} as const;

/**
 * How databases are created: in the database server's container, through the
 * client config the plan rendered for it (root password inside, 0600), with
 * the SQL on stdin, so no password is ever in an argv.
 */
export const DATABASE_SERVER = {
  container: 'mariadb',
  /** The rendered client.cnf as the container sees it (roles/services/mariadb.yaml mounts /etc/stackctl/mariadb there). */
  clientConfig: '/etc/mysql/mariadb.conf.d/stackctl/client.cnf',
  client: 'mariadb',
} as const;

/** What the executor needs of a node (the `Remote` facade fits). */
export interface NodeAccess {
  readonly node: string;
  exec(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
  readonly files: { upload(source: UploadSource, dest: string, opts?: UploadOptions): Promise<number> };
  readonly docker: ContainerEngine;
}

/** One unit of per-node work, as a progress line. */
export interface StepTask {
  readonly title: string;
  run(): Promise<string>;
}

/** Runs a phase's per-node tasks with at most `concurrency` at once; must not throw. */
export type StepRunner = (tasks: readonly StepTask[], concurrency: number) => Promise<void>;

/** The default runner: no display. */
export const plainRunner: StepRunner = async (tasks, concurrency) => {
  await mapLimit(tasks, concurrency, (t) => t.run().catch(() => ''));
};

/** Side effects of the executor (CONVENTIONS.md 8). */
export interface ExecutorDeps {
  /** A node's shell, files and Docker engine (one SSH connection). */
  readonly connect: (node: string) => NodeAccess;
  /** node -> dest -> rendered content (holds secrets; only uploaded). */
  readonly rendered: ReadonlyMap<string, ReadonlyMap<string, string>>;
  readonly journal: JournalSink;
  readonly emit: (e: StackctlEvent) => void;
  /** Service secrets by name (database passwords). */
  readonly secret?: (name: string) => Secret | undefined;
  readonly runner?: StepRunner;
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
  /** The inventory as the operator named it, for command lines in hints (`stackctl recover galera -i ...`). */
  readonly inventoryFile?: string;
}

/** Options of a deploy. */
export interface ExecutorOptions {
  readonly concurrency?: number;
  readonly failureBudgetPercent?: number;
}

/** What a deploy did. */
export interface DeployReport {
  readonly ok: boolean;
  readonly run: string;
  readonly ms: number;
  readonly steps: { readonly step: number; readonly ms: number; readonly nodes: number; readonly failed: number }[];
  /** Side effects performed (not counting ones found already in place). */
  readonly changes: number;
  readonly failures: Failure[];
  /** Set when the failure budget stopped the deploy (`host`: in the host preparation, before step 1). */
  readonly aborted?: { readonly step: number; readonly roles: RoleTally[]; readonly host?: true };
}

/** One line of a dry run or of observed state. */
export interface Prediction {
  readonly step: number;
  readonly node: string;
  readonly object: 'host' | 'container' | 'config' | RunOnceWork['kind'];
  readonly name: string;
  /** create, recreate, start, unchanged, upload, run, done */
  readonly action: string;
  readonly detail: string;
}

/** A node's state against its work in one step. */
interface Observed {
  readonly containers: ContainerDiff[];
  readonly configs: ConfigDiff[];
}

/** Container names of run-once task containers. */
const taskContainerName = (w: Extract<RunOnceWork, { kind: 'task' }>): string => `stackctl-${w.service}-${w.name}`;
const markerFile = (w: RunOnceWork): string => `${MARKER_DIR}/${w.service}.${w.kind}.${w.name}`;

/** Read a node's state for the work of one step. */
export async function observe(access: NodeAccess, work: NodeWork): Promise<Observed> {
  const containers: ContainerDiff[] = [];
  for (const c of work.containers) containers.push(diffContainer(c, await access.docker.inspectContainer(c.name)));
  let sums = new Map<string, string>();
  if (work.configs.length) {
    const r = await access.exec(['sha256sum', '--', ...work.configs.map((c) => c.dest)], {
      timeoutMs: EXECUTOR_DEFAULTS.commandTimeoutMs,
    });
    sums = parseSha256sum(r.stdout); // missing files only go to stderr
  }
  return { containers, configs: work.configs.map((c) => diffConfig(c, sums.get(c.dest))) };
}

/** The hash a run-once work records when done (a registration's includes its password's digest). */
function workHash(w: RunOnceWork, secret: ExecutorDeps['secret']): string {
  return w.kind === 'register' ? identityHash(w, (n) => secret?.(n)) : w.hash;
}

/** The journal's effect kind of each kind of run-once work. */
const WORK_EFFECT: Readonly<Record<RunOnceWork['kind'], EffectKind>> = {
  task: EffectKind.TASK,
  database: EffectKind.DATABASE,
  register: EffectKind.REGISTER,
  resources: EffectKind.REGISTER,
};

/** The input hash recorded on the node for run-once work, if any. */
async function markerOf(access: NodeAccess, w: RunOnceWork): Promise<string | undefined> {
  const r = await access.exec(['cat', markerFile(w)], { timeoutMs: EXECUTOR_DEFAULTS.commandTimeoutMs });
  return r.code === 0 ? r.stdout.trim() : undefined;
}

/** What a deploy would do, from real state; no side effects. */
export async function predict(plan: DeployPlan, deps: Pick<ExecutorDeps, 'connect' | 'secret'>): Promise<Prediction[]> {
  const out: Prediction[] = [];
  for (const st of plan.steps) {
    for (const nw of st.nodes) {
      // host preparation is checked and done in one go by the deploy: listed, not predicted item by item
      for (const h of nw.host)
        out.push({
          step: st.step,
          node: nw.node,
          object: 'host',
          name: h.service,
          action: 'check',
          detail: hostSummary(h),
        });
      const o = await observe(deps.connect(nw.node), nw);
      for (const c of o.configs)
        out.push({
          step: st.step,
          node: nw.node,
          object: 'config',
          name: c.work.dest,
          action: c.action,
          detail: c.detail,
        });
      for (const c of o.containers)
        out.push({
          step: st.step,
          node: nw.node,
          object: 'container',
          name: c.work.name,
          action: c.action,
          detail: c.changed.join(', '),
        });
    }
    for (const w of st.runOnce) {
      const done = (await markerOf(deps.connect(w.node), w)) === workHash(w, deps.secret);
      out.push({
        step: st.step,
        node: w.node,
        object: w.kind,
        name: `${w.service}/${w.name}`,
        action: done ? 'done' : 'run',
        detail: '',
      });
    }
  }
  return out;
}

/** The registry part of an image reference (`host:port` before the first slash), or Docker Hub. */
function registryOf(image: string): string {
  const first = image.split('/')[0]!;
  return image.includes('/') && /[.:]/.test(first) ? first : 'docker.io';
}

/** Internal: a failure already classified, thrown to unwind a node's work. */
class ClassifiedFailure extends Error {
  constructor(readonly failure: Failure) {
    super(failure.message);
  }
}

/** Perform the deploy. Never throws for node failures: they are in the report. */
export async function executeDeploy(
  plan: DeployPlan,
  deps: ExecutorDeps,
  opts: ExecutorOptions = {},
): Promise<DeployReport> {
  const now = deps.now ?? Date.now;
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const runner = deps.runner ?? plainRunner;
  const concurrency = opts.concurrency ?? EXECUTOR_DEFAULTS.concurrency;
  const budget = opts.failureBudgetPercent ?? EXECUTOR_DEFAULTS.failureBudgetPercent;
  const { journal, emit } = deps;
  // BEGIN deploy guard (src/recover/guard.ts): unchanged containers must be up; Galera's cluster-wide checks.
  const guard = deployGuard(plan, {
    connect: deps.connect,
    now,
    sleep,
    emit,
    run: journal.run,
    ...(deps.inventoryFile ? { inventoryFile: deps.inventoryFile } : {}),
  });
  // END deploy guard
  const t0 = now();
  const failures: Failure[] = [];
  const steps: DeployReport['steps'] = [];
  const deadNodes = new Set<string>(); // failed in an earlier step (within the budget): skipped afterwards
  const pending = new Map(journal.previous.pending.map((e) => [effectKey(e), e]));
  let changes = 0;
  let aborted: DeployReport['aborted'];

  const fail = (f: Failure): void => {
    failures.push(f);
    emit({ kind: 'deploy.failure', step: f.step, path: f.path, code: f.code, message: f.message, class: f.class });
  };

  /** Record an effect found already in place when a killed run had only announced it. */
  const verifyPending = (e: Effect): void => {
    const k = effectKey(e);
    if (!pending.has(k)) return;
    pending.delete(k);
    journal.record('done', e, true);
  };

  /** Journal around one side effect. */
  const effect = async <T>(e: Effect, act: () => Promise<T>): Promise<T> => {
    pending.delete(effectKey(e));
    journal.record('intent', e);
    try {
      const r = await act();
      journal.record('done', e);
      changes++;
      return r;
    } catch (err) {
      journal.record('failed', e);
      throw err;
    }
  };

  const change = (step: number, node: string, object: string, name: string, action: string, detail = '', ms = 0) =>
    emit({ kind: 'deploy.change', step, node, object, name, action, detail, ms });

  const logTail = (docker: ContainerEngine, name: string): Promise<string> =>
    containerLogTail(docker, name, EXECUTOR_DEFAULTS.logLines);
  /** Right after our start: a restart since counts as a failure. */
  const waitHealthy = (access: NodeAccess, w: ContainerWork): Promise<void> =>
    waitContainerHealthy(access, w, {
      now,
      sleep,
      pollMs: EXECUTOR_DEFAULTS.pollMs,
      logLines: EXECUTOR_DEFAULTS.logLines,
      restartsFail: true,
    });

  /** Wait until the service answers through HAProxy on the internal VIP (any status below 500). */
  const waitFrontend = async (access: NodeAccess, w: ContainerWork, url: string): Promise<void> => {
    const deadline = now() + EXECUTOR_DEFAULTS.frontendTimeoutMs;
    let last = '';
    for (;;) {
      const r = await access.docker
        .exec(w.name, ['curl', '-s', '-o', '/dev/null', '-m', '5', '-w', '%{http_code}', url], { timeoutMs: 10_000 })
        .catch((e: unknown) => ({ code: -1, stdout: '', stderr: messageOf(e) }));
      last = r.stdout.trim() || r.stderr.trim();
      const status = Number(r.stdout.trim());
      if (status >= 100 && status < 500) return;
      if (now() > deadline) {
        throw new TimeoutError(
          'E_FRONTEND_TIMEOUT',
          `${w.node}: ${w.name} is healthy but ${url} still answers '${last || 'nothing'}' through HAProxy after ${Math.round(EXECUTOR_DEFAULTS.frontendTimeoutMs / 1000)} s`,
          { hint: 'Check the HAProxy frontend and backend of this service (docker logs haproxy) and the VIP.' },
        );
      }
      await sleep(EXECUTOR_DEFAULTS.pollMs);
    }
  };

  /**
   * The node's OS, for every service of the deploy that declares a host preparation. It reads
   * the node before it changes anything (modules, a file, host units), so a re-run or `--resume`
   * finishes it without a journal entry of its own; its changes are events.
   */
  const prepareNodeHost = async (work: readonly { st: DeployStep; nw: NodeWork }[]): Promise<string> => {
    let n = 0;
    for (const { st, nw } of work) {
      const access = deps.connect(nw.node);
      for (const h of nw.host) {
        const t = now();
        let made: HostChange[];
        try {
          made = await prepareHost(access, h);
        } catch (err) {
          throw new ClassifiedFailure(
            failureOf(
              err,
              { step: st.step, node: nw.node, path: `step ${st.step}/${nw.node}/host ${h.service}` },
              FailureClass.RETRYABLE,
            ),
          );
        }
        n += made.length;
        changes += made.length;
        for (const c of made) change(st.step, nw.node, `host ${c.object}`, c.name, c.action, h.service, now() - t);
        if (!made.length) change(st.step, nw.node, 'host', h.service, 'unchanged', hostSummary(h));
      }
    }
    return n ? `${n} change(s)` : 'unchanged';
  };

  /** Phase A: observe and pull; nothing is stopped here. */
  const prepareNode = async (st: DeployStep, nw: NodeWork): Promise<Observed> => {
    const access = deps.connect(nw.node);
    const o = await observe(access, nw);
    for (const c of o.configs) if (c.action === 'unchanged') verifyPending(uploadEffect(c));
    for (const c of o.containers) {
      if (c.action === ContainerAction.UNCHANGED || c.action === ContainerAction.START)
        verifyPending(containerEffect(EffectKind.CREATE, c.work));
      if (c.action === ContainerAction.UNCHANGED) verifyPending(containerEffect(EffectKind.START, c.work));
    }
    const images = [
      ...new Set([
        ...o.containers
          .filter((c) => c.action === ContainerAction.CREATE || c.action === ContainerAction.RECREATE)
          .map((c) => c.work.image),
        ...nw.images,
      ]),
    ];
    for (const image of images) {
      const e: Effect = { kind: EffectKind.PULL, node: nw.node, target: image, hash: image };
      if (await access.docker.imageExists(image)) {
        verifyPending(e);
        continue;
      }
      const t = now();
      try {
        await effect(e, () => access.docker.pullImage(image));
      } catch (err) {
        throw new ClassifiedFailure(
          failureOf(
            new RemoteError(
              'E_IMAGE_PULL',
              `${nw.node}: cannot pull ${image} from registry ${registryOf(image)}: ${err instanceof Error ? err.message : String(err)}`,
              {
                hint: `Push it first (stackctl images push), and check that ${nw.node} reaches ${registryOf(image)}. Nothing was stopped.`,
              },
            ),
            { step: st.step, node: nw.node, path: `step ${st.step}/${nw.node}/pull ${image}` },
            FailureClass.RETRYABLE,
          ),
        );
      }
      change(st.step, nw.node, 'image', image, 'pulled', registryOf(image), now() - t);
    }
    return o;
  };

  const uploadEffect = (c: ConfigDiff): Effect => ({
    kind: EffectKind.UPLOAD,
    node: c.work.node,
    target: c.work.dest,
    hash: c.work.sha256,
  });
  const containerEffect = (kind: EffectKind, w: ContainerWork): Effect => ({
    kind,
    node: w.node,
    target: w.name,
    hash: w.hash,
  });

  /** Phase B: configs, then containers in service order. */
  const applyNode = async (st: DeployStep, nw: NodeWork, o: Observed): Promise<string> => {
    const access = deps.connect(nw.node);
    const where = (what: string) => ({ step: st.step, node: nw.node, path: `step ${st.step}/${nw.node}/${what}` });
    let n = 0;
    for (const c of o.configs) {
      if (c.action === 'unchanged') continue;
      const data = deps.rendered.get(nw.node)?.get(c.work.dest);
      if (data === undefined) {
        throw new ClassifiedFailure(
          failureOf(
            new StackctlError('E_RENDERED_MISSING', `${nw.node}: no rendered content for ${c.work.dest}`, {
              hint: 'This is a bug: the plan lists the file but did not render it.',
            }),
            where(`config ${c.work.dest}`),
            FailureClass.RETRYABLE,
          ),
        );
      }
      const t = now();
      try {
        await effect(uploadEffect(c), () =>
          access.files.upload({ data }, c.work.dest, { mode: parseInt(c.work.mode, 8) }),
        );
      } catch (err) {
        // The upload is atomic: the old file (if any) is still in place.
        throw new ClassifiedFailure(failureOf(err, where(`config ${c.work.dest}`), FailureClass.RETRYABLE));
      }
      n++;
      change(st.step, nw.node, 'config', c.work.dest, 'uploaded', c.detail, now() - t);
    }
    for (const c of o.containers) {
      n += await applyContainer(st, nw, c);
      gates.get(`${nw.node}/${c.work.name}`)?.open();
    }
    return n ? `${n} change(s)` : 'unchanged';
  };

  /**
   * Containers that others wait for within the current step (`after` in the plan: a cluster's
   * bootstrap node first), by `node/container`; opened once that container is healthy or failed.
   */
  const gates = new Map<string, Gate>();

  /** One container of a node: create, recreate or start it and wait for its health; 1 if changed. */
  const applyContainer = async (st: DeployStep, nw: NodeWork, c: ContainerDiff): Promise<number> => {
    const access = deps.connect(nw.node);
    const where = (what: string) => ({ step: st.step, node: nw.node, path: `step ${st.step}/${nw.node}/${what}` });
    const w = c.work;
    if (c.action === ContainerAction.UNCHANGED) {
      // BEGIN deploy guard: an unchanged container that is down fails the run, with the service's own diagnosis
      let made: number;
      try {
        made = await guard.unchanged(access, w);
      } catch (err) {
        throw new ClassifiedFailure(failureOf(err, where(`${w.name}/health`), FailureClass.HARD, guardLog(err)));
      }
      changes += made;
      // END deploy guard
      change(st.step, nw.node, 'container', w.name, 'unchanged');
      return made;
    }
    const gate = w.after ? gates.get(`${w.after}/${w.name}`) : undefined;
    if (gate) {
      const tw = now();
      await gate.opened;
      change(st.step, nw.node, 'container', w.name, 'waited', `for ${w.after}`, now() - tw);
    }
    const t = now();
    if (c.action === ContainerAction.RECREATE) {
      try {
        await effect(
          { kind: EffectKind.REMOVE, node: nw.node, target: w.name, hash: c.currentHash ?? 'unlabelled' },
          async () => {
            await access.docker.stopContainer(w.name, { timeoutS: EXECUTOR_DEFAULTS.stopTimeoutS });
            await access.docker.removeContainer(w.name, { force: true });
          },
        );
      } catch (err) {
        throw new ClassifiedFailure(failureOf(err, where(`${w.name}/remove`), FailureClass.HARD));
      }
    }
    if (c.action !== ContainerAction.START) {
      try {
        await effect(containerEffect(EffectKind.CREATE, w), () =>
          access.docker.createContainer(containerSpec(plan.cloud, w)),
        );
      } catch (err) {
        throw new ClassifiedFailure(failureOf(err, where(`${w.name}/create`), FailureClass.RETRYABLE));
      }
    }
    try {
      await effect(containerEffect(EffectKind.START, w), () => access.docker.startContainer(w.name));
    } catch (err) {
      // Undo the create, so the next run starts from a clean slate.
      const log = await logTail(access.docker, w.name);
      const rolledBack = await access.docker.removeContainer(w.name, { force: true }).then(
        () => true,
        () => false,
      );
      throw new ClassifiedFailure(
        failureOf(
          err,
          where(`${w.name}/start`),
          rolledBack ? FailureClass.ROLLED_BACK : FailureClass.ROLLBACK_FAILED,
          log,
        ),
      );
    }
    // BEGIN deploy guard: what a start needs beyond Docker (Galera: a founding permit, a cluster restart)
    try {
      changes += await guard.started(access, w);
    } catch (err) {
      throw new ClassifiedFailure(failureOf(err, where(`${w.name}/start`), FailureClass.HARD, guardLog(err)));
    }
    // END deploy guard
    try {
      await waitHealthy(access, w);
    } catch (err) {
      throw new ClassifiedFailure(
        failureOf(err, where(`${w.name}/health`), FailureClass.HARD, await logTail(access.docker, w.name)),
      );
    }
    if (w.frontend) {
      try {
        await waitFrontend(access, w, w.frontend);
      } catch (err) {
        throw new ClassifiedFailure(
          failureOf(err, where(`${w.name}/frontend`), FailureClass.HARD, await logTail(access.docker, w.name)),
        );
      }
    }
    const action = { create: 'created', recreate: 'recreated', start: 'started' }[c.action];
    change(st.step, nw.node, 'container', w.name, action, c.changed.join(', '), now() - t);
    return 1;
  };

  /** Run-once work on the bootstrap node. */
  const runOnce = async (st: DeployStep, w: RunOnceWork): Promise<void> => {
    const access = deps.connect(w.node);
    const hash = workHash(w, deps.secret);
    const e: Effect = {
      kind: WORK_EFFECT[w.kind],
      node: w.node,
      target: `${w.service}/${w.name}`,
      hash,
    };
    if ((await markerOf(access, w)) === hash) {
      verifyPending(e);
      change(st.step, w.node, w.kind, `${w.service}/${w.name}`, 'unchanged');
      return;
    }
    const where = { step: st.step, node: w.node, path: `step ${st.step}/${w.node}/${w.kind} ${w.service}/${w.name}` };
    const t = now();
    let detail = '';
    try {
      await effect(e, async () => {
        if (w.kind === 'task') await runTask(access, w);
        else if (w.kind === 'database') await createDatabase(access, w, deps.secret);
        else {
          const done = await runIdentityWork(access, w, plan.identity, (n) => deps.secret?.(n));
          detail = done
            .filter((a) => a.action !== 'unchanged')
            .map((a) => `${a.object} ${a.name} ${a.action}`)
            .join(', ');
        }
        const marker = markerFile(w);
        await access.exec(
          [
            'sh',
            '-c',
            'mkdir -p "$1" && printf "%s\\n" "$2" > "$3.tmp" && mv "$3.tmp" "$3"',
            'sh',
            MARKER_DIR,
            hash,
            marker,
          ],
          { timeoutMs: EXECUTOR_DEFAULTS.commandTimeoutMs },
        );
      });
    } catch (err) {
      const log = err instanceof TaskFailed ? err.log : undefined;
      throw new ClassifiedFailure(failureOf(err, where, FailureClass.HARD, log));
    }
    change(st.step, w.node, w.kind, `${w.service}/${w.name}`, 'ran', detail, now() - t);
  };

  /** A one-shot container from the task's borrowed container definition. */
  const runTask = async (access: NodeAccess, w: Extract<RunOnceWork, { kind: 'task' }>): Promise<void> => {
    const name = taskContainerName(w);
    const base = containerSpec(plan.cloud, w.container);
    await access.docker.removeContainer(name, { force: true }); // a leftover of a killed run
    const { healthcheck: _h, ...rest } = base;
    await access.docker.createContainer({
      ...rest,
      name,
      command: w.command,
      restart: 'no',
      labels: { [LABEL.cloud]: plan.cloud, [LABEL.service]: w.service, [LABEL.hash]: w.hash },
    });
    await access.docker.startContainer(name);
    const deadline = now() + EXECUTOR_DEFAULTS.taskTimeoutMs;
    for (;;) {
      const info = await access.docker.inspectContainer(name);
      if (!info?.state.running) {
        const code = info?.state.exitCode ?? -1;
        if (code !== 0) {
          const log = await logTail(access.docker, name);
          await access.docker.removeContainer(name, { force: true }).catch(() => undefined);
          throw new TaskFailed(`${w.node}: task ${w.service}/${w.name} exited with ${code}`, log);
        }
        break;
      }
      if (now() > deadline) {
        const log = await logTail(access.docker, name);
        throw new TaskFailed(`${w.node}: task ${w.service}/${w.name} still runs after its deadline`, log);
      }
      await sleep(EXECUTOR_DEFAULTS.pollMs);
    }
    await access.docker.removeContainer(name, { force: true });
  };

  /** Record a node's phase failure. */
  const onNodeError = (st: DeployStep, nw: NodeWork, failed: Set<string>, err: unknown, what: string): void => {
    failed.add(nw.node);
    fail(
      err instanceof ClassifiedFailure
        ? err.failure
        : failureOf(
            err,
            { step: st.step, node: nw.node, path: `step ${st.step}/${nw.node}/${what}` },
            FailureClass.HARD,
          ),
    );
  };

  // Host preparation of every step comes first: a node that lacks what a later step needs (KVM
  // for libvirt) fails the deploy before any step has changed anything.
  const hostWork = new Map<string, { st: DeployStep; nw: NodeWork }[]>();
  for (const st of plan.steps)
    for (const nw of st.nodes)
      if (nw.host.length) hostWork.set(nw.node, [...(hostWork.get(nw.node) ?? []), { st, nw }]);
  if (hostWork.size) {
    const failedHosts = new Set<string>();
    await runner(
      [...hostWork].map(([node, work]) => ({
        title: `host ${node}: ${work.flatMap(({ nw }) => nw.host.map((h) => h.service)).join(', ')}`,
        run: async () => {
          try {
            return await prepareNodeHost(work);
          } catch (err) {
            onNodeError(work[0]!.st, work[0]!.nw, failedHosts, err, 'host');
            throw err;
          }
        },
      })),
      concurrency,
    );
    for (const n of failedHosts) deadNodes.add(n);
    const roles = rolesOverBudget(
      tallyRoles(
        [...hostWork].map(([node, work]) => ({ node, role: work[0]!.nw.role })),
        failedHosts,
      ),
      budget,
    );
    if (roles.length) aborted = { step: Math.min(...failures.map((f) => f.step)), roles, host: true };
  }

  for (const st of aborted ? [] : plan.steps) {
    const ts = now();
    const nodes = st.nodes.filter((n) => !deadNodes.has(n.node));
    emit({
      kind: 'deploy.step',
      step: st.step,
      title: st.title,
      phase: 'start',
      nodes: nodes.length,
      failed: 0,
      ms: 0,
    });
    const failed = new Set<string>();
    const observed = new Map<string, Observed>();
    await runner(
      nodes.map((nw) => ({
        title: `step ${st.step} ${nw.node}: check state, pull images`,
        run: async () => {
          try {
            const o = await prepareNode(st, nw);
            observed.set(nw.node, o);
            return 'ready';
          } catch (err) {
            onNodeError(st, nw, failed, err, 'prepare');
            throw err;
          }
        },
      })),
      concurrency,
    );
    const over = (): RoleTally[] => rolesOverBudget(tallyRoles(nodes, failed), budget);
    if (over().length === 0) {
      gates.clear();
      for (const nw of nodes) {
        for (const c of observed.get(nw.node)?.containers ?? []) {
          const first = c.work.after;
          const key = `${first}/${c.work.name}`;
          // Only a bootstrap node that takes part in this phase is waited for.
          if (first && !gates.has(key) && observed.get(first)?.containers.some((x) => x.work.name === c.work.name))
            gates.set(key, new Gate());
        }
      }
      await runner(
        nodes
          .filter((nw) => observed.has(nw.node))
          .map((nw) => ({
            title: `step ${st.step} ${nw.node}: ${nw.containers.map((c) => c.name).join(', ') || 'configs'}`,
            run: async () => {
              try {
                return await applyNode(st, nw, observed.get(nw.node)!);
              } catch (err) {
                onNodeError(st, nw, failed, err, 'apply');
                throw err;
              } finally {
                // A failed node opens its gates too: the others then succeed or fail on their own health.
                for (const c of nw.containers) gates.get(`${nw.node}/${c.name}`)?.open();
              }
            },
          })),
        concurrency,
      );
    }
    let runOnceFailed = false;
    if (over().length === 0) {
      for (const w of st.runOnce) {
        try {
          await runOnce(st, w);
        } catch (err) {
          fail(
            err instanceof ClassifiedFailure
              ? err.failure
              : failureOf(
                  err,
                  { step: st.step, node: w.node, path: `step ${st.step}/${w.node}/${w.name}` },
                  FailureClass.HARD,
                ),
          );
          runOnceFailed = true;
          break; // later run-once work depends on earlier (db_sync needs the database)
        }
      }
    }
    for (const n of failed) deadNodes.add(n);
    const ms = now() - ts;
    steps.push({ step: st.step, ms, nodes: nodes.length, failed: failed.size });
    emit({
      kind: 'deploy.step',
      step: st.step,
      title: st.title,
      phase: 'end',
      nodes: nodes.length,
      failed: failed.size,
      ms,
    });
    const roles = over();
    if (roles.length || runOnceFailed) {
      aborted = { step: st.step, roles };
      break;
    }
  }
  const ok = failures.length === 0;
  journal.end(ok);
  return { ok, run: journal.run, ms: now() - t0, steps, changes, failures, ...(aborted ? { aborted } : {}) };
}

/** A one-way latch: `opened` resolves once `open()` was called. */
class Gate {
  open!: () => void;
  readonly opened = new Promise<void>((resolve) => (this.open = resolve));
}

/** A task container that failed, with the end of its log. */
class TaskFailed extends RemoteError {
  constructor(
    message: string,
    readonly log: string,
  ) {
    super('E_TASK_FAILED', message, { hint: 'The task log below says why; fix it and deploy again (or --resume).' });
  }
}

/** SQL string literal (single quotes, backslashes escaped). */
function sqlString(v: string): string {
  return `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/** Create a database and its user; the SQL (with the password) goes over stdin. */
async function createDatabase(
  access: NodeAccess,
  w: Extract<RunOnceWork, { kind: 'database' }>,
  secret: ExecutorDeps['secret'],
): Promise<void> {
  const pw = secret?.(w.passwordSecret);
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
  const r = await access.exec(
    [
      'docker',
      'exec',
      '-i',
      DATABASE_SERVER.container,
      DATABASE_SERVER.client,
      `--defaults-extra-file=${DATABASE_SERVER.clientConfig}`,
    ],
    { timeoutMs: EXECUTOR_DEFAULTS.commandTimeoutMs, stdin: sql + '\n' },
  );
  // A syntax error quotes the SQL near it, which may hold the password.
  let redacted = r.stderr;
  for (const v of [pw.reveal(), sqlString(pw.reveal()).slice(1, -1)]) redacted = redacted.split(v).join('<redacted>');
  redacted = redacted.trim().slice(-400);
  if (r.code !== 0) {
    throw new RemoteError('E_DATABASE_CREATE', `${access.node}: creating database ${w.name} failed: ${redacted}`, {
      hint: `Is ${DATABASE_SERVER.container} running and healthy on ${access.node}? See its log.`,
    });
  }
}
