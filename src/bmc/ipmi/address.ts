/**
 * `ipmi://host[:port]` addresses (CONVENTIONS.md 4): parsed offline, with
 * errors that name the node and the address.
 */
import { InputError } from '../../core/errors.js';

/** The UDP port of RMCP (IPMI over LAN) when the address gives none. */
export const IPMI_DEFAULT_PORT = 623;

/** URL scheme of IPMI addresses. */
export const IPMI_SCHEME = 'ipmi:';

/** A parsed IPMI address. */
export interface IpmiAddress {
  readonly host: string;
  readonly port: number;
}

function bad(node: string, address: string, why: string, hint: string): InputError {
  return new InputError('E_IPMI_ADDRESS', `node ${node}: BMC address "${address}" ${why}`, {
    hint,
    details: { node, address },
  });
}

const FORM = 'Write the BMC address as ipmi://host or ipmi://host:port (default port 623).';

/** Parse `ipmi://host[:port]`; throws InputError naming the node. */
export function parseIpmiAddress(node: string, address: string): IpmiAddress {
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    throw bad(node, address, 'is not a valid URL', FORM);
  }
  if (url.protocol !== IPMI_SCHEME) throw bad(node, address, `has scheme "${url.protocol}", expected "ipmi:"`, FORM);
  if (url.username || url.password) {
    throw bad(
      node,
      address,
      'contains credentials',
      'Remove the user and password from the address; put them in the secrets file instead.',
    );
  }
  if ((url.pathname !== '' && url.pathname !== '/') || url.search || url.hash) {
    throw bad(node, address, 'has a path, query or fragment', FORM);
  }
  const host = url.hostname;
  if (!host) throw bad(node, address, 'has no host', FORM);
  if (host.startsWith('[')) {
    throw bad(
      node,
      address,
      'is an IPv6 address',
      'IPv6 BMC addresses are not supported yet; use IPv4 or a host name.',
    );
  }
  const port = url.port === '' ? IPMI_DEFAULT_PORT : Number(url.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw bad(node, address, 'has an invalid port', FORM);
  return { host, port };
}
