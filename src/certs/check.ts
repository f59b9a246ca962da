/**
 * Offline checks of the operator's CA and certificates named under `tls:`
 * (CONVENTIONS.md 3): `inventory validate` and `certs generate` report every
 * fault at once, each naming the inventory field (with its line), the file
 * and the reason. No key material is ever part of a message.
 */
import type { Issue, SourceLocation } from '../core/errors.js';
import { TLS_ENDPOINTS, type Tls, type TlsEndpoint } from '../inventory/schema.js';
import { ENDPOINTS, endpointNeeded, type CertInputs } from './endpoints.js';
import { looseMode, operatorPath, readPem } from './files.js';
import { coverage, issuedBy, keyMatches, readCertificate, readPrivateKey, type CertInfo } from './x509.js';

/** What the checks read. */
export interface TlsCheckContext {
  /** The inventory file (absolute): operator paths are relative to its folder. */
  readonly inventoryFile: string;
  readonly tls: Tls | undefined;
  readonly inputs: CertInputs;
  /** Where a field of the inventory is (file, line). */
  readonly locate: (path: readonly (string | number)[]) => SourceLocation;
  readonly now: Date;
}

/** Every fault of the operator's TLS files; empty when there is no `tls:` section. */
export function checkOperatorTls(ctx: TlsCheckContext): Issue[] {
  const issues: Issue[] = [];
  const tls = ctx.tls;
  if (!tls) return issues;
  const fault = (code: string, path: (string | number)[], message: string, hint: string): void => {
    issues.push({ severity: 'error', code, message, hint, location: ctx.locate(path) });
  };
  const field = (path: readonly (string | number)[]): string => path.join('.');

  /** Read a certificate field; reports E_CERT_FILE and E_CERT_EXPIRED. */
  const certAt = (path: (string | number)[], value: string): { pem: string; info: CertInfo } | undefined => {
    const file = operatorPath(ctx.inventoryFile, value);
    let pem: string;
    let info: CertInfo;
    try {
      pem = readPem(file);
      info = readCertificate(pem);
    } catch (e) {
      fault(
        'E_CERT_FILE',
        path,
        `${field(path)} ${file}: ${(e as Error).message}`,
        'Name a readable PEM certificate file (-----BEGIN CERTIFICATE-----), relative to the inventory or absolute.',
      );
      return undefined;
    }
    if (info.notAfter < ctx.now || info.notBefore > ctx.now) {
      const expired = info.notAfter < ctx.now;
      fault(
        'E_CERT_EXPIRED',
        path,
        `${field(path)} ${file}: ${expired ? `expired on ${info.notAfter.toISOString()}` : `not valid before ${info.notBefore.toISOString()}`} (${info.subject})`,
        expired
          ? 'Renew the certificate and replace the file (or remove the field: stackctl then issues one).'
          : "Check this machine's clock and the certificate's dates.",
      );
    }
    return { pem, info };
  };

  /** Read a key field; reports E_CERT_FILE and, when asked, E_CERT_KEY_PERMISSIONS. */
  const keyAt = (path: (string | number)[], value: string, private_: boolean): string | undefined => {
    const file = operatorPath(ctx.inventoryFile, value);
    let pem: string;
    try {
      pem = readPem(file);
      readPrivateKey(pem);
    } catch (e) {
      fault(
        'E_CERT_FILE',
        path,
        `${field(path)} ${file}: ${(e as Error).message}`,
        'Name a readable PEM private key file (-----BEGIN PRIVATE KEY----- or another PEM key), relative to the inventory or absolute.',
      );
      return undefined;
    }
    const loose = private_ ? looseMode(file) : undefined;
    if (loose) {
      fault(
        'E_CERT_KEY_PERMISSIONS',
        path,
        `${field(path)} ${file}: the CA key is accessible to group or others (mode ${loose})`,
        `Run 'chmod 600 ${file}' and check who may have read it; whoever holds the CA key can issue certificates the cloud trusts.`,
      );
    }
    return pem;
  };

  const mismatch = (path: (string | number)[], certValue: string, keyValue: string): void => {
    const cert = operatorPath(ctx.inventoryFile, certValue);
    const key = operatorPath(ctx.inventoryFile, keyValue);
    fault(
      'E_CERT_KEY_MISMATCH',
      path,
      `${field(path)} ${key} is not the private key of ${cert}`,
      'Name the key the certificate was issued for (compare their public keys).',
    );
  };

  let ca: { pem: string; info: CertInfo } | undefined;
  if (tls.ca) {
    ca = certAt(['tls', 'ca', 'cert'], tls.ca.cert);
    if (ca && !ca.info.isCa) {
      fault(
        'E_CERT_FILE',
        ['tls', 'ca', 'cert'],
        `tls.ca.cert ${operatorPath(ctx.inventoryFile, tls.ca.cert)}: not a CA certificate (${ca.info.subject} has no basicConstraints CA:TRUE)`,
        'Name the certificate of the CA that issues the endpoint certificates.',
      );
      ca = undefined;
    }
    const keyPem = tls.ca.key !== undefined ? keyAt(['tls', 'ca', 'key'], tls.ca.key, true) : undefined;
    if (ca && keyPem && tls.ca.key && !keyMatches(ca.pem, keyPem))
      mismatch(['tls', 'ca', 'key'], tls.ca.cert, tls.ca.key);
    if (!tls.ca.key) {
      const missing = TLS_ENDPOINTS.filter((e) => endpointNeeded(ENDPOINTS[e], ctx.inputs) && !tls.endpoints?.[e]).map(
        (e) => `tls.endpoints.${e}`,
      );
      const nodes = (ctx.inputs.nodes ?? []).map((n) => n.node);
      if (nodes.length) missing.push(`the nodes' own certificates (${nodes.join(', ')})`);
      if (missing.length)
        fault(
          'E_CERT_NO_CA_KEY',
          ['tls', 'ca'],
          `tls.ca has no key, and no certificate is given for ${missing.join(', ')}: stackctl cannot issue one`,
          "Add tls.ca.key (the CA's private key, mode 0600), or name a certificate and key for each of these endpoints " +
            "(the nodes' own certificates are always issued by stackctl: they need the key).",
        );
    }
  }

  for (const name of TLS_ENDPOINTS) {
    const files = tls.endpoints?.[name];
    if (!files) continue;
    checkEndpoint(name, files.cert, files.key);
  }

  function checkEndpoint(name: TlsEndpoint, certValue: string, keyValue: string): void {
    const base = ['tls', 'endpoints', name];
    const cert = certAt([...base, 'cert'], certValue);
    const keyPem = keyAt([...base, 'key'], keyValue, false);
    if (!cert) return;
    if (keyPem && !keyMatches(cert.pem, keyPem)) mismatch([...base, 'key'], certValue, keyValue);
    const missing = coverage(cert.pem, ENDPOINTS[name].required(ctx.inputs));
    if (missing.length)
      fault(
        'E_CERT_SAN',
        [...base, 'cert'],
        `tls.endpoints.${name}.cert ${operatorPath(ctx.inventoryFile, certValue)}: no subject alternative name covers ${missing.join(', ')} (it has ${sansText(cert.info)})`,
        `A certificate for ${name} must name ${missing.join(', ')}: clients connect there. Reissue it with those SANs, or remove the field and let 'stackctl certs generate' issue one.`,
      );
    if (ca && !issuedBy(cert.pem, ca.pem))
      fault(
        'E_CERT_CHAIN',
        [...base, 'cert'],
        `tls.endpoints.${name}.cert ${operatorPath(ctx.inventoryFile, certValue)}: not issued by the CA of tls.ca.cert (issuer ${cert.info.issuer})`,
        'Name a certificate that CA issued, or the CA that issued this one.',
      );
  }
  return issues;
}

/** `DNS:a, IP:1.2.3.4`, or `none`. */
export function sansText(info: CertInfo): string {
  const all = [...info.sans.dns.map((d) => `DNS:${d}`), ...info.sans.ip.map((a) => `IP:${a}`)];
  return all.length ? all.join(', ') : 'none';
}
