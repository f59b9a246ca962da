/**
 * Requests to a registry that serves a certificate of the cloud's CA: node:https
 * with that CA as the only trust anchor, and the certificate checked against
 * the registry's own name (the inventory's registry host) whatever address the
 * request goes to (127.0.0.1:5000 on the deploy host, the lab address on the
 * nodes' side). Node's fetch takes neither option, so this stands in for it
 * where the registry API module asks (`RegistryAccess.fetch`): the answer is a
 * standard Response with status and headers (bodies are not needed there).
 */
import { Agent, request } from 'node:https';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';

/** A fetch for `https://` URLs that trusts `caPem` only and verifies the peer as `host`. */
export function caFetch(caPem: string, host: string): typeof fetch {
  // NOTE: an agent of its own: a connection kept open by another client (Node's global agent reuses
  // sockets across requests) would skip this client's name check.
  const agent = new Agent({
    keepAlive: true,
    ca: caPem,
    checkServerIdentity: (_name: string, cert: PeerCertificate) => checkServerIdentity(host, cert),
  });
  const f = (input: string | URL | Request, init?: RequestInit): Promise<Response> =>
    new Promise((resolve, reject) => {
      const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
      const headers = Object.fromEntries(new Headers(init?.headers).entries());
      const req = request(
        url,
        {
          method: init?.method ?? 'GET',
          headers,
          agent,
          ...(init?.signal ? { signal: init.signal } : {}),
        },
        (res) => {
          res.resume(); // the body is not read: drain it
          res.once('end', () => {
            const h = new Headers();
            for (const [k, v] of Object.entries(res.headers))
              if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(', ') : v);
            resolve(new Response(null, { status: res.statusCode ?? 0, headers: h }));
          });
          res.once('error', reject);
        },
      );
      // NOTE: wrapped like Node's fetch does ("fetch failed", the reason as its cause) so callers read both alike.
      req.once('error', (e) => reject(new TypeError('fetch failed', { cause: e })));
      req.end();
    });
  return f as typeof fetch;
}
