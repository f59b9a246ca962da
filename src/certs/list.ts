/**
 * `certs list`: what the cloud's certificates are now, read from their files:
 * the CA and each endpoint the plan needs, generated or the operator's.
 */
import { existsSync } from 'node:fs';
import { TLS_ENDPOINTS, type Tls } from '../inventory/schema.js';
import { ENDPOINTS, endpointNeeded, type CertInputs } from './endpoints.js';
import { generatedFiles, operatorPath, readPem } from './files.js';
import { nodeCertName } from './nodes.js';
import { readCertificate } from './x509.js';

const DAY_MS = 86_400_000;

/** One certificate as listed. */
export interface CertRow {
  /** `ca`, an endpoint, or a node's own (`node-<name>`). */
  readonly name: string;
  readonly source: 'generated' | 'operator';
  readonly file: string;
  /** false: not generated yet (or unreadable: `error` says why). */
  readonly present: boolean;
  readonly subject?: string;
  readonly issuer?: string;
  readonly sans?: { readonly dns: readonly string[]; readonly ip: readonly string[] };
  readonly notAfter?: string;
  /** Whole days until notAfter (negative once expired). */
  readonly daysLeft?: number;
  readonly error?: string;
}

/** The rows: the CA, then every endpoint the plan needs, in the table's order, then the nodes' own. */
export function listCerts(input: {
  inventoryFile: string;
  dir: string;
  tls: Tls | undefined;
  inputs: CertInputs;
  now: Date;
}): CertRow[] {
  const row = (name: CertRow['name'], source: CertRow['source'], file: string): CertRow => {
    if (!existsSync(file)) return { name, source, file, present: false };
    try {
      const info = readCertificate(readPem(file));
      return {
        name,
        source,
        file,
        present: true,
        subject: info.subject,
        issuer: info.issuer,
        sans: info.sans,
        notAfter: info.notAfter.toISOString(),
        daysLeft: Math.floor((info.notAfter.getTime() - input.now.getTime()) / DAY_MS),
      };
    } catch (e) {
      return { name, source, file, present: false, error: (e as Error).message };
    }
  };
  const tls = input.tls;
  const rows: CertRow[] = [
    tls?.ca
      ? row('ca', 'operator', operatorPath(input.inventoryFile, tls.ca.cert))
      : row('ca', 'generated', generatedFiles(input.dir, 'ca').cert),
  ];
  for (const name of TLS_ENDPOINTS) {
    if (!endpointNeeded(ENDPOINTS[name], input.inputs)) continue;
    const given = tls?.endpoints?.[name];
    rows.push(
      given
        ? row(name, 'operator', operatorPath(input.inventoryFile, given.cert))
        : row(name, 'generated', generatedFiles(input.dir, name).cert),
    );
  }
  for (const n of input.inputs.nodes ?? [])
    rows.push(row(nodeCertName(n.node), 'generated', generatedFiles(input.dir, nodeCertName(n.node)).cert));
  return rows;
}
