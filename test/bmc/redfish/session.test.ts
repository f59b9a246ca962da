import { describe, expect, it } from 'vitest';
import { AuthError } from '../../../src/core/errors.js';
import { Secret } from '../../../src/core/secret.js';
import { TransportError, TransportFault, type HttpRequest, type HttpResponse } from '../../../src/bmc/redfish/http.js';
import { Limiter } from '../../../src/bmc/redfish/limiter.js';
import { RedfishSession, retryAfterMs, SESSIONS_PATH, type SessionOptions } from '../../../src/bmc/redfish/session.js';

function session(
  handler: (req: HttpRequest) => HttpResponse | Promise<HttpResponse>,
  extra: Partial<SessionOptions> = {},
) {
  const seen: HttpRequest[] = [];
  const s = new RedfishSession({
    peer: { node: 'ctl-0', address: 'redfish+https://bmc/redfish/v1/Systems/1' },
    origin: 'https://bmc',
    host: 'bmc',
    port: 443,
    username: 'root',
    password: new Secret('hunter2'),
    request: async (req) => {
      seen.push(req);
      return handler(req);
    },
    limiter: new Limiter(4),
    now: () => 0,
    sleep: async () => undefined,
    timeoutMs: 1000,
    maxBusyRetries: 3,
    maxRetryAfterMs: 30_000,
    probeCertificate: () => Promise.reject(new Error('no tls here')),
    trace: () => undefined,
    warn: () => undefined,
    ...extra,
  });
  return { s, seen };
}

const created = (token: string): HttpResponse => ({
  status: 201,
  headers: { 'x-auth-token': token, location: `https://bmc${SESSIONS_PATH}/${token}` },
  body: '{}',
});

describe('RedfishSession', () => {
  it('re-authenticates once on 401, then fails with AuthError', async () => {
    let logins = 0;
    const { s, seen } = session((req) => {
      if (req.method === 'POST') return created(`t${++logins}`);
      return { status: 401, headers: {}, body: '' };
    });
    const err = await s.call('GET', '/redfish/v1/Systems/1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthError);
    expect((err as AuthError).message).toBe(
      'authentication failed for node ctl-0 at redfish+https://bmc/redfish/v1/Systems/1',
    );
    expect(logins).toBe(2);
    expect(seen.map((r) => r.method)).toEqual(['POST', 'GET', 'POST', 'GET']);
  });

  it('sends the password only in the login body, and the token on later requests', async () => {
    const { s, seen } = session((req) =>
      req.method === 'POST' ? created('tok') : { status: 200, headers: {}, body: '{"PowerState":"On"}' },
    );
    expect((await s.call('GET', '/redfish/v1/Systems/1')).json).toEqual({ PowerState: 'On' });
    expect(seen[0]?.body).toContain('hunter2');
    expect(seen[1]?.headers['X-Auth-Token']).toBe('tok');
    expect(JSON.stringify(seen[1])).not.toContain('hunter2');
  });

  it('shares one login between concurrent first requests', async () => {
    let logins = 0;
    const { s } = session(async (req) => {
      if (req.method === 'POST') {
        await new Promise((resolve) => setTimeout(resolve, 5));
        return created(`t${++logins}`);
      }
      return { status: 200, headers: {}, body: '{}' };
    });
    await Promise.all([1, 2, 3, 4, 5].map(() => s.call('GET', '/redfish/v1')));
    expect(logins).toBe(1);
  });

  it('deletes its session at close and reports a failed delete as a warning only', async () => {
    const warnings: string[] = [];
    const { s, seen } = session(
      (req) => {
        if (req.method === 'POST') return created('tok');
        if (req.method === 'DELETE') throw new TransportError(TransportFault.RESET, 'socket hang up', 'ECONNRESET');
        return { status: 200, headers: {}, body: '{}' };
      },
      { warn: (l) => warnings.push(l) },
    );
    await s.call('GET', '/redfish/v1');
    await s.close();
    expect(seen.at(-1)).toMatchObject({ method: 'DELETE', url: `https://bmc${SESSIONS_PATH}/tok` });
    expect(warnings).toHaveLength(1);
    await s.close();
    expect(seen.filter((r) => r.method === 'DELETE')).toHaveLength(1);
  });

  it('rejects a body that is not JSON with a RemoteError', async () => {
    const { s } = session((req) =>
      req.method === 'POST' ? created('tok') : { status: 200, headers: {}, body: '<html>login</html>' },
    );
    await expect(s.call('GET', '/redfish/v1')).rejects.toMatchObject({ code: 'E_REDFISH_RESPONSE' });
  });

  it('quotes the Redfish error message of a refused request', async () => {
    const { s } = session((req) =>
      req.method === 'POST'
        ? created('tok')
        : { status: 400, headers: {}, body: JSON.stringify({ error: { message: 'bad value', code: 'x' } }) },
    );
    await expect(s.call('PATCH', '/redfish/v1/Systems/1', {})).rejects.toMatchObject({
      code: 'E_REDFISH_HTTP',
      status: 400,
      message: expect.stringContaining('bad value'),
    });
  });
});

describe('retryAfterMs', () => {
  it.each([
    { scenario: 'delta seconds', value: '3', want: 3000 },
    { scenario: 'an HTTP date 10 s ahead', value: new Date(20_000).toUTCString(), want: 10_000 },
    { scenario: 'a date in the past', value: new Date(0).toUTCString(), want: 0 },
    { scenario: 'a huge value, bounded', value: '86400', want: 60_000 },
    { scenario: 'no header', value: undefined, want: 1000 },
    { scenario: 'garbage', value: 'soon', want: 1000 },
  ])('reads $scenario', ({ value, want }) => {
    expect(retryAfterMs(value, 10_000, 60_000)).toBe(want);
  });
});
