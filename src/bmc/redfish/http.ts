import http from 'node:http';
import https from 'node:https';

/**
 * The HTTP transport of the Redfish client: node:http / node:https with a
 * keep-alive agent. Everything above it talks to the `RequestFn` type, so
 * tests can pass another implementation (CONVENTIONS.md 8).
 */

/** One HTTP exchange as the client wants it. */
export interface HttpRequest {
  readonly method: string;
  /** Absolute URL, e.g. `https://10.1.0.11/redfish/v1/Systems/1`. */
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: string;
  /** Abort the whole exchange (connect, TLS, response) after this many milliseconds. */
  readonly timeoutMs: number;
}

/** A complete HTTP response; header names are lower case. */
export interface HttpResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | undefined>>;
  readonly body: string;
}

/** Sends one request. Rejects with a TransportError when no HTTP response came back. */
export type RequestFn = (request: HttpRequest) => Promise<HttpResponse>;

/** Why no HTTP response came back. */
export const TransportFault = {
  /** Nothing answered before the deadline. */
  TIMEOUT: 'timeout',
  /** No route to the host (EHOSTUNREACH, ENETUNREACH). */
  UNREACHABLE: 'unreachable',
  /** The host answered but nothing listens on the port. */
  REFUSED: 'refused',
  /** The host name does not resolve. */
  DNS: 'dns',
  /** The TLS certificate chain is not trusted (self-signed, unknown CA, expired). */
  TLS_UNTRUSTED: 'tls-untrusted',
  /** The certificate is trusted but not issued for this host name or address. */
  TLS_HOSTNAME: 'tls-hostname',
  /** The peer closed or reset the connection mid-exchange. */
  RESET: 'reset',
  /** Anything else. */
  OTHER: 'other',
} as const;
export type TransportFault = (typeof TransportFault)[keyof typeof TransportFault];

/** Socket and TLS error codes → fault kind. */
export const ERROR_CODE_FAULT: Readonly<Record<string, TransportFault>> = {
  /** Connection or overall deadline passed. */
  ETIMEDOUT: TransportFault.TIMEOUT,
  /** Connection refused: host up, port closed. */
  ECONNREFUSED: TransportFault.REFUSED,
  /** No route to host. */
  EHOSTUNREACH: TransportFault.UNREACHABLE,
  /** No route to network. */
  ENETUNREACH: TransportFault.UNREACHABLE,
  /** Host is down (ARP failed). */
  EHOSTDOWN: TransportFault.UNREACHABLE,
  /** Name does not resolve. */
  ENOTFOUND: TransportFault.DNS,
  /** Resolver temporarily failing. */
  EAI_AGAIN: TransportFault.DNS,
  /** Peer reset the connection. */
  ECONNRESET: TransportFault.RESET,
  /** Peer closed while we were writing. */
  EPIPE: TransportFault.RESET,
  /** Self-signed leaf certificate. */
  DEPTH_ZERO_SELF_SIGNED_CERT: TransportFault.TLS_UNTRUSTED,
  /** Self-signed root in the chain. */
  SELF_SIGNED_CERT_IN_CHAIN: TransportFault.TLS_UNTRUSTED,
  /** Issuer of the leaf unknown. */
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: TransportFault.TLS_UNTRUSTED,
  /** Issuer certificate unknown. */
  UNABLE_TO_GET_ISSUER_CERT: TransportFault.TLS_UNTRUSTED,
  /** Issuer certificate not in the local trust store. */
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: TransportFault.TLS_UNTRUSTED,
  /** Root not trusted for this purpose. */
  CERT_UNTRUSTED: TransportFault.TLS_UNTRUSTED,
  /** Signature does not verify. */
  CERT_SIGNATURE_FAILURE: TransportFault.TLS_UNTRUSTED,
  /** Certificate expired. */
  CERT_HAS_EXPIRED: TransportFault.TLS_UNTRUSTED,
  /** Certificate not valid yet (often a BMC clock at 1970). */
  CERT_NOT_YET_VALID: TransportFault.TLS_UNTRUSTED,
  /** Name or IP address not in the certificate. */
  ERR_TLS_CERT_ALTNAME_INVALID: TransportFault.TLS_HOSTNAME,
};

/** A request that got no HTTP response; the session turns it into a StackctlError naming the node. */
export class TransportError extends Error {
  readonly fault: TransportFault;
  /** The socket or TLS error code, when there was one. */
  readonly errorCode: string | undefined;
  constructor(fault: TransportFault, message: string, errorCode?: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'TransportError';
    this.fault = fault;
    this.errorCode = errorCode;
  }
}

/** Options of the default transport. */
export interface TransportOptions {
  /** PEM trust anchors replacing the system store (a BMC's private CA or its self-signed certificate). */
  readonly ca?: string;
  /** Skip certificate verification entirely. */
  readonly insecure?: boolean;
  /** Sockets kept per host; matches the per-BMC request limit. */
  readonly maxSockets: number;
  /** Largest response body accepted; BMC answers are a few kilobytes. */
  readonly maxBodyBytes?: number;
}

/** A request function bound to keep-alive agents, and the way to release their sockets. */
export interface Transport {
  readonly request: RequestFn;
  /** Destroy every pooled socket. */
  close(): void;
}

const DEFAULT_MAX_BODY = 4 * 1024 * 1024;

/** Build the default node:http(s) transport with keep-alive agents. */
export function createTransport(options: TransportOptions): Transport {
  const httpAgent = new http.Agent({ keepAlive: true, maxSockets: options.maxSockets });
  const httpsAgent = new https.Agent({
    keepAlive: true,
    maxSockets: options.maxSockets,
    rejectUnauthorized: !options.insecure,
    ...(options.ca !== undefined && !options.insecure ? { ca: options.ca } : {}),
  });
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY;
  const request: RequestFn = async (req) => {
    const agent = req.url.startsWith('https:') ? httpsAgent : httpAgent;
    try {
      return await exchange(agent, req, maxBody);
    } catch (err) {
      // NOTE: a pooled socket the BMC closed while idle fails on first use; Node's
      // documentation recommends one retry on a fresh socket, the request never reached the server.
      if (err instanceof ReusedSocketReset) return exchange(agent, req, maxBody);
      throw err;
    }
  };
  return {
    request,
    close() {
      httpAgent.destroy();
      httpsAgent.destroy();
    },
  };
}

/** A reset on a kept-alive socket: safe to retry once. */
class ReusedSocketReset extends TransportError {}

function exchange(agent: http.Agent, req: HttpRequest, maxBody: number): Promise<HttpResponse> {
  const module = req.url.startsWith('https:') ? https : http;
  return new Promise<HttpResponse>((resolve, reject) => {
    const outgoing = module.request(req.url, { method: req.method, headers: req.headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > maxBody) {
          outgoing.destroy(new TransportError(TransportFault.OTHER, `response larger than ${maxBody} bytes`));
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', () => {
        clearTimeout(timer);
        const headers: Record<string, string | undefined> = {};
        for (const [name, value] of Object.entries(res.headers)) {
          headers[name] = Array.isArray(value) ? value.join(', ') : value;
        }
        resolve({ status: res.statusCode ?? 0, headers, body: Buffer.concat(chunks).toString('utf8') });
      });
      res.on('error', (err) => fail(err));
    });
    const timer = setTimeout(() => {
      outgoing.destroy(new TransportError(TransportFault.TIMEOUT, `no answer within ${req.timeoutMs} ms`, 'ETIMEDOUT'));
    }, req.timeoutMs);
    const fail = (err: unknown): void => {
      clearTimeout(timer);
      reject(classify(err, outgoing.reusedSocket));
    };
    outgoing.on('error', fail);
    outgoing.end(req.body);
  });
}

function classify(err: unknown, reusedSocket: boolean): TransportError {
  if (err instanceof TransportError) return err;
  const code = typeof err === 'object' && err !== null && 'code' in err ? String(err.code) : undefined;
  const fault = (code !== undefined ? ERROR_CODE_FAULT[code] : undefined) ?? TransportFault.OTHER;
  const message = err instanceof Error ? err.message : String(err);
  if (fault === TransportFault.RESET && reusedSocket) return new ReusedSocketReset(fault, message, code, err);
  return new TransportError(fault, message, code, err);
}
