/**
 * The certificates a cloud needs, as one table (CONVENTIONS.md 12): which
 * endpoint, what it serves, the names every certificate of it must carry
 * (those clients connect to: a VIP, the registry's host) and the DNS names a
 * certificate stackctl issues adds. Generic code in generate.ts and check.ts
 * reads it; an endpoint with no required name (no VIP and no HAProxy node on
 * its network, no registry) is not needed by the plan and gets no certificate.
 */
import { isIP } from 'node:net';
import type { TlsEndpoint } from '../inventory/schema.js';
import type { Sans } from './x509.js';

/** What the table derives the names from (src/cli/certs.ts reads it from the loaded inventory). */
export interface CertInputs {
  /** cloud.name */
  readonly cloud: string;
  /** cloud.domain, when set */
  readonly domain?: string;
  /** network -> the addresses clients reach HAProxy at there: its VIP, else every HAProxy node's address */
  readonly frontends: Readonly<Record<string, readonly string[]>>;
  /** The registry's host (cloud.registry, else the release manifest's), without its port */
  readonly registryHost?: string;
  /** The nodes that need a certificate of their own (certs/nodes.ts), with what it names */
  readonly nodes?: readonly { readonly node: string; readonly sans: Sans }[];
}

/** One row of the table. */
export interface EndpointSpec {
  /** What the certificate is for, in words (`certs list`, docs/tls.md). */
  readonly description: string;
  /** Names every certificate of this endpoint must carry, operator's or generated (E_CERT_SAN). */
  readonly required: (i: CertInputs) => Sans;
  /** DNS names a generated certificate adds; the first is its common name (else the first required name). */
  readonly names: (i: CertInputs) => readonly string[];
}

const fqdn = (host: string, domain?: string): string => (domain ? `${host}.${domain}` : host);

/** A host as SANs: an IP address or a DNS name. */
export function hostSans(host: string | undefined): Sans {
  if (!host) return { dns: [], ip: [] };
  return isIP(host) ? { dns: [], ip: [host] } : { dns: [host], ip: [] };
}

/** The endpoints, in the order they are issued and listed. */
export const ENDPOINTS: Readonly<Record<TlsEndpoint, EndpointSpec>> = {
  public: {
    description: "HAProxy's frontends on the external network (the public API endpoints)",
    required: (i) => ({ dns: [], ip: [...(i.frontends['external'] ?? [])] }),
    names: (i) => [fqdn(i.cloud, i.domain)],
  },
  internal: {
    description: "HAProxy's frontends on the internal_api network (the internal and admin API endpoints)",
    required: (i) => ({ dns: [], ip: [...(i.frontends['internal_api'] ?? [])] }),
    names: (i) => [fqdn(`${i.cloud}-internal`, i.domain)],
  },
  registry: {
    description: 'the container registry the nodes pull from',
    required: (i) => hostSans(i.registryHost),
    names: () => [],
  },
};

/** Whether the plan needs a certificate for the endpoint. */
export function endpointNeeded(spec: EndpointSpec, i: CertInputs): boolean {
  const r = spec.required(i);
  return r.dns.length + r.ip.length > 0;
}

/** The SANs of a certificate stackctl issues: the required names and the endpoint's DNS names, sorted. */
export function generatedSans(spec: EndpointSpec, i: CertInputs): Sans {
  const r = spec.required(i);
  return {
    dns: [...new Set([...r.dns, ...spec.names(i)])].sort(),
    ip: [...new Set(r.ip)].sort(),
  };
}

/** The common name of a certificate stackctl issues for the endpoint. */
export function commonName(spec: EndpointSpec, i: CertInputs): string {
  const r = spec.required(i);
  return spec.names(i)[0] ?? r.dns[0] ?? r.ip[0] ?? i.cloud;
}
