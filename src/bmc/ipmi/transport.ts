/**
 * One UDP socket shared by the IPMI sessions to many BMCs. Replies are routed
 * by the BMC's address; each BMC gets a lane that carries at most one
 * exchange at a time, spaced by a configurable minimum interval, because
 * small BMCs drop or mishandle back-to-back requests. Every exchange has a
 * per-attempt timeout and a bounded number of retransmissions; every datagram
 * that is not the awaited answer is dropped and counted, never thrown.
 */
import { createSocket, type Socket } from 'node:dgram';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { RemoteError, TimeoutError } from '../../core/errors.js';
import { DropReason } from './packet.js';

/** Where a BMC listens. */
export interface Peer {
  readonly host: string;
  readonly port: number;
}

/** What a received datagram meant to the exchange waiting for it. */
export type Verdict<T> = { readonly value: T } | { readonly drop: DropReason };

/** One request/answer exchange with a BMC. */
export interface Exchange<T> {
  /** Build the datagram for an attempt (0 = first); retransmissions may need a fresh sequence number. */
  build(attempt: number): Buffer;
  /** Judge a datagram from the peer: the awaited answer, or a reason to drop it. */
  accept(datagram: Buffer): Verdict<T>;
  /**
   * Called when an attempt hears nothing acceptable in time: a value ends the
   * exchange with it instead of retransmitting (e.g. "only answers with a
   * wrong key exchange code arrived", which a retransmission cannot change).
   */
  afterSilence?(): T | undefined;
  /** How long to wait for an answer to each attempt. */
  readonly timeoutMs: number;
  /** Retransmissions after the first attempt. */
  readonly retries: number;
  /** Node name, for the timeout message. */
  readonly node: string;
  /** BMC address as written in the inventory, for the timeout message. */
  readonly address: string;
  /** What was asked, for the timeout message (e.g. "Chassis Control"). */
  readonly what: string;
}

/** Traffic and drop counters of a transport (or of a lab BMC). */
export interface TransportCounters {
  sent: number;
  received: number;
  retransmits: number;
  timeouts: number;
  sendErrors: number;
  dropped: Record<DropReason, number>;
}

/** Fresh zeroed counters. */
export function newCounters(): TransportCounters {
  const dropped = Object.fromEntries(Object.values(DropReason).map((r) => [r, 0])) as Record<DropReason, number>;
  return { sent: 0, received: 0, retransmits: 0, timeouts: 0, sendErrors: 0, dropped };
}

/** Total of all dropped datagrams. */
export function droppedTotal(c: TransportCounters): number {
  return Object.values(c.dropped).reduce((a, b) => a + b, 0);
}

/** Timer functions, injectable for tests. */
export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Options of a transport; every side effect has a default. */
export interface IpmiTransportOptions {
  /** Minimum time between the starts of two exchanges with the same BMC (ms). Default 0. */
  readonly minIntervalMs?: number;
  /** Local address to bind (default all interfaces, any port). */
  readonly bindAddress?: string;
  readonly bindPort?: number;
  readonly createSocket?: () => Socket;
  readonly resolve?: (host: string) => Promise<string>;
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
  readonly timers?: Timers;
}

interface Lane {
  /** Settles when the exchange ahead of the newest one is done. */
  tail: Promise<void>;
  pending: number;
  lastStart: number;
  /** The exchange in flight, fed with every datagram from the peer. */
  waiter: ((datagram: Buffer) => void) | undefined;
}

const defaultResolve = async (host: string): Promise<string> => {
  if (isIP(host) === 4) return host;
  const { address } = await lookup(host, { family: 4 });
  return address;
};

const defaultTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

/** A UDP socket carrying IPMI exchanges to any number of BMCs. */
export class IpmiTransport {
  /** Live counters; read them, do not write them. */
  readonly counters: TransportCounters = newCounters();
  readonly minIntervalMs: number;
  readonly #options: IpmiTransportOptions;
  readonly #lanes = new Map<string, Lane>();
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #timers: Timers;
  readonly #resolve: (host: string) => Promise<string>;
  #socket: Promise<Socket> | undefined;
  #closed = false;

  constructor(options: IpmiTransportOptions = {}) {
    this.#options = options;
    this.minIntervalMs = options.minIntervalMs ?? 0;
    this.#now = options.now ?? Date.now;
    this.#sleep = options.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.#timers = options.timers ?? defaultTimers;
    this.#resolve = options.resolve ?? defaultResolve;
  }

  /** The local UDP port, once bound (binds on first use). */
  async localPort(): Promise<number> {
    return (await this.#bound()).address().port;
  }

  #bound(): Promise<Socket> {
    if (this.#closed) return Promise.reject(closedError());
    this.#socket ??= new Promise<Socket>((resolve, reject) => {
      const socket = (this.#options.createSocket ?? (() => createSocket('udp4')))();
      socket.on('message', (msg, rinfo) => this.#onMessage(msg, `${rinfo.address}:${rinfo.port}`));
      // NOTE: ICMP errors on an unconnected UDP socket are not reported; anything else is counted, not fatal.
      socket.on('error', () => {
        this.counters.sendErrors += 1;
      });
      socket.once('error', reject);
      socket.bind(this.#options.bindPort ?? 0, this.#options.bindAddress, () => {
        socket.off('error', reject);
        // The socket alone must not keep a process alive; pending exchanges hold their own timers.
        socket.unref();
        resolve(socket);
      });
    });
    return this.#socket;
  }

  #onMessage(msg: Buffer, key: string): void {
    this.counters.received += 1;
    const waiter = this.#lanes.get(key)?.waiter;
    if (!waiter) {
      this.counters.dropped[DropReason.UNSOLICITED] += 1;
      return;
    }
    waiter(msg);
  }

  /**
   * Run one exchange with a peer: queued behind the peer's previous exchange,
   * paced, retransmitted on silence. Rejects with TimeoutError naming the node.
   */
  async exchange<T>(peer: Peer, ex: Exchange<T>): Promise<T> {
    const socket = await this.#bound();
    let ip: string;
    try {
      ip = await this.#resolve(peer.host);
    } catch (err) {
      throw new RemoteError(
        'E_IPMI_RESOLVE',
        `cannot resolve the BMC host "${peer.host}" of node ${ex.node} (${ex.address})`,
        {
          hint: 'Check the host name in the BMC address, or write the BMC IP address instead.',
          cause: err,
          details: { node: ex.node, address: ex.address },
        },
      );
    }
    const key = `${ip}:${peer.port}`;
    let lane = this.#lanes.get(key);
    if (!lane) {
      lane = { tail: Promise.resolve(), pending: 0, lastStart: Number.NEGATIVE_INFINITY, waiter: undefined };
      this.#lanes.set(key, lane);
    }
    const ahead = lane.tail;
    let done!: () => void;
    lane.tail = new Promise<void>((r) => (done = r));
    lane.pending += 1;
    try {
      await ahead;
      return await this.#run(socket, lane, ip, peer.port, ex);
    } finally {
      done();
      lane.pending -= 1;
      if (lane.pending === 0) this.#lanes.delete(key);
    }
  }

  /**
   * Send a datagram that expects no answer (e.g. a RAKP 3 that reports an error). Resolves once
   * the socket has handed it to the kernel, so a close() right after cannot swallow it: dgram sends
   * only after a lookup step on the next tick, and a socket closed before then drops the datagram.
   */
  async send(peer: Peer, datagram: Buffer): Promise<void> {
    const socket = await this.#bound();
    const ip = await this.#resolve(peer.host);
    await new Promise<void>((resolve) =>
      socket.send(datagram, peer.port, ip, (err) => {
        if (err) this.counters.sendErrors += 1;
        else this.counters.sent += 1;
        resolve();
      }),
    );
  }

  #send(socket: Socket, datagram: Buffer, ip: string, port: number): void {
    // No completion callback: the datagram goes out synchronously when the socket buffer has room, which
    // halves the cost of a send; a failure surfaces on the socket's 'error' event and is counted there.
    socket.send(datagram, port, ip);
    this.counters.sent += 1;
  }

  async #run<T>(socket: Socket, lane: Lane, ip: string, port: number, ex: Exchange<T>): Promise<T> {
    const started = this.#now();
    for (let attempt = 0; attempt <= ex.retries; attempt++) {
      if (this.#closed) throw closedError();
      const wait = lane.lastStart + this.minIntervalMs - this.#now();
      if (wait > 0) await this.#sleep(wait);
      lane.lastStart = this.#now();
      if (attempt > 0) this.counters.retransmits += 1;
      const answer = new Promise<{ value: T } | undefined>((resolve) => {
        const timer = this.#timers.setTimeout(() => {
          lane.waiter = undefined;
          const late = ex.afterSilence?.();
          resolve(late === undefined ? undefined : { value: late });
        }, ex.timeoutMs);
        lane.waiter = (datagram) => {
          let verdict: Verdict<T>;
          try {
            verdict = ex.accept(datagram);
          } catch {
            verdict = { drop: DropReason.MALFORMED };
          }
          if ('drop' in verdict) {
            this.counters.dropped[verdict.drop] += 1;
            return;
          }
          this.#timers.clearTimeout(timer);
          lane.waiter = undefined;
          resolve({ value: verdict.value });
        };
      });
      this.#send(socket, ex.build(attempt), ip, port);
      const got = await answer;
      if (got) return got.value;
    }
    this.counters.timeouts += 1;
    const attempts = ex.retries + 1;
    throw new TimeoutError(
      'E_IPMI_TIMEOUT',
      `no answer from the BMC of node ${ex.node} at ${ex.address} to ${ex.what} ` +
        `(${attempts} attempt${attempts === 1 ? '' : 's'} over ${this.#now() - started} ms)`,
      {
        hint:
          'Check the BMC address and port, that the BMC is powered and reachable over UDP from this host, ' +
          'and that IPMI over LAN is enabled in its network settings.',
        details: { node: ex.node, address: ex.address, command: ex.what, attempts },
      },
    );
  }

  /** Close the socket; exchanges still waiting fail at their next attempt. Safe to call twice. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const pending = this.#socket;
    this.#socket = undefined;
    if (!pending) return;
    const socket = await pending.catch(() => undefined);
    if (socket) await new Promise<void>((r) => socket.close(() => r()));
  }
}

function closedError(): RemoteError {
  return new RemoteError('E_IPMI_TRANSPORT_CLOSED', 'the IPMI transport was closed while a request was pending', {
    hint: 'Close the transport only after every driver that shares it is done.',
  });
}
