/**
 * Precheck: every image of the target release is in the registry, asked
 * through the registry's HTTP API v2 (HEAD /v2/<name>/manifests/<tag>)
 * before anything stops. Side effects are injected (`fetch`) so tests may
 * pass their own; the default is Node's fetch.
 */
import { InputError, RemoteError, messageOf } from '../core/errors.js';

/** Manifest media types a registry may hold an image under (single-platform and multi-platform). */
export const MANIFEST_MEDIA_TYPES = [
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.oci.image.index.v1+json',
] as const;

/** An image reference split into registry host[:port], repository and tag. */
export interface ImageName {
  readonly registry: string;
  readonly repository: string;
  readonly tag: string;
}

/** Split `host[:port]/repo/path:tag`; the registry part is required. */
export function parseImageRef(ref: string): ImageName {
  const m = /^([A-Za-z0-9.-]+(?::\d{1,5})?)\/([a-z0-9]+(?:[._/-][a-z0-9]+)*):([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$/.exec(
    ref,
  );
  if (!m) {
    throw new InputError('E_IMAGE_REF', `'${ref}' is not registry/repository:tag`, {
      hint: 'For example 192.168.24.1:5000/stackctl/<image>:zed-1.',
      details: { ref },
    });
  }
  return { registry: m[1]!, repository: m[2]!, tag: m[3]! };
}

/** The target names images the registry does not hold: refused before anything stops. */
export class ImagesMissing extends InputError {
  /** `repository:tag` of each missing image. */
  readonly missing: readonly string[];
  constructor(registry: string, missing: readonly string[], release?: string) {
    super(
      'E_IMAGE_NOT_IN_REGISTRY',
      `${missing.length} image(s) of ${release ? `release ${release}` : 'the target'} missing from the registry ${registry}: ${missing.join(', ')}`,
      {
        hint:
          `Build and push them first: stackctl images build${release ? ` --release ${release}` : ''} and stackctl images push. ` +
          'Nothing was stopped.',
        details: { registry, missing, ...(release ? { release } : {}) },
      },
    );
    this.missing = missing;
  }
}

/** How to reach the registry. */
export interface RegistryCheckOptions {
  /** host:port to ask instead of the one in the references (e.g. 127.0.0.1:5000 on the deploy host). */
  readonly address?: string;
  /** http for the lab's registry; https for a site's. */
  readonly scheme?: 'http' | 'https';
  readonly timeoutMs?: number;
  /** Named in the error's hint. */
  readonly release?: string;
  readonly fetch?: typeof fetch;
}

/**
 * HEAD every image's manifest. Resolves with the references found; throws
 * ImagesMissing naming every `repository:tag` that is absent (404), and
 * RemoteError when the registry does not answer or answers otherwise.
 */
export async function checkImagesPresent(
  refs: readonly string[],
  opts: RegistryCheckOptions = {},
): Promise<{ readonly present: readonly string[]; readonly registry: string }> {
  const doFetch = opts.fetch ?? fetch;
  const scheme = opts.scheme ?? 'http';
  const names = refs.map(parseImageRef);
  const registries = [...new Set(names.map((n) => opts.address ?? n.registry))];
  const registry = registries.join(', ');
  const present: string[] = [];
  const missing: string[] = [];
  for (const [i, n] of names.entries()) {
    const host = opts.address ?? n.registry;
    const url = `${scheme}://${host}/v2/${n.repository}/manifests/${encodeURIComponent(n.tag)}`;
    let status: number;
    try {
      const r = await doFetch(url, {
        method: 'HEAD',
        headers: { Accept: MANIFEST_MEDIA_TYPES.join(', ') },
        signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000),
      });
      status = r.status;
    } catch (e) {
      // NOTE: Node's fetch says only "fetch failed"; the reason (ECONNREFUSED, a timeout) is its cause.
      const why = e instanceof Error && e.cause instanceof Error ? `${e.message}: ${e.cause.message}` : messageOf(e);
      throw new RemoteError('E_REGISTRY_UNREACHABLE', `the registry ${host} does not answer (${url}): ${why}`, {
        hint:
          'Start it (stackctl images push starts the deploy host registry), ' +
          'or give the address it answers at from here (--check-images HOST:PORT).',
        cause: e,
        details: { registry: host, url },
      });
    }
    if (status === 200) present.push(refs[i]!);
    else if (status === 404) missing.push(`${n.repository}:${n.tag}`);
    else {
      throw new RemoteError('E_REGISTRY', `the registry ${host} answered HTTP ${status} for ${url}`, {
        hint: status === 401 ? 'The registry wants credentials; stackctl supports registries without auth.' : undefined,
        details: { registry: host, url, status },
      });
    }
  }
  if (missing.length) throw new ImagesMissing(registry, missing, opts.release);
  return { present, registry };
}
