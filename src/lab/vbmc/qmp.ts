/**
 * A small QMP (QEMU Machine Protocol) client over a unix socket, written on
 * node:net. QMP is line-delimited JSON: the server greets with
 * `{"QMP": {...}}`, the client must send `qmp_capabilities` before any other
 * command, and then every `{"execute": …, "id": …}` gets one
 * `{"return": …, "id": …}` or `{"error": {"class", "desc"}, "id": …}`.
 * Asynchronous `{"event": …}` messages may arrive in between at any time.
 *
 * A QEMU socket monitor serves one client at a time (others wait in the
 * listen backlog), so callers should keep connections short.
 */
import { createConnection, type Socket } from 'node:net';
import { RemoteError, TimeoutError, messageOf } from '../../core/errors.js';

/** Defaults of a QMP connection. */
export const QMP_DEFAULTS = {
  /** Connect, greeting and capabilities negotiation together (ms). */
  connectTimeoutMs: 2_000,
  /** One command, from sending to its answer (ms). */
  commandTimeoutMs: 5_000,
} as const;

/** Connection failures that mean "nobody serves this socket (yet)", not a protocol fault. */
const UNREACHABLE_CODES: ReadonlySet<string> = new Set(['ENOENT', 'ECONNREFUSED', 'ECONNRESET', 'EPIPE']);

/** An asynchronous QMP event (SHUTDOWN, RESET, POWERDOWN, …). */
export interface QmpEvent {
  readonly event: string;
  readonly data?: Readonly<Record<string, unknown>>;
  readonly timestamp?: { readonly seconds: number; readonly microseconds: number };
}

/** What `query-status` returns. */
export interface QmpStatus {
  /** `running`, `paused`, `shutdown`, `prelaunch`, `inmigrate`, … */
  readonly status: string;
  readonly running: boolean;
}

/** Options of a QMP connection; the socket factory is injectable. */
export interface QmpConnectOptions {
  /** Path of the QMP unix socket. */
  readonly path: string;
  /** Who the socket belongs to (a machine name), for error messages. */
  readonly label?: string;
  readonly connectTimeoutMs?: number;
  readonly commandTimeoutMs?: number;
  readonly createConnection?: (path: string) => Socket;
}

/** Nobody answers at the socket (QEMU not started, exited, or still starting). */
export class QmpUnreachableError extends RemoteError {
  constructor(label: string, path: string, reason: string, cause?: unknown) {
    super('E_QMP_UNREACHABLE', `${label}: no QMP server answers at ${path} (${reason})`, {
      hint: 'Check that the QEMU process of this machine runs; its stderr log sits next to the socket.',
      details: { machine: label, path, reason },
      cause,
    });
  }
}

/** QEMU answered a command with an error object. */
export class QmpCommandError extends RemoteError {
  /** QMP error class, such as `GenericError` or `CommandNotFound`. */
  readonly errorClass: string;
  constructor(label: string, command: string, errorClass: string, desc: string) {
    super('E_QMP_COMMAND', `${label}: QMP command ${command} failed: ${errorClass}: ${desc}`, {
      hint: 'QEMU refused the command; its description is quoted above.',
      details: { machine: label, command, errorClass, desc },
    });
    this.errorClass = errorClass;
  }
}

/** The connection closed before a command was answered (QEMU exited, e.g. after `quit`). */
export class QmpClosedError extends RemoteError {
  constructor(label: string, command: string) {
    super('E_QMP_CLOSED', `${label}: QMP connection closed before ${command} was answered`, {
      hint: 'QEMU exited or dropped the connection; check its stderr log.',
      details: { machine: label, command },
    });
  }
}

interface Pending {
  readonly command: string;
  resolve(value: unknown): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

/** One negotiated QMP connection. Create with `QmpClient.connect`. */
export class QmpClient {
  /** Events received so far on this connection, oldest first. */
  readonly events: QmpEvent[] = [];
  /** The `version` object of the greeting. */
  readonly version: Readonly<Record<string, unknown>>;
  readonly #socket: Socket;
  readonly #label: string;
  readonly #commandTimeoutMs: number;
  readonly #pending = new Map<number, Pending>();
  readonly #eventWaiters = new Set<(e: QmpEvent) => void>();
  #nextId = 1;
  #closed = false;

  private constructor(socket: Socket, label: string, commandTimeoutMs: number, version: Record<string, unknown>) {
    this.#socket = socket;
    this.#label = label;
    this.#commandTimeoutMs = commandTimeoutMs;
    this.version = version;
  }

  /**
   * Connect, read the greeting and leave capabilities negotiation mode.
   * Rejects with QmpUnreachableError when nothing (or nothing speaking QMP)
   * answers in time.
   */
  static async connect(options: QmpConnectOptions): Promise<QmpClient> {
    const label = options.label ?? 'qemu';
    const timeoutMs = options.connectTimeoutMs ?? QMP_DEFAULTS.connectTimeoutMs;
    const socket = (options.createConnection ?? ((p: string) => createConnection({ path: p })))(options.path);
    const lines = new LineReader();
    let client: QmpClient | undefined;
    const handshake = new Promise<QmpClient>((resolve, reject) => {
      const fail = (reason: string, cause?: unknown) => {
        socket.destroy();
        reject(new QmpUnreachableError(label, options.path, reason, cause));
      };
      const timer = setTimeout(() => fail(`no greeting within ${timeoutMs} ms`), timeoutMs);
      socket.once('error', (e: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        fail(e.code && UNREACHABLE_CODES.has(e.code) ? e.code : messageOf(e), e);
      });
      socket.once('close', () => {
        clearTimeout(timer);
        fail('connection closed during the handshake');
      });
      let greeted = false;
      let negotiated = false;
      const onData = (chunk: Buffer) => {
        for (const message of lines.push(chunk)) {
          if (negotiated && client) {
            client.#dispatch(message); // arrived in the same chunk as the negotiation answer
          } else if (!greeted) {
            const qmp = message['QMP'];
            if (!isRecord(qmp)) return fail('the peer does not greet like QMP');
            greeted = true;
            const version = isRecord(qmp['version']) ? qmp['version'] : {};
            socket.write(`${JSON.stringify({ execute: 'qmp_capabilities', id: 0 })}\n`);
            client = new QmpClient(socket, label, options.commandTimeoutMs ?? QMP_DEFAULTS.commandTimeoutMs, version);
          } else if (message['id'] === 0 && 'return' in message) {
            clearTimeout(timer);
            negotiated = true;
            socket.removeAllListeners();
            if (!client) return fail('answer before greeting');
            client.#attach(lines);
            resolve(client);
          } else if (message['id'] === 0 && 'error' in message) {
            clearTimeout(timer);
            return fail(`qmp_capabilities refused: ${JSON.stringify(message['error'])}`);
          }
          // events before negotiation completes are not expected; ignore them
        }
      };
      socket.on('data', onData);
    });
    return handshake;
  }

  /** Wire the negotiated socket to the command table. */
  #attach(lines: LineReader): void {
    this.#socket.on('data', (chunk: Buffer) => {
      for (const message of lines.push(chunk)) this.#dispatch(message);
    });
    // Errors always come with a close; the close handler fails what is pending.
    this.#socket.on('error', () => undefined);
    this.#socket.on('close', () => {
      this.#closed = true;
      for (const [id, p] of this.#pending) {
        clearTimeout(p.timer);
        this.#pending.delete(id);
        p.reject(new QmpClosedError(this.#label, p.command));
      }
    });
  }

  #dispatch(message: Record<string, unknown>): void {
    if (typeof message['event'] === 'string') {
      const event = message as unknown as QmpEvent;
      this.events.push(event);
      for (const w of this.#eventWaiters) w(event);
      return;
    }
    const id = message['id'];
    if (typeof id !== 'number') return; // an answer we did not ask for
    const p = this.#pending.get(id);
    if (!p) return;
    this.#pending.delete(id);
    clearTimeout(p.timer);
    const error = message['error'];
    if (isRecord(error)) {
      p.reject(new QmpCommandError(this.#label, p.command, String(error['class']), String(error['desc'])));
    } else {
      p.resolve(message['return']);
    }
  }

  /** True once the connection is closed (by us or by QEMU). */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Run one command and resolve to its `return` value (unchecked JSON: the
   * caller narrows it). Rejects with QmpCommandError, QmpClosedError or a
   * TimeoutError.
   */
  execute(command: string, args?: Readonly<Record<string, unknown>>): Promise<unknown> {
    if (this.#closed) return Promise.reject(new QmpClosedError(this.#label, command));
    const id = this.#nextId++;
    return new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(
          new TimeoutError('E_QMP_TIMEOUT', `${this.#label}: QMP command ${command} got no answer`, {
            hint: 'QEMU may be overloaded or hung; a hard power off kills it.',
            details: { machine: this.#label, command, timeoutMs: this.#commandTimeoutMs },
          }),
        );
      }, this.#commandTimeoutMs);
      this.#pending.set(id, { command, resolve, reject, timer });
      this.#socket.write(`${JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}), id })}\n`);
    });
  }

  /**
   * Resolve with the first event called `name` received on this connection
   * (also one received before the call); reject with a TimeoutError after
   * `timeoutMs`.
   */
  waitForEvent(name: string, timeoutMs: number): Promise<QmpEvent> {
    const seen = this.events.find((e) => e.event === name);
    if (seen) return Promise.resolve(seen);
    return new Promise<QmpEvent>((resolve, reject) => {
      const waiter = (e: QmpEvent) => {
        if (e.event !== name) return;
        clearTimeout(timer);
        this.#eventWaiters.delete(waiter);
        resolve(e);
      };
      const timer = setTimeout(() => {
        this.#eventWaiters.delete(waiter);
        reject(
          new TimeoutError('E_QMP_TIMEOUT', `${this.#label}: no QMP event ${name} within ${timeoutMs} ms`, {
            hint: 'The event did not happen; check what the guest is doing (serial log).',
            details: { machine: this.#label, event: name, timeoutMs },
          }),
        );
      }, timeoutMs);
      this.#eventWaiters.add(waiter);
    });
  }

  /** `query-status`, narrowed. */
  async queryStatus(): Promise<QmpStatus> {
    const r = await this.execute('query-status');
    if (!isRecord(r) || typeof r['status'] !== 'string' || typeof r['running'] !== 'boolean') {
      throw new QmpCommandError(this.#label, 'query-status', 'BadAnswer', JSON.stringify(r));
    }
    return { status: r['status'], running: r['running'] };
  }

  /** Close the connection. Safe to call twice. */
  async close(): Promise<void> {
    if (this.#closed) return;
    await new Promise<void>((resolve) => {
      this.#socket.once('close', () => resolve());
      this.#socket.end();
      // A peer that never finishes the close would hold us; destroy after a moment.
      setTimeout(() => this.#socket.destroy(), 200).unref();
    });
  }
}

/** Open a connection, run `fn`, and close the connection whatever happens. */
export async function withQmp<T>(options: QmpConnectOptions, fn: (qmp: QmpClient) => Promise<T>): Promise<T> {
  const qmp = await QmpClient.connect(options);
  try {
    return await fn(qmp);
  } finally {
    await qmp.close();
  }
}

/** Splits a byte stream into JSON objects, one per line (QEMU ends lines with CRLF). */
class LineReader {
  #rest = '';
  push(chunk: Buffer): Record<string, unknown>[] {
    this.#rest += chunk.toString('utf8');
    const out: Record<string, unknown>[] = [];
    let nl: number;
    while ((nl = this.#rest.indexOf('\n')) >= 0) {
      const line = this.#rest.slice(0, nl).trim();
      this.#rest = this.#rest.slice(nl + 1);
      if (!line) continue;
      try {
        const v: unknown = JSON.parse(line);
        if (isRecord(v)) out.push(v);
      } catch {
        // not JSON: a QMP server never sends this; skip the line rather than fail the connection
      }
    }
    return out;
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
