/**
 * Precheck: every image of the target release is in the registry, asked
 * through the registry's HTTP API v2 (HEAD /v2/<name>/manifests/<tag or
 * digest>) before anything stops. A pinned image (`…:tag@sha256:…`) is
 * asked for by its digest: the check proves the very content the nodes will
 * pull is there, whatever the tag points to now.
 */
import { headManifests, type RegistryAccess } from '../images/registry-api.js';

export {
  ImagesMissing,
  MANIFEST_MEDIA_TYPES,
  parseImageRef,
  type ImageName,
  type RegistryAccess as RegistryCheckOptions,
} from '../images/registry-api.js';

/**
 * HEAD every image's manifest. Resolves with the references found; throws
 * ImagesMissing naming every image that is absent (404), and RemoteError
 * when the registry does not answer or answers otherwise.
 */
export async function checkImagesPresent(
  refs: readonly string[],
  opts: RegistryAccess = {},
): Promise<{ readonly present: readonly string[]; readonly registry: string }> {
  const r = await headManifests(refs, opts, false);
  return { present: [...r.digests.keys()], registry: r.registry };
}
