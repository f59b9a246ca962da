/**
 * Remote execution on nodes: the `Remote` facade ties a node's shell, file
 * transfer and container engine to one pooled SSH connection.
 *
 *     const pool = openPool(inventoryFile);
 *     const node = remoteFor(pool, { name: 'ctl-0', address: '192.168.24.10' });
 *     await node.run(['mkdir', '-p', '/etc/kolla'], { timeoutMs: 10_000 });
 *     await node.files.upload({ data: conf }, '/etc/kolla/keystone/keystone.conf', { mode: 0o600 });
 *     await node.docker.startContainer('keystone');
 *     await pool.close();
 */
import { RemoteError } from '../core/errors.js';
import { remoteEngine, type ContainerEngine, type DockerTimeouts, type DockerTransport } from './docker.js';
import { DEFAULT_SSH_PORT } from './known-hosts.js';
import {
  SshPool,
  describeTarget,
  type ExecOptions,
  type ExecResult,
  type RemoteCommand,
  type SshPoolOptions,
  type SshTarget,
} from './ssh.js';
import { SftpTransfer, type UploadOptions, type UploadSource } from './transfer.js';

export type {
  ContainerEngine,
  ContainerInfo,
  ContainerSpec,
  ContainerSummary,
  ImageInfo,
  PullProgress,
} from './docker.js';
export { DOCKER_DEFAULTS, localEngine, remoteEngine, type DockerTimeouts } from './docker.js';
export { ensureClientKey, generateEd25519, parsePublicKey, type PublicKey } from './keys.js';
export {
  checkHostKey,
  hostKeyError,
  knownHostName,
  recordHostKey,
  recordedKeys,
  replaceKeyCommand,
  HostKeyVerdict,
} from './known-hosts.js';
export {
  SSH_DEFAULTS,
  SshPool,
  fetchHostKey,
  type ExecOptions,
  type ExecResult,
  type RemoteCommand,
  type SshTarget,
} from './ssh.js';
export { SftpTransfer, type FileTransfer, type UploadOptions, type UploadSource } from './transfer.js';

/** The user stackctl logs in as unless told otherwise. */
export const DEFAULT_SSH_USER = 'root';

/** Files stackctl keeps next to an inventory for SSH. */
export interface SshFiles {
  /** `<inventory>.known_hosts`: host keys trusted with `stackctl nodes trust`. */
  readonly knownHostsFile: string;
  /** `<inventory>.ssh/id_ed25519` (mode 0600) and its `.pub`. */
  readonly privateKeyFile: string;
}

/** SSH files of an inventory (`site.yaml` → `site.known_hosts`, `site.ssh/id_ed25519`). */
export function sshFilesFor(inventoryFile: string): SshFiles {
  const base = inventoryFile.replace(/\.ya?ml$/, '');
  return { knownHostsFile: `${base}.known_hosts`, privateKeyFile: `${base}.ssh/id_ed25519` };
}

/** A pool using an inventory's SSH files. */
export function openPool(inventoryFile: string, opts: Partial<SshPoolOptions> = {}): SshPool {
  return new SshPool({ ...sshFilesFor(inventoryFile), ...opts });
}

/** How to reach a node by SSH. */
export interface NodeSsh {
  readonly name: string;
  /** The address to connect to (the provisioning network address for inventory nodes). */
  readonly address: string;
  readonly port?: number;
  readonly user?: string;
}

/** Commands on one node. */
export interface Shell {
  readonly node: string;
  /** Run a command; resolves whatever its exit code. */
  exec(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
  /** Run a command; a non-zero exit becomes a RemoteError with the end of its stderr. */
  run(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
}

/** Files on one node. */
export interface NodeFiles {
  upload(source: UploadSource, dest: string, opts?: UploadOptions): Promise<number>;
  download(src: string, localFile: string, opts?: { mode?: number }): Promise<number>;
  readFile(src: string): Promise<Buffer>;
}

/** Everything stackctl does on a node, over one SSH connection. */
export interface Remote extends Shell {
  readonly target: SshTarget;
  readonly files: NodeFiles;
  readonly docker: ContainerEngine;
  /** Free this node's Docker channels (the SSH connection stays in the pool). */
  close(): Promise<void>;
}

/** Last `n` characters of command output, for error messages. */
function tail(text: string, n = 400): string {
  const t = text.trim();
  return t.length > n ? '…' + t.slice(-n) : t;
}

/** The facade for one node. `docker` is created on first use. */
export function remoteFor(
  pool: SshPool,
  node: NodeSsh,
  opts: { dockerTransport?: DockerTransport; dockerTimeouts?: DockerTimeouts } = {},
): Remote {
  const target: SshTarget = {
    node: node.name,
    host: node.address,
    port: node.port ?? DEFAULT_SSH_PORT,
    user: node.user ?? DEFAULT_SSH_USER,
  };
  const transfer = new SftpTransfer(pool);
  let docker: ContainerEngine | undefined;
  const shown = (c: RemoteCommand): string => (typeof c === 'string' ? c.split('\n')[0]! : c.join(' '));
  return {
    node: node.name,
    target,
    exec: (command, o) => pool.exec(target, command, o),
    async run(command, o) {
      const r = await pool.exec(target, command, o);
      if (r.code !== 0) {
        throw new RemoteError(
          'E_REMOTE_COMMAND',
          `${describeTarget(target)}: '${shown(command)}' exited with ${r.code}: ${tail(r.stderr || r.stdout)}`,
          {
            hint: 'The command ran on the node and failed; its output above says why.',
            details: { node: node.name, command: shown(command), code: r.code },
          },
        );
      }
      return r;
    },
    files: {
      upload: (source, dest, o) => transfer.upload(target, source, dest, o),
      download: (src, localFile, o) => transfer.download(target, src, localFile, o),
      readFile: (src) => transfer.readFile(target, src),
    },
    get docker(): ContainerEngine {
      docker ??= remoteEngine(pool, target, {
        ...(opts.dockerTransport ? { transport: opts.dockerTransport } : {}),
        ...(opts.dockerTimeouts ? { timeouts: opts.dockerTimeouts } : {}),
      });
      return docker;
    },
    async close() {
      await docker?.close();
      docker = undefined;
    },
  };
}
