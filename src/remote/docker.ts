/**
 * Docker Engine access: the only module that imports `dockerode`
 * (CONVENTIONS.md 9). The rest of stackctl sees the narrow `ContainerEngine`
 * interface below and never a dockerode type.
 *
 * On a node, the Docker API is carried over the node's pooled SSH connection:
 * each HTTP connection of the client is an SSH channel to the node's
 * `/var/run/docker.sock` (OpenSSH's direct-streamlocal forwarding, on by
 * default in Debian's sshd). Why that rather than `docker system dial-stdio`:
 * it needs no docker CLI process per HTTP connection on the node, is not
 * counted against sshd's MaxSessions (10 by default) that commands and SFTP
 * share, and works with any dockerd. When a node's sshd forbids stream-local
 * forwarding, `auto` falls back to `docker system dial-stdio` (docker >= 18.09).
 */
import http from 'node:http';
import type { Duplex } from 'node:stream';
import Docker from 'dockerode';
import { RemoteError, StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import { Secret } from '../core/secret.js';
import type { SshPool, SshTarget } from './ssh.js';

/** Docker's socket on Debian (docker.io). */
export const DOCKER_SOCKET = '/var/run/docker.sock';

/** How the Docker API reaches a node's dockerd. */
export const DockerTransport = {
  /** SSH stream-local forwarding to the node's docker.sock. */
  STREAMLOCAL: 'streamlocal',
  /** `docker system dial-stdio` run over SSH (needs the docker CLI on the node). */
  DIAL_STDIO: 'dial-stdio',
  /** Stream-local first; dial-stdio when the node's sshd refuses forwarding. */
  AUTO: 'auto',
} as const;
export type DockerTransport = (typeof DockerTransport)[keyof typeof DockerTransport];

/**
 * Deadlines of Docker API calls; each can be overridden per engine (`DockerTimeouts`). A call past its
 * deadline is aborted (its channel closed, so nothing is left waiting on a silent dockerd) and fails with
 * a TimeoutError naming the engine, the call and the object.
 */
export const DOCKER_DEFAULTS = {
  /** version, ps, inspect, image inspect/exists, logs: answered from dockerd's memory and disk (ms). */
  readMs: 30_000,
  /** create: writes the container's configuration and prepares its file system (ms). */
  createMs: 60_000,
  /** start: namespaces, mounts, network; not the container's own process coming up (ms). */
  startMs: 60_000,
  /** Stop grace (TERM, then KILL) when the caller gives none: Docker's own default (s). */
  stopTimeoutS: 10,
  /** stop: on top of the stop grace, for the kill and the clean-up (ms). */
  stopMarginMs: 30_000,
  /** rm (a forced one kills first), volume rm (ms). */
  removeMs: 60_000,
  /**
   * pull: no byte from dockerd for this long fails the pull, however long the whole pull takes. dockerd
   * reports progress several times a second while a layer downloads or extracts (ms).
   */
  pullStallMs: 120_000,
  /** exec: create, run and inspect, when the caller gives no deadline (ms). */
  execMs: 600_000,
} as const;

/** Per-engine overrides of DOCKER_DEFAULTS (tests use short ones). */
export type DockerTimeouts = Partial<Record<keyof typeof DOCKER_DEFAULTS, number>>;

/** HTTP status codes of the Docker API that carry a meaning for us. */
const DOCKER_STATUS = {
  /** Start of a running / stop of a stopped container: nothing to do. */
  NOT_MODIFIED: 304,
  /** No such container, image or exec. */
  NOT_FOUND: 404,
  /** Name already in use, container running, etc. */
  CONFLICT: 409,
} as const;

/** One line of `listContainers`. */
export interface ContainerSummary {
  readonly id: string;
  readonly name: string;
  readonly image: string;
  /** created, running, exited, … */
  readonly state: string;
  /** Human status, e.g. `Up 3 minutes (healthy)`. */
  readonly status: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** What stackctl needs to know about one container. */
export interface ContainerInfo {
  readonly id: string;
  readonly name: string;
  /** The image reference it was created from. */
  readonly image: string;
  /** The image ID (sha256:…) it runs. */
  readonly imageId: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly state: {
    readonly status: string;
    readonly running: boolean;
    readonly exitCode: number;
    /** ISO time; `0001-01-01T00:00:00Z` when never started. */
    readonly startedAt: string;
    readonly finishedAt: string;
    /** healthy / unhealthy / starting, when the container has a healthcheck. */
    readonly health?: string;
    readonly oomKilled: boolean;
  };
  readonly restartCount: number;
}

/** Facts about an image. */
export interface ImageInfo {
  readonly id: string;
  readonly tags: readonly string[];
  /** Docker's RepoDigests: `repository@sha256:…` for each registry manifest the image was pulled or pushed as. */
  readonly digests?: readonly string[];
  readonly created: string;
  readonly size: number;
  readonly labels: Readonly<Record<string, string>>;
}

/** Healthcheck of a container. */
export interface HealthcheckSpec {
  /** Exec form without the `CMD` marker, e.g. ['curl', '-f', 'http://localhost:5000']. */
  readonly test: readonly string[];
  readonly intervalMs?: number;
  readonly timeoutMs?: number;
  readonly retries?: number;
  readonly startPeriodMs?: number;
}

/** A container to create (the fields the service tables use). */
export interface ContainerSpec {
  readonly name: string;
  readonly image: string;
  readonly command?: readonly string[];
  readonly entrypoint?: readonly string[];
  /** Values may be Secrets: revealed only into the API request body. */
  readonly env?: Readonly<Record<string, string | Secret>>;
  readonly labels?: Readonly<Record<string, string>>;
  /** `host:container[:ro]` binds or `volume:container`. */
  readonly volumes?: readonly string[];
  /** `host`, `none`, `bridge` or a network name. */
  readonly network?: string;
  readonly restart?: 'no' | 'always' | 'unless-stopped' | 'on-failure';
  readonly user?: string;
  readonly workingDir?: string;
  readonly privileged?: boolean;
  /** Docker's --init: an init as PID 1 that reaps orphaned processes. */
  readonly init?: boolean;
  readonly capAdd?: readonly string[];
  readonly capDrop?: readonly string[];
  readonly pidMode?: string;
  readonly securityOpt?: readonly string[];
  /** `--device-cgroup-rule`s, e.g. `a *:* rwm`: every device the container sees may be used. */
  readonly deviceCgroupRules?: readonly string[];
  /** No masked and no read-only /proc and /sys paths (what --privileged also gives): /proc/sys writable. */
  readonly unmaskPaths?: boolean;
  readonly healthcheck?: HealthcheckSpec;
}

/** One progress event of a pull. */
export interface PullProgress {
  /** Layer ID, when the event is about a layer. */
  readonly layer?: string;
  /** Docker's status text: Pulling fs layer, Downloading, Pull complete, … */
  readonly status: string;
  readonly current?: number;
  readonly total?: number;
}

/** Output and exit code of a command run in a container. */
export interface ContainerExecResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** The container operations stackctl uses; one implementation per engine location. */
export interface ContainerEngine {
  /** Where this engine is: `local` or the node name. */
  readonly where: string;
  /** Server version; fails when the engine cannot be reached. */
  version(): Promise<{ version: string; apiVersion: string }>;
  /** Containers (running and stopped), optionally only those carrying every given label. */
  listContainers(filter?: { labels?: Readonly<Record<string, string>> }): Promise<ContainerSummary[]>;
  /** One container by name or ID; undefined when there is none. */
  inspectContainer(ref: string): Promise<ContainerInfo | undefined>;
  pullImage(ref: string, opts?: { onProgress?: (p: PullProgress) => void }): Promise<void>;
  imageExists(ref: string): Promise<boolean>;
  inspectImage(ref: string): Promise<ImageInfo | undefined>;
  /** Create a container; returns its ID. */
  createContainer(spec: ContainerSpec): Promise<string>;
  /** Start; a running container is left as it is. */
  startContainer(ref: string): Promise<void>;
  /** Stop (TERM, then KILL after `timeoutS`); a stopped container is left as it is. */
  stopContainer(ref: string, opts?: { timeoutS?: number }): Promise<void>;
  /** Remove; a missing container is not an error (re-runs must be harmless). */
  removeContainer(ref: string, opts?: { force?: boolean }): Promise<void>;
  /** Remove a named volume and its data; a missing volume is not an error. Fails while a container uses it. */
  removeVolume(name: string): Promise<void>;
  /** Run a command in a running container and wait for it. */
  exec(
    ref: string,
    argv: readonly string[],
    opts?: { env?: Readonly<Record<string, string | Secret>>; user?: string; timeoutMs?: number },
  ): Promise<ContainerExecResult>;
  /** The last `tail` lines of the container's output. */
  logs(ref: string, opts?: { tail?: number }): Promise<{ stdout: string; stderr: string }>;
  /** Close the engine's connections. */
  close(): Promise<void>;
}

/** A dockerode error's fields. */
type DockerodeError = Error & { statusCode?: number; json?: { message?: string } | null; code?: string };

/** Docker's multiplexed stream (non-TTY): 8-byte headers [stream, 0, 0, 0, size32be] then the payload. */
export function demuxDockerStream(buf: Buffer): { stdout: Buffer; stderr: Buffer } {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let i = 0;
  while (i + 8 <= buf.length) {
    const kind = buf[i]!;
    const size = buf.readUInt32BE(i + 4);
    const payload = buf.subarray(i + 8, i + 8 + size);
    (kind === 2 ? err : out).push(payload);
    i += 8 + size;
  }
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
}

function nsOf(ms: number | undefined): number | undefined {
  return ms === undefined ? undefined : ms * 1_000_000;
}

function envList(env: Readonly<Record<string, string | Secret>> | undefined): string[] | undefined {
  if (!env) return undefined;
  return Object.entries(env).map(([k, v]) => `${k}=${v instanceof Secret ? v.reveal() : v}`);
}

/** Read a stream to its end. */
async function drain(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of stream) parts.push(typeof c === 'string' ? Buffer.from(c) : c);
  return Buffer.concat(parts);
}

/**
 * An http.Agent whose connections are byte streams opened by `open` (SSH
 * channels here). Keep-alive reuses a channel for many requests.
 */
class StreamAgent extends http.Agent {
  readonly #idle = new WeakMap<Duplex, NodeJS.Timeout>();
  constructor(private readonly open: () => Promise<Duplex>) {
    super({ keepAlive: true, maxSockets: 8 });
  }
  // An idle channel is closed after DOCKER_IDLE_CHANNEL_MS: dockerd or sshd may drop a channel left
  // idle for minutes, and the next request on it dies with 'socket hang up' (seen during upgrades,
  // where a compute's engine waits idle while its instances are evacuated).
  override keepSocketAlive(socket: Duplex): void {
    // NOTE: Node's keepSocketAlive returns whether to keep the socket; its typings say void.
    const keep = (http.Agent.prototype.keepSocketAlive as unknown as (this: http.Agent, s: Duplex) => boolean).call(
      this,
      socket,
    );
    if (keep) {
      const t = setTimeout(() => socket.destroy(), DOCKER_IDLE_CHANNEL_MS);
      t.unref();
      this.#idle.set(socket, t);
    }
    return keep as unknown as void;
  }
  override reuseSocket(socket: Duplex, req: http.ClientRequest): void {
    clearTimeout(this.#idle.get(socket));
    this.#idle.delete(socket);
    super.reuseSocket(socket as never, req);
  }
  override createConnection(
    _options: http.ClientRequestArgs,
    callback?: (err: Error | null, stream: Duplex) => void,
  ): Duplex | null | undefined {
    this.open().then(
      (s) => callback?.(null, withSocketMethods(s)),
      (err: Error) => callback?.(err, undefined as unknown as Duplex),
    );
    return undefined;
  }
  // NOTE: keepSocketAlive and reuseSocket keep Node's defaults. They call net.Socket methods
  // (setKeepAlive, unref, ref) that withSocketMethods supplies, and the default reuseSocket
  // also removes the error listener the agent put on the idle channel; replacing it with a
  // no-op left one listener behind per reuse.
}

/**
 * http calls a few net.Socket methods on its sockets; an SSH channel needs them as no-ops. And a
 * channel is always read: at the end of an answer that does not keep its connection (dockerd's
 * logs and exec answers), sshd closes the channel and http, done with it, stops reading and waits
 * for its 'close' to give the agent's slot back. A channel whose end nobody reads never closes:
 * after a few such answers at once, every slot was held and each later call to that node waited
 * for ever. The extra reader only keeps the channel flowing (http still gets every byte, and its
 * pause() still holds the flow back).
 */
function withSocketMethods(s: Duplex): Duplex {
  const sock = s as Duplex & Record<string, unknown>;
  for (const m of ['setTimeout', 'setNoDelay', 'setKeepAlive', 'ref', 'unref']) {
    if (typeof sock[m] !== 'function') sock[m] = () => sock;
  }
  if (!drained.has(s)) {
    drained.add(s);
    s.on('data', () => undefined);
  }
  return s;
}

/** The channels that already have their extra reader. */
const drained = new WeakSet<Duplex>();

/** How long an idle Docker API channel is kept for reuse. */
export const DOCKER_IDLE_CHANNEL_MS = 20_000;

/**
 * A request that died with its channel (reset, or closed before the answer) and never reached
 * dockerd's answer: safe to send once more when the operation is idempotent.
 */
export function isDeadChannel(err: unknown): boolean {
  const e = err as DockerodeError;
  return (
    e?.statusCode === undefined &&
    (e?.code === 'ECONNRESET' || e?.code === 'EPIPE' || /socket hang up/i.test(String(e?.message ?? '')))
  );
}

/** The dockerode-backed engine; build it with `remoteEngine` or `localEngine`. */
class DockerEngine implements ContainerEngine {
  readonly #t: Record<keyof typeof DOCKER_DEFAULTS, number>;
  constructor(
    readonly where: string,
    private readonly docker: Docker,
    private readonly onClose: () => void,
    timeouts: DockerTimeouts = {},
  ) {
    this.#t = { ...DOCKER_DEFAULTS, ...timeouts };
  }

  /** The TimeoutError of a call past its deadline (`what` and `hint` say more for a pull). */
  #timeout(
    op: string,
    ref: string | undefined,
    ms: number,
    what = `no answer from dockerd within ${ms} ms`,
    hint = `dockerd on ${this.where} took the request and did not answer: it is hung, stopped or overloaded, and may ` +
      "still carry the request out if it recovers. Check it there ('systemctl status docker', 'journalctl -u docker'); " +
      'a hung dockerd needs a restart.',
  ): TimeoutError {
    return new TimeoutError('E_DOCKER_TIMEOUT', `${this.where}: docker ${op}${ref ? ` ${ref}` : ''}: ${what}`, {
      hint,
      details: { engine: this.where, op, ...(ref ? { ref } : {}), timeoutMs: ms },
    });
  }

  /**
   * Run `fn` with a deadline. `fn` hands the signal to dockerode; at the deadline the request is aborted,
   * which closes its channel, and the call fails with `onTimeout()` at once: it does not wait for the
   * library to notice. A late outcome of `fn` is ignored.
   */
  async #bounded<T>(ms: number, onTimeout: () => StackctlError, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const abort = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const work = fn(abort.signal);
    work.catch(() => undefined);
    try {
      return await Promise.race([
        work,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            reject(onTimeout());
            abort.abort();
          }, ms);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Our error for a failed API call, naming the engine, the operation and the object. */
  #error(err: unknown, op: string, ref?: string): StackctlError {
    if (err instanceof StackctlError) return err;
    const e = err as DockerodeError;
    const what = `${this.where}: docker ${op}${ref ? ` ${ref}` : ''}`;
    const apiMessage = e.json?.message ?? messageOf(e);
    if (e.statusCode === undefined && (e.code === 'ENOENT' || e.code === 'ECONNREFUSED' || e.code === 'EACCES')) {
      return new RemoteError('E_DOCKER_UNREACHABLE', `${what}: cannot reach dockerd (${e.code})`, {
        hint:
          e.code === 'EACCES'
            ? 'The user may not use docker.sock: run as root or add the user to the docker group.'
            : "Is dockerd running? Start it with 'systemctl start docker' (or 'dockerd &'); install Debian's docker.io if missing.",
        cause: err,
        details: { engine: this.where, op },
      });
    }
    return new RemoteError(
      e.statusCode === DOCKER_STATUS.NOT_FOUND ? 'E_DOCKER_NOT_FOUND' : 'E_DOCKER_API',
      `${what}: ${apiMessage.trim()}`,
      {
        hint:
          e.statusCode === DOCKER_STATUS.NOT_FOUND
            ? 'Check the name; list what exists with docker ps -a / docker images on that host.'
            : e.statusCode === DOCKER_STATUS.CONFLICT
              ? 'Another container or operation holds it: remove or stop that first.'
              : 'See the dockerd log on that host for details.',
        cause: err,
        details: { engine: this.where, op, ...(ref ? { ref } : {}), status: e.statusCode },
      },
    );
  }

  /** One request within `ms`, raw errors; an idempotent one (`retry`) is sent again when its channel died under it. */
  #request<T>(op: string, ref: string | undefined, ms: number, fn: (signal: AbortSignal) => Promise<T>, retry = true) {
    return this.#bounded(
      ms,
      () => this.#timeout(op, ref, ms),
      (signal) => (retry ? this.#again(() => fn(signal), signal) : fn(signal)),
    );
  }

  /** One request within `ms`, its errors ours. */
  async #call<T>(
    op: string,
    ref: string | undefined,
    ms: number,
    fn: (signal: AbortSignal) => Promise<T>,
    retry = true,
  ): Promise<T> {
    try {
      return await this.#request(op, ref, ms, fn, retry);
    } catch (err) {
      throw this.#error(err, op, ref);
    }
  }

  /** One request within `ms` whose answer `status` means "nothing to do" (resolves undefined then). */
  async #callTolerating<T>(
    status: number,
    op: string,
    ref: string,
    ms: number,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T | undefined> {
    try {
      return await this.#request(op, ref, ms, fn);
    } catch (err) {
      if ((err as DockerodeError).statusCode === status) return undefined;
      throw this.#error(err, op, ref);
    }
  }

  /**
   * A GET through dockerode's modem, for the calls whose dockerode method does not pass an abort signal on
   * (image inspect; version, whose typings take none). Paths as dockerode builds them.
   */
  #get<T>(path: string, abortSignal: AbortSignal, statusCodes: Record<number, string> = {}): Promise<T> {
    return new Promise<T>((resolve, reject) =>
      this.docker.modem.dial(
        {
          path,
          method: 'GET',
          options: {},
          abortSignal,
          statusCodes: { 200: true, 500: 'server error', ...statusCodes },
        },
        (err, data) => (err ? reject(err) : resolve(data as T)),
      ),
    );
  }

  /** Run an idempotent request; once more on a fresh channel when its channel died under it (not when we aborted it). */
  async #again<T>(fn: () => Promise<T>, signal: AbortSignal): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (!isDeadChannel(err) || signal.aborted) throw err;
      return fn();
    }
  }

  async version(): Promise<{ version: string; apiVersion: string }> {
    const v = await this.#call('version', undefined, this.#t.readMs, (abortSignal) =>
      this.#get<Docker.DockerVersion>('/version', abortSignal),
    );
    return { version: v.Version, apiVersion: v.ApiVersion };
  }

  async listContainers(filter: { labels?: Readonly<Record<string, string>> } = {}): Promise<ContainerSummary[]> {
    const label = Object.entries(filter.labels ?? {}).map(([k, v]) => `${k}=${v}`);
    const list = await this.#call('ps', undefined, this.#t.readMs, (abortSignal) =>
      this.docker.listContainers({ all: true, ...(label.length ? { filters: { label } } : {}), abortSignal }),
    );
    return list.map((c) => ({
      id: c.Id,
      name: (c.Names[0] ?? '').replace(/^\//, ''),
      image: c.Image,
      state: c.State,
      status: c.Status,
      labels: c.Labels ?? {},
    }));
  }

  async inspectContainer(ref: string): Promise<ContainerInfo | undefined> {
    const c = await this.#callTolerating(DOCKER_STATUS.NOT_FOUND, 'inspect', ref, this.#t.readMs, (abortSignal) =>
      this.docker.getContainer(ref).inspect({ abortSignal }),
    );
    if (!c) return undefined;
    return {
      id: c.Id,
      name: c.Name.replace(/^\//, ''),
      image: c.Config.Image,
      imageId: c.Image,
      labels: c.Config.Labels ?? {},
      state: {
        status: c.State.Status,
        running: c.State.Running,
        exitCode: c.State.ExitCode,
        startedAt: c.State.StartedAt,
        finishedAt: c.State.FinishedAt,
        ...(c.State.Health?.Status ? { health: c.State.Health.Status } : {}),
        oomKilled: c.State.OOMKilled,
      },
      restartCount: c.RestartCount,
    };
  }

  /**
   * Pull, bounded by progress rather than by a total: every byte dockerd sends re-arms a `pullStallMs`
   * watchdog, so a big image on a slow link may take as long as it needs, while a registry that accepts
   * the connection and then says nothing (or a frozen dockerd) fails the pull after `pullStallMs`.
   */
  async pullImage(ref: string, opts: { onProgress?: (p: PullProgress) => void } = {}): Promise<void> {
    const ms = this.#t.pullStallMs;
    let bytes = 0;
    let stalled!: () => void;
    const stall = new Promise<never>((_, reject) => {
      stalled = () =>
        reject(
          this.#timeout(
            'pull',
            ref,
            ms,
            `no progress for ${ms} ms (${bytes} bytes of progress before that)`,
            `The registry, the network to it, or dockerd on ${this.where} stalls. Check that ${this.where} reaches ` +
              "the registry (curl http://REGISTRY/v2/) and read dockerd's log there; dockerd may go on trying in the " +
              'background, and a restart of dockerd ends that.',
          ),
        );
    });
    stall.catch(() => undefined);
    const abort = new AbortController();
    let stream: (NodeJS.ReadableStream & { destroy(): void }) | undefined;
    let timer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        stalled();
        abort.abort();
        stream?.destroy();
      }, ms);
    };
    const work = (async () => {
      stream = (await this.docker.pull(ref, { abortSignal: abort.signal })) as NodeJS.ReadableStream & {
        destroy(): void;
      };
      if (abort.signal.aborted) stream.destroy();
      stream.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        arm();
      });
      await new Promise<void>((resolve, reject) =>
        this.docker.modem.followProgress(
          stream!,
          (err) => (err ? reject(err) : resolve()),
          (ev: { id?: string; status?: string; progressDetail?: { current?: number; total?: number } }) =>
            opts.onProgress?.({
              ...(ev.id ? { layer: ev.id } : {}),
              status: ev.status ?? '',
              ...(ev.progressDetail?.current !== undefined ? { current: ev.progressDetail.current } : {}),
              ...(ev.progressDetail?.total !== undefined ? { total: ev.progressDetail.total } : {}),
            }),
        ),
      );
    })();
    work.catch(() => undefined);
    arm();
    try {
      await Promise.race([work, stall]);
    } catch (err) {
      throw this.#error(err, 'pull', ref);
    } finally {
      clearTimeout(timer);
    }
  }

  async inspectImage(ref: string): Promise<ImageInfo | undefined> {
    const i = await this.#callTolerating(DOCKER_STATUS.NOT_FOUND, 'image inspect', ref, this.#t.readMs, (abortSignal) =>
      this.#get<Docker.ImageInspectInfo>(`/images/${ref}/json`, abortSignal, { 404: 'no such image' }),
    );
    if (!i) return undefined;
    return {
      id: i.Id,
      tags: i.RepoTags ?? [],
      digests: i.RepoDigests ?? [],
      created: i.Created,
      size: i.Size,
      labels: i.Config?.Labels ?? {},
    };
  }

  async imageExists(ref: string): Promise<boolean> {
    return (await this.inspectImage(ref)) !== undefined;
  }

  async createContainer(spec: ContainerSpec): Promise<string> {
    const hc = spec.healthcheck;
    const c = await this.#call(
      'create',
      spec.name,
      this.#t.createMs,
      (abortSignal) =>
        this.docker.createContainer({
          name: spec.name,
          Image: spec.image,
          ...(spec.command ? { Cmd: [...spec.command] } : {}),
          ...(spec.entrypoint ? { Entrypoint: [...spec.entrypoint] } : {}),
          ...(spec.env ? { Env: envList(spec.env) } : {}),
          Labels: { ...(spec.labels ?? {}) },
          ...(spec.user ? { User: spec.user } : {}),
          ...(spec.workingDir ? { WorkingDir: spec.workingDir } : {}),
          ...(hc
            ? {
                Healthcheck: {
                  Test: ['CMD', ...hc.test],
                  Interval: nsOf(hc.intervalMs),
                  Timeout: nsOf(hc.timeoutMs),
                  Retries: hc.retries,
                  StartPeriod: nsOf(hc.startPeriodMs),
                },
              }
            : {}),
          HostConfig: {
            ...(spec.volumes ? { Binds: [...spec.volumes] } : {}),
            ...(spec.network ? { NetworkMode: spec.network } : {}),
            ...(spec.restart ? { RestartPolicy: { Name: spec.restart } } : {}),
            ...(spec.privileged ? { Privileged: true } : {}),
            ...(spec.init ? { Init: true } : {}),
            ...(spec.capAdd ? { CapAdd: [...spec.capAdd] } : {}),
            ...(spec.capDrop ? { CapDrop: [...spec.capDrop] } : {}),
            ...(spec.pidMode ? { PidMode: spec.pidMode } : {}),
            ...(spec.securityOpt ? { SecurityOpt: [...spec.securityOpt] } : {}),
            ...(spec.deviceCgroupRules ? { DeviceCgroupRules: [...spec.deviceCgroupRules] } : {}),
            // An empty list, not an absent one, is what turns Docker's default masks off.
            ...(spec.unmaskPaths ? { MaskedPaths: [], ReadonlyPaths: [] } : {}),
          },
          abortSignal,
        }),
      false, // a create sent twice conflicts with itself
    );
    return c.id;
  }

  async startContainer(ref: string): Promise<void> {
    await this.#callTolerating(DOCKER_STATUS.NOT_MODIFIED, 'start', ref, this.#t.startMs, (abortSignal) =>
      this.docker.getContainer(ref).start({ abortSignal }),
    );
  }

  async stopContainer(ref: string, opts: { timeoutS?: number } = {}): Promise<void> {
    // dockerd answers once the container is down: after the stop grace (TERM, then KILL) at most.
    const graceS = opts.timeoutS ?? this.#t.stopTimeoutS;
    await this.#callTolerating(
      DOCKER_STATUS.NOT_MODIFIED,
      'stop',
      ref,
      graceS * 1000 + this.#t.stopMarginMs,
      (abortSignal) => this.docker.getContainer(ref).stop({ t: graceS, abortSignal }),
    );
  }

  async removeContainer(ref: string, opts: { force?: boolean } = {}): Promise<void> {
    await this.#callTolerating(DOCKER_STATUS.NOT_FOUND, 'rm', ref, this.#t.removeMs, (abortSignal) =>
      this.docker.getContainer(ref).remove({ force: Boolean(opts.force), abortSignal }),
    );
  }

  async removeVolume(name: string): Promise<void> {
    await this.#callTolerating(DOCKER_STATUS.NOT_FOUND, 'volume rm', name, this.#t.removeMs, (abortSignal) =>
      this.docker.getVolume(name).remove({ abortSignal }),
    );
  }

  async exec(
    ref: string,
    argv: readonly string[],
    opts: { env?: Readonly<Record<string, string | Secret>>; user?: string; timeoutMs?: number } = {},
  ): Promise<ContainerExecResult> {
    const shown = argv.join(' ');
    const ms = opts.timeoutMs ?? this.#t.execMs;
    try {
      // One deadline for the whole exchange: create, run to the end, inspect.
      return await this.#bounded(
        ms,
        () =>
          new TimeoutError(
            'E_DOCKER_EXEC_TIMEOUT',
            `${this.where}: '${shown}' in ${ref} did not finish within ${ms} ms`,
            {
              hint:
                'Docker cannot kill an exec: the process may still run in the container. If dockerd itself hangs, ' +
                "check it on that host ('systemctl status docker').",
              details: { engine: this.where, container: ref, op: 'exec', timeoutMs: ms },
            },
          ),
        async (abortSignal) => {
          const ex = await this.docker.getContainer(ref).exec({
            Cmd: [...argv],
            AttachStdout: true,
            AttachStderr: true,
            ...(opts.env ? { Env: envList(opts.env) } : {}),
            ...(opts.user ? { User: opts.user } : {}),
            abortSignal,
          });
          // Without hijacking, dockerd streams the multiplexed output as the response body until the command ends.
          const stream = (await ex.start({
            hijack: false,
            stdin: false,
            Detach: false,
            abortSignal,
          })) as NodeJS.ReadableStream & {
            destroy(): void;
          };
          // The response is a stream: the abort does not reach it by itself.
          const stop = (): void => stream.destroy();
          abortSignal.addEventListener('abort', stop, { once: true });
          let raw: Buffer;
          try {
            raw = await drain(stream);
          } finally {
            abortSignal.removeEventListener('abort', stop);
          }
          const info = await ex.inspect({ abortSignal });
          const { stdout, stderr } = demuxDockerStream(raw);
          return { code: info.ExitCode ?? -1, stdout: stdout.toString('utf8'), stderr: stderr.toString('utf8') };
        },
      );
    } catch (err) {
      throw this.#error(err, 'exec', ref); // a command is not run twice
    }
  }

  async logs(ref: string, opts: { tail?: number } = {}): Promise<{ stdout: string; stderr: string }> {
    return this.#call('logs', ref, this.#t.readMs, async (abortSignal) => {
      const c = this.docker.getContainer(ref);
      const tty = (await c.inspect({ abortSignal })).Config.Tty;
      const raw = (await c.logs({
        stdout: true,
        stderr: true,
        follow: false,
        tail: opts.tail ?? 100,
        abortSignal,
      })) as Buffer;
      if (tty) return { stdout: raw.toString('utf8'), stderr: '' };
      const { stdout, stderr } = demuxDockerStream(raw);
      return { stdout: stdout.toString('utf8'), stderr: stderr.toString('utf8') };
    });
  }

  async close(): Promise<void> {
    this.onClose();
  }
}

/**
 * The Docker engine of a node, over the pool's SSH connection to it. Closing
 * the engine frees its channels; the SSH connection stays with the pool.
 */
export function remoteEngine(
  pool: SshPool,
  target: SshTarget,
  opts: { transport?: DockerTransport; socketPath?: string; timeouts?: DockerTimeouts } = {},
): ContainerEngine {
  const socketPath = opts.socketPath ?? DOCKER_SOCKET;
  let mode: DockerTransport = opts.transport ?? DockerTransport.AUTO;
  const dialStdio = (): Promise<Duplex> => pool.openExecStream(target, ['docker', 'system', 'dial-stdio']);
  const open = async (): Promise<Duplex> => {
    if (mode === DockerTransport.DIAL_STDIO) return dialStdio();
    try {
      return await pool.openUnixSocket(target, socketPath);
    } catch (err) {
      // sshd answers "administratively prohibited" when AllowStreamLocalForwarding is off.
      if (mode !== DockerTransport.AUTO || !(err instanceof StackctlError) || err.code !== 'E_SSH_CHANNEL') throw err;
      mode = DockerTransport.DIAL_STDIO;
      return dialStdio();
    }
  };
  const agent = new StreamAgent(open);
  // host/port only fill the Host header: the agent decides where bytes go.
  // docker-modem honours `agent` although its typings do not list it.
  const options: Docker.DockerOptions & { agent: http.Agent } = { protocol: 'http', host: 'docker', port: 80, agent };
  const docker = new Docker(options);
  return new DockerEngine(target.node, docker, () => agent.destroy(), opts.timeouts);
}

/** The Docker engine of this machine, through its Unix socket. */
export function localEngine(socketPath = DOCKER_SOCKET, timeouts: DockerTimeouts = {}): ContainerEngine {
  const docker = new Docker({ socketPath });
  return new DockerEngine('local', docker, () => undefined, timeouts);
}
