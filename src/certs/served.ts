/**
 * What the cloud serves over TLS, and the files behind it: which endpoints
 * HAProxy terminates TLS on (the inventory's `tls.public`/`tls.internal`),
 * the PEM each of them reads (certificate chain then key, as HAProxy's `crt`
 * takes it), and the CA clients verify with. The PEM holds a private key: it
 * is a Secret from the moment it is read, and reaches a node only as a 0600
 * config file over the deploy's SFTP channel (the plan renders it like a
 * service password).
 */
import { existsSync } from 'node:fs';
import { Secret } from '../core/secret.js';
import type { Tls, TlsEndpoint } from '../inventory/schema.js';
import { generatedFiles, operatorPath, readPem } from './files.js';
import { nodeCertName } from './nodes.js';

/** The endpoints HAProxy serves over TLS, and the network each one's frontends bind on. */
export const SERVED_ENDPOINTS = {
  public: { network: 'external' },
  internal: { network: 'internal_api' },
} as const satisfies Partial<Record<TlsEndpoint, { network: string }>>;
export type ServedEndpoint = keyof typeof SERVED_ENDPOINTS;

/** Where the HAProxy container reads each endpoint's PEM (its config folder is mounted at /etc/haproxy). */
export const HAPROXY_CRT_DIR = '/etc/haproxy/tls';

/**
 * Where a service's containers find the cloud's CA: the file common/ca.pem.hbs renders in its
 * config folder (mounted at the same path; empty unless tls.internal).
 */
export function serviceCaFile(service: string): string {
  return `/etc/stackctl/${service}/ca.pem`;
}

/** The endpoints the inventory has HAProxy serve over TLS (none without a `tls:` section). */
export function servedEndpoints(tls: Tls | undefined): ServedEndpoint[] {
  if (!tls) return [];
  const on: ServedEndpoint[] = [];
  if (tls.public ?? true) on.push('public');
  if (tls.internal === true) on.push('internal');
  return on;
}

/** The files of one endpoint's certificate: the operator's (tls.endpoints) or the generated ones. */
export function endpointFiles(
  inventoryFile: string,
  certsDir: string,
  tls: Tls | undefined,
  name: TlsEndpoint,
): { cert: string; key: string; source: 'operator' | 'generated' } {
  const given = tls?.endpoints?.[name];
  if (given)
    return {
      cert: operatorPath(inventoryFile, given.cert),
      key: operatorPath(inventoryFile, given.key),
      source: 'operator',
    };
  return { ...generatedFiles(certsDir, name), source: 'generated' };
}

/** The CA certificate clients trust: the operator's (tls.ca.cert) or the generated one; undefined without TLS. */
export function caFile(inventoryFile: string, certsDir: string, tls: Tls | undefined): string | undefined {
  if (!tls) return undefined;
  return tls.ca ? operatorPath(inventoryFile, tls.ca.cert) : generatedFiles(certsDir, 'ca').cert;
}

/** What the plan needs of TLS. */
export interface TlsMaterial {
  /** Endpoint -> the PEM HAProxy reads (chain, then key); absent when its files are missing. */
  readonly pems: Partial<Record<ServedEndpoint, Secret>>;
  /** Endpoints whose files are missing or unreadable, with the reason (the plan refuses to render them). */
  readonly missing: Partial<Record<ServedEndpoint, string>>;
  /**
   * The CA certificate (PEM, public) the services verify the internal endpoints with: read only
   * when HAProxy serves the internal endpoint over TLS; `missing.internal` says why when it cannot be.
   */
  readonly ca?: string;
  /**
   * Each node's own certificate (certs/nodes.ts), by node: the certificate (public) and, read
   * with the keys only, its key; `missingNodes` says why a node's cannot be read.
   */
  readonly nodes?: Readonly<Record<string, { readonly cert: string; readonly key?: Secret }>>;
  readonly missingNodes?: Readonly<Record<string, string>>;
}

/**
 * Read the PEMs of the served endpoints. Nothing is read without a `tls:` section. With
 * `keys: false` (a plan shown without the secrets) only the CA is read: it is public.
 */
export function loadTlsMaterial(
  inventoryFile: string,
  certsDir: string,
  tls: Tls | undefined,
  opts: { readonly keys?: boolean; readonly nodes?: readonly string[] } = {},
): TlsMaterial {
  const pems: Partial<Record<ServedEndpoint, Secret>> = {};
  const missing: Partial<Record<ServedEndpoint, string>> = {};
  const nodes = tls && opts.nodes?.length ? loadNodeCerts(certsDir, opts.nodes, opts.keys !== false) : {};
  for (const name of opts.keys === false ? [] : servedEndpoints(tls)) {
    const f = endpointFiles(inventoryFile, certsDir, tls, name);
    if (!existsSync(f.cert) || !existsSync(f.key)) {
      missing[name] = `${existsSync(f.cert) ? f.key : f.cert} does not exist`;
      continue;
    }
    try {
      pems[name] = new Secret(haproxyPem(readPem(f.cert), readPem(f.key)));
    } catch (e) {
      missing[name] = (e as Error).message;
    }
  }
  // the internal endpoint's clients need the CA too (its certificate's reason, when missing, comes
  // first), and so do the nodes with a certificate of their own
  const wantCa = (servedEndpoints(tls).includes('internal') && !missing.internal) || opts.nodes?.length;
  if (!tls || !wantCa) return { pems, missing, ...nodes };
  const ca = caFile(inventoryFile, certsDir, tls)!;
  let caPem: string | undefined;
  let caMissing: string | undefined;
  if (!existsSync(ca)) caMissing = `${ca} (the CA) does not exist`;
  else
    try {
      caPem = pemBlocks(readPem(ca));
    } catch (e) {
      caMissing = (e as Error).message;
    }
  return {
    pems,
    missing:
      caMissing && servedEndpoints(tls).includes('internal')
        ? { ...missing, internal: missing.internal ?? caMissing }
        : missing,
    ...(caPem ? { ca: caPem } : {}),
    ...nodes,
    ...(caMissing && opts.nodes?.length
      ? { missingNodes: { ...Object.fromEntries(opts.nodes.map((n) => [n, caMissing])), ...nodes.missingNodes } }
      : {}),
  };
}

/** Each node's own certificate from the folder of generated ones (its key too when `keys`). */
function loadNodeCerts(
  certsDir: string,
  nodes: readonly string[],
  keys: boolean,
): Pick<TlsMaterial, 'nodes' | 'missingNodes'> {
  const found: Record<string, { cert: string; key?: Secret }> = {};
  const missingNodes: Record<string, string> = {};
  for (const node of nodes) {
    const f = generatedFiles(certsDir, nodeCertName(node));
    try {
      if (!existsSync(f.cert) || (keys && !existsSync(f.key)))
        throw new Error(`${existsSync(f.cert) ? f.key : f.cert} does not exist`);
      const cert = pemBlocks(readPem(f.cert));
      if (!cert) throw new Error(`${f.cert} holds no PEM block`);
      if (!keys) {
        found[node] = { cert };
        continue;
      }
      const key = pemBlocks(readPem(f.key));
      if (!key) throw new Error(`${f.key} holds no PEM block`);
      found[node] = { cert, key: new Secret(key) };
    } catch (e) {
      missingNodes[node] = (e as Error).message;
    }
  }
  return { nodes: found, ...(Object.keys(missingNodes).length ? { missingNodes } : {}) };
}

/** The PEM blocks of a file, each ending in a newline, nothing around them ('' when there is none). */
export function pemBlocks(text: string): string {
  return (
    text.replace(/\r\n/g, '\n').match(/-----BEGIN [A-Z0-9 ]+-----\n[A-Za-z0-9+/=\n]+-----END [A-Z0-9 ]+-----/g) ?? []
  )
    .map((b) => b + '\n')
    .join('');
}

/**
 * Certificate chain, then key: the file HAProxy's `crt` reads. Only the PEM blocks are kept (an
 * operator's file may carry text around them, e.g. openssl's `Bag Attributes`).
 */
export function haproxyPem(certPem: string, keyPem: string): string {
  const cert = pemBlocks(certPem);
  const key = pemBlocks(keyPem);
  if (!cert || !key) throw new Error('no PEM block in the certificate or key file');
  return cert + key;
}
