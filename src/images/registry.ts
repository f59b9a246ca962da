/**
 * The deploy host's image registry: a container of our `registry` image
 * (Debian's docker-registry, no auth) published on a host address, 127.0.0.1:5000
 * by default, so that the host's dockerd pushes to it as a "localhost"
 * registry (insecure by default there, which Docker tries over TLS first
 * without verifying), and nodes pull from it over the lab or provisioning
 * network under the inventory's registry address. With an inventory that turns
 * TLS on (registry-tls.ts) it serves the registry certificate; an inventory
 * with `cloud.registry_insecure: true` turns it back to plain HTTP.
 */
import { RemoteError, UsageError } from '../core/errors.js';
import type { Release } from '../roles/schema.js';
import { labImageRef } from './catalog.js';
import { DIGEST } from './pins.js';
import { caFetch } from './registry-https.js';
import { fingerprintOf, registryFiles, servedFingerprint, type RegistryTls } from './registry-tls.js';
import type { LocalContainer, LocalEngine, ProgressLine } from '../remote/docker-local.js';

/** How long a started registry container gets to answer its HTTP API. */
const REGISTRY_START_TIMEOUT_MS = 60_000;

/** Default name of the registry container. */
export const REGISTRY_CONTAINER = 'stackctl-registry';
/** Default host address the registry is published on. */
export const DEFAULT_REGISTRY_ADDRESS = '127.0.0.1:5000';
/** Label marking what stackctl's registry code created. */
export const REGISTRY_LABEL = 'org.stackctl.registry';

/** Where and under which name the registry runs. */
export interface RegistryOptions {
  readonly release: Release;
  /** host:port to publish on. */
  readonly address?: string;
  readonly container?: string;
  /** Extra labels (e.g. the lab that started it). */
  readonly labels?: Readonly<Record<string, string>>;
  /** Further host:port addresses to publish on, e.g. the VM lab bridge's address for its nodes. */
  readonly publishAlso?: readonly string[];
  /**
   * What to serve: TLS with this certificate, plain HTTP (false), or whatever the
   * container serves now (absent: a push without an inventory). A running registry
   * serving something else is reconfigured in place and restarted (its images stay).
   */
  readonly tls?: RegistryTls | false;
}

/** Split host:port; the port is required. */
export function splitAddress(address: string): { host: string; port: string } {
  const m = /^([A-Za-z0-9.-]+):(\d{1,5})$/.exec(address);
  if (!m || Number(m[2]) > 65535) {
    throw new UsageError('E_REGISTRY_ADDRESS', `registry address '${address}' is not host:port`, {
      hint: 'For example 127.0.0.1:5000.',
    });
  }
  return { host: m[1]!, port: m[2]! };
}

/** Result of ensureRegistry. */
export interface RegistryState {
  readonly container: string;
  readonly address: string;
  /** True when this call created the container (so its caller owns it). */
  readonly created: boolean;
  /** True when this call changed what a running registry serves (TLS on, off, or another certificate). */
  readonly reconfigured: boolean;
}

/**
 * Until `url` answers 2xx (or, with `anyTls`, 400: what a TLS registry says to plain HTTP), or the
 * deadline: the last failure's reason, or undefined once it answered.
 */
async function waitHttp(url: string, timeoutMs: number, f: typeof fetch, anyTls = false): Promise<string | undefined> {
  const deadline = Date.now() + timeoutMs;
  let why = 'no answer';
  while (Date.now() < deadline) {
    try {
      const r = await f(url, { signal: AbortSignal.timeout(1000) });
      if (r.ok || (anyTls && r.status === 400)) return undefined;
      why = `HTTP ${r.status}`;
    } catch (e) {
      why = e instanceof Error && e.cause instanceof Error ? e.cause.message : String(e); // not listening yet, or TLS refused
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return why;
}

/** Whether the registry at `address` serves what `want` asks (TLS with its certificate, or plain HTTP). */
async function serves(address: string, want: RegistryTls | false): Promise<boolean> {
  const { host, port } = splitAddress(address);
  const served = await servedFingerprint(host, Number(port));
  return want ? served === fingerprintOf(want.certPem) : served === undefined;
}

/** Start the registry container unless it runs already; re-entrant. Needs the `registry` image built. */
export async function ensureRegistry(engine: LocalEngine, opts: RegistryOptions): Promise<RegistryState> {
  const address = opts.address ?? DEFAULT_REGISTRY_ADDRESS;
  const name = opts.container ?? REGISTRY_CONTAINER;
  for (const a of [address, ...(opts.publishAlso ?? [])]) splitAddress(a); // every address checked before anything is created
  const image = labImageRef(opts.release, 'registry');
  let c: LocalContainer | undefined = await engine.container(name);
  let created = false;
  if (!c) {
    if (!(await engine.image(image))) {
      throw new RemoteError('E_REGISTRY_IMAGE', `the registry image ${image} is not built`, {
        hint: 'Run `stackctl images build --only registry` first.',
      });
    }
    await engine.createContainer({
      name,
      image,
      labels: { [REGISTRY_LABEL]: address, ...(opts.labels ?? {}) },
      publish: {
        '5000/tcp': [address, ...(opts.publishAlso ?? [])].map((a) => {
          const b = splitAddress(a);
          return { hostIp: b.host, hostPort: b.port };
        }),
      },
      restart: 'unless-stopped',
    });
    created = true;
    if (opts.tls) await engine.putArchive(name, '/', registryFiles(opts.tls));
    c = await engine.container(name);
  }
  if (!c?.running) {
    try {
      await engine.start(name);
    } catch (e) {
      // e.g. the port is taken: leave no half-made registry behind
      if (created) await engine.removeContainer(name);
      throw e;
    }
  }
  const want = opts.tls;
  const scheme = want ? 'https' : 'http';
  const f = want ? caFetch(want.caPem, want.host) : fetch;
  let reconfigured = false;
  // (a registry started just now must listen before what it serves can be asked)
  if (
    want !== undefined &&
    !created &&
    (await waitHttp(`http://${address}/v2/`, REGISTRY_START_TIMEOUT_MS, fetch, true)) === undefined &&
    !(await serves(address, want))
  ) {
    // Debian's registry reads its configuration at start only: new files, then a restart (the volume keeps the images).
    await engine.putArchive(name, '/', registryFiles(want));
    await engine.restart(name, 10);
    reconfigured = true;
  }
  // A started registry answers within a second on a quiet machine; a loaded one can take far longer.
  // Without a wish (a push without inventory) a TLS registry will do too: Docker pushes to loopback either way.
  const why = await waitHttp(`${scheme}://${address}/v2/`, REGISTRY_START_TIMEOUT_MS, f, want === undefined);
  if (why !== undefined) {
    throw new RemoteError(
      'E_REGISTRY_DOWN',
      `the registry ${name} does not answer at ${scheme}://${address}/v2/: ${why}`,
      {
        hint: want
          ? `See \`docker logs ${name}\`. A certificate error means the registry serves another certificate than ` +
            `the inventory's registry certificate for ${want.host} (stackctl certs list).`
          : `See \`docker logs ${name}\`; another process may hold ${address}.`,
      },
    );
  }
  return { container: name, address, created, reconfigured };
}

/** One pushed image. */
export interface PushedImage {
  readonly key: string;
  readonly ref: string;
  /** The manifest digest the registry stored it under (what a pin records). */
  readonly digest: string;
}

/**
 * Push the release's locally built images to the registry at `address`:
 * each is tagged `<address>/<namespace>/<key>:<tag>` and pushed. Images not
 * built locally are skipped and reported.
 */
export async function pushImages(
  engine: LocalEngine,
  release: Release,
  address: string,
  keys: readonly string[],
  progress: ProgressLine,
): Promise<{ pushed: PushedImage[]; missing: string[] }> {
  const pushed: PushedImage[] = [];
  const missing: string[] = [];
  for (const key of keys.length ? keys : Object.keys(release.images)) {
    const img = release.images[key];
    if (!img) {
      throw new UsageError('E_UNKNOWN_IMAGE', `no image '${key}' in release ${release.name}`, {
        hint: `Image keys: ${Object.keys(release.images).sort().join(', ')}.`,
      });
    }
    const local = `${release.registry}/${release.namespace}/${key}:${img.tag}`;
    if (!(await engine.image(local))) {
      missing.push(key);
      continue;
    }
    const target = `${address}/${release.namespace}/${key}:${img.tag}`;
    if (target !== local) await engine.tag(local, target);
    progress(`${key}: pushing ${target}`);
    const digest = await engine.push(target, (line) => progress(`${key}: ${line}`));
    if (!digest || !DIGEST.test(digest)) {
      throw new RemoteError('E_PUSH_DIGEST', `the push of ${target} named no sha256 digest`, {
        hint: 'Docker reports the digest the registry stored at the end of a push; check `docker push` by hand.',
      });
    }
    pushed.push({ key, ref: target, digest });
  }
  return { pushed, missing };
}
