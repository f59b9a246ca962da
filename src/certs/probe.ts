/**
 * Read the certificate an endpoint serves, as a TLS client sees it: connect,
 * take the peer's leaf certificate, close. Nothing is verified here (an
 * expired or unknown certificate must still be read to say so); no request is
 * sent. Hosts given as IP addresses get no SNI, as the cloud's clients.
 */
import { isIP } from 'node:net';
import { connect } from 'node:tls';
import { messageOf } from '../core/errors.js';
import type { ReadCertificate } from './expiry.js';
import { readCertificate } from './x509.js';

/** Deadline of one handshake. */
export const PROBE_TIMEOUT_MS = 10_000;

/** The certificate served at host:port, named `name`; a failure is carried in `error`, never thrown. */
export function readServedCertificate(
  name: string,
  host: string,
  port: number,
  timeoutMs = PROBE_TIMEOUT_MS,
): Promise<ReadCertificate> {
  const where = `${host}:${port}`;
  return new Promise((resolve) => {
    let done = false;
    const finish = (r: ReadCertificate): void => {
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
      const peer = socket.getPeerX509Certificate();
      if (!peer) return finish({ name, where, error: 'the endpoint sent no certificate' });
      try {
        const info = readCertificate(peer.toString());
        finish({ name, where, subject: info.subject, notBefore: info.notBefore, notAfter: info.notAfter });
      } catch (e) {
        finish({ name, where, error: messageOf(e) });
      }
    });
    socket.once('timeout', () => finish({ name, where, error: `no TLS handshake within ${timeoutMs / 1000} s` }));
    socket.once('error', (e: NodeJS.ErrnoException) => finish({ name, where, error: e.code ?? messageOf(e) }));
  });
}
