/**
 * The registry's HTTP API v2, as far as stackctl asks it: does a manifest
 * exist, and which digest does a tag name (`HEAD /v2/<name>/manifests/<tag>`,
 * header `Docker-Content-Digest`). Side effects are injected (`fetch`) so
 * tests may pass their own; the default is Node's fetch.
 */
import { InputError, RemoteError, messageOf } from '../core/errors.js';

/**
 * Manifest media types a registry may hold an image under (single-platform and multi-platform).
 * NOTE: without them in Accept, Debian's docker-registry 2.8 answers a schema 2 manifest with a
 * schema 1 conversion, whose digest is not the one Docker pushed and pulls.
 */
export const MANIFEST_MEDIA_TYPES = [
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.oci.image.index.v1+json',
] as const;

/** Default deadline of one registry request. */
export const REGISTRY_TIMEOUT_MS = 10_000;

/** An image reference split into registry host[:port], repository, tag and digest. */
export interface ImageName {
  readonly registry: string;
  readonly repository: string;
  readonly tag?: string;
  /** `sha256:…` when the reference is pinned. */
  readonly digest?: string;
}

const REF =
  /^([A-Za-z0-9.-]+(?::\d{1,5})?)\/([a-z0-9]+(?:[._/-][a-z0-9]+)*)(?::([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(sha256:[0-9a-f]{64}))?$/;

/** Split `host[:port]/repo/path:tag`, `…@sha256:<hex>` or both; the registry part is required. */
export function parseImageRef(ref: string): ImageName {
  const m = REF.exec(ref);
  if (!m || (m[3] === undefined && m[4] === undefined)) {
    throw new InputError('E_IMAGE_REF', `'${ref}' is not registry/repository:tag (or @sha256:<digest>)`, {
      hint: 'For example 192.168.24.1:5000/stackctl/<image>:zed-1.',
      details: { ref },
    });
  }
  return {
    registry: m[1]!,
    repository: m[2]!,
    ...(m[3] !== undefined ? { tag: m[3] } : {}),
    ...(m[4] !== undefined ? { digest: m[4] } : {}),
  };
}

/** What a manifest request asks for: the digest when the reference has one (it wins over the tag). */
const manifestReference = (n: ImageName): string => n.digest ?? n.tag!;

/** `repository:tag` or `repository@digest`, as errors name an image. */
export const shortName = (n: ImageName): string =>
  n.digest ? `${n.repository}@${n.digest}` : `${n.repository}:${n.tag!}`;

/** The registry does not hold some images: refused before anything changes. */
export class ImagesMissing extends InputError {
  /** `repository:tag` (or `repository@digest`) of each missing image. */
  readonly missing: readonly string[];
  constructor(registry: string, missing: readonly string[], release?: string) {
    super(
      'E_IMAGE_NOT_IN_REGISTRY',
      `${missing.length} image(s) of ${release ? `release ${release}` : 'the target'} missing from the registry ${registry}: ${missing.join(', ')}`,
      {
        hint:
          `Build and push them first: stackctl images build${release ? ` --release ${release}` : ''} and stackctl images push. ` +
          'A pinned digest that is gone was deleted from the registry: push the image again, then ' +
          'stackctl images pin --refresh. Nothing was stopped.',
        details: { registry, missing, ...(release ? { release } : {}) },
      },
    );
    this.missing = missing;
  }
}

/** How to reach the registry. */
export interface RegistryAccess {
  /** host:port to ask instead of the one in the references (e.g. 127.0.0.1:5000 on the deploy host). */
  readonly address?: string;
  /** http (the default: stackctl's own registry) for a registry the inventory marks `registry_insecure`; https otherwise. */
  readonly scheme?: 'http' | 'https';
  readonly timeoutMs?: number;
  /** Named in the error's hint. */
  readonly release?: string;
  readonly fetch?: typeof fetch;
}

/** The answer to one manifest HEAD. */
export interface ManifestHead {
  readonly url: string;
  readonly status: number;
  /** Header Docker-Content-Digest, when the registry sent one. */
  readonly digest?: string;
}

/** HEAD one manifest; RemoteError E_REGISTRY_UNREACHABLE when the registry does not answer. */
export async function headManifest(name: ImageName, opts: RegistryAccess = {}): Promise<ManifestHead> {
  const host = opts.address ?? name.registry;
  const url = `${opts.scheme ?? 'http'}://${host}/v2/${name.repository}/manifests/${encodeURIComponent(manifestReference(name))}`;
  try {
    const r = await (opts.fetch ?? fetch)(url, {
      method: 'HEAD',
      headers: { Accept: MANIFEST_MEDIA_TYPES.join(', ') },
      signal: AbortSignal.timeout(opts.timeoutMs ?? REGISTRY_TIMEOUT_MS),
    });
    const digest = r.headers.get('docker-content-digest') ?? undefined;
    return { url, status: r.status, ...(digest ? { digest } : {}) };
  } catch (e) {
    // NOTE: Node's fetch says only "fetch failed"; the reason (ECONNREFUSED, a timeout) is its cause.
    const why = e instanceof Error && e.cause instanceof Error ? `${e.message}: ${e.cause.message}` : messageOf(e);
    throw new RemoteError('E_REGISTRY_UNREACHABLE', `the registry ${host} does not answer (${url}): ${why}`, {
      hint:
        'Start it (stackctl images push starts the deploy host registry), ' +
        'or give the address it answers at from here (--registry HOST:PORT, --check-images HOST:PORT).',
      cause: e,
      details: { registry: host, url },
    });
  }
}

/** Any answer but 200 and 404: the registry refused. */
function refused(host: string, h: ManifestHead): RemoteError {
  return new RemoteError('E_REGISTRY', `the registry ${host} answered HTTP ${h.status} for ${h.url}`, {
    hint: h.status === 401 ? 'The registry wants credentials; stackctl supports registries without auth.' : undefined,
    details: { registry: host, url: h.url, status: h.status },
  });
}

/**
 * The digest a manifest HEAD names, or undefined when the image is absent (404). Throws
 * RemoteError for any other answer, an answer without a sha256 digest, and (for a pinned
 * reference) an answer naming another digest than the one asked for.
 */
export function digestOfHead(
  n: ImageName,
  h: ManifestHead,
  opts: RegistryAccess = {},
  needDigest = true,
): string | undefined {
  const host = opts.address ?? n.registry;
  if (h.status === 404) return undefined;
  if (h.status !== 200) throw refused(host, h);
  // an existence check of a tag makes do without the digest header; a pin and a pinned reference do not
  if (!needDigest && !h.digest && !n.digest) return '';
  if (!h.digest || !/^sha256:[0-9a-f]{64}$/.test(h.digest)) {
    throw new RemoteError(
      'E_REGISTRY_DIGEST',
      `the registry ${host} named no sha256 digest for ${shortName(n)} (${h.url})`,
      {
        hint: 'stackctl pins images by the Docker-Content-Digest header of the registry API v2; use a registry that sends it (Docker Distribution does).',
        details: { url: h.url, ...(h.digest ? { digest: h.digest } : {}) },
      },
    );
  }
  if (n.digest && h.digest !== n.digest) {
    // A registry serving a manifest under another digest than the one asked for is not one to pull from.
    throw new RemoteError('E_REGISTRY_DIGEST', `the registry ${host} answered ${h.digest} for ${shortName(n)}`, {
      hint: 'Something between this machine and the registry is not what it claims to be: check the registry address.',
      details: { url: h.url, digest: h.digest },
    });
  }
  return h.digest;
}

/**
 * HEAD every reference's manifest. Resolves with the references found and
 * the digest the registry named for each ('' for a tag answered without one,
 * when `needDigest` is false); throws ImagesMissing naming every image that
 * is absent (404), and RemoteError when the registry does not answer,
 * answers otherwise, or names no valid digest.
 */
export async function headManifests(
  refs: readonly string[],
  opts: RegistryAccess = {},
  needDigest = true,
): Promise<{ readonly digests: ReadonlyMap<string, string>; readonly registry: string }> {
  const names = refs.map(parseImageRef);
  const registry = [...new Set(names.map((n) => opts.address ?? n.registry))].join(', ');
  const digests = new Map<string, string>();
  const missing: string[] = [];
  for (const [i, n] of names.entries()) {
    const digest = digestOfHead(n, await headManifest(n, opts), opts, needDigest);
    if (digest !== undefined) digests.set(refs[i]!, digest);
    else missing.push(shortName(n));
  }
  if (missing.length) throw new ImagesMissing(registry, missing, opts.release);
  return { digests, registry };
}
