import { parseBmcAddressFor, redactUserinfo } from '../../core/bmc-address.js';
import { InputError } from '../../core/errors.js';

/** Address schemes this driver accepts and the transport each one selects (the same two the inventory knows). */
export const REDFISH_SCHEMES = {
  /** HTTPS with certificate verification: the production form. */
  'redfish+https:': 'https',
  /** Plain HTTP: loopback (the lab), or with the target's explicit `insecureHttp`; the driver warns when it connects. */
  'redfish+http:': 'http',
} as const satisfies Readonly<Record<string, 'http' | 'https'>>;

/** Default TCP port of each transport. */
const DEFAULT_PORT = { https: 443, http: 80 } as const;

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

/**
 * Parse a Redfish BMC address with the one BMC address parser
 * (core/bmc-address.ts), or throw an InputError (E_REDFISH_ADDRESS) naming
 * the node; credentials written in an address are never echoed back.
 */
export function parseRedfishAddress(node: string, raw: string): RedfishAddress {
  const a = parseBmcAddressFor(node, raw, 'E_REDFISH_ADDRESS');
  const fail = (why: string): never => {
    throw new InputError('E_REDFISH_ADDRESS', `node ${node}: BMC address '${redactUserinfo(raw)}' ${why}`, {
      hint: 'Write the address as redfish+https://host[:port]/redfish/v1/Systems/ID (or redfish+http://127.0.0.1… in a lab).',
      details: { node, address: redactUserinfo(raw) },
    });
  };
  const scheme = `${a.scheme}:`;
  if (!Object.hasOwn(REDFISH_SCHEMES, scheme))
    fail(`has an unknown scheme for Redfish '${a.scheme}'; known: ${Object.keys(REDFISH_SCHEMES).join(' ')}`);
  const protocol = REDFISH_SCHEMES[scheme as keyof typeof REDFISH_SCHEMES];
  let systemId = '';
  try {
    systemId = decodeURIComponent(a.systemPath.slice(a.systemPath.lastIndexOf('/') + 1));
  } catch {
    fail('has a system id that is not valid percent-encoding');
  }
  const showPort = a.explicitPort && a.port !== DEFAULT_PORT[protocol];
  return {
    raw,
    protocol,
    host: a.host,
    port: a.port,
    origin: `${protocol}://${a.urlHost}${showPort ? `:${a.port}` : ''}`,
    systemPath: a.systemPath,
    systemId,
    hostKey: `${a.urlHost}:${a.port}`,
  };
}
