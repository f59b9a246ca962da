import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import type { Secret } from '../../../core/secret.js';
import type { MachineBackend } from '../machine.js';
import {
  REDFISH_MODE_UEFI,
  REDFISH_TARGET_DEVICE,
  RESET_EFFECTS,
  OVERRIDE_ENABLED_VALUES,
  MACHINE_BOOT_TARGET,
} from './mappings.js';
import {
  collection,
  defaultIdentity,
  errorBody,
  etagOf,
  managerBody,
  managerPath,
  PATHS,
  resetActionInfo,
  serviceRoot,
  sessionBody,
  sessionService,
  successBody,
  systemBody,
  systemPath,
  type Body,
  type ResetInfoStyle,
  type SystemIdentity,
} from './resources.js';
import { SessionStore, type LabSession } from './sessions.js';

/**
 * If-Match handling on PATCH of the system:
 * `checked` rejects a stale ETag with 412 and accepts a PATCH without one;
 * `required` also answers 428 when If-Match is missing;
 * `off` offers no ETag at all (older BMCs).
 */
export type IfMatchPolicy = 'checked' | 'required' | 'off';

/** Faults a test can switch on at any time; the server consumes the counters. */
export interface RedfishFaults {
  /** Reset answers 200 without touching the machine (a BMC that acknowledges and does nothing). */
  resetWithoutEffect: boolean;
  /** The next this-many requests get 503 with Retry-After. */
  busy: number;
  /** Retry-After value (seconds) sent with those 503s. */
  retryAfterSeconds: number;
  /** The next this-many PATCHes of the system get 412 whatever their If-Match. */
  preconditionFailures: number;
}

/** Counters a test reads to check the client's behaviour. */
export interface RedfishServerStats {
  /** Every request received. */
  requests: number;
  /** Requests being handled right now. */
  inFlight: number;
  /** The most requests ever handled at once. */
  maxInFlight: number;
  /** Successful logins (POST to the session collection). */
  sessionsCreated: number;
  /** Sessions ended by DELETE. */
  sessionsDeleted: number;
  /** Logins and Basic authentications refused. */
  authFailures: number;
  /** Requests refused with 401 because their token was unknown or expired. */
  tokenRejections: number;
  /** Requests authenticated with HTTP Basic. */
  basicAuths: number;
  /** ResetType of every Reset action accepted, in order. */
  resets: string[];
  /** PATCHes of the system that carried If-Match. */
  ifMatchSeen: number;
  /** Answers with 412. */
  preconditionFailed: number;
}

/** Options of one virtual Redfish BMC. */
export interface VirtualRedfishBmcOptions {
  readonly machine: MachineBackend;
  readonly username: string;
  readonly password: Secret;
  /** The system's Id in `/redfish/v1/Systems/{id}`; default `1`. */
  readonly systemId?: string;
  /** Serve HTTPS with this PEM key and certificate; plain HTTP without. */
  readonly tls?: { readonly key: string; readonly cert: string };
  readonly ifMatch?: IfMatchPolicy;
  /** ResetType values offered; default every one in RESET_EFFECTS. */
  readonly resetTypes?: readonly string[];
  /** List reset values inline (default) or through an ActionInfo resource. */
  readonly resetInfo?: ResetInfoStyle;
  readonly identity?: Partial<SystemIdentity>;
  /** Hold every answer this long: makes concurrency observable in tests. */
  readonly responseDelayMs?: number;
  /** Idle timeout of sessions; default 1800 s like most BMCs. */
  readonly sessionTimeoutSeconds?: number;
  readonly now?: () => number;
  readonly faults?: Partial<RedfishFaults>;
}

/** Where a listening server can be reached. */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
  /** `http://127.0.0.1:PORT` or `https://…`. */
  readonly url: string;
  /** The stackctl BMC address of the system: `redfish+http(s)://host:port/redfish/v1/Systems/ID`. */
  readonly bmcAddress: string;
}

interface Reply {
  readonly status: number;
  readonly body?: Body;
  readonly headers?: Readonly<Record<string, string>>;
}

interface Context {
  readonly method: string;
  readonly path: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: unknown;
  readonly session: LabSession | undefined;
  readonly params: readonly string[];
}

interface Route {
  readonly method: string;
  readonly pattern: RegExp;
  /** False only for the service root, version document and login, which the specification leaves open. */
  readonly auth: boolean;
  readonly handle: (ctx: Context) => Promise<Reply>;
}

/** Largest request body accepted. */
const MAX_BODY_BYTES = 64 * 1024;

/** Properties of `Boot` a client may PATCH. */
const PATCHABLE_BOOT = ['BootSourceOverrideTarget', 'BootSourceOverrideEnabled', 'BootSourceOverrideMode'] as const;

/**
 * A Redfish service in front of a MachineBackend: enough of the standard for
 * stackctl's client and for an operator's curl. Many can run in one process,
 * each on its own port with its own credentials.
 */
export class VirtualRedfishBmc {
  readonly machine: MachineBackend;
  readonly systemId: string;
  /** Faults to inject; change them at any time. */
  readonly faults: RedfishFaults;
  readonly stats: RedfishServerStats = {
    requests: 0,
    inFlight: 0,
    maxInFlight: 0,
    sessionsCreated: 0,
    sessionsDeleted: 0,
    authFailures: 0,
    tokenRejections: 0,
    basicAuths: 0,
    resets: [],
    ifMatchSeen: 0,
    preconditionFailed: 0,
  };
  /** If-Match policy; may be changed between requests. */
  ifMatch: IfMatchPolicy;
  readonly #o: VirtualRedfishBmcOptions;
  readonly #sessions: SessionStore;
  readonly #identity: SystemIdentity;
  readonly #resetTypes: readonly string[];
  readonly #routes: readonly Route[];
  #server: http.Server | undefined;
  #address: ListenAddress | undefined;

  constructor(options: VirtualRedfishBmcOptions) {
    this.#o = options;
    this.machine = options.machine;
    this.systemId = options.systemId ?? '1';
    this.ifMatch = options.ifMatch ?? 'checked';
    this.faults = {
      resetWithoutEffect: false,
      busy: 0,
      retryAfterSeconds: 1,
      preconditionFailures: 0,
      ...options.faults,
    };
    this.#identity = { ...defaultIdentity(options.machine.name), ...options.identity };
    this.#resetTypes = options.resetTypes ?? Object.keys(RESET_EFFECTS);
    for (const t of this.#resetTypes) {
      if (!Object.hasOwn(RESET_EFFECTS, t)) throw new RangeError(`virtual BMC cannot offer ResetType ${t}`);
    }
    this.#sessions = new SessionStore(
      options.username,
      options.password,
      options.sessionTimeoutSeconds ?? 1800,
      options.now ?? Date.now,
    );
    this.#routes = this.#buildRoutes();
  }

  /** The listening address; throws before listen(). */
  get address(): ListenAddress {
    if (!this.#address) throw new Error('virtual Redfish BMC is not listening');
    return this.#address;
  }

  /** Sessions alive now. */
  get activeSessions(): number {
    return this.#sessions.list().length;
  }

  /** Start serving; port 0 picks a free port, reported in the result. */
  async listen(options: { readonly host: string; readonly port: number }): Promise<ListenAddress> {
    if (this.#server) throw new Error('virtual Redfish BMC is already listening');
    const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
      // A client that hung up mid-answer must not become an unhandled rejection in the lab process.
      this.#serve(req, res).catch(() => res.destroy());
    };
    const server = this.#o.tls
      ? https.createServer({ key: this.#o.tls.key, cert: this.#o.tls.cert }, handler)
      : http.createServer(handler);
    this.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const { port } = server.address() as AddressInfo;
    const scheme = this.#o.tls ? 'https' : 'http';
    const hostPart = options.host.includes(':') ? `[${options.host}]` : options.host;
    this.#address = {
      host: options.host,
      port,
      url: `${scheme}://${hostPart}:${port}`,
      bmcAddress: `redfish+${scheme}://${hostPart}:${port}${systemPath(this.systemId)}`,
    };
    return this.#address;
  }

  /** Stop serving and cut every open connection (kept-alive ones too). */
  async close(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await closed;
  }

  /** Drop every session, as a BMC reboot does: clients get 401 on their next request. */
  expireSessions(): void {
    this.#sessions.expireAll();
  }

  async #serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const stats = this.stats;
    stats.requests += 1;
    stats.inFlight += 1;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    let reply: Reply;
    try {
      const body = await readBody(req);
      if (this.#o.responseDelayMs) await delay(this.#o.responseDelayMs);
      reply = await this.#dispatch(req, body);
    } catch (err) {
      reply =
        err instanceof BadRequest
          ? { status: err.status, body: errorBody(err.messageId, err.message) }
          : { status: 500, body: errorBody('InternalError', 'The request failed due to an internal service error.') };
    } finally {
      stats.inFlight -= 1;
    }
    const payload = reply.body === undefined ? '' : JSON.stringify(reply.body, null, 2);
    res.writeHead(reply.status, {
      ...(payload ? { 'Content-Type': 'application/json; charset=utf-8' } : {}),
      'OData-Version': '4.0',
      'Cache-Control': 'no-cache',
      'Content-Length': String(Buffer.byteLength(payload)),
      ...reply.headers,
    });
    res.end(payload);
  }

  async #dispatch(req: http.IncomingMessage, body: unknown): Promise<Reply> {
    const method = req.method ?? 'GET';
    const rawPath = new URL(req.url ?? '/', 'http://vbmc').pathname;
    const path = rawPath.length > 1 ? rawPath.replace(/\/+$/, '') : rawPath;
    if (this.faults.busy > 0) {
      this.faults.busy -= 1;
      return {
        status: 503,
        headers: { 'Retry-After': String(this.faults.retryAfterSeconds) },
        body: errorBody('ServiceTemporarilyUnavailable', 'The service is temporarily unavailable.', 'Retry later.'),
      };
    }
    const matches = this.#routes.map((r) => ({ route: r, m: r.pattern.exec(path) })).filter((x) => x.m !== null);
    if (matches.length === 0) {
      return { status: 404, body: errorBody('ResourceMissingAtURI', `The resource at ${path} does not exist.`) };
    }
    const hit = matches.find((x) => x.route.method === method);
    if (!hit) {
      return {
        status: 405,
        headers: { Allow: matches.map((x) => x.route.method).join(', ') },
        body: errorBody('OperationNotAllowed', `${method} is not allowed on ${path}.`),
      };
    }
    let session: LabSession | undefined;
    if (hit.route.auth) {
      const auth = this.#authenticate(req.headers);
      if (auth === 'refused') {
        return {
          status: 401,
          headers: { 'WWW-Authenticate': 'Basic realm="Redfish"' },
          body: errorBody('NoValidSession', 'There is no valid session established with the implementation.'),
        };
      }
      session = auth === 'basic' ? undefined : auth;
    }
    const params = (hit.m ?? []).slice(1).map((p) => decodeURIComponent(p));
    return hit.route.handle({ method, path, headers: req.headers, body, session, params });
  }

  /** A session for X-Auth-Token, 'basic' for good Basic credentials, 'refused' otherwise. */
  #authenticate(headers: http.IncomingHttpHeaders): LabSession | 'basic' | 'refused' {
    const token = headers['x-auth-token'];
    if (typeof token === 'string') {
      const session = this.#sessions.lookup(token);
      if (session) return session;
      this.stats.tokenRejections += 1;
      return 'refused';
    }
    const authorization = headers.authorization;
    if (authorization?.startsWith('Basic ')) {
      const decoded = Buffer.from(authorization.slice(6), 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon >= 0 && this.#sessions.checkCredentials(decoded.slice(0, colon), decoded.slice(colon + 1))) {
        this.stats.basicAuths += 1;
        return 'basic';
      }
      this.stats.authFailures += 1;
    }
    return 'refused';
  }

  #buildRoutes(): Route[] {
    const sys = escape(systemPath(this.systemId));
    const route = (method: string, path: string, auth: boolean, handle: Route['handle']): Route => ({
      method,
      pattern: new RegExp(`^${path}$`),
      auth,
      handle,
    });
    const ok = (body: Body, headers?: Record<string, string>): Reply => ({
      status: 200,
      body,
      ...(headers ? { headers } : {}),
    });
    return [
      route('GET', escape(PATHS.versions), false, async () => ok({ v1: `${PATHS.root}/` })),
      route('GET', escape(PATHS.root), false, async () => ok(serviceRoot(this.#identity.uuid))),
      route('GET', escape(PATHS.sessionService), true, async () =>
        ok(sessionService(this.#o.sessionTimeoutSeconds ?? 1800)),
      ),
      route('GET', escape(PATHS.sessions), true, async () =>
        ok(
          collection(
            'SessionCollection',
            PATHS.sessions,
            'Session Collection',
            this.#sessions.list().map((s) => `${PATHS.sessions}/${s.id}`),
          ),
        ),
      ),
      route('POST', escape(PATHS.sessions), false, (ctx) => this.#login(ctx)),
      route('GET', `${escape(PATHS.sessions)}/([^/]+)`, true, async (ctx) => {
        const s = this.#sessions.byId(ctx.params[0] ?? '');
        return s ? ok(sessionBody(s)) : notFound(ctx.path);
      }),
      route('DELETE', `${escape(PATHS.sessions)}/([^/]+)`, true, async (ctx) => {
        if (!this.#sessions.delete(ctx.params[0] ?? '')) return notFound(ctx.path);
        this.stats.sessionsDeleted += 1;
        return { status: 204 };
      }),
      route('GET', escape(PATHS.systems), true, async () =>
        ok(
          collection('ComputerSystemCollection', PATHS.systems, 'Computer System Collection', [
            systemPath(this.systemId),
          ]),
        ),
      ),
      route('GET', sys, true, async () => {
        const body = await this.#systemBody();
        return ok(body, this.#etagHeader(body));
      }),
      route('PATCH', sys, true, (ctx) => this.#patchSystem(ctx)),
      route('POST', `${sys}/Actions/ComputerSystem\\.Reset`, true, (ctx) => this.#reset(ctx)),
      route('GET', `${sys}/ResetActionInfo`, true, async () => ok(resetActionInfo(this.systemId, this.#resetTypes))),
      route('GET', escape(PATHS.managers), true, async () =>
        ok(collection('ManagerCollection', PATHS.managers, 'Manager Collection', [managerPath()])),
      ),
      route('GET', escape(managerPath()), true, async () =>
        ok(managerBody(this.systemId, this.#identity.firmwareVersion)),
      ),
    ];
  }

  async #login(ctx: Context): Promise<Reply> {
    const userName = field(ctx.body, 'UserName');
    const password = field(ctx.body, 'Password');
    if (userName === undefined || password === undefined) {
      throw new BadRequest(400, 'PropertyMissing', 'The request body must hold UserName and Password strings.');
    }
    if (!this.#sessions.checkCredentials(userName, password)) {
      this.stats.authFailures += 1;
      return { status: 401, body: errorBody('InsufficientPrivilege', 'Invalid user name or password.') };
    }
    const session = this.#sessions.create(userName);
    this.stats.sessionsCreated += 1;
    const location = `${PATHS.sessions}/${session.id}`;
    return { status: 201, body: sessionBody(session), headers: { 'X-Auth-Token': session.token, Location: location } };
  }

  async #systemBody(): Promise<Body> {
    const body = systemBody({
      systemId: this.systemId,
      machineName: this.machine.name,
      power: await this.machine.powerState(),
      boot: await this.machine.getBootDevice(),
      identity: this.#identity,
      resetTypes: this.#resetTypes,
      resetInfo: this.#o.resetInfo ?? 'inline',
    });
    if (this.ifMatch !== 'off') body['@odata.etag'] = etagOf(body);
    return body;
  }

  #etagHeader(body: Body): Record<string, string> | undefined {
    const etag = body['@odata.etag'];
    return typeof etag === 'string' ? { ETag: etag } : undefined;
  }

  async #patchSystem(ctx: Context): Promise<Reply> {
    const current = await this.#systemBody();
    const ifMatch = ctx.headers['if-match'];
    if (ifMatch !== undefined) this.stats.ifMatchSeen += 1;
    if (this.faults.preconditionFailures > 0) {
      this.faults.preconditionFailures -= 1;
      return this.#preconditionFailed();
    }
    if (this.ifMatch !== 'off') {
      if (ifMatch === undefined && this.ifMatch === 'required') {
        return {
          status: 428,
          body: errorBody('PreconditionRequired', 'This resource needs an If-Match header on PATCH.'),
        };
      }
      if (ifMatch !== undefined && !etagMatches(ifMatch, String(current['@odata.etag'])))
        return this.#preconditionFailed();
    }
    const body = ctx.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new BadRequest(400, 'MalformedJSON', 'The request body must be a JSON object.');
    }
    for (const key of Object.keys(body)) {
      if (key !== 'Boot') throw new BadRequest(400, 'PropertyNotWritable', `The property ${key} is not writable here.`);
    }
    const boot: unknown = (body as Record<string, unknown>)['Boot'];
    if (typeof boot !== 'object' || boot === null || Array.isArray(boot)) {
      throw new BadRequest(400, 'PropertyValueTypeError', 'Boot must be an object.');
    }
    const change = boot as Record<string, unknown>;
    for (const [key, value] of Object.entries(change)) {
      if (!(PATCHABLE_BOOT as readonly string[]).includes(key)) {
        throw new BadRequest(400, 'PropertyNotWritable', `The property Boot/${key} is not writable here.`);
      }
      if (typeof value !== 'string')
        throw new BadRequest(400, 'PropertyValueTypeError', `Boot/${key} must be a string.`);
    }
    const now = await this.machine.getBootDevice();
    const target = str(change['BootSourceOverrideTarget']) ?? MACHINE_BOOT_TARGET[now.device];
    const enabled =
      str(change['BootSourceOverrideEnabled']) ??
      (MACHINE_BOOT_TARGET[now.device] === 'None' ? 'Disabled' : now.persistent ? 'Continuous' : 'Once');
    const mode = str(change['BootSourceOverrideMode']) ?? (now.uefi ? 'UEFI' : 'Legacy');
    const device = REDFISH_TARGET_DEVICE[target];
    if (device === undefined) throw notInList('BootSourceOverrideTarget', target);
    if (!OVERRIDE_ENABLED_VALUES.includes(enabled)) throw notInList('BootSourceOverrideEnabled', enabled);
    const uefi = REDFISH_MODE_UEFI[mode];
    if (uefi === undefined) throw notInList('BootSourceOverrideMode', mode);
    if (enabled === 'Disabled' || device === 'none') await this.machine.setBootDevice('none', false, uefi);
    else await this.machine.setBootDevice(device, enabled === 'Continuous', uefi);
    const updated = await this.#systemBody();
    return { status: 200, body: updated, ...(this.#etagHeader(updated) ? { headers: this.#etagHeader(updated) } : {}) };
  }

  #preconditionFailed(): Reply {
    this.stats.preconditionFailed += 1;
    return { status: 412, body: errorBody('PreconditionFailed', 'The ETag in If-Match does not match the resource.') };
  }

  async #reset(ctx: Context): Promise<Reply> {
    const resetType = field(ctx.body, 'ResetType');
    if (resetType === undefined)
      throw new BadRequest(400, 'ActionParameterMissing', 'The action requires the parameter ResetType.');
    const effect = RESET_EFFECTS[resetType];
    if (!this.#resetTypes.includes(resetType) || effect === undefined) {
      throw new BadRequest(
        400,
        'ActionParameterValueNotInList',
        `The value ${resetType} for ResetType is not in the list of acceptable values (${this.#resetTypes.join(', ')}).`,
      );
    }
    this.stats.resets.push(resetType);
    // The fault: acknowledge like a healthy BMC, do nothing.
    if (!this.faults.resetWithoutEffect) await effect(this.machine);
    return { status: 200, body: successBody() };
  }
}

/** A request the client got wrong, answered with a Redfish error body. */
class BadRequest extends Error {
  readonly status: number;
  readonly messageId: string;
  constructor(status: number, messageId: string, message: string) {
    super(message);
    this.status = status;
    this.messageId = messageId;
  }
}

function notInList(property: string, value: string): BadRequest {
  return new BadRequest(
    400,
    'PropertyValueNotInList',
    `The value ${value} for ${property} is not in the list of acceptable values.`,
  );
}

function notFound(path: string): Reply {
  return { status: 404, body: errorBody('ResourceMissingAtURI', `The resource at ${path} does not exist.`) };
}

function escape(path: string): string {
  return path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function str(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

function field(body: unknown, key: string): string | undefined {
  return typeof body === 'object' && body !== null ? str((body as Record<string, unknown>)[key]) : undefined;
}

/** If-Match: `*` or a comma-separated list; weak comparison, as Redfish services do for W/ tags. */
function etagMatches(header: string, etag: string): boolean {
  const bare = (t: string): string => t.trim().replace(/^W\//, '');
  return header.split(',').some((t) => t.trim() === '*' || bare(t) === bare(etag));
}

async function readBody(req: http.IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > MAX_BODY_BYTES) throw new BadRequest(413, 'PayloadTooLarge', 'The request body is too large.');
    chunks.push(buf);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new BadRequest(400, 'MalformedJSON', 'The request body is not valid JSON.');
  }
}
