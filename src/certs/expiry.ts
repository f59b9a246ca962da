/**
 * The expiry verdict of the certificates a cloud serves (`stackctl status`):
 * pure, so the rule is tested on its own. A certificate with fewer whole days
 * left than the threshold, an expired one, or one that could not be read is a
 * problem; each problem names the certificate and where it was read.
 */
import { TLS_EXPIRY_DAYS_DEFAULT } from '../inventory/schema.js';

const DAY_MS = 86_400_000;

/** Default threshold, days (inventory `tls.expiry_days`, status `--cert-days`). */
export const EXPIRY_THRESHOLD_DAYS = TLS_EXPIRY_DAYS_DEFAULT;

/** What a certificate's expiry says. */
export const ExpiryState = {
  /** At least the threshold's days left. */
  OK: 'ok',
  /** Still valid, fewer days left than the threshold: renew it. */
  EXPIRING: 'expiring',
  /** Past its notAfter (or before its notBefore): clients refuse it now. */
  EXPIRED: 'expired',
  /** Could not be read where it is served or kept: its expiry is unknown. */
  UNREADABLE: 'unreadable',
} as const;
export type ExpiryState = (typeof ExpiryState)[keyof typeof ExpiryState];

/** The states that fail `status`. */
export const EXPIRY_PROBLEMS: ReadonlySet<ExpiryState> = new Set([
  ExpiryState.EXPIRING,
  ExpiryState.EXPIRED,
  ExpiryState.UNREADABLE,
]);

/** One certificate as read: from a served endpoint or a file. */
export interface ReadCertificate {
  /** `ca`, `public`, `internal`. */
  readonly name: string;
  /** Where it was read: `10.0.0.250:5000` or a file path. */
  readonly where: string;
  readonly subject?: string;
  readonly notBefore?: Date;
  readonly notAfter?: Date;
  /** Why it could not be read (then the dates are absent). */
  readonly error?: string;
}

/** One certificate's expiry, as the status report carries it. */
export interface CertificateExpiry {
  readonly name: string;
  readonly where: string;
  readonly state: ExpiryState;
  readonly subject?: string;
  /** ISO time. */
  readonly notAfter?: string;
  /** Whole days until notAfter (negative once expired). */
  readonly daysLeft?: number;
  readonly error?: string;
}

/** Each certificate's state against the threshold (days). */
export function evaluateExpiry(
  certs: readonly ReadCertificate[],
  now: Date,
  thresholdDays: number,
): CertificateExpiry[] {
  return certs.map((c) => {
    const base = { name: c.name, where: c.where, ...(c.subject ? { subject: c.subject } : {}) };
    if (!c.notAfter) return { ...base, state: ExpiryState.UNREADABLE, error: c.error ?? 'no certificate' };
    const daysLeft = Math.floor((c.notAfter.getTime() - now.getTime()) / DAY_MS);
    const expired = c.notAfter <= now || (c.notBefore !== undefined && c.notBefore > now);
    const state = expired ? ExpiryState.EXPIRED : daysLeft < thresholdDays ? ExpiryState.EXPIRING : ExpiryState.OK;
    return { ...base, state, notAfter: c.notAfter.toISOString(), daysLeft };
  });
}

/** The sentence of a problem, naming the certificate (a status finding). */
export function expiryProblem(e: CertificateExpiry, thresholdDays: number): string | undefined {
  switch (e.state) {
    case ExpiryState.OK:
      return undefined;
    case ExpiryState.UNREADABLE:
      return `certificate ${e.name} (${e.where}) could not be read: ${e.error ?? 'unknown reason'}`;
    case ExpiryState.EXPIRED:
      return `certificate ${e.name} (${e.where}) is not valid now: it expired on ${e.notAfter} (or is not valid yet); renew it (stackctl certs generate, then deploy)`;
    case ExpiryState.EXPIRING:
      return `certificate ${e.name} (${e.where}) expires in ${e.daysLeft} day(s) on ${e.notAfter}, under the ${thresholdDays}-day threshold; renew it (stackctl certs generate, then deploy)`;
  }
}
