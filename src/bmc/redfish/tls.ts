import { readFileSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { InputError, messageOf } from '../../core/errors.js';

/**
 * TLS trust for BMCs. `BmcTarget.caBundle` holds either PEM text (it contains
 * a `-----BEGIN CERTIFICATE-----` line) or the path of a PEM file; the
 * certificates replace the system trust store for that BMC, which is what a
 * private BMC CA or a self-signed BMC certificate needs.
 */

const PEM_CERTIFICATE = '-----BEGIN CERTIFICATE-----';

/** Reads a file as UTF-8 text; injectable for tests. */
export type ReadTextFile = (path: string) => string;

/** The default file reader. */
export const readTextFile: ReadTextFile = (path) => readFileSync(path, 'utf8');

/** Resolve a CA bundle (PEM text or path) to PEM text, or throw an InputError naming the node. */
export function loadCaBundle(node: string, caBundle: string, readFile: ReadTextFile = readTextFile): string {
  if (caBundle.includes(PEM_CERTIFICATE)) return caBundle;
  let text: string;
  try {
    text = readFile(caBundle);
  } catch (err) {
    throw new InputError('E_REDFISH_CA_BUNDLE', `node ${node}: cannot read CA bundle ${caBundle}: ${messageOf(err)}`, {
      hint: 'Give the path of a PEM file holding the BMC CA certificate (or the BMC certificate itself when self-signed).',
      details: { node, caBundle },
      cause: err,
    });
  }
  if (!text.includes(PEM_CERTIFICATE)) {
    throw new InputError('E_REDFISH_CA_BUNDLE', `node ${node}: CA bundle ${caBundle} holds no PEM certificate`, {
      hint: `The file must contain at least one "${PEM_CERTIFICATE}" block.`,
      details: { node, caBundle },
    });
  }
  return text;
}

/** What an operator needs to recognise a certificate. */
export interface CertificateInfo {
  /** SHA-256 fingerprint as colon-separated upper-case hex (the form `openssl x509 -fingerprint -sha256` prints). */
  readonly fingerprint256: string;
  readonly subject: string;
  readonly issuer: string;
  readonly validTo: string;
}

/** Fetch the certificate a TLS server presents, without trusting it and without sending anything. */
export type ProbeCertificate = (host: string, port: number, timeoutMs: number) => Promise<CertificateInfo>;

/**
 * The default probe: a separate, bare TLS handshake. The refused request is
 * never re-sent over an unverified channel, so no credential reaches a peer
 * whose certificate was rejected.
 */
export const probeCertificate: ProbeCertificate = (host, port, timeoutMs) =>
  new Promise((resolve, reject) => {
    const socket = tls.connect({
      host,
      port,
      rejectUnauthorized: false,
      ...(net.isIP(host) ? {} : { servername: host }),
    });
    const timer = setTimeout(() => socket.destroy(new Error(`no TLS handshake within ${timeoutMs} ms`)), timeoutMs);
    socket.once('secureConnect', () => {
      clearTimeout(timer);
      const cert = socket.getPeerCertificate();
      socket.end();
      if (!cert || !cert.fingerprint256) {
        reject(new Error('the server presented no certificate'));
        return;
      }
      resolve({
        fingerprint256: cert.fingerprint256,
        subject: nameOf(cert.subject),
        issuer: nameOf(cert.issuer),
        validTo: cert.valid_to,
      });
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });

function nameOf(name: tls.Certificate | undefined): string {
  if (!name) return '';
  return Object.entries(name)
    .map(([k, v]) => `${k}=${Array.isArray(v) ? v.join('+') : String(v)}`)
    .join(', ');
}
