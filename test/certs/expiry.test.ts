/**
 * The expiry rule of `stackctl status` (every state of ExpiryState from a table of cases), and the
 * reader of a served certificate against a real TLS server on loopback serving a certificate the
 * test issued, valid for one day.
 */
import { createServer, type Server } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EXPIRY_PROBLEMS,
  EXPIRY_THRESHOLD_DAYS,
  ExpiryState,
  evaluateExpiry,
  expiryProblem,
} from '../../src/certs/expiry.js';
import { readServedCertificate } from '../../src/certs/probe.js';
import { generateKeyPair, issueCertificate } from '../../src/certs/x509.js';

const DAY = 86_400_000;
const NOW = new Date('2026-11-26T00:00:00Z');
const at = (days: number): Date => new Date(NOW.getTime() + days * DAY);

describe('evaluateExpiry', () => {
  const cases = [
    { scenario: 'a year left', notAfter: at(365), state: ExpiryState.OK, days: 365 },
    { scenario: 'exactly the threshold left', notAfter: at(30), state: ExpiryState.OK, days: 30 },
    { scenario: 'one day under the threshold', notAfter: at(29.5), state: ExpiryState.EXPIRING, days: 29 },
    { scenario: 'one day left', notAfter: at(1), state: ExpiryState.EXPIRING, days: 1 },
    { scenario: 'expired yesterday', notAfter: at(-1), state: ExpiryState.EXPIRED, days: -1 },
  ];
  for (const c of cases)
    it(`${c.scenario}: ${c.state}`, () => {
      const [e] = evaluateExpiry([{ name: 'public', where: '10.0.0.250:5000', notAfter: c.notAfter }], NOW, 30);
      expect(e!.state).toBe(c.state);
      expect(e!.daysLeft).toBe(c.days);
      const problem = expiryProblem(e!, 30);
      expect(problem === undefined).toBe(!EXPIRY_PROBLEMS.has(c.state));
      if (problem) expect(problem).toMatch(/^certificate public \(10\.0\.0\.250:5000\)/);
    });

  it('a certificate that is not valid yet is a problem', () => {
    const [e] = evaluateExpiry([{ name: 'ca', where: 'ca.pem', notBefore: at(1), notAfter: at(900) }], NOW, 30);
    expect(e!.state).toBe(ExpiryState.EXPIRED);
  });

  it('an unreadable certificate is a problem that says why', () => {
    const [e] = evaluateExpiry([{ name: 'public', where: '10.0.0.250:5000', error: 'ECONNREFUSED' }], NOW, 30);
    expect(e!.state).toBe(ExpiryState.UNREADABLE);
    expect(expiryProblem(e!, 30)).toContain('ECONNREFUSED');
  });

  it('defaults to 30 days, and the threshold moves the verdict', () => {
    expect(EXPIRY_THRESHOLD_DAYS).toBe(30);
    const c = [{ name: 'public', where: 'x', notAfter: at(10) }];
    expect(evaluateExpiry(c, NOW, 7)[0]!.state).toBe(ExpiryState.OK);
    expect(evaluateExpiry(c, NOW, 11)[0]!.state).toBe(ExpiryState.EXPIRING);
  });
});

describe('readServedCertificate', () => {
  let server: Server;
  let port = 0;
  let notAfter: Date;
  beforeAll(async () => {
    const keys = await generateKeyPair();
    notAfter = new Date(Date.now() + DAY);
    const cert = await issueCertificate(
      {
        commonName: 'probe-test',
        sans: { dns: [], ip: ['127.0.0.1'] },
        ca: false,
        publicKeyPem: keys.publicKeyPem,
        notBefore: new Date(Date.now() - 60_000),
        notAfter,
      },
      { keyPem: keys.keyPem },
    );
    server = createServer({ cert, key: keys.keyPem }, (s) => s.end());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('reads the certificate a TLS server serves, and status would fail on it with the default threshold', async () => {
    const read = await readServedCertificate('public', '127.0.0.1', port);
    expect(read.error).toBeUndefined();
    expect(read.subject).toBe('CN=probe-test');
    expect(Math.abs(read.notAfter!.getTime() - notAfter.getTime())).toBeLessThan(1000);
    const [e] = evaluateExpiry([read], new Date(), EXPIRY_THRESHOLD_DAYS);
    expect(e!.state).toBe(ExpiryState.EXPIRING);
    expect(expiryProblem(e!, EXPIRY_THRESHOLD_DAYS)).toMatch(
      /^certificate public \(127\.0\.0\.1:\d+\) expires in 0 day/,
    );
  });

  it('says why when nothing answers', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const p = (closed.address() as { port: number }).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const read = await readServedCertificate('public', '127.0.0.1', p, 2000);
    expect(read.notAfter).toBeUndefined();
    expect(read.error).toBe('ECONNREFUSED');
  });
});
