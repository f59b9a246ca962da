/**
 * stackctl's registry over TLS: the certificate it serves (the inventory's
 * `registry` endpoint, from `certs generate` or the operator's), the files
 * that turn it on inside the registry container, and what the registry
 * serves now. The key is a Secret from the moment it is read; it goes into
 * the container through the local Docker socket only (never a command line,
 * an environment variable or a network).
 */
import { X509Certificate } from 'node:crypto';
import type { Secret } from '../core/secret.js';
import { tarFiles } from '../core/tar.js';
import { peerCertificate } from '../certs/probe.js';

/** What the registry serves when TLS is on, and what its clients verify it with. */
export interface RegistryTls {
  /** The certificate chain (PEM), leaf first. */
  readonly certPem: string;
  readonly key: Secret;
  /** The CA certificate (PEM) the nodes' dockerd and this machine trust for it. */
  readonly caPem: string;
  /** The name the certificate must carry: the inventory registry's host (DNS name or IP), without port. */
  readonly host: string;
}

/** Where the registry's configuration and TLS files live in its container. */
export const REGISTRY_CONFIG = '/etc/docker/registry/config.yml';
export const REGISTRY_TLS_DIR = '/etc/docker/registry/tls';

/**
 * The registry's config.yml: the image's own (no auth, filesystem storage) with
 * `http.tls` when TLS is on. Debian's docker-registry (distribution 2.8) reads it at start.
 */
export function registryConfigYaml(tls: boolean): string {
  const http = tls
    ? `{ addr: ':5000', tls: { certificate: ${REGISTRY_TLS_DIR}/registry.pem, key: ${REGISTRY_TLS_DIR}/registry.key } }`
    : `{ addr: ':5000' }`;
  return [
    '# Written by stackctl. No auth: the registry listens on the deploy host and the provisioning network only.',
    'version: 0.1',
    'log: { level: info }',
    'storage: { filesystem: { rootdirectory: /var/lib/docker-registry }, delete: { enabled: true } }',
    `http: ${http}`,
    '',
  ].join('\n');
}

/** The archive (extracted at /) that makes the registry container serve `tls`, or plain HTTP when false. */
export function registryFiles(tls: RegistryTls | false): Buffer {
  const strip = (p: string): string => p.replace(/^\//, '');
  return tarFiles([
    { path: strip(REGISTRY_CONFIG), data: registryConfigYaml(tls !== false), mode: 0o644 },
    ...(tls
      ? [
          { path: `${strip(REGISTRY_TLS_DIR)}/registry.pem`, data: tls.certPem, mode: 0o644 },
          { path: `${strip(REGISTRY_TLS_DIR)}/registry.key`, data: tls.key.reveal(), mode: 0o600 },
        ]
      : []),
  ]);
}

/** SHA-256 fingerprint of the first certificate of a PEM chain, as Node prints it (AA:BB:…). */
export function fingerprintOf(certPem: string): string {
  return new X509Certificate(certPem).fingerprint256;
}

/**
 * The fingerprint of the certificate served at host:port, or undefined when no TLS
 * handshake happens there (plain HTTP, nothing listening, no answer within `timeoutMs`).
 * Nothing is verified: this asks what is served, not whether to trust it.
 */
export async function servedFingerprint(host: string, port: number, timeoutMs = 3000): Promise<string | undefined> {
  return (await peerCertificate(host, port, timeoutMs)).cert?.fingerprint256;
}

/** The files a node's dockerd trusts the registry with: `/etc/docker/certs.d/<host:port>/ca.crt` per name. */
export function dockerTrustFiles(registries: readonly string[], caPem: string): { path: string; content: string }[] {
  return registries.map((r) => ({ path: `/etc/docker/certs.d/${r}/ca.crt`, content: caPem }));
}

/** What a registry configured with `tls` serves, in words: `TLS for 10.0.0.1` or `plain HTTP`. */
export function servedMode(tls: RegistryTls | false): string {
  return tls ? `TLS for ${tls.host}` : 'plain HTTP';
}
