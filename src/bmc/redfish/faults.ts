import { AuthError, RemoteError, TimeoutError, type StackctlError } from '../../core/errors.js';
import { TransportFault, type TransportError } from './http.js';
import type { CertificateInfo } from './tls.js';

/**
 * Errors the Redfish client raises. Each names the node and the BMC address
 * (which never holds credentials: the address parser rejects user:pass@).
 */

/** Who a request was for: every message names both. */
export interface Peer {
  readonly node: string;
  readonly address: string;
}

/** A Redfish service answered with a non-2xx status the client does not handle itself. */
export class RedfishStatusError extends RemoteError {
  readonly status: number;
  constructor(peer: Peer, method: string, path: string, status: number, text: string | undefined) {
    super(
      'E_REDFISH_HTTP',
      `node ${peer.node}: ${method} ${path} failed at ${peer.address}: HTTP ${status}${text ? ` (${text})` : ''}`,
      {
        hint: 'The BMC refused the request; its message is quoted above. Check the BMC event log and firmware level.',
        details: { node: peer.node, address: peer.address, method, path, status },
      },
    );
    this.status = status;
  }
}

/** Credentials refused (also after one re-authentication). */
export function authFailed(peer: Peer, status: number): AuthError {
  return new AuthError('E_REDFISH_AUTH', `authentication failed for node ${peer.node} at ${peer.address}`, {
    hint: 'Check the user name and password of this node in the secrets file; some BMCs lock an account after repeated failures.',
    details: { node: peer.node, address: peer.address, status },
  });
}

/** Turn a transport failure into the StackctlError an operator can act on. */
export function transportFailure(
  peer: Peer,
  err: TransportError,
  timeoutMs: number,
  certificate?: CertificateInfo,
): StackctlError {
  const details = { node: peer.node, address: peer.address, fault: err.fault, errorCode: err.errorCode };
  const at = `node ${peer.node}: BMC at ${peer.address}`;
  switch (err.fault) {
    case TransportFault.TIMEOUT:
      return new TimeoutError('E_REDFISH_TIMEOUT', `${at} did not answer within ${seconds(timeoutMs)}`, {
        hint: 'Check that the BMC has power and network, that the address is right, and that no firewall drops its port.',
        details,
        cause: err,
      });
    case TransportFault.UNREACHABLE:
      return new TimeoutError('E_REDFISH_UNREACHABLE', `${at} is unreachable (${err.errorCode ?? err.message})`, {
        hint: 'No route to the BMC: check the management network, its VLAN and the address.',
        details,
        cause: err,
      });
    case TransportFault.REFUSED:
      return new RemoteError('E_REDFISH_REFUSED', `${at} refused the connection`, {
        hint: 'The host answers but no Redfish service listens on that port: check the port and that Redfish is enabled on the BMC.',
        details,
        cause: err,
      });
    case TransportFault.DNS:
      return new RemoteError('E_REDFISH_DNS', `${at}: the host name does not resolve (${err.errorCode ?? ''})`, {
        hint: 'Fix the host name in the address or use the BMC IP address.',
        details,
        cause: err,
      });
    case TransportFault.TLS_UNTRUSTED:
    case TransportFault.TLS_HOSTNAME: {
      const fp = certificate
        ? `; the certificate's SHA-256 fingerprint is ${certificate.fingerprint256} (subject ${certificate.subject || '-'}, issuer ${certificate.issuer || '-'})`
        : '; its fingerprint could not be read';
      const why =
        err.fault === TransportFault.TLS_HOSTNAME
          ? 'is not issued for this host name or address'
          : `is not trusted (${err.errorCode ?? err.message})`;
      return new RemoteError(
        err.fault === TransportFault.TLS_HOSTNAME ? 'E_REDFISH_TLS_HOSTNAME' : 'E_REDFISH_TLS_UNTRUSTED',
        `${at}: the TLS certificate ${why}${fp}`,
        {
          hint:
            err.fault === TransportFault.TLS_HOSTNAME
              ? 'Address the BMC by a name or IP its certificate lists, or re-issue the certificate.'
              : "Compare this fingerprint with the one the BMC shows on its console or web UI. If they match, pass the BMC's CA certificate (or the certificate itself, when self-signed) as a PEM file with --ca-bundle (bmc ca_bundle in the inventory). --insecure skips verification and is for labs only.",
          details: { ...details, ...(certificate ? { fingerprint256: certificate.fingerprint256 } : {}) },
          cause: err,
        },
      );
    }
    default:
      return new RemoteError('E_REDFISH_CONNECTION', `${at}: connection failed (${err.errorCode ?? err.message})`, {
        hint: 'The BMC closed the connection; it may be rebooting or overloaded. Try again in a minute.',
        details,
        cause: err,
      });
  }
}

/** `12 s` or `250 ms`. */
export function seconds(ms: number): string {
  return ms >= 1000 ? `${Math.round(ms / 100) / 10} s` : `${ms} ms`;
}
