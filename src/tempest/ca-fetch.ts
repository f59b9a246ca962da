/**
 * A `fetch` for the few JSON requests of src/tempest/cloud.ts that trusts one
 * CA more than the system's (the cloud's own, for its https:// endpoints):
 * Node's global fetch takes no CA per request. Built on node:https; answers
 * are whole bodies (small JSON documents).
 */
import { request as httpsRequest } from 'node:https';
import { request as httpRequest } from 'node:http';
import { rootCertificates } from 'node:tls';

/** fetch(url, init) over node:http(s), verifying https:// peers against the system's CAs and `caPem`. */
export function fetchTrusting(caPem: string): typeof fetch {
  const ca = [...rootCertificates, caPem];
  return (async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const headers = Object.fromEntries(new Headers(init.headers).entries());
    const body = typeof init.body === 'string' ? init.body : undefined;
    return new Promise<Response>((resolve, reject) => {
      const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
      const req = send(
        url,
        { method: init.method ?? 'GET', headers, ...(url.protocol === 'https:' ? { ca } : {}) },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const h = new Headers();
            for (const [k, v] of Object.entries(res.headers))
              if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(', ') : v);
            resolve(new Response(Buffer.concat(chunks), { status: res.statusCode ?? 0, headers: h }));
          });
        },
      );
      req.on('error', reject);
      const signal = init.signal;
      if (signal) {
        if (signal.aborted) req.destroy(signal.reason as Error);
        signal.addEventListener('abort', () => req.destroy(signal.reason as Error), { once: true });
      }
      req.end(body);
    });
  }) as typeof fetch;
}
