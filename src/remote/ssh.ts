/**
 * SSH to nodes: the only module that imports `ssh2` (CONVENTIONS.md 9).
 *
 * An `SshPool` keeps one connection per `user@host:port` and runs many
 * channels over it (commands, one SFTP session, Unix-socket forwards for the
 * Docker API). Hosts are checked strictly against stackctl's known_hosts file;
 * login is by stackctl's own ed25519 key only. Every ssh2 error becomes a
 * StackctlError here, naming the node and its address.
 */
import { randomBytes } from 'node:crypto';
import { constants as osConstants } from 'node:os';
import type { Duplex } from 'node:stream';
import { Client, type ClientChannel, type ConnectConfig, type SFTPWrapper, type Stats } from 'ssh2';
import { AuthError, RemoteError, StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import { Secret } from '../core/secret.js';
import { publicKeyFromBlob, readClientKey, type PublicKey } from './keys.js';
import { checkHostKey, hostKeyError, knownHostName, recordedKeys, type HostKeyCheck } from './known-hosts.js';
import { isEnvName, shellJoin, shellQuote } from './quote.js';

/** Defaults of the pool; each can be overridden in `SshPoolOptions`. */
export const SSH_DEFAULTS = {
  /** TCP connect + key exchange + login must finish within this (ms). */
  connectTimeoutMs: 10_000,
  /** SSH-level keep-alive probe interval (ms): finds dead peers behind idle NAT or a rebooted node. */
  keepAliveMs: 15_000,
  /** Unanswered keep-alives before the connection is declared dead. */
  keepAliveCountMax: 3,
  /** OpenSSH's `MaxSessions` default: more concurrent session channels per connection are refused. */
  maxSessions: 10,
  /** Cap on each of stdout and stderr of one command; more is an error, not silent truncation. */
  maxOutputBytes: 64 * 1024 * 1024,
  /** Time the remote `timeout` gets beyond ours before it kills the process group (s). */
  remoteKillGraceS: 2,
  /**
   * sshd must answer a channel open (command, SFTP, Docker forward) within this (ms). A connection whose sshd
   * is hung altogether is found by the keep-alives; this bounds each open on its own.
   */
  channelOpenTimeoutMs: 30_000,
  /** Each SFTP request (a 64 KiB write or read, a stat, an fsync…) must be answered within this (ms). */
  sftpRequestTimeoutMs: 60_000,
  /** Longest life of a command stream (`openExecStream`): the remote `timeout` ends one left behind (ms). */
  streamMaxMs: 24 * 3_600_000,
  /** A command stream closed by us whose process has not ended after this (ms) is sent TERM. */
  streamCloseGraceMs: 2_000,
} as const;

/**
 * Host-key algorithms in ssh2's preference order. When the known_hosts file
 * already holds a key of some type for a host, that type is asked for first,
 * so that a host with several keys offers the one that was recorded.
 */
const HOST_KEY_ALGORITHMS: Readonly<Record<string, readonly string[]>> = {
  'ssh-ed25519': ['ssh-ed25519'],
  'ecdsa-sha2-nistp256': ['ecdsa-sha2-nistp256'],
  'ecdsa-sha2-nistp384': ['ecdsa-sha2-nistp384'],
  'ecdsa-sha2-nistp521': ['ecdsa-sha2-nistp521'],
  'ssh-rsa': ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'],
};

/** SSH_MSG_CHANNEL_OPEN_FAILURE reason sshd gives when a session channel is refused (e.g. MaxSessions reached). */
const SSH_OPEN_CONNECT_FAILED = 2;

/** Attempts at opening a refused session channel before giving up (about 5 s with the backoff). */
const CHANNEL_OPEN_RETRIES = 30;

/** Where to log in: the node's name (for messages), its SSH address, port and user. */
export interface SshTarget {
  readonly node: string;
  readonly host: string;
  readonly port: number;
  readonly user: string;
}

/** A command: an argv (each element shell-quoted) or a shell script run by `/bin/sh`. */
export type RemoteCommand = readonly string[] | string;

/** Options of one command. */
export interface ExecOptions {
  /** Deadline: the command is killed (its whole process group) and a TimeoutError raised. */
  readonly timeoutMs: number;
  /** Bytes for the command's standard input (closed afterwards; empty when absent). */
  readonly stdin?: string | Buffer;
  /**
   * Environment variables. Sent over the channel's stdin ahead of `stdin` and
   * read by the remote shell's builtins, so values (secrets too) never appear
   * in any process's argv and need no `AcceptEnv` on the node.
   */
  readonly env?: Readonly<Record<string, string | Secret>>;
  /** Cap on each of stdout and stderr (bytes). */
  readonly maxOutputBytes?: number;
}

/** What a finished command left. `code` is 128+N when it died of signal N, as in shells. */
export interface ExecResult {
  readonly code: number;
  readonly signal?: string;
  readonly stdout: string;
  readonly stderr: string;
}

/** Stat of a remote path; undefined from `stat` when it does not exist. */
export interface RemoteStat {
  readonly mode: number;
  readonly size: number;
  readonly uid: number;
  readonly gid: number;
  readonly isDirectory: boolean;
}

/** An open remote file (opaque). */
export interface RemoteHandle {
  readonly path: string;
  /** @internal the SFTP handle bytes */
  readonly raw: Buffer;
}

/** The SFTP operations stackctl uses, promise-based and with our errors. */
export interface SftpSession {
  stat(path: string): Promise<RemoteStat | undefined>;
  mkdir(path: string, mode: number): Promise<void>;
  open(path: string, flags: 'r' | 'wx', mode?: number): Promise<RemoteHandle>;
  write(h: RemoteHandle, data: Buffer, position: number): Promise<void>;
  read(h: RemoteHandle, into: Buffer, position: number): Promise<number>;
  /** fsync@openssh.com; false when the server lacks the extension. */
  fsync(h: RemoteHandle): Promise<boolean>;
  fchmod(h: RemoteHandle, mode: number): Promise<void>;
  fchown(h: RemoteHandle, uid: number, gid: number): Promise<void>;
  close(h: RemoteHandle): Promise<void>;
  /** posix-rename@openssh.com: replaces `to` atomically (plain SFTP rename refuses an existing target). */
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
}

/** Options of a pool; the side effects (key reading, client creation) are injectable. */
export interface SshPoolOptions {
  /** stackctl's known_hosts file: hosts not in it are refused. */
  readonly knownHostsFile: string;
  /** stackctl's private key (ed25519, mode 0600). */
  readonly privateKeyFile: string;
  readonly connectTimeoutMs?: number;
  readonly keepAliveMs?: number;
  readonly keepAliveCountMax?: number;
  /** Session channels (commands, SFTP, exec streams) open at once per connection. */
  readonly maxSessions?: number;
  readonly channelOpenTimeoutMs?: number;
  readonly sftpRequestTimeoutMs?: number;
  /** Reads the private key (default: with a 0600 check). */
  readonly readKey?: (file: string) => Buffer;
  /** Makes ssh2 clients (tests may count or wrap them). */
  readonly newClient?: () => Client;
}

/** A counting semaphore: channels wait here for a free session slot. */
class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];
  constructor(size: number) {
    this.#free = size;
  }
  async acquire(): Promise<() => void> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    };
  }
}

/** One live connection and what hangs off it. */
interface Connection {
  readonly client: Client;
  readonly slots: Slots;
  /** The SFTP session in use; a new one is opened when it closed or stopped answering. */
  sftp?: Promise<SftpSession>;
  closed: boolean;
}

/** A Node-style callback of ssh2. */
type Ssh2Callback<T> = (err: Error | undefined | null, value?: T) => void;

/** `node (user@host:port)` for messages. */
export function describeTarget(t: SshTarget): string {
  return `${t.node} (${t.user}@${knownHostName(t.host, t.port)})`;
}

/** An ssh2 error with the fields it may carry. */
type Ssh2Error = Error & { level?: string; code?: string | number; description?: string };

/** Turn an ssh2 / socket error into ours, naming the node. `check` is the host-key verdict, if one was made. */
function connectError(err: Ssh2Error, t: SshTarget, timeoutMs: number, check?: HostKeyCheck): StackctlError {
  if (err instanceof StackctlError) return err;
  if (check && check.verdict !== 'trusted') return hostKeyError(check, t.node, t.host, t.port);
  const where = describeTarget(t);
  const details = { node: t.node, host: t.host, port: t.port, user: t.user };
  if (err.level === 'client-timeout' || err.code === 'ETIMEDOUT') {
    return new TimeoutError('E_SSH_CONNECT_TIMEOUT', `${where}: no SSH session within ${timeoutMs} ms`, {
      hint:
        'Check that the node is powered on and booted, that its address is right, and that nothing filters port ' +
        t.port +
        '.',
      cause: err,
      details,
    });
  }
  if (err.level === 'client-authentication') {
    return new AuthError('E_SSH_AUTH', `${where}: the node refused stackctl's SSH key`, {
      hint: `Put the public key (<inventory>.ssh/id_ed25519.pub) into ~${t.user}/.ssh/authorized_keys on the node, and check that sshd allows key logins for ${t.user}.`,
      cause: err,
      details,
    });
  }
  const code = typeof err.code === 'string' ? err.code : '';
  if (['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'ECONNRESET'].includes(code)) {
    return new RemoteError('E_SSH_UNREACHABLE', `${where}: cannot reach sshd (${code})`, {
      hint:
        code === 'ECONNREFUSED'
          ? `Nothing listens on port ${t.port}: is sshd running on the node, and is the port right (--ssh-port)?`
          : 'Check the address, the route to it and that the node is up.',
      cause: err,
      details,
    });
  }
  return new RemoteError('E_SSH', `${where}: SSH failed: ${messageOf(err)}`, {
    hint: 'Run the command again with --debug for the cause; check sshd logs on the node.',
    cause: err,
    details,
  });
}

/** Signal name (as SSH reports it, without SIG) to 128+number, as shells report deaths by signal. */
function signalCode(signal: string): number {
  const n = (osConstants.signals as Record<string, number | undefined>)[`SIG${signal}`];
  return 128 + (n ?? 0);
}

/** Host-key algorithms to ask for, recorded types first. */
function hostKeyAlgorithms(recorded: readonly PublicKey[]): string[] {
  const first = recorded.flatMap((k) => HOST_KEY_ALGORITHMS[k.type] ?? []);
  const all = Object.values(HOST_KEY_ALGORITHMS).flat();
  return [...new Set([...first, ...all])];
}

/**
 * Build the command line sent to the node. The body runs under `/bin/sh`,
 * wrapped in coreutils `timeout`, which kills the session's whole process
 * group at the deadline (plus a grace period): the shell alone dying would
 * leave its children running. The shell's `$0` is a per-command tag so that
 * `killScript` can find the command again. With `env`, a prelude reads
 * `export NAME='value'` lines from stdin up to a random end marker using only
 * shell builtins, then `eval`s them.
 */
export function buildCommandLine(
  command: RemoteCommand,
  timeoutMs: number,
  env: Readonly<Record<string, string | Secret>> | undefined,
  token = randomBytes(12).toString('hex'),
): { line: string; stdinPrefix: string; token: string } {
  const body = typeof command === 'string' ? command : shellJoin(command);
  let prelude = '';
  let stdinPrefix = '';
  const names = Object.keys(env ?? {});
  if (names.length) {
    for (const name of names) {
      if (!isEnvName(name)) throw new TypeError(`'${name}' is not a valid environment variable name`);
      const v = env![name]!;
      stdinPrefix += `export ${name}=${shellQuote(v instanceof Secret ? v.reveal() : v)}\n`;
    }
    const end = `__stackctl_env_end_${token}`;
    stdinPrefix += `${end}\n`;
    prelude = `__e=; while IFS= read -r __l && [ "$__l" != ${end} ]; do __e="$__e$__l\n"; done; eval "$__e"; unset __e __l\n`;
  }
  const seconds = Math.ceil(timeoutMs / 1000) + SSH_DEFAULTS.remoteKillGraceS;
  return {
    line: `timeout -s KILL ${seconds} /bin/sh -c ${shellQuote(prelude + body)} stackctl-cmd-${token}`,
    stdinPrefix,
    token,
  };
}

/**
 * A script that sends TERM to the processes tagged by `buildCommandLine`;
 * `timeout` passes TERM on to the whole process group. SSH "signal" requests
 * cannot do this: OpenSSH refuses them for root sessions ("session signalling
 * requires privilege separation"). Needs only sh and grep. The tag is split
 * so that this script's own command line does not match it. A command given
 * up on right after its channel opened may not have a process yet (sshd
 * forks it later on a loaded node): until one is found, the script looks
 * again every 0.2 s for 2 s.
 */
export function killScript(token: string): string {
  return (
    `t=${token}; n=0; while :; do hit=; for p in /proc/[0-9]*; do ` +
    `grep -qF "stackctl-cmd-$t" "$p/cmdline" 2>/dev/null && kill -TERM "\${p#/proc/}" 2>/dev/null && hit=1; done; ` +
    `[ -n "$hit" ] || [ $n -ge 10 ] && break; n=$((n+1)); sleep 0.2; done; true`
  );
}

/**
 * Promisified SFTP with errors naming the node, path and operation. Every request has a deadline: a
 * request sftp-server does not answer in time (a hung file system, a frozen process) fails with
 * E_SFTP_TIMEOUT and calls `onStuck`, which drops the session so that the next transfer opens a new one.
 */
function wrapSftp(sftp: SFTPWrapper, t: SshTarget, timeoutMs: number, onStuck: () => void): SftpSession {
  const fail = (op: string, path: string, err: Error & { code?: number | string }): RemoteError => {
    const denied = err.code === 3;
    return new RemoteError('E_SFTP', `${describeTarget(t)}: ${op} ${path}: ${messageOf(err)}`, {
      hint: denied
        ? `The SSH user ${t.user} may not ${op} there; check ownership and modes on the node.`
        : 'Check the path and the free space on the node.',
      cause: err,
      details: { node: t.node, op, path, status: err.code },
    });
  };
  /** One request: `fn` starts it and calls `settle` with ssh2's answer, which `answer` turns into ours. */
  const request = <R, T>(
    op: string,
    path: string,
    fn: (settle: Ssh2Callback<R>) => void,
    answer: (err: (Error & { code?: number | string }) | undefined | null, v: R | undefined) => T,
  ): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      let done = false;
      const timer = setTimeout(() => {
        if (done) return;
        done = true;
        reject(
          new TimeoutError(
            'E_SFTP_TIMEOUT',
            `${describeTarget(t)}: SFTP ${op} ${path}: no answer within ${timeoutMs} ms`,
            {
              hint:
                "The node's sftp-server or its file system does not answer (a hung mount, a stopped process). The SFTP " +
                'session was dropped; the next transfer opens a new one. Look on the node for processes stuck in state D.',
              details: { node: t.node, host: t.host, op, path, timeoutMs },
            },
          ),
        );
        onStuck();
      }, timeoutMs);
      const settle: Ssh2Callback<R> = (err, v) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        try {
          resolve(answer(err, v));
        } catch (e) {
          reject(e);
        }
      };
      try {
        fn(settle);
      } catch (e) {
        settle(e as Error);
      }
    });
  /** The common case: an error is an E_SFTP, a value is passed on. */
  const call = <T>(op: string, path: string, fn: (cb: Ssh2Callback<T>) => void) =>
    request<T, T>(op, path, fn, (err, v) => {
      if (err) throw fail(op, path, err);
      return v as T;
    });
  return {
    stat: (path) =>
      request<Stats, RemoteStat | undefined>(
        'stat',
        path,
        (cb) => sftp.stat(path, cb),
        (err, s) => {
          if (err) {
            if (err.code === 2) return undefined;
            throw fail('stat', path, err);
          }
          return { mode: s!.mode, size: s!.size, uid: s!.uid, gid: s!.gid, isDirectory: s!.isDirectory() };
        },
      ),
    mkdir: (path, mode) => call('mkdir', path, (cb) => sftp.mkdir(path, { mode }, cb)),
    open: async (path, flags, mode) => ({
      path,
      raw: await call<Buffer>('open', path, (cb) =>
        sftp.open(path, flags, mode === undefined ? {} : { mode }, (err, h) => cb(err, h)),
      ),
    }),
    write: (h, data, position) => call('write', h.path, (cb) => sftp.write(h.raw, data, 0, data.length, position, cb)),
    read: (h, into, position) =>
      call<number>('read', h.path, (cb) => sftp.read(h.raw, into, 0, into.length, position, (err, n) => cb(err, n))),
    fsync: (h) =>
      request<boolean, boolean>(
        'fsync',
        h.path,
        (cb) => {
          try {
            sftp.ext_openssh_fsync(h.raw, (err) => cb(err, true));
          } catch {
            cb(undefined, false); // ssh2 throws synchronously when the server did not announce fsync@openssh.com
          }
        },
        (err, v) => {
          if (err) throw fail('fsync', h.path, err);
          return v ?? false;
        },
      ),
    fchmod: (h, mode) => call('chmod', h.path, (cb) => sftp.fchmod(h.raw, mode, cb)),
    fchown: (h, uid, gid) => call('chown', h.path, (cb) => sftp.fchown(h.raw, uid, gid, cb)),
    close: (h) => call('close', h.path, (cb) => sftp.close(h.raw, cb)),
    rename: (from, to) => call('rename', to, (cb) => sftp.ext_openssh_rename(from, to, cb)),
    unlink: (path) => call('unlink', path, (cb) => sftp.unlink(path, cb)),
  };
}

/**
 * One SSH connection per `user@host:port`, many channels over it.
 * Call `close()` when done: open connections keep the process alive.
 */
export class SshPool {
  readonly #opts: Required<Omit<SshPoolOptions, 'readKey' | 'newClient'>>;
  readonly #readKey: (file: string) => Buffer;
  readonly #newClient: () => Client;
  readonly #connections = new Map<string, Promise<Connection>>();
  #closed = false;

  constructor(opts: SshPoolOptions) {
    this.#opts = {
      knownHostsFile: opts.knownHostsFile,
      privateKeyFile: opts.privateKeyFile,
      connectTimeoutMs: opts.connectTimeoutMs ?? SSH_DEFAULTS.connectTimeoutMs,
      keepAliveMs: opts.keepAliveMs ?? SSH_DEFAULTS.keepAliveMs,
      keepAliveCountMax: opts.keepAliveCountMax ?? SSH_DEFAULTS.keepAliveCountMax,
      maxSessions: opts.maxSessions ?? SSH_DEFAULTS.maxSessions,
      channelOpenTimeoutMs: opts.channelOpenTimeoutMs ?? SSH_DEFAULTS.channelOpenTimeoutMs,
      sftpRequestTimeoutMs: opts.sftpRequestTimeoutMs ?? SSH_DEFAULTS.sftpRequestTimeoutMs,
    };
    this.#readKey = opts.readKey ?? readClientKey;
    this.#newClient = opts.newClient ?? (() => new Client());
  }

  /** The known_hosts file this pool checks against. */
  get knownHostsFile(): string {
    return this.#opts.knownHostsFile;
  }

  /** Connections currently open or opening. */
  get size(): number {
    return this.#connections.size;
  }

  /** Run a command on the node; resolves with its exit code and output whatever the code. */
  async exec(t: SshTarget, command: RemoteCommand, opts: ExecOptions): Promise<ExecResult> {
    const { line, stdinPrefix, token } = buildCommandLine(command, opts.timeoutMs, opts.env);
    const shown = typeof command === 'string' ? command.split('\n')[0]! : shellJoin(command);
    const conn = await this.#connection(t);
    const release = await conn.slots.acquire();
    try {
      const result = await this.#openExec(
        conn,
        t,
        line,
        (ch) => ({ done: this.#collect(ch, t, shown, opts, stdinPrefix) }),
        // Opened after we gave up on it: the command runs without us, so stop it.
        (ch) => {
          ch.close();
          void this.#kill(conn, t, token);
        },
      );
      return await result.done;
    } catch (err) {
      const started =
        err instanceof StackctlError && ['E_SSH_COMMAND_TIMEOUT', 'E_SSH_OUTPUT_TOO_LARGE'].includes(err.code);
      // Still holding our slot: the kill runs in it. Best effort; the remote `timeout` is the backstop.
      if (started) await this.#kill(conn, t, token);
      throw err;
    } finally {
      release();
    }
  }

  /** Send TERM to the processes of a tagged command (see `killScript`); best effort, never throws. */
  async #kill(conn: Connection, t: SshTarget, token: string): Promise<void> {
    await this.#openExec(conn, t, killScript(token), (ch) => ({
      done: this.#collect(ch, t, 'kill', { timeoutMs: 5000 }, ''),
    }))
      .then((r) => r.done)
      .catch(() => undefined);
  }

  /** The node's SFTP session (one per connection, shared by concurrent transfers). */
  async sftp(t: SshTarget): Promise<SftpSession> {
    const conn = await this.#connection(t);
    if (!conn.sftp) {
      const opening = this.#openSftp(conn, t);
      conn.sftp = opening;
      opening.catch(() => {
        if (conn.sftp === opening) conn.sftp = undefined;
      });
    }
    return conn.sftp;
  }

  async #openSftp(conn: Connection, t: SshTarget): Promise<SftpSession> {
    // Held for the session's life: the SFTP channel counts against MaxSessions.
    const release = await conn.slots.acquire();
    let current = true;
    /** This session is done for: the next sftp() call opens another one. */
    const retire = (): void => {
      release();
      if (!current) return;
      current = false;
      conn.sftp = undefined;
    };
    try {
      const sftp = await this.#opening<SFTPWrapper, SFTPWrapper>(
        t,
        'an SFTP session',
        (cb) => conn.client.sftp(cb),
        (s) => s,
        (s) => s.end(),
      );
      sftp.on('close', retire);
      return wrapSftp(sftp, t, this.#opts.sftpRequestTimeoutMs, () => {
        // NOTE: sshd confirms the close only once sftp-server exits, which a stopped one never does: the pool
        // frees our slot now, so one stuck session cannot block every later transfer to the node.
        retire();
        sftp.end();
      });
    } catch (err) {
      release();
      throw err instanceof StackctlError ? err : this.#channelError(err as Error, t, 'sftp');
    }
  }

  /**
   * A byte stream to a Unix socket on the node (direct-streamlocal@openssh.com,
   * sshd's `AllowStreamLocalForwarding`, on by default). Not a session channel:
   * it does not count against MaxSessions.
   */
  async openUnixSocket(t: SshTarget, socketPath: string): Promise<Duplex> {
    const conn = await this.#connection(t);
    const what = `a forward to ${socketPath}`;
    try {
      return await this.#opening<ClientChannel, ClientChannel>(
        t,
        what,
        (cb) => conn.client.openssh_forwardOutStreamLocal(socketPath, cb),
        (ch) => ch,
        (ch) => ch.close(),
      );
    } catch (err) {
      throw err instanceof StackctlError ? err : this.#channelError(err as Error, t, what);
    }
  }

  /**
   * A command's stdin/stdout as one byte stream (e.g. `docker system dial-stdio`); holds a session slot until
   * closed. The command is tagged like `exec`'s: when we close the stream and its process has not ended a
   * little later, it is sent TERM. sshd keeps a session open until its process exits, and a process that
   * ignores its closed stdin (dial-stdio waiting on a frozen dockerd) would otherwise hold the slot for good.
   */
  async openExecStream(t: SshTarget, argv: readonly string[]): Promise<Duplex> {
    const conn = await this.#connection(t);
    const release = await conn.slots.acquire();
    const { line, token } = buildCommandLine(argv, SSH_DEFAULTS.streamMaxMs, undefined);
    try {
      const ch = await this.#openExec(conn, t, line, (c) => c);
      let closed = false;
      let grace: NodeJS.Timeout | undefined;
      ch.once('close', () => {
        closed = true;
        clearTimeout(grace);
        release();
      });
      // ssh2's destroy() and end-of-stream both come through close().
      const close = ch.close.bind(ch);
      ch.close = (...args: unknown[]): void => {
        close(...args);
        if (closed || grace) return;
        grace = setTimeout(() => {
          if (!closed) void this.#kill(conn, t, token);
        }, SSH_DEFAULTS.streamCloseGraceMs);
        grace.unref();
      };
      return ch;
    } catch (err) {
      release();
      throw err;
    }
  }

  /** Close one node's connection, or all of them. */
  async close(t?: SshTarget): Promise<void> {
    if (!t) this.#closed = true;
    const keys = t ? [this.#key(t)] : [...this.#connections.keys()];
    await Promise.all(
      keys.map(async (key) => {
        const p = this.#connections.get(key);
        this.#connections.delete(key);
        const conn = await p?.catch(() => undefined);
        if (!conn || conn.closed) return;
        await new Promise<void>((resolve) => {
          conn.client.once('close', () => resolve());
          conn.client.end();
          // A peer that never answers our disconnect must not hang shutdown.
          setTimeout(() => (conn.client.destroy(), resolve()), 2000).unref();
        });
      }),
    );
  }

  #key(t: SshTarget): string {
    return `${t.user}@${t.host}:${t.port}`;
  }

  #connection(t: SshTarget): Promise<Connection> {
    if (this.#closed) {
      return Promise.reject(new RemoteError('E_SSH_POOL_CLOSED', `${describeTarget(t)}: the SSH pool is closed`));
    }
    const key = this.#key(t);
    let p = this.#connections.get(key);
    if (!p) {
      p = this.#connect(t);
      this.#connections.set(key, p);
      const mine = p;
      p.catch(() => {
        if (this.#connections.get(key) === mine) this.#connections.delete(key);
      });
    }
    return p;
  }

  #connect(t: SshTarget): Promise<Connection> {
    const key = this.#key(t);
    const client = this.#newClient();
    let check: HostKeyCheck | undefined;
    const privateKey = this.#readKey(this.#opts.privateKeyFile);
    const config: ConnectConfig = {
      host: t.host,
      port: t.port,
      username: t.user,
      privateKey,
      tryKeyboard: false,
      readyTimeout: this.#opts.connectTimeoutMs,
      keepaliveInterval: this.#opts.keepAliveMs,
      keepaliveCountMax: this.#opts.keepAliveCountMax,
      algorithms: {
        serverHostKey: hostKeyAlgorithms(recordedKeys(this.#opts.knownHostsFile, t.host, t.port)) as NonNullable<
          ConnectConfig['algorithms']
        >['serverHostKey'],
      },
      hostVerifier: (blob: Buffer): boolean => {
        check = checkHostKey(this.#opts.knownHostsFile, t.host, t.port, blob);
        return check.verdict === 'trusted';
      },
    };
    return new Promise<Connection>((resolve, reject) => {
      const conn: Connection = { client, slots: new Slots(this.#opts.maxSessions), closed: false };
      let ready = false;
      const forget = (): void => {
        conn.closed = true;
        // Only drop the map entry if it is still ours (a reconnect may have replaced it).
        void this.#connections.get(key)?.then(
          (c) => c === conn && this.#connections.delete(key),
          () => undefined,
        );
      };
      client.on('error', (err: Ssh2Error) => {
        if (!ready) reject(connectError(err, t, this.#opts.connectTimeoutMs, check));
        forget();
      });
      client.on('close', () => {
        if (!ready)
          reject(connectError(new Error('connection closed during login'), t, this.#opts.connectTimeoutMs, check));
        forget();
      });
      client.once('ready', () => {
        ready = true;
        resolve(conn);
      });
      try {
        client.connect(config);
      } catch (err) {
        reject(connectError(err as Ssh2Error, t, this.#opts.connectTimeoutMs, check));
      }
    });
  }

  /**
   * Open a channel within channelOpenTimeoutMs. `open` starts it with the callback given; `use` runs inside
   * ssh2's callback. ssh2 cannot withdraw an open request: one answered after the deadline is disposed of.
   */
  #opening<C, T>(
    t: SshTarget,
    what: string,
    open: (cb: (err: Error | undefined, ch: C) => void) => void,
    use: (ch: C) => T,
    dispose: (ch: C) => void,
  ): Promise<T> {
    const ms = this.#opts.channelOpenTimeoutMs;
    return new Promise<T>((resolve, reject) => {
      let late = false;
      const timer = setTimeout(() => {
        late = true;
        reject(
          new TimeoutError('E_SSH_CHANNEL_TIMEOUT', `${describeTarget(t)}: sshd did not open ${what} within ${ms} ms`, {
            hint:
              "The node's sshd is overloaded or hung; the SSH keep-alives drop the connection if it stays silent. " +
              'A channel sshd opens later anyway is closed at once, and a command started in it is stopped.',
            details: { node: t.node, host: t.host, port: t.port, channel: what, timeoutMs: ms },
          }),
        );
      }, ms);
      open((err, ch) => {
        clearTimeout(timer);
        if (late) {
          if (!err) dispose(ch);
          return;
        }
        if (err) return reject(err);
        try {
          resolve(use(ch));
        } catch (e) {
          reject(e);
        }
      });
    });
  }

  #channelError(err: Error, t: SshTarget, what: string): RemoteError {
    return new RemoteError('E_SSH_CHANNEL', `${describeTarget(t)}: cannot open ${what}: ${messageOf(err)}`, {
      hint: "The node's sshd refused a channel: check its MaxSessions, AllowStreamLocalForwarding and Subsystem sftp settings.",
      cause: err,
      details: { node: t.node, host: t.host, port: t.port },
    });
  }

  /**
   * Open a command channel. sshd frees a session slot only after its own
   * clean-up of a closed channel, a little after we saw it close, so a refusal
   * ("open failed") right after one is retried with a short backoff.
   */
  async #openExec<T>(
    conn: Connection,
    t: SshTarget,
    line: string,
    use: (ch: ClientChannel) => T,
    late: (ch: ClientChannel) => void = (ch) => ch.close(),
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        // `use` runs inside ssh2's callback, before it parses the next packet: a fast command's
        // exit-status may sit in the same read, and an 'exit' event has no buffer to wait in.
        return await this.#opening<ClientChannel, T>(
          t,
          'a command channel',
          (cb) => conn.client.exec(line, cb),
          use,
          late,
        );
      } catch (err) {
        if (err instanceof StackctlError) throw err;
        const refused = (err as { reason?: number }).reason === SSH_OPEN_CONNECT_FAILED;
        if (!refused || conn.closed || attempt >= CHANNEL_OPEN_RETRIES) {
          throw this.#channelError(err as Error, t, 'a command channel');
        }
        await new Promise((r) => setTimeout(r, Math.min(10 * attempt, 200)));
      }
    }
  }

  #collect(
    ch: ClientChannel,
    t: SshTarget,
    shown: string,
    opts: ExecOptions,
    stdinPrefix: string,
  ): Promise<ExecResult> {
    const cap = opts.maxOutputBytes ?? SSH_DEFAULTS.maxOutputBytes;
    return new Promise<ExecResult>((resolve, reject) => {
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let outBytes = 0;
      let errBytes = 0;
      let code: number | undefined;
      let signal: string | undefined;
      let failure: StackctlError | undefined;
      const kill = (why: StackctlError): void => {
        if (failure) return;
        failure = why;
        clearTimeout(timer);
        // sshd confirms the close only once the command has exited, so do not wait for it:
        // closing does not stop the command on the node, exec() runs killScript next.
        ch.close();
        reject(why);
      };
      const timer = setTimeout(
        () =>
          kill(
            new TimeoutError(
              'E_SSH_COMMAND_TIMEOUT',
              `${describeTarget(t)}: '${shown}' did not finish within ${opts.timeoutMs} ms; killed`,
              {
                hint: 'The command was stopped on the node. Raise the timeout if the work is legitimately slow, or look on the node for what it waits on.',
                details: { node: t.node, host: t.host, command: shown, timeoutMs: opts.timeoutMs },
              },
            ),
          ),
        opts.timeoutMs,
      );
      const tooMuch = (): void =>
        kill(
          new RemoteError(
            'E_SSH_OUTPUT_TOO_LARGE',
            `${describeTarget(t)}: '${shown}' wrote more than ${cap} bytes; killed`,
            {
              hint: 'Redirect large output to a file on the node and download it instead.',
              details: { node: t.node, command: shown },
            },
          ),
        );
      ch.on('data', (b: Buffer) => {
        outBytes += b.length;
        if (outBytes > cap) return tooMuch();
        out.push(b);
      });
      ch.stderr.on('data', (b: Buffer) => {
        errBytes += b.length;
        if (errBytes > cap) return tooMuch();
        err.push(b);
      });
      ch.on('exit', (c: number | null, sig?: string) => {
        if (typeof c === 'number') code = c;
        else if (sig) {
          signal = sig;
          code = signalCode(sig);
        }
      });
      ch.on('error', (e: Error) => {
        failure ??= new RemoteError('E_SSH_CHANNEL', `${describeTarget(t)}: '${shown}': ${messageOf(e)}`, { cause: e });
      });
      ch.on('close', () => {
        clearTimeout(timer);
        if (failure) return reject(failure); // already rejected by kill(), or a channel error
        if (code === undefined) {
          return reject(
            new RemoteError('E_SSH_DISCONNECTED', `${describeTarget(t)}: connection lost while running '${shown}'`, {
              hint: 'The node may have rebooted or its sshd restarted; the command may or may not have run.',
              details: { node: t.node, command: shown },
            }),
          );
        }
        resolve({
          code,
          ...(signal ? { signal } : {}),
          stdout: Buffer.concat(out).toString('utf8'),
          stderr: Buffer.concat(err).toString('utf8'),
        });
      });
      if (stdinPrefix) ch.write(stdinPrefix);
      ch.end(opts.stdin ?? '');
    });
  }
}

/**
 * Connect only far enough to read the key `host:port` offers, then hang up
 * without logging in (for `stackctl nodes trust`).
 */
export function fetchHostKey(
  t: Omit<SshTarget, 'user'> & { user?: string },
  opts: { timeoutMs?: number; newClient?: () => Client } = {},
): Promise<PublicKey> {
  const timeoutMs = opts.timeoutMs ?? SSH_DEFAULTS.connectTimeoutMs;
  const target: SshTarget = { ...t, user: t.user ?? 'root' };
  const client = (opts.newClient ?? (() => new Client()))();
  let offered: Buffer | undefined;
  return new Promise<PublicKey>((resolve, reject) => {
    const finish = (err?: Ssh2Error): void => {
      client.removeAllListeners();
      client.on('error', () => undefined);
      client.destroy();
      if (offered) resolve(publicKeyFromBlob(offered));
      else reject(connectError(err ?? new Error('no host key offered'), target, timeoutMs));
    };
    client.on('error', finish);
    client.on('close', () => finish());
    client.connect({
      host: target.host,
      port: target.port,
      username: target.user,
      readyTimeout: timeoutMs,
      hostVerifier: (blob: Buffer): boolean => {
        offered = Buffer.from(blob);
        return false; // refuse: we only wanted to see the key
      },
    });
  });
}
