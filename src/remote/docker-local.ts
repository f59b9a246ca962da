/**
 * With remote/docker.ts, the only modules that import dockerode (CONVENTIONS.md 9):
 * the Docker Engine of THIS machine, over its local socket, for image builds and lab nodes.
 * Remote hosts go through src/remote/ instead. Docker's errors become
 * RemoteError here, with a hint, so callers never see dockerode's types.
 */
import Docker from 'dockerode';
import { PassThrough, type Readable } from 'node:stream';
import { RemoteError, StackctlError } from '../core/errors.js';

/** What stackctl needs to know about a local image. */
export interface LocalImage {
  readonly id: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly tags: readonly string[];
  readonly size: number;
}

/** What stackctl needs to know about a local container. */
export interface LocalContainer {
  readonly id: string;
  readonly name: string;
  readonly running: boolean;
  /** Docker's state word: created, running, exited, ... */
  readonly status: string;
  readonly image: string;
  readonly labels: Readonly<Record<string, string>>;
  /** network name -> address */
  readonly addresses: Readonly<Record<string, string>>;
}

/** A user-defined bridge network. */
export interface NetworkSpec {
  readonly name: string;
  readonly subnet: string;
  readonly gateway: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** A host address a container port is published on. */
export interface PortBinding {
  readonly hostIp: string;
  readonly hostPort: string;
}

/** A container to create; a deliberately small subset of Docker's options. */
export interface ContainerSpec {
  readonly name: string;
  readonly image: string;
  readonly hostname?: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly env?: readonly string[];
  readonly cmd?: readonly string[];
  /** Replaces the image's entrypoint. */
  readonly entrypoint?: readonly string[];
  /** Anonymous volumes (container paths). */
  readonly volumes?: readonly string[];
  readonly capAdd?: readonly string[];
  readonly capDrop?: readonly string[];
  readonly securityOpt?: readonly string[];
  /** No masked or read-only /proc and /sys paths (the CLI's `--security-opt systempaths=unconfined`). */
  readonly unmaskPaths?: boolean;
  readonly devices?: readonly string[];
  readonly deviceCgroupRules?: readonly string[];
  /** containerPort/tcp -> host ip:port (one binding or several) */
  readonly publish?: Readonly<Record<string, PortBinding | readonly PortBinding[]>>;
  /** Networks with a fixed address each; the first is used at create time. */
  readonly networks?: readonly { readonly name: string; readonly ip?: string; readonly aliases?: readonly string[] }[];
  readonly restart?: 'no' | 'unless-stopped';
}

/** Result of a command run in a container. */
export interface ExecResult {
  readonly exitCode: number;
  readonly output: string;
}

/** Progress lines of long Docker operations (build steps, push layers). */
export type ProgressLine = (line: string) => void;

/** The local Docker Engine, as stackctl uses it. Fakes implement it in unit tests. */
export interface LocalEngine {
  ping(): Promise<void>;
  image(ref: string): Promise<LocalImage | undefined>;
  /** Import a root filesystem tar stream as an image; resolves to the image id. */
  importRootfs(tar: Readable, repo: string, tag: string): Promise<string>;
  /** Build from a context folder; resolves to the image id. */
  build(
    contextDir: string,
    opts: {
      readonly tag: string;
      readonly buildArgs: Readonly<Record<string, string>>;
      readonly labels: Readonly<Record<string, string>>;
    },
    progress: ProgressLine,
  ): Promise<string>;
  tag(source: string, target: string): Promise<void>;
  /** Push; resolves to the manifest digest the registry stored (Docker's `aux.Digest`), when Docker said. */
  push(ref: string, progress: ProgressLine): Promise<string | undefined>;
  removeImage(ref: string): Promise<void>;
  container(name: string): Promise<LocalContainer | undefined>;
  containers(labels: Readonly<Record<string, string>>): Promise<LocalContainer[]>;
  createContainer(spec: ContainerSpec): Promise<string>;
  /** Copy a tar archive into a (created or running) container at `path`. */
  putArchive(name: string, path: string, tar: Buffer): Promise<void>;
  start(name: string): Promise<void>;
  kill(name: string): Promise<void>;
  stop(name: string, timeoutS: number): Promise<void>;
  restart(name: string, timeoutS: number): Promise<void>;
  removeContainer(name: string): Promise<void>;
  exec(name: string, cmd: readonly string[]): Promise<ExecResult>;
  network(name: string): Promise<NetworkSpec | undefined>;
  networks(labels: Readonly<Record<string, string>>): Promise<NetworkSpec[]>;
  createNetwork(spec: NetworkSpec): Promise<void>;
  connect(network: string, container: string, ip?: string, aliases?: readonly string[]): Promise<void>;
  disconnect(network: string, container: string): Promise<void>;
  removeNetwork(name: string): Promise<void>;
}

const HINT_DOCKERD =
  'Is the Docker Engine running? Start it with `systemctl start docker` (or `dockerd &` where there is no init), then check `docker info`.';

/** Docker's HTTP status of a failed call, when it has one. */
function statusOf(e: unknown): number | undefined {
  const s = (e as { statusCode?: unknown }).statusCode;
  return typeof s === 'number' ? s : undefined;
}

/** Docker's own message, without dockerode's "(HTTP code 500) server error - " prefix. */
function dockerMessage(e: unknown): string {
  const json = (e as { json?: { message?: unknown } }).json;
  if (json && typeof json.message === 'string') return json.message;
  const msg = e instanceof Error ? e.message : String(e);
  return msg.replace(/^\(HTTP code \d+\)\s*[a-z ]*-\s*/i, '').trim();
}

function wrap(action: string, e: unknown): StackctlError {
  if (e instanceof StackctlError) return e;
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' || code === 'ECONNREFUSED' || code === 'EACCES') {
    return new RemoteError('E_DOCKER_UNREACHABLE', `cannot reach the local Docker Engine (${code}) to ${action}`, {
      hint: HINT_DOCKERD,
      cause: e,
    });
  }
  return new RemoteError('E_DOCKER', `Docker refused to ${action}: ${dockerMessage(e)}`, {
    hint: 'See the message above; `docker info` and the dockerd log tell more.',
    cause: e,
    details: { action, ...(statusOf(e) !== undefined ? { status: statusOf(e) } : {}) },
  });
}

async function call<T>(action: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw wrap(action, e);
  }
}

/** Follow a JSON-lines progress stream; lines with `error` fail the operation. */
function follow(
  docker: Docker,
  stream: NodeJS.ReadableStream,
  onEvent: (ev: Record<string, unknown>) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    docker.modem.followProgress(
      stream,
      (err: Error | null) => (err ? reject(err) : resolve()),
      (ev: Record<string, unknown>) => {
        if (typeof ev.error === 'string') {
          reject(new Error(ev.error));
          return;
        }
        onEvent(ev);
      },
    );
  });
}

/** Build a LocalEngine on the local socket (DOCKER_HOST is honoured by dockerode). */
export function localEngine(docker: Docker = new Docker()): LocalEngine {
  const toContainer = (info: Docker.ContainerInspectInfo): LocalContainer => ({
    id: info.Id,
    name: info.Name.replace(/^\//, ''),
    running: info.State.Running,
    status: info.State.Status,
    image: info.Config.Image,
    labels: info.Config.Labels ?? {},
    addresses: Object.fromEntries(
      Object.entries(info.NetworkSettings.Networks ?? {}).map(([n, v]) => [n, v.IPAddress]),
    ),
  });
  const labelFilter = (labels: Readonly<Record<string, string>>): string =>
    JSON.stringify({ label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) });

  const engine: LocalEngine = {
    ping: () => call('answer a ping', async () => void (await docker.ping())),

    image: (ref) =>
      call(`inspect image ${ref}`, async () => {
        try {
          const info = await docker.getImage(ref).inspect();
          return { id: info.Id, labels: info.Config?.Labels ?? {}, tags: info.RepoTags ?? [], size: info.Size };
        } catch (e) {
          if (statusOf(e) === 404) return undefined;
          throw e;
        }
      }),

    importRootfs: (tar, repo, tag) =>
      call(`import ${repo}:${tag}`, async () => {
        const stream = await docker.importImage(tar, { repo, tag });
        await follow(docker, stream, () => undefined);
        const info = await docker.getImage(`${repo}:${tag}`).inspect();
        return info.Id;
      }),

    build: (contextDir, opts, progress) =>
      call(`build ${opts.tag}`, async () => {
        const stream = await docker.buildImage(
          { context: contextDir, src: ['.'] },
          {
            t: opts.tag,
            buildargs: { ...opts.buildArgs },
            labels: { ...opts.labels },
            rm: true,
            forcerm: true,
            pull: false,
          },
        );
        await follow(docker, stream, (ev) => {
          if (typeof ev.stream === 'string') {
            for (const line of ev.stream.split('\n')) if (line.trim()) progress(line.trimEnd());
          }
        });
        return (await docker.getImage(opts.tag).inspect()).Id;
      }),

    tag: (source, target) =>
      call(`tag ${source} as ${target}`, async () => {
        const at = target.lastIndexOf(':');
        const slash = target.lastIndexOf('/');
        const [repo, tag] = at > slash ? [target.slice(0, at), target.slice(at + 1)] : [target, 'latest'];
        await docker.getImage(source).tag({ repo, tag });
      }),

    push: (ref, progress) =>
      call(`push ${ref}`, async () => {
        // NOTE: Docker 20.10 wants an X-Registry-Auth header even for a registry without auth.
        const stream = await docker.getImage(ref).push({ authconfig: {} });
        let digest: string | undefined;
        await follow(docker, stream, (ev) => {
          if (typeof ev.status === 'string' && (ev.status === 'Pushed' || ev.status.startsWith('latest'))) {
            progress(`${typeof ev.id === 'string' ? ev.id + ': ' : ''}${ev.status}`);
          } else if (typeof ev.status === 'string' && /digest:/.test(ev.status)) progress(ev.status);
          const aux = ev.aux as { Digest?: unknown } | undefined;
          if (typeof aux?.Digest === 'string') digest = aux.Digest;
        });
        return digest;
      }),

    removeImage: (ref) =>
      call(`remove image ${ref}`, async () => {
        try {
          await docker.getImage(ref).remove({ force: true });
        } catch (e) {
          if (statusOf(e) !== 404) throw e;
        }
      }),

    container: (name) =>
      call(`inspect container ${name}`, async () => {
        try {
          return toContainer(await docker.getContainer(name).inspect());
        } catch (e) {
          if (statusOf(e) === 404) return undefined;
          throw e;
        }
      }),

    containers: (labels) =>
      call('list containers', async () => {
        const list = await docker.listContainers({ all: true, filters: labelFilter(labels) });
        const out: LocalContainer[] = [];
        for (const c of list) {
          const found = await engine.container(c.Id);
          if (found) out.push(found);
        }
        return out.sort((a, b) => a.name.localeCompare(b.name));
      }),

    createContainer: (spec) =>
      call(`create container ${spec.name}`, async () => {
        const [first, ...rest] = spec.networks ?? [];
        const exposed: Record<string, object> = {};
        const bindings: Record<string, { HostIp: string; HostPort: string }[]> = {};
        for (const [port, b] of Object.entries(spec.publish ?? {})) {
          exposed[port] = {};
          bindings[port] = (Array.isArray(b) ? b : [b]).map((x: PortBinding) => ({
            HostIp: x.hostIp,
            HostPort: x.hostPort,
          }));
        }
        const c = await docker.createContainer({
          name: spec.name,
          Image: spec.image,
          ...(spec.hostname ? { Hostname: spec.hostname } : {}),
          Labels: { ...spec.labels },
          ...(spec.env ? { Env: [...spec.env] } : {}),
          ...(spec.cmd ? { Cmd: [...spec.cmd] } : {}),
          ...(spec.entrypoint ? { Entrypoint: [...spec.entrypoint] } : {}),
          ...(spec.volumes ? { Volumes: Object.fromEntries(spec.volumes.map((v) => [v, {}])) } : {}),
          ExposedPorts: exposed,
          HostConfig: {
            CapAdd: spec.capAdd ? [...spec.capAdd] : undefined,
            CapDrop: spec.capDrop ? [...spec.capDrop] : undefined,
            SecurityOpt: spec.securityOpt ? [...spec.securityOpt] : undefined,
            // An empty list (not an absent one) is what turns the default masks off.
            ...(spec.unmaskPaths ? { MaskedPaths: [], ReadonlyPaths: [] } : {}),
            Devices: (spec.devices ?? []).map((d) => ({
              PathOnHost: d,
              PathInContainer: d,
              CgroupPermissions: 'rwm',
            })),
            DeviceCgroupRules: spec.deviceCgroupRules ? [...spec.deviceCgroupRules] : undefined,
            PortBindings: bindings,
            RestartPolicy: { Name: spec.restart ?? 'no' },
            ...(first ? { NetworkMode: first.name } : {}),
          },
          ...(first
            ? {
                NetworkingConfig: {
                  EndpointsConfig: {
                    [first.name]: {
                      ...(first.ip ? { IPAMConfig: { IPv4Address: first.ip } } : {}),
                      ...(first.aliases ? { Aliases: [...first.aliases] } : {}),
                    },
                  },
                },
              }
            : {}),
        });
        // Docker 20.10 attaches one network at create time; the others are connected before start.
        for (const n of rest) await engine.connect(n.name, spec.name, n.ip, n.aliases);
        return c.id;
      }),

    putArchive: (name, path, tar) =>
      call(`copy files into ${name}`, async () => {
        await docker.getContainer(name).putArchive(tar, { path });
      }),

    start: (name) =>
      call(`start ${name}`, async () => {
        try {
          await docker.getContainer(name).start();
        } catch (e) {
          if (statusOf(e) !== 304) throw e; // already running
        }
      }),

    kill: (name) =>
      call(`kill ${name}`, async () => {
        try {
          await docker.getContainer(name).kill();
        } catch (e) {
          if (statusOf(e) !== 409 && statusOf(e) !== 304) throw e; // not running
        }
      }),

    stop: (name, timeoutS) =>
      call(`stop ${name}`, async () => {
        try {
          await docker.getContainer(name).stop({ t: timeoutS });
        } catch (e) {
          if (statusOf(e) !== 304) throw e; // already stopped
        }
      }),

    restart: (name, timeoutS) =>
      call(`restart ${name}`, async () => docker.getContainer(name).restart({ t: timeoutS })),

    removeContainer: (name) =>
      call(`remove container ${name}`, async () => {
        try {
          await docker.getContainer(name).remove({ force: true, v: true });
        } catch (e) {
          if (statusOf(e) !== 404) throw e;
        }
      }),

    exec: (name, cmd) =>
      call(`run ${cmd[0] ?? ''} in ${name}`, async () => {
        const ex = await docker.getContainer(name).exec({ Cmd: [...cmd], AttachStdout: true, AttachStderr: true });
        const stream = await ex.start({ hijack: true, stdin: false });
        const chunks: Buffer[] = [];
        const sink = new PassThrough();
        sink.on('data', (b: Buffer) => chunks.push(b));
        docker.modem.demuxStream(stream, sink, sink);
        await new Promise<void>((resolve, reject) => {
          stream.on('end', () => resolve());
          stream.on('close', () => resolve());
          stream.on('error', reject);
        });
        const info = await ex.inspect();
        return { exitCode: info.ExitCode ?? -1, output: Buffer.concat(chunks).toString('utf8') };
      }),

    network: (name) =>
      call(`inspect network ${name}`, async () => {
        try {
          const n = (await docker.getNetwork(name).inspect()) as {
            Name: string;
            Labels?: Record<string, string>;
            IPAM?: { Config?: { Subnet?: string; Gateway?: string }[] };
          };
          const cfg = n.IPAM?.Config?.[0] ?? {};
          return { name: n.Name, subnet: cfg.Subnet ?? '', gateway: cfg.Gateway ?? '', labels: n.Labels ?? {} };
        } catch (e) {
          if (statusOf(e) === 404) return undefined;
          throw e;
        }
      }),

    networks: (labels) =>
      call('list networks', async () => {
        const list = await docker.listNetworks({ filters: labelFilter(labels) });
        const out: NetworkSpec[] = [];
        for (const n of list) {
          const found = await engine.network(n.Name);
          if (found) out.push(found);
        }
        return out.sort((a, b) => a.name.localeCompare(b.name));
      }),

    createNetwork: (spec) =>
      call(`create network ${spec.name}`, async () => {
        await docker.createNetwork({
          Name: spec.name,
          Driver: 'bridge',
          CheckDuplicate: true,
          Labels: { ...spec.labels },
          IPAM: { Driver: 'default', Config: [{ Subnet: spec.subnet, Gateway: spec.gateway }] },
        });
      }),

    connect: (network, container, ip, aliases) =>
      call(`connect ${container} to ${network}`, async () => {
        await docker.getNetwork(network).connect({
          Container: container,
          EndpointConfig: {
            ...(ip ? { IPAMConfig: { IPv4Address: ip } } : {}),
            ...(aliases ? { Aliases: [...aliases] } : {}),
          },
        });
      }),

    disconnect: (network, container) =>
      call(`disconnect ${container} from ${network}`, async () => {
        try {
          await docker.getNetwork(network).disconnect({ Container: container, Force: true });
        } catch (e) {
          if (statusOf(e) !== 404) throw e;
        }
      }),

    removeNetwork: (name) =>
      call(`remove network ${name}`, async () => {
        try {
          await docker.getNetwork(name).remove();
        } catch (e) {
          if (statusOf(e) !== 404) throw e;
        }
      }),
  };
  return engine;
}

/** Fail with how to start dockerd when the local engine does not answer. */
export async function requireDocker(engine: LocalEngine): Promise<void> {
  await engine.ping();
}
