import { InputError } from './errors.js';

/** BMC protocols stackctl speaks, by address scheme (CONVENTIONS.md 4). */
export const BMC_SCHEMES = {
  /** IPMI 2.0 LAN+ (RMCP+), UDP, default port 623. */
  ipmi: { driver: 'ipmi', tls: false, defaultPort: 623 },
  /** Redfish over HTTPS, TLS verified. */
  'redfish+https': { driver: 'redfish', tls: true, defaultPort: 443 },
  /** Redfish over plain HTTP: for lab virtual BMCs only (a warning is printed). */
  'redfish+http': { driver: 'redfish', tls: false, defaultPort: 80 },
} as const;
export type BmcScheme = keyof typeof BMC_SCHEMES;

/** A parsed BMC address. */
export interface BmcAddress {
  readonly scheme: BmcScheme;
  readonly driver: 'ipmi' | 'redfish';
  /** Host name or IP address; an IPv6 address without brackets. */
  readonly host: string;
  /** The host as written in a URL: IPv6 addresses in brackets. */
  readonly urlHost: string;
  readonly port: number;
  /** True when the address names the port (rather than using the scheme's default). */
  readonly explicitPort: boolean;
  /** Redfish: path of the ComputerSystem, e.g. /redfish/v1/Systems/1; '' for IPMI. */
  readonly systemPath: string;
  /** Canonical text (default port made explicit), for duplicate detection. */
  readonly canonical: string;
}

const FORMS = 'ipmi://host[:port] or redfish+https://host[:port]/redfish/v1/Systems/ID';

/**
 * Parse a BMC address: the one parser behind the inventory checks and both
 * drivers. Throws InputError naming the address (with any credentials in it
 * redacted) on an unknown scheme, credentials in the address, a bad port, a
 * query or fragment, or a Redfish address without a system path.
 */
export function parseBmcAddress(address: string): BmcAddress {
  const shown = redactUserinfo(address);
  const known = Object.keys(BMC_SCHEMES).join(', ');
  const fail = (code: string, why: string, hint = `Write it as ${FORMS} (schemes: ${known}).`): never => {
    throw new InputError(code, `BMC address '${shown}' ${why}`, { hint });
  };
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):(.*)$/s.exec(address);
  if (!m) return fail('E_BMC_ADDRESS', 'has no scheme');
  const scheme = m[1]!.toLowerCase();
  if (!(scheme in BMC_SCHEMES))
    return fail('E_BMC_SCHEME', `has an unknown scheme '${scheme}'`, `Known schemes: ${known}.`);
  const info = BMC_SCHEMES[scheme as BmcScheme];
  const rest = m[2]!;
  const credentialsHint =
    'Remove user:password@ from the address; credentials live in the secrets file, named by bmc.credentials.';
  if (/^(\/\/)?[^/]*@/.test(rest)) return fail('E_INLINE_SECRET', 'carries credentials', credentialsHint);
  if (!rest.startsWith('//')) return fail('E_BMC_ADDRESS', `must be written ${scheme}://…`);
  const authority = /^\/\/([^/?#]*)/.exec(rest)![1]!;
  const portText = /^(?:\[[^\]]*\]|[^:]*):(\d*)$/.exec(authority)?.[1];
  const port = portText ? Number(portText) : info.defaultPort;
  if (portText === '' || !Number.isInteger(port) || port < 1 || port > 65535) {
    return fail('E_BMC_ADDRESS', 'has an invalid port', 'Ports are 1-65535.');
  }
  let url: URL;
  try {
    // URL parses host and IPv6 brackets for us; the scheme is swapped for one it knows.
    url = new URL(`http:${rest}`);
  } catch {
    return fail('E_BMC_ADDRESS', 'is not a valid address', 'Check the host name and port.');
  }
  if (!url.hostname) return fail('E_BMC_ADDRESS', 'has no host');
  if (url.search || url.hash) return fail('E_BMC_ADDRESS', 'must not have a query or fragment');
  let systemPath = '';
  if (info.driver === 'redfish') {
    systemPath = url.pathname.replace(/\/+$/, '');
    if (!/^\/redfish\/v1\/Systems\/[^/]+$/.test(systemPath)) {
      return fail(
        'E_BMC_ADDRESS',
        `has path '${url.pathname}', which does not name a system`,
        'Write the path of the ComputerSystem, e.g. redfish+https://bmc.example/redfish/v1/Systems/1.',
      );
    }
  } else if (url.pathname !== '/' && url.pathname !== '') {
    return fail('E_BMC_ADDRESS', 'must not have a path', 'Write it as ipmi://host[:port].');
  }
  const urlHost = url.hostname.toLowerCase();
  const host = urlHost.startsWith('[') ? urlHost.slice(1, -1) : urlHost;
  return {
    scheme: scheme as BmcScheme,
    driver: info.driver,
    host,
    urlHost,
    port,
    explicitPort: portText !== undefined,
    systemPath,
    canonical: `${scheme}://${urlHost}:${port}${systemPath}`,
  };
}

/**
 * Parse an address for a driver: the same checks, with the node named in the
 * message and the driver's own error code (E_IPMI_ADDRESS, E_REDFISH_ADDRESS).
 */
export function parseBmcAddressFor(node: string, address: string, code: string): BmcAddress {
  try {
    return parseBmcAddress(address);
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    throw new InputError(code, `node ${node}: ${e.message}`, {
      ...(e.hint ? { hint: e.hint } : {}),
      details: { node, address: redactUserinfo(address), reason: e.code },
    });
  }
}

/** True when the host is on the loopback range (lab virtual BMCs). */
export function isLoopbackHost(host: string): boolean {
  return /^127\.\d+\.\d+\.\d+$/.test(host) || host === 'localhost' || host === '[::1]' || host === '::1';
}

/** The address with any `user:password@` replaced, safe to print. */
export function redactUserinfo(address: string): string {
  return address.replace(/^([^:]*:(?:\/\/)?)[^/@]*@/, '$1<redacted>@');
}
