/**
 * `ipmi://host[:port]` addresses (CONVENTIONS.md 4): parsed offline by the
 * one BMC address parser (core/bmc-address.ts), with errors naming the node.
 */
import { BMC_SCHEMES, parseBmcAddressFor } from '../../core/bmc-address.js';
import { InputError } from '../../core/errors.js';

/** The UDP port of RMCP (IPMI over LAN) when the address gives none. */
export const IPMI_DEFAULT_PORT = BMC_SCHEMES.ipmi.defaultPort;

/** A parsed IPMI address. */
export interface IpmiAddress {
  readonly host: string;
  readonly port: number;
}

/** Parse `ipmi://host[:port]`; throws InputError (E_IPMI_ADDRESS) naming the node. */
export function parseIpmiAddress(node: string, address: string): IpmiAddress {
  const a = parseBmcAddressFor(node, address, 'E_IPMI_ADDRESS');
  const refuse = (why: string, hint: string): never => {
    throw new InputError('E_IPMI_ADDRESS', `node ${node}: BMC address '${address}' ${why}`, {
      hint,
      details: { node, address },
    });
  };
  if (a.driver !== 'ipmi')
    refuse(`is a ${a.scheme} address, not IPMI`, 'Write the BMC address as ipmi://host[:port] (default port 623).');
  if (a.host.includes(':'))
    refuse('is an IPv6 address', 'IPv6 BMC addresses are not supported yet; use IPv4 or a host name.');
  return { host: a.host, port: a.port };
}
