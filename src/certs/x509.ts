/**
 * The one adapter of `@peculiar/x509` (CONVENTIONS.md 9), on Node's WebCrypto:
 * key pairs, certificates issued by a CA, and what stackctl reads of a PEM
 * certificate. Node's own `X509Certificate` answers the checks it already
 * knows (key matches certificate, signed by a CA). Keys only ever travel as
 * PEM strings between this file and the files of src/certs/files.ts: never
 * on a command line, never in a message.
 */
import 'reflect-metadata';
import {
  X509Certificate as NodeCertificate,
  createPrivateKey,
  createPublicKey,
  webcrypto,
  type KeyObject,
} from 'node:crypto';
import * as x509 from '@peculiar/x509';
import { messageOf } from '../core/errors.js';

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

/** The key type of every key stackctl generates: ECDSA on P-256, signed with SHA-256. */
const EC_P256 = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** How a CA key of each type signs (an operator's CA may be RSA or another curve). */
const SIGNING: Readonly<Record<string, (k: KeyObject) => SigningAlgorithm>> = {
  ec: (k) => ({ name: 'ECDSA', namedCurve: curveName(k), hash: 'SHA-256' }),
  rsa: () => ({ name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }),
};

/** How a key signs, in WebCrypto's terms. */
type SigningAlgorithm = webcrypto.EcKeyImportParams | webcrypto.RsaHashedImportParams;

/** Node's curve names -> WebCrypto's. */
const CURVES: Readonly<Record<string, string>> = { prime256v1: 'P-256', secp384r1: 'P-384', secp521r1: 'P-521' };

function curveName(k: KeyObject): string {
  const c = k.asymmetricKeyDetails?.namedCurve ?? '';
  const name = CURVES[c];
  if (!name) throw new Error(`unsupported EC curve ${c || '(unknown)'}`);
  return name;
}

/** A PEM private key (PKCS#8) and its PEM public key. */
export interface KeyPairPem {
  readonly keyPem: string;
  readonly publicKeyPem: string;
}

/** A new ECDSA P-256 key pair as PEM. */
export async function generateKeyPair(): Promise<KeyPairPem> {
  const keys = await webcrypto.subtle.generateKey(EC_P256, true, ['sign', 'verify']);
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  const spki = await webcrypto.subtle.exportKey('spki', keys.publicKey);
  return {
    keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY'),
    publicKeyPem: x509.PemConverter.encode(spki, 'PUBLIC KEY'),
  };
}

/** Subject alternative names: DNS names and IP addresses. */
export interface Sans {
  readonly dns: readonly string[];
  readonly ip: readonly string[];
}

/** What to put in a certificate. */
export interface CertRequest {
  readonly commonName: string;
  /** Absent for a CA. */
  readonly sans?: Sans;
  readonly notBefore: Date;
  readonly notAfter: Date;
  /** The key the certificate is for. */
  readonly publicKeyPem: string;
  readonly ca: boolean;
  /**
   * A node's own certificate: also a TLS client (libvirt and QEMU connect with it), and with key
   * encipherment in its key usage, which libvirt demands of every certificate it loads
   * (virNetTLSContextCheckCertKeyUsage refuses to start without it, whatever the key type).
   */
  readonly clientAuth?: boolean;
}

/** The signer: the CA's certificate and key (PEM), or the certificate's own key for a self-signed CA. */
export interface Issuer {
  readonly certPem?: string;
  readonly keyPem: string;
}

async function importPrivate(keyPem: string): Promise<{ key: webcrypto.CryptoKey; alg: SigningAlgorithm }> {
  const obj = createPrivateKey(keyPem);
  const alg = SIGNING[obj.asymmetricKeyType ?? '']?.(obj);
  if (!alg) throw new Error(`unsupported key type ${obj.asymmetricKeyType ?? '(unknown)'}`);
  const der = obj.export({ type: 'pkcs8', format: 'der' });
  return { key: await webcrypto.subtle.importKey('pkcs8', der, alg, false, ['sign']), alg };
}

async function importPublic(publicKeyPem: string): Promise<webcrypto.CryptoKey> {
  const obj = createPublicKey(publicKeyPem);
  const alg = SIGNING[obj.asymmetricKeyType ?? '']?.(obj);
  if (!alg) throw new Error(`unsupported key type ${obj.asymmetricKeyType ?? '(unknown)'}`);
  return webcrypto.subtle.importKey('spki', obj.export({ type: 'spki', format: 'der' }), alg, true, ['verify']);
}

/** Issue a certificate (a CA's own when `issuer.certPem` is absent): PEM. */
export async function issueCertificate(req: CertRequest, issuer: Issuer): Promise<string> {
  const signer = await importPrivate(issuer.keyPem);
  const publicKey = await importPublic(req.publicKeyPem);
  const subject = `CN=${req.commonName.replace(/[,+"\\<>;=]/g, '\\$&')}`;
  const issuerName = issuer.certPem ? new x509.X509Certificate(issuer.certPem).subject : subject;
  const serial = Buffer.from(webcrypto.getRandomValues(new Uint8Array(16)));
  serial[0] = serial[0]! & 0x7f; // a positive serial
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(req.ca, req.ca ? 0 : undefined, true),
    new x509.KeyUsagesExtension(
      req.ca
        ? x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign
        : x509.KeyUsageFlags.digitalSignature | (req.clientAuth ? x509.KeyUsageFlags.keyEncipherment : 0),
      true,
    ),
    await x509.SubjectKeyIdentifierExtension.create(publicKey),
  ];
  if (issuer.certPem)
    extensions.push(await x509.AuthorityKeyIdentifierExtension.create(new x509.X509Certificate(issuer.certPem)));
  if (!req.ca)
    extensions.push(
      new x509.ExtendedKeyUsageExtension([
        x509.ExtendedKeyUsage.serverAuth,
        ...(req.clientAuth ? [x509.ExtendedKeyUsage.clientAuth] : []),
      ]),
    );
  if (req.sans) {
    const names = [
      ...req.sans.dns.map((value) => ({ type: 'dns' as const, value })),
      ...req.sans.ip.map((value) => ({ type: 'ip' as const, value })),
    ];
    extensions.push(new x509.SubjectAlternativeNameExtension(names));
  }
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial.toString('hex'),
    subject,
    issuer: issuerName,
    notBefore: req.notBefore,
    notAfter: req.notAfter,
    publicKey,
    signingKey: signer.key,
    signingAlgorithm: signer.alg,
    extensions,
  });
  return cert.toString('pem') + '\n';
}

/** What stackctl reads of a certificate. */
export interface CertInfo {
  readonly subject: string;
  readonly issuer: string;
  readonly sans: Sans;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly isCa: boolean;
  readonly fingerprint256: string;
}

/** The first certificate of a PEM text (a bundle's leaf); throws with the parser's reason. */
export function readCertificate(pem: string): CertInfo {
  if (!/-----BEGIN CERTIFICATE-----/.test(pem))
    throw new Error('no PEM certificate block (-----BEGIN CERTIFICATE-----)');
  const node = nodeCert(pem);
  const cert = new x509.X509Certificate(node.raw);
  const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
  const dns: string[] = [];
  const ip: string[] = [];
  for (const n of san?.names.toJSON() ?? []) {
    if (n.type === 'dns') dns.push(n.value);
    if (n.type === 'ip') ip.push(n.value);
  }
  return {
    subject: cert.subject,
    issuer: cert.issuer,
    sans: { dns, ip },
    notBefore: cert.notBefore,
    notAfter: cert.notAfter,
    isCa: node.ca,
    fingerprint256: node.fingerprint256,
  };
}

function nodeCert(pem: string): NodeCertificate {
  try {
    return new NodeCertificate(pem);
  } catch (e) {
    throw new Error(`not a readable certificate (${messageOf(e)})`);
  }
}

/** Check a PEM private key parses; throws with the reason (never the key). */
export function readPrivateKey(pem: string): void {
  if (!/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(pem)) throw new Error('no PEM private key block');
  try {
    createPrivateKey(pem);
  } catch (e) {
    throw new Error(`not a readable private key (${(e as NodeJS.ErrnoException).code ?? 'parse error'})`);
  }
}

/** True when the private key belongs to the certificate. */
export function keyMatches(certPem: string, keyPem: string): boolean {
  return nodeCert(certPem).checkPrivateKey(createPrivateKey(keyPem));
}

/** True when `certPem` names `caPem` as issuer and carries its valid signature. */
export function issuedBy(certPem: string, caPem: string): boolean {
  const cert = nodeCert(certPem);
  const ca = nodeCert(caPem);
  return cert.checkIssued(ca) && cert.verify(ca.publicKey);
}

/** The required names no SAN of the certificate covers (wildcards count, as TLS clients count them). */
export function coverage(certPem: string, required: Sans): string[] {
  const cert = nodeCert(certPem);
  return [
    ...required.dns.filter((d) => cert.checkHost(d, { subject: 'never' }) === undefined),
    ...required.ip.filter((a) => cert.checkIP(a) === undefined),
  ];
}
