/**
 * `certs generate`: the cloud's CA and the certificates of ENDPOINTS, issued
 * where the operator gave none. Re-entrant (CONVENTIONS.md 6): a certificate
 * that is still right is kept byte for byte; one that no longer fits the
 * inventory (its SANs, its CA, its key) or that nears its end is reissued,
 * with the reason. A CA is never replaced behind the operator's back: the
 * nodes and clients trust it.
 */
import { InputError, IoError } from '../core/errors.js';
import { TLS_ENDPOINTS, type Tls } from '../inventory/schema.js';
import { ENDPOINTS, commonName, endpointNeeded, generatedSans, type CertInputs } from './endpoints.js';
import {
  CERT_MODE,
  KEY_MODE,
  bothExist,
  ensureCertsDir,
  generatedFiles,
  looseMode,
  operatorPath,
  readPem,
  writePem,
} from './files.js';
import { nodeCertName } from './nodes.js';
import { generateKeyPair, issueCertificate, issuedBy, keyMatches, readCertificate, type Sans } from './x509.js';

/** Lifetimes and margins of what stackctl issues. */
export const CERT_POLICY = {
  /** Days a generated CA is valid. */
  caDays: 3650,
  /** Days a generated endpoint certificate is valid (825: the longest most TLS clients accept). */
  leafDays: 825,
  /** A generated certificate with fewer days left is reissued by `certs generate`. */
  renewBeforeDays: 30,
  /** notBefore is set this far in the past, for nodes whose clocks lag a little. */
  backdateMinutes: 5,
} as const;

const DAY_MS = 86_400_000;

/** What happened to one certificate. */
export interface CertOutcome {
  /** `ca`, an endpoint, or a node's own (`node-<name>`). */
  readonly name: string;
  readonly action: 'created' | 'kept' | 'reissued' | 'operator';
  readonly cert: string;
  /** Why it was reissued. */
  readonly reason?: string;
}

/** Inputs of generateCerts; side effects injectable (CONVENTIONS.md 8). */
export interface GenerateCertsInput {
  readonly inventoryFile: string;
  readonly dir: string;
  readonly tls: Tls | undefined;
  readonly inputs: CertInputs;
  readonly now?: () => Date;
  /**
   * `certs renew`: also reissue generated certificates with fewer than `days` days left (when that
   * is above the policy's margin) and those named in `force` (endpoints, `node-<name>`), even when still right.
   */
  readonly renew?: { readonly days: number; readonly force: ReadonlySet<string> };
}

/** Issue what is missing or stale; the caller holds the run lock and checked the operator's files. */
export async function generateCerts(input: GenerateCertsInput): Promise<CertOutcome[]> {
  const now = (input.now ?? (() => new Date()))();
  const tls = input.tls;
  const needed = TLS_ENDPOINTS.filter((e) => endpointNeeded(ENDPOINTS[e], input.inputs));
  const nodes = input.inputs.nodes ?? [];
  const toIssue = [...needed.filter((e) => !tls?.endpoints?.[e]), ...nodes.map((n) => nodeCertName(n.node))];
  const outcomes: CertOutcome[] = [];

  let ca: { certPem: string; keyPem: string } | undefined;
  if (tls?.ca) {
    const cert = operatorPath(input.inventoryFile, tls.ca.cert);
    outcomes.push({ name: 'ca', action: 'operator', cert });
    if (tls.ca.key) ca = { certPem: readPem(cert), keyPem: readPem(operatorPath(input.inventoryFile, tls.ca.key)) };
  } else if (toIssue.length) {
    ensureCertsDir(input.dir);
    const r = await generatedCa(input, now);
    ca = r.ca;
    outcomes.push(r.outcome);
  }

  for (const name of needed) {
    const given = tls?.endpoints?.[name];
    if (given) {
      outcomes.push({ name, action: 'operator', cert: operatorPath(input.inventoryFile, given.cert) });
      continue;
    }
    // checkOperatorTls refuses a CA without a key when an endpoint needs issuing (E_CERT_NO_CA_KEY)
    const spec = ENDPOINTS[name];
    outcomes.push(
      await leaf(
        input,
        name,
        { commonName: commonName(spec, input.inputs), sans: generatedSans(spec, input.inputs) },
        ca!,
        now,
      ),
    );
  }
  // each node's own: always stackctl's (a server and client certificate for the TLS its services speak)
  for (const n of nodes)
    outcomes.push(
      await leaf(
        input,
        nodeCertName(n.node),
        { commonName: n.sans.dns[0] ?? n.node, sans: n.sans, clientAuth: true },
        ca!,
        now,
      ),
    );
  return outcomes;
}

/** Keep or create stackctl's CA; refuse to replace one that exists. */
async function generatedCa(
  input: GenerateCertsInput,
  now: Date,
): Promise<{ ca: { certPem: string; keyPem: string }; outcome: CertOutcome }> {
  const files = generatedFiles(input.dir, 'ca');
  const exists = bothExist(files);
  if (exists.cert || exists.key) {
    const refuse = (reason: string): never => {
      throw new InputError('E_CERT_FILE', `${files.cert}: ${reason}`, {
        hint:
          `stackctl does not replace a CA that nodes and clients may trust. Restore ${files.cert} and ${files.key}, ` +
          'or, to start over with a new CA (every certificate is then reissued and must be redistributed), remove both and run again.',
        location: { file: files.cert },
      });
    };
    if (!exists.key) refuse(`the CA certificate exists but its key ${files.key} does not`);
    if (!exists.cert) refuse(`the CA key ${files.key} exists but its certificate does not`);
    const loose = looseMode(files.key);
    if (loose)
      throw new IoError(
        'E_CERT_KEY_PERMISSIONS',
        `the CA key ${files.key} is accessible to group or others (mode ${loose})`,
        {
          hint: `Run 'chmod 600 ${files.key}' and check who may have read it; whoever holds the CA key can issue certificates the cloud trusts.`,
          location: { file: files.key },
        },
      );
    const certPem = readPem(files.cert);
    const keyPem = readPem(files.key);
    let info;
    try {
      info = readCertificate(certPem);
    } catch (e) {
      return refuse((e as Error).message);
    }
    if (!keyMatches(certPem, keyPem)) refuse(`${files.key} is not the key of this CA certificate`);
    if (info.notAfter < now) refuse(`the CA expired on ${info.notAfter.toISOString()}`);
    return { ca: { certPem, keyPem }, outcome: { name: 'ca', action: 'kept', cert: files.cert } };
  }
  const keys = await generateKeyPair();
  const commonName = `${input.inputs.cloud} CA`;
  const certPem = await issueCertificate(
    { commonName, ca: true, publicKeyPem: keys.publicKeyPem, ...validity(now, CERT_POLICY.caDays) },
    { keyPem: keys.keyPem },
  );
  writePem(files.key, keys.keyPem, KEY_MODE);
  writePem(files.cert, certPem, CERT_MODE);
  return { ca: { certPem, keyPem: keys.keyPem }, outcome: { name: 'ca', action: 'created', cert: files.cert } };
}

function validity(now: Date, days: number): { notBefore: Date; notAfter: Date } {
  return {
    notBefore: new Date(now.getTime() - CERT_POLICY.backdateMinutes * 60_000),
    notAfter: new Date(now.getTime() + days * DAY_MS),
  };
}

/** Keep, issue or reissue one generated certificate (an endpoint's or a node's). */
async function leaf(
  input: GenerateCertsInput,
  name: string,
  subject: { readonly commonName: string; readonly sans: Sans; readonly clientAuth?: boolean },
  ca: { certPem: string; keyPem: string },
  now: Date,
): Promise<CertOutcome> {
  const files = generatedFiles(input.dir, name);
  const want = subject.sans;
  const exists = bothExist(files);
  let reason: string | undefined;
  if (exists.cert || exists.key) {
    const days = Math.max(CERT_POLICY.renewBeforeDays, input.renew?.days ?? 0);
    reason = staleness(files, want, ca.certPem, now, days);
    if (!reason && input.renew?.force.has(name)) reason = 'renewal asked for (--cert)';
    if (!reason) return { name, action: 'kept', cert: files.cert };
  }
  ensureCertsDir(input.dir);
  const keys = await generateKeyPair();
  const certPem = await issueCertificate(
    {
      commonName: subject.commonName,
      sans: want,
      ca: false,
      ...(subject.clientAuth ? { clientAuth: true } : {}),
      publicKeyPem: keys.publicKeyPem,
      ...validity(now, CERT_POLICY.leafDays),
    },
    ca,
  );
  writePem(files.key, keys.keyPem, KEY_MODE);
  writePem(files.cert, certPem, CERT_MODE);
  return reason
    ? { name, action: 'reissued', cert: files.cert, reason }
    : { name, action: 'created', cert: files.cert };
}

/** Why an existing generated certificate must be reissued, or undefined when it is right. */
function staleness(
  files: { cert: string; key: string },
  want: Sans,
  caPem: string,
  now: Date,
  renewBeforeDays: number,
): string | undefined {
  const exists = bothExist(files);
  if (!exists.cert) return 'its certificate file is missing';
  if (!exists.key) return 'its key file is missing';
  let certPem: string;
  let keyPem: string;
  let info;
  try {
    certPem = readPem(files.cert);
    keyPem = readPem(files.key);
    info = readCertificate(certPem);
    if (!keyMatches(certPem, keyPem)) return 'its key does not match it';
  } catch (e) {
    return `it cannot be read (${(e as Error).message})`;
  }
  if (!issuedBy(certPem, caPem)) return 'it was not issued by the current CA';
  const changes = sanChanges(info.sans, want);
  if (changes) return `its SANs no longer match the inventory (${changes})`;
  const daysLeft = Math.floor((info.notAfter.getTime() - now.getTime()) / DAY_MS);
  if (daysLeft < renewBeforeDays) return daysLeft < 0 ? 'it has expired' : `it expires in ${daysLeft} day(s)`;
  return undefined;
}

/** `+IP:10.0.0.9 -IP:10.0.0.250`, or '' when the sets are equal. */
export function sanChanges(have: Sans, want: Sans): string {
  const fmt = (s: Sans): Set<string> => new Set([...s.dns.map((d) => `DNS:${d}`), ...s.ip.map((a) => `IP:${a}`)]);
  const h = fmt(have);
  const w = fmt(want);
  return [
    ...[...w].filter((x) => !h.has(x)).map((x) => `+${x}`),
    ...[...h].filter((x) => !w.has(x)).map((x) => `-${x}`),
  ].join(' ');
}
