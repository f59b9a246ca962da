/**
 * Read the certificate an endpoint serves, as a TLS client sees it: connect,
 * take the peer's leaf certificate, close. Nothing is verified here (an
 * expired or unknown certificate must still be read to say so); no request is
 * sent. Hosts given as IP addresses get no SNI, as the cloud's clients.
 */
import { isIP } from 'node:net';
import { connect } from 'node:tls';
import type { X509Certificate } from 'node:crypto';
import { messageOf } from '../core/errors.js';
import type { ReadCertificate } from './expiry.js';
import { readCertificate } from './x509.js';

/** Deadline of one handshake. */
export const PROBE_TIMEOUT_MS = 10_000;

/** What one handshake at host:port showed: the peer's leaf certificate, or why there is none. */
export type Peer = { cert: X509Certificate; error?: undefined } | { cert?: undefined; error: string };

/**
 * Connect to host:port, take the leaf certificate the peer sends, close. Never throws: a refused
 * connection, a plain-text listener or no handshake within `timeoutMs` come back as `error`.
 */
export function peerCertificate(host: string, port: number, timeoutMs = PROBE_TIMEOUT_MS): Promise<Peer> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (r: Peer): void => {
      if (done) return;
      done = true;
      socket.destroy();
      resolve(r);
    };
    const socket = connect({
      host,
      port,
      rejectUnauthorized: false,
      ...(isIP(host) ? {} : { servername: host }),
      timeout: timeoutMs,
    });
    socket.once('secureConnect', () => {
      const cert = socket.getPeerX509Certificate();
      finish(cert ? { cert } : { error: 'the endpoint sent no certificate' });
    });
    socket.once('timeout', () => finish({ error: `no TLS handshake within ${timeoutMs / 1000} s` }));
    socket.once('error', (e: NodeJS.ErrnoException) => finish({ error: e.code ?? messageOf(e) }));
  });
}

/** The certificate served at host:port, named `name`; a failure is carried in `error`, never thrown. */
export async function readServedCertificate(
  name: string,
  host: string,
  port: number,
  timeoutMs = PROBE_TIMEOUT_MS,
): Promise<ReadCertificate> {
  const where = `${host}:${port}`;
  const peer = await peerCertificate(host, port, timeoutMs);
  if (!peer.cert) return { name, where, error: peer.error };
  try {
    const info = readCertificate(peer.cert.toString());
    return { name, where, subject: info.subject, notBefore: info.notBefore, notAfter: info.notAfter };
  } catch (e) {
    return { name, where, error: messageOf(e) };
  }
}
