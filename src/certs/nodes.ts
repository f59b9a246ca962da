/**
 * Per-node certificates: a node whose services speak TLS themselves (a
 * service file's `node_certificate`, e.g. libvirt's listener and QEMU's
 * migration streams with `nova_live_migration_transport: tls`) gets a
 * certificate of its own from the cloud's CA, valid as server and client,
 * naming the node (its name and FQDN) and every address it has. The plan and
 * `certs generate` ask the same question here, so they agree on which nodes.
 */
import type { Service } from '../roles/schema.js';
import type { Sans } from './x509.js';

/** The certificate name of a node's own certificate (`certs list`, `certs renew --cert`, its files). */
export const nodeCertName = (node: string): string => `node-${node}`;

/** Whether a certificate name is a node's (`node-<name>`), and which node. */
export function nodeOfCertName(name: string): string | undefined {
  return name.startsWith('node-') ? name.slice('node-'.length) : undefined;
}

/**
 * The services on a node that need its certificate: those with `node_certificate` whose
 * condition holds for the cloud's settings (`setting` gives a setting's effective value).
 */
export function servicesNeedingNodeCert(
  services: readonly Pick<Service, 'name' | 'node_certificate'>[],
  setting: (name: string) => unknown,
): string[] {
  return services
    .filter(
      (s) =>
        s.node_certificate &&
        (!s.node_certificate.when ||
          s.node_certificate.when.in.includes(setting(s.node_certificate.when.setting) as never)),
    )
    .map((s) => s.name);
}

/** What a node's certificate carries: its name, its FQDN, every address of it. */
export function nodeCertSans(node: string, domain: string, addresses: Readonly<Record<string, string>>): Sans {
  return {
    dns: [...new Set([node, `${node}.${domain}`])].sort(),
    ip: [...new Set(Object.values(addresses))].sort(),
  };
}
