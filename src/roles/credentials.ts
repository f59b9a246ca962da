/**
 * The cloud's admin credentials for the OpenStack client, as OS_* variables:
 * written to a file by `stackctl openrc`, handed to a container's environment
 * by `stackctl status`. The password stays a Secret until the very end.
 */
import type { Secret } from '../core/secret.js';
import type { Plan } from './plan.js';

/** Which Keystone endpoint the client uses. */
export type EndpointInterface = 'public' | 'internal';

/**
 * OS_* variables of the admin user for `iface`, or undefined when no node
 * runs keystone (the plan has no identity endpoint). `cacert`: the CA file
 * the client verifies an https:// endpoint with (OS_CACERT).
 */
export function adminCredentials(
  plan: Plan,
  password: Secret,
  opts: { iface: EndpointInterface; region: string; cacert?: string },
): { url: string; env: Record<string, string | Secret> } | undefined {
  const identity = plan.services
    .find((s) => s.name === 'keystone')
    ?.endpoints.find((e) => e.type === 'identity' && e.interface === opts.iface);
  if (!identity) return undefined;
  return {
    url: identity.url,
    env: {
      OS_AUTH_URL: identity.url,
      OS_IDENTITY_API_VERSION: '3',
      OS_USERNAME: 'admin',
      OS_PASSWORD: password,
      OS_PROJECT_NAME: 'admin',
      OS_USER_DOMAIN_NAME: 'Default',
      OS_PROJECT_DOMAIN_NAME: 'Default',
      OS_REGION_NAME: opts.region,
      OS_INTERFACE: opts.iface,
      // the cloud's CA, for an https:// endpoint its certificate verifies against
      ...(opts.cacert && identity.url.startsWith('https://') ? { OS_CACERT: opts.cacert } : {}),
    },
  };
}
