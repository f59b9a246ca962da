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
  readonly host: string;
  readonly port: number;
  /** Redfish: path of the ComputerSystem, e.g. /redfish/v1/Systems/1; '' for IPMI. */
  readonly systemPath: string;
  /** Canonical text (default port made explicit), for duplicate detection. */
  readonly canonical: string;
}

/**
 * Parse a BMC address. Throws InputError naming the address on an unknown
 * scheme, an address with credentials in it, a bad port, or a Redfish address
 * without a system path.
 */
export function parseBmcAddress(address: string): BmcAddress {
  const m = /^([a-z+]+):\/\/(.*)$/.exec(address);
  const known = Object.keys(BMC_SCHEMES).join(', ');
  if (!m) {
    throw new InputError('E_BMC_ADDRESS', `BMC address '${address}' has no scheme`, {
      hint: `Write it as ipmi://host[:port] or redfish+https://host/redfish/v1/Systems/ID (schemes: ${known}).`,
    });
  }
  const scheme = m[1]!;
  if (!(scheme in BMC_SCHEMES)) {
    throw new InputError('E_BMC_SCHEME', `BMC address '${address}' has an unknown scheme '${scheme}'`, {
      hint: `Known schemes: ${known}.`,
    });
  }
  const info = BMC_SCHEMES[scheme as BmcScheme];
  const explicitPort = /^[^/]*:(\d+)(\/|$)/.exec(m[2]!.replace(/^\[[^\]]*\]/, ''));
  const port = explicitPort ? Number(explicitPort[1]) : info.defaultPort;
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InputError('E_BMC_ADDRESS', `BMC address '${redactUserinfo(address)}' has an invalid port`, {
      hint: 'Ports are 1-65535.',
    });
  }
  let url: URL;
  try {
    // URL parses host, port and IPv6 brackets for us; the scheme is swapped for one it knows.
    url = new URL(`http://${m[2]!}`);
  } catch {
    throw new InputError('E_BMC_ADDRESS', `BMC address '${redactUserinfo(address)}' is not a valid address`, {
      hint: 'Check the host name and port.',
    });
  }
  if (url.username || url.password) {
    throw new InputError('E_INLINE_SECRET', `BMC address '${redactUserinfo(address)}' carries credentials`, {
      hint: 'Remove user:password@ from the address; credentials live in the secrets file, named by bmc.credentials.',
    });
  }
  let systemPath = '';
  if (info.driver === 'redfish') {
    systemPath = url.pathname.replace(/\/+$/, '');
    if (!/^\/redfish\/v1\/Systems\/[^/]+$/.test(systemPath)) {
      throw new InputError('E_BMC_ADDRESS', `Redfish address '${address}' does not name a system`, {
        hint: 'Write the path of the ComputerSystem, e.g. redfish+https://bmc.example/redfish/v1/Systems/1.',
      });
    }
  } else if (url.pathname !== '/' && url.pathname !== '') {
    throw new InputError('E_BMC_ADDRESS', `IPMI address '${address}' must not have a path`, {
      hint: 'Write it as ipmi://host[:port].',
    });
  }
  const host = url.hostname;
  return {
    scheme: scheme as BmcScheme,
    driver: info.driver,
    host,
    port,
    systemPath,
    canonical: `${scheme}://${host.toLowerCase()}:${port}${systemPath}`,
  };
}

/** True when the host is on the loopback range (lab virtual BMCs). */
export function isLoopbackHost(host: string): boolean {
  return /^127\.\d+\.\d+\.\d+$/.test(host) || host === 'localhost' || host === '[::1]' || host === '::1';
}

function redactUserinfo(address: string): string {
  return address.replace(/\/\/[^@/]*@/, '//<redacted>@');
}
