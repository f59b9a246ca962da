import { RemoteError } from '../../core/errors.js';
import type { Secret } from '../../core/secret.js';
import { authFailed, RedfishStatusError, seconds, transportFailure, type Peer } from './faults.js';
import { TransportError, TransportFault, type HttpResponse, type RequestFn } from './http.js';
import type { Limiter } from './limiter.js';
import { redfishErrorText, stringAt } from './resources.js';
import type { CertificateInfo, ProbeCertificate } from './tls.js';

/** Where the Redfish specification fixes the session login collection. */
export const SESSIONS_PATH = '/redfish/v1/SessionService/Sessions';

/** Statuses that mean "busy, come back later" and may carry Retry-After. */
const BUSY_STATUSES: ReadonlySet<number> = new Set([429, 503]);

/** Wait used when a busy answer carries no usable Retry-After. */
const DEFAULT_BUSY_WAIT_MS = 1000;

/** What a session needs; built by the driver from its target and options. */
export interface SessionOptions {
  readonly peer: Peer;
  /** `https://host:port`. */
  readonly origin: string;
  readonly host: string;
  readonly port: number;
  readonly username: string;
  readonly password: Secret;
  readonly request: RequestFn;
  /** The per-BMC limiter every exchange runs under. */
  readonly limiter: Limiter;
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  readonly timeoutMs: number;
  /** How many busy (503/429) answers in a row are waited out before giving up. */
  readonly maxBusyRetries: number;
  /** Upper bound of one Retry-After wait, whatever the BMC asks for. */
  readonly maxRetryAfterMs: number;
  readonly probeCertificate: ProbeCertificate;
  /** One line per request (method, path, status): never headers or bodies. */
  readonly trace: (line: string) => void;
  readonly warn: (line: string) => void;
}

/** A successful answer. */
export interface RedfishResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | undefined>>;
  /** Parsed JSON body, or undefined for an empty body (204). */
  readonly json: unknown;
}

/**
 * A Redfish session: logs in on first use, reuses the X-Auth-Token for every
 * request, re-authenticates once on a 401, deletes the session on close.
 * Every exchange runs under the BMC's limiter and waits out 503/429.
 */
export class RedfishSession {
  readonly #o: SessionOptions;
  #token: string | undefined;
  #sessionPath: string | undefined;
  #login: Promise<string> | undefined;
  /** Sessions this client created so far (a re-authentication makes a second one). */
  sessionsCreated = 0;

  constructor(options: SessionOptions) {
    this.#o = options;
  }

  /** Send an authenticated request; resolves on 2xx, throws RedfishStatusError or another StackctlError otherwise. */
  async call(
    method: string,
    path: string,
    body?: unknown,
    headers: Readonly<Record<string, string>> = {},
  ): Promise<RedfishResponse> {
    const token = await this.#ensureToken();
    let res = await this.#exchange(method, path, body, { ...headers, 'X-Auth-Token': token });
    if (res.status === 401) {
      // NOTE: BMCs drop sessions on idle timeout or on their own reboot; one fresh login is the remedy, two is a loop.
      this.#o.trace(`${method} ${path}: session rejected, logging in again`);
      const fresh = await this.#reauthenticate(token);
      res = await this.#exchange(method, path, body, { ...headers, 'X-Auth-Token': fresh });
      if (res.status === 401) throw authFailed(this.#o.peer, res.status);
    }
    if (res.status < 200 || res.status > 299) {
      throw new RedfishStatusError(this.#o.peer, method, path, res.status, redfishErrorText(parseJson(res.body)));
    }
    return { status: res.status, headers: res.headers, json: this.#json(method, path, res.body) };
  }

  /** Delete the session on the BMC (best effort: a BMC that is gone has dropped it anyway). */
  async close(): Promise<void> {
    const login = this.#login;
    if (login) await login.catch(() => undefined);
    const token = this.#token;
    const path = this.#sessionPath;
    this.#token = undefined;
    this.#sessionPath = undefined;
    if (token === undefined || path === undefined) return;
    try {
      const res = await this.#exchange('DELETE', path, undefined, { 'X-Auth-Token': token });
      if (res.status >= 300 && res.status !== 401 && res.status !== 404) {
        this.#o.warn(`node ${this.#o.peer.node}: the BMC refused to delete session ${path} (HTTP ${res.status})`);
      }
    } catch (err) {
      this.#o.warn(
        `node ${this.#o.peer.node}: could not delete session ${path}: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }

  #ensureToken(): Promise<string> {
    if (this.#token !== undefined) return Promise.resolve(this.#token);
    // Concurrent first calls share one login instead of opening one session each.
    this.#login ??= this.#createSession().finally(() => {
      this.#login = undefined;
    });
    return this.#login;
  }

  #reauthenticate(rejected: string): Promise<string> {
    // Another request may have logged in again already; its token is as good as a new one.
    if (this.#token !== undefined && this.#token !== rejected) return Promise.resolve(this.#token);
    if (this.#token === rejected) {
      this.#token = undefined;
      this.#sessionPath = undefined;
    }
    return this.#ensureToken();
  }

  async #createSession(): Promise<string> {
    const body = { UserName: this.#o.username, Password: this.#o.password.reveal() };
    const res = await this.#exchange('POST', SESSIONS_PATH, body, {});
    // Wrong credentials are final: retrying only feeds the BMC's account lockout.
    if (res.status === 401 || res.status === 403) throw authFailed(this.#o.peer, res.status);
    if (res.status < 200 || res.status > 299) {
      throw new RedfishStatusError(
        this.#o.peer,
        'POST',
        SESSIONS_PATH,
        res.status,
        redfishErrorText(parseJson(res.body)),
      );
    }
    const token = res.headers['x-auth-token'];
    if (!token) {
      throw new RemoteError(
        'E_REDFISH_SESSION',
        `node ${this.#o.peer.node}: the BMC at ${this.#o.peer.address} created a session without an X-Auth-Token`,
        {
          hint: 'This BMC does not implement Redfish session login as the specification requires; a firmware update usually fixes it.',
          details: { node: this.#o.peer.node, address: this.#o.peer.address },
        },
      );
    }
    const location = res.headers['location'] ?? stringAt(parseJson(res.body), '@odata.id');
    this.#token = token;
    this.#sessionPath = location !== undefined ? new URL(location, this.#o.origin).pathname : undefined;
    this.sessionsCreated += 1;
    return token;
  }

  /** One HTTP exchange under the limiter, waiting out busy answers; transport failures become StackctlErrors. */
  async #exchange(
    method: string,
    path: string,
    body: unknown,
    headers: Readonly<Record<string, string>>,
  ): Promise<HttpResponse> {
    const o = this.#o;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const request = {
      method,
      url: new URL(path, o.origin).toString(),
      timeoutMs: o.timeoutMs,
      headers: {
        Accept: 'application/json',
        'OData-Version': '4.0',
        ...(payload !== undefined
          ? { 'Content-Type': 'application/json', 'Content-Length': String(Buffer.byteLength(payload)) }
          : {}),
        ...headers,
      },
      ...(payload !== undefined ? { body: payload } : {}),
    };
    for (let busy = 0; ; busy += 1) {
      let res: HttpResponse;
      try {
        res = await o.limiter.run(() => o.request(request));
      } catch (err) {
        throw await this.#transportError(err);
      }
      o.trace(`${method} ${path} -> ${res.status}`);
      if (!BUSY_STATUSES.has(res.status)) return res;
      if (busy >= o.maxBusyRetries) {
        throw new RemoteError(
          'E_REDFISH_BUSY',
          `node ${o.peer.node}: the BMC at ${o.peer.address} stayed busy (HTTP ${res.status}) for ${busy + 1} attempts of ${method} ${path}`,
          {
            hint: 'The BMC is overloaded or updating its firmware; try again later, or reset the BMC.',
            details: { node: o.peer.node, address: o.peer.address, status: res.status },
          },
        );
      }
      const wait = retryAfterMs(res.headers['retry-after'], o.now(), o.maxRetryAfterMs);
      o.trace(`${method} ${path}: busy, waiting ${seconds(wait)}`);
      // The wait happens outside the limiter so other requests to this BMC are not held up by it.
      await o.sleep(wait);
    }
  }

  async #transportError(err: unknown): Promise<Error> {
    if (!(err instanceof TransportError)) return err instanceof Error ? err : new Error(String(err));
    let certificate: CertificateInfo | undefined;
    if (err.fault === TransportFault.TLS_UNTRUSTED || err.fault === TransportFault.TLS_HOSTNAME) {
      certificate = await this.#o
        .probeCertificate(this.#o.host, this.#o.port, this.#o.timeoutMs)
        .catch(() => undefined);
    }
    return transportFailure(this.#o.peer, err, this.#o.timeoutMs, certificate);
  }

  #json(method: string, path: string, body: string): unknown {
    if (body.trim() === '') return undefined;
    const json = parseJson(body);
    if (json === undefined) {
      throw new RemoteError(
        'E_REDFISH_RESPONSE',
        `node ${this.#o.peer.node}: ${method} ${path} at ${this.#o.peer.address} returned a body that is not JSON`,
        {
          hint: 'The address may point at something other than a Redfish service (a web UI, a proxy).',
          details: { node: this.#o.peer.node, address: this.#o.peer.address, method, path },
        },
      );
    }
    return json;
  }
}

function parseJson(body: string): unknown {
  try {
    return JSON.parse(body) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * Milliseconds to wait for a `Retry-After` value (delta seconds or an HTTP
 * date), bounded by `maxMs`; a missing or unreadable value gives one second.
 */
export function retryAfterMs(value: string | undefined, nowMs: number, maxMs: number): number {
  let ms = DEFAULT_BUSY_WAIT_MS;
  if (value !== undefined && value.trim() !== '') {
    const text = value.trim();
    if (/^\d+$/.test(text)) ms = Number(text) * 1000;
    else {
      const at = Date.parse(text);
      if (!Number.isNaN(at)) ms = at - nowMs;
    }
  }
  return Math.min(Math.max(ms, 0), maxMs);
}
