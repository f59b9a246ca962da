import { InputError } from '../../core/errors.js';

/** Address schemes this driver accepts and the transport each one selects (the same two the inventory knows). */
export const REDFISH_SCHEMES = {
  /** HTTPS with certificate verification: the production form. */
  'redfish+https:': 'https',
  /** Plain HTTP: lab only, the driver warns each time it connects. */
  'redfish+http:': 'http',
} as const satisfies Readonly<Record<string, 'http' | 'https'>>;

/** Default TCP port of each transport. */
const DEFAULT_PORT = { https: 443, http: 80 } as const;

/** The path form every address must have: the ComputerSystem resource of one node. */
const SYSTEM_PATH = /^\/redfish\/v1\/Systems\/([^/?#]+)$/;

/** A parsed `redfish+https://host[:port]/redfish/v1/Systems/ID` address. */
export interface RedfishAddress {
  /** The address exactly as written in the inventory (never holds credentials). */
  readonly raw: string;
  readonly protocol: 'http' | 'https';
  /** Host name or IP address; an IPv6 address is given without brackets. */
  readonly host: string;
  readonly port: number;
  /** `https://host:port`: the base every request path is appended to. */
  readonly origin: string;
  /** `/redfish/v1/Systems/ID`. */
  readonly systemPath: string;
  /** The system's `Id` (last path segment, decoded). */
  readonly systemId: string;
  /** `host:port`, the key of the per-BMC request limiter. */
  readonly hostKey: string;
}

/** Parse a Redfish BMC address, or throw an InputError naming the node and the forms accepted. */
export function parseRedfishAddress(node: string, raw: string): RedfishAddress {
  const forms = 'redfish+https://host[:port]/redfish/v1/Systems/ID (or redfish+http://… in a lab)';
  // An address written with user:password@ must not be echoed back: the password would land in logs.
  const shown = raw.replace(/^([^:/]*:\/*)[^/@]*@/, '$1<redacted>@');
  const fail = (why: string, hint = `Write the address as ${forms}.`): never => {
    throw new InputError('E_REDFISH_ADDRESS', `node ${node}: invalid Redfish BMC address "${shown}": ${why}`, {
      hint,
      details: { node, address: shown },
    });
  };
  const colon = raw.indexOf(':');
  const scheme = colon > 0 ? raw.slice(0, colon + 1).toLowerCase() : '';
  if (!Object.hasOwn(REDFISH_SCHEMES, scheme)) {
    fail(`unknown scheme "${scheme || shown}"; known: ${Object.keys(REDFISH_SCHEMES).join(' ')}`);
  }
  const protocol = REDFISH_SCHEMES[scheme as keyof typeof REDFISH_SCHEMES];
  let url: URL;
  try {
    // WHY: WHATWG URL only fills in host and port for special schemes, so parse as plain http(s).
    url = new URL(`${protocol}:${raw.slice(colon + 1)}`);
  } catch {
    return fail('not a URL');
  }
  if (url.username || url.password) {
    fail(
      'credentials must not be written in the address',
      'Remove user:password@ from the address; BMC credentials belong in the secrets file.',
    );
  }
  if (url.search || url.hash) fail('a query or fragment is not allowed');
  if (!url.hostname) fail('no host');
  const match = SYSTEM_PATH.exec(url.pathname.replace(/\/+$/, ''));
  if (!match) fail(`the path must be /redfish/v1/Systems/ID, not "${url.pathname}"`);
  const systemPath = url.pathname.replace(/\/+$/, '');
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  const port = url.port ? Number(url.port) : DEFAULT_PORT[protocol];
  let systemId: string;
  try {
    systemId = decodeURIComponent(match?.[1] ?? '');
  } catch {
    return fail('the system id is not valid percent-encoding');
  }
  return {
    raw,
    protocol,
    host,
    port,
    origin: `${protocol}://${url.host}`,
    systemPath,
    systemId,
    hostKey: `${url.hostname}:${port}`,
  };
}
