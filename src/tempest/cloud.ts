/**
 * The few questions `stackctl tempest config` asks the cloud, over HTTP from
 * this machine: a Keystone token (the password goes in the request body, never
 * in argv or a log), then the flavours (Nova) and images (Glance) the catalog
 * points at.
 */
import { RemoteError, TimeoutError } from '../core/errors.js';
import type { Secret } from '../core/secret.js';
import type { CloudResource } from './config.js';

/** How to reach the cloud as admin. */
export interface CloudLogin {
  readonly authUrl: string;
  readonly password: Secret;
  readonly region: string;
  readonly iface: 'public' | 'internal';
}

/** Injected side effects (CONVENTIONS.md 8). */
export interface CloudDeps {
  readonly fetch?: typeof fetch;
  readonly timeoutMs?: number;
}

interface CatalogEntry {
  type: string;
  endpoints: { interface: string; region?: string; region_id?: string; url: string }[];
}

/** One JSON request; transport faults and non-2xx answers become RemoteError/TimeoutError. */
async function request(
  f: typeof fetch,
  url: string,
  init: RequestInit,
  timeoutMs: number,
): Promise<{ headers: Headers; body: unknown }> {
  let res: Response;
  try {
    res = await f(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    const name = err instanceof Error ? err.name : '';
    if (name === 'TimeoutError' || name === 'AbortError')
      throw new TimeoutError('E_CLOUD_TIMEOUT', `${url} did not answer within ${timeoutMs / 1000} s`, {
        hint: 'Is the cloud deployed and its VIP reachable from this machine?',
      });
    throw new RemoteError('E_CLOUD_UNREACHABLE', `cannot reach ${url}: ${err instanceof Error ? err.message : err}`, {
      hint: 'Is the cloud deployed (stackctl deploy) and its VIP reachable from this machine?',
      cause: err,
    });
  }
  const text = await res.text();
  if (!res.ok)
    throw new RemoteError('E_CLOUD_HTTP', `${init.method ?? 'GET'} ${url} answered HTTP ${res.status}`, {
      hint:
        res.status === 401
          ? 'Keystone refused the admin password of the secrets file: is this the secrets file the cloud was deployed with?'
          : 'Check the service with stackctl status.',
      details: { status: res.status, body: text.slice(0, 300) },
    });
  try {
    return { headers: res.headers, body: text ? (JSON.parse(text) as unknown) : {} };
  } catch (err) {
    throw new RemoteError('E_CLOUD_HTTP', `${url} answered something that is not JSON`, { cause: err });
  }
}

/** The catalog URL of `type` for the region and interface, or a RemoteError naming what is missing. */
export function endpointOf(catalog: readonly CatalogEntry[], type: string, region: string, iface: string): string {
  const svc = catalog.find((c) => c.type === type);
  const ep = svc?.endpoints.find((e) => e.interface === iface && (e.region_id ?? e.region) === region);
  if (!ep)
    throw new RemoteError('E_CLOUD_CATALOG', `the catalog has no ${iface} ${type} endpoint in region ${region}`, {
      hint: 'Deploy the service (stackctl deploy) and check the region (inventory cloud.region).',
    });
  return ep.url.replace(/\/+$/, '');
}

/** The cloud's flavours and images, as admin (every project's images). */
export async function listFlavorsAndImages(
  login: CloudLogin,
  deps: CloudDeps = {},
): Promise<{ flavors: CloudResource[]; images: CloudResource[] }> {
  const f = deps.fetch ?? fetch;
  const timeoutMs = deps.timeoutMs ?? 30_000;
  const auth = await request(
    f,
    `${login.authUrl.replace(/\/+$/, '')}/auth/tokens`,
    {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        auth: {
          identity: {
            methods: ['password'],
            password: { user: { name: 'admin', domain: { name: 'Default' }, password: login.password.reveal() } },
          },
          scope: { project: { name: 'admin', domain: { name: 'Default' } } },
        },
      }),
    },
    timeoutMs,
  );
  const token = auth.headers.get('x-subject-token');
  const catalog = (auth.body as { token?: { catalog?: CatalogEntry[] } }).token?.catalog ?? [];
  if (!token) throw new RemoteError('E_CLOUD_HTTP', 'Keystone issued no token (no X-Subject-Token header)');
  const headers = { 'x-auth-token': token, accept: 'application/json' };
  const compute = endpointOf(catalog, 'compute', login.region, login.iface);
  const image = endpointOf(catalog, 'image', login.region, login.iface);
  const fl = await request(f, `${compute}/flavors?is_public=None`, { headers }, timeoutMs);
  const flavors = ((fl.body as { flavors?: { id: string; name: string }[] }).flavors ?? []).map((x) => ({
    id: x.id,
    name: x.name,
  }));
  const images: CloudResource[] = [];
  let next: string | undefined = `${image}/v2/images?limit=200`;
  // Glance pages its list; follow `next` (relative to the endpoint's root)
  for (let page = 0; next && page < 50; page++) {
    const r = await request(f, next, { headers }, timeoutMs);
    const body = r.body as { images?: { id: string; name: string | null; status: string }[]; next?: string };
    for (const x of body.images ?? []) images.push({ id: x.id, name: x.name ?? '', status: x.status });
    next = body.next ? `${image}${body.next}` : undefined;
  }
  return { flavors, images };
}
