/**
 * RMCP+ session establishment messages: Open Session Request/Response and
 * RAKP messages 1-4 (IPMI v2.0 sections 13.17-13.31), and the HMACs that
 * bind them to the user's password. Shared by the client and the lab BMC.
 */
import { hmac, type CipherSuite } from './crypto.js';

/** RMCP+ status codes carried by Open Session Response and RAKP 2/4 (IPMI v2.0 table 13-15). */
export const RakpStatus = {
  /** No errors. */
  OK: 0x00,
  /** Insufficient resources to create a session. */
  INSUFFICIENT_RESOURCES: 0x01,
  /** Invalid session id. */
  INVALID_SESSION_ID: 0x02,
  /** Invalid payload type. */
  INVALID_PAYLOAD_TYPE: 0x03,
  /** Invalid authentication algorithm. */
  INVALID_AUTH_ALGORITHM: 0x04,
  /** Invalid integrity algorithm. */
  INVALID_INTEGRITY_ALGORITHM: 0x05,
  /** No matching authentication payload. */
  NO_MATCHING_AUTH_PAYLOAD: 0x06,
  /** No matching integrity payload. */
  NO_MATCHING_INTEGRITY_PAYLOAD: 0x07,
  /** Inactive session id. */
  INACTIVE_SESSION_ID: 0x08,
  /** Invalid role. */
  INVALID_ROLE: 0x09,
  /** Unauthorized role or privilege level requested. */
  UNAUTHORIZED_ROLE: 0x0a,
  /** Insufficient resources to create a session at the requested role. */
  INSUFFICIENT_RESOURCES_FOR_ROLE: 0x0b,
  /** Invalid name length. */
  INVALID_NAME_LENGTH: 0x0c,
  /** Unauthorized name: no such user (or the user is disabled). */
  UNAUTHORIZED_NAME: 0x0d,
  /** Unauthorized GUID. */
  UNAUTHORIZED_GUID: 0x0e,
  /** Invalid integrity check value: the key exchange code did not match (wrong password). */
  INVALID_INTEGRITY_CHECK_VALUE: 0x0f,
  /** Invalid confidentiality algorithm. */
  INVALID_CONFIDENTIALITY_ALGORITHM: 0x10,
  /** No cipher suite match with the proposed security algorithms. */
  NO_CIPHER_SUITE_MATCH: 0x11,
  /** Illegal or unrecognized parameter. */
  ILLEGAL_PARAMETER: 0x12,
} as const;

/** Statuses that mean "these credentials are refused": never retried, they may lock the account. */
export const AUTH_FAILURE_STATUSES: ReadonlySet<number> = new Set([
  RakpStatus.UNAUTHORIZED_ROLE,
  RakpStatus.UNAUTHORIZED_NAME,
  RakpStatus.INVALID_NAME_LENGTH,
  RakpStatus.INVALID_INTEGRITY_CHECK_VALUE,
]);

/** Statuses that mean "the BMC does not accept this cipher suite": the next suite may be tried. */
export const SUITE_REFUSED_STATUSES: ReadonlySet<number> = new Set([
  RakpStatus.INVALID_AUTH_ALGORITHM,
  RakpStatus.INVALID_INTEGRITY_ALGORITHM,
  RakpStatus.NO_MATCHING_AUTH_PAYLOAD,
  RakpStatus.NO_MATCHING_INTEGRITY_PAYLOAD,
  RakpStatus.INVALID_CONFIDENTIALITY_ALGORITHM,
  RakpStatus.NO_CIPHER_SUITE_MATCH,
]);

/** Human name of an RMCP+ status code. */
export function rakpStatusName(status: number): string {
  const entry = Object.entries(RakpStatus).find(([, v]) => v === status);
  return entry ? entry[0].toLowerCase().replace(/_/g, ' ') : `status ${status.toString(16)}h`;
}

/** RAKP 1 role bit: look the user up by name only, not by name and privilege. */
export const ROLE_NAME_ONLY_LOOKUP = 0x10;

/** Open Session Request fields. */
export interface OpenSessionRequest {
  readonly tag: number;
  /** Requested maximum privilege (0 = highest the proposed algorithms allow). */
  readonly privilege: number;
  readonly consoleSessionId: number;
  readonly auth: number;
  readonly integrity: number;
  readonly confidentiality: number;
}

/** Open Session Response fields (algorithms are absent when status is not OK). */
export interface OpenSessionResponse {
  readonly tag: number;
  readonly status: number;
  readonly privilege: number;
  readonly consoleSessionId: number;
  readonly bmcSessionId: number;
  readonly auth: number;
  readonly integrity: number;
  readonly confidentiality: number;
}

function algorithmRecord(type: number, algorithm: number): Buffer {
  return Buffer.from([type, 0x00, 0x00, 0x08, algorithm & 0x3f, 0x00, 0x00, 0x00]);
}

function readAlgorithm(buf: Buffer, offset: number, type: number): number | undefined {
  if (buf[offset] !== type || buf[offset + 3] !== 0x08) return undefined;
  return (buf[offset + 4] ?? 0) & 0x3f;
}

/** Encode an Open Session Request payload. */
export function encodeOpenSessionRequest(r: OpenSessionRequest): Buffer {
  const head = Buffer.alloc(8);
  head[0] = r.tag;
  head[1] = r.privilege;
  head.writeUInt32LE(r.consoleSessionId >>> 0, 4);
  return Buffer.concat([
    head,
    algorithmRecord(0, r.auth),
    algorithmRecord(1, r.integrity),
    algorithmRecord(2, r.confidentiality),
  ]);
}

/** Decode an Open Session Request; undefined when malformed. */
export function decodeOpenSessionRequest(b: Buffer): OpenSessionRequest | undefined {
  if (b.length < 32) return undefined;
  const auth = readAlgorithm(b, 8, 0);
  const integrity = readAlgorithm(b, 16, 1);
  const confidentiality = readAlgorithm(b, 24, 2);
  if (auth === undefined || integrity === undefined || confidentiality === undefined) return undefined;
  return {
    tag: b[0] ?? 0,
    privilege: (b[1] ?? 0) & 0x0f,
    consoleSessionId: b.readUInt32LE(4),
    auth,
    integrity,
    confidentiality,
  };
}

/** Encode an Open Session Response payload (short form when status is not OK). */
export function encodeOpenSessionResponse(r: OpenSessionResponse): Buffer {
  const head = Buffer.alloc(r.status === RakpStatus.OK ? 12 : 8);
  head[0] = r.tag;
  head[1] = r.status;
  head[2] = r.privilege;
  head.writeUInt32LE(r.consoleSessionId >>> 0, 4);
  if (r.status !== RakpStatus.OK) return head;
  head.writeUInt32LE(r.bmcSessionId >>> 0, 8);
  return Buffer.concat([
    head,
    algorithmRecord(0, r.auth),
    algorithmRecord(1, r.integrity),
    algorithmRecord(2, r.confidentiality),
  ]);
}

/** Decode an Open Session Response; undefined when malformed. */
export function decodeOpenSessionResponse(b: Buffer): OpenSessionResponse | undefined {
  if (b.length < 8) return undefined;
  const base = {
    tag: b[0] ?? 0,
    status: b[1] ?? 0,
    privilege: (b[2] ?? 0) & 0x0f,
    consoleSessionId: b.readUInt32LE(4),
  };
  if (base.status !== RakpStatus.OK) return { ...base, bmcSessionId: 0, auth: 0, integrity: 0, confidentiality: 0 };
  if (b.length < 36) return undefined;
  const auth = readAlgorithm(b, 12, 0);
  const integrity = readAlgorithm(b, 20, 1);
  const confidentiality = readAlgorithm(b, 28, 2);
  if (auth === undefined || integrity === undefined || confidentiality === undefined) return undefined;
  return { ...base, bmcSessionId: b.readUInt32LE(8), auth, integrity, confidentiality };
}

/** RAKP Message 1 fields. */
export interface Rakp1 {
  readonly tag: number;
  readonly bmcSessionId: number;
  /** Console random number Rm (16 bytes). */
  readonly consoleRandom: Buffer;
  /** Role byte as sent: privilege level plus the name-only lookup bit. */
  readonly role: number;
  readonly username: string;
}

/** Encode RAKP Message 1. */
export function encodeRakp1(r: Rakp1): Buffer {
  const name = Buffer.from(r.username, 'utf8');
  const b = Buffer.alloc(28 + name.length);
  b[0] = r.tag;
  b.writeUInt32LE(r.bmcSessionId >>> 0, 4);
  r.consoleRandom.copy(b, 8, 0, 16);
  b[24] = r.role;
  b[27] = name.length;
  name.copy(b, 28);
  return b;
}

/** Decode RAKP Message 1; undefined when malformed. */
export function decodeRakp1(b: Buffer): Rakp1 | undefined {
  if (b.length < 28) return undefined;
  const nameLength = b[27] ?? 0;
  if (nameLength > 16 || b.length < 28 + nameLength) return undefined;
  return {
    tag: b[0] ?? 0,
    bmcSessionId: b.readUInt32LE(4),
    consoleRandom: Buffer.from(b.subarray(8, 24)),
    role: b[24] ?? 0,
    username: b.subarray(28, 28 + nameLength).toString('utf8'),
  };
}

/** RAKP Message 2 fields. */
export interface Rakp2 {
  readonly tag: number;
  readonly status: number;
  readonly consoleSessionId: number;
  /** BMC random number Rc (16 bytes). */
  readonly bmcRandom: Buffer;
  /** BMC GUID (16 bytes). */
  readonly guid: Buffer;
  readonly authCode: Buffer;
}

/** Encode RAKP Message 2 (short form when status is not OK). */
export function encodeRakp2(r: Rakp2): Buffer {
  const b = Buffer.alloc(r.status === RakpStatus.OK ? 40 : 8);
  b[0] = r.tag;
  b[1] = r.status;
  b.writeUInt32LE(r.consoleSessionId >>> 0, 4);
  if (r.status !== RakpStatus.OK) return b;
  r.bmcRandom.copy(b, 8, 0, 16);
  r.guid.copy(b, 24, 0, 16);
  return Buffer.concat([b, r.authCode]);
}

/** Decode RAKP Message 2; undefined when malformed. */
export function decodeRakp2(b: Buffer): Rakp2 | undefined {
  if (b.length < 8) return undefined;
  const base = { tag: b[0] ?? 0, status: b[1] ?? 0, consoleSessionId: b.readUInt32LE(4) };
  if (base.status !== RakpStatus.OK)
    return { ...base, bmcRandom: Buffer.alloc(0), guid: Buffer.alloc(0), authCode: Buffer.alloc(0) };
  if (b.length < 40) return undefined;
  return {
    ...base,
    bmcRandom: Buffer.from(b.subarray(8, 24)),
    guid: Buffer.from(b.subarray(24, 40)),
    authCode: Buffer.from(b.subarray(40)),
  };
}

/** RAKP Message 3 fields. */
export interface Rakp3 {
  readonly tag: number;
  readonly status: number;
  readonly bmcSessionId: number;
  readonly authCode: Buffer;
}

/** Encode RAKP Message 3. */
export function encodeRakp3(r: Rakp3): Buffer {
  const b = Buffer.alloc(8);
  b[0] = r.tag;
  b[1] = r.status;
  b.writeUInt32LE(r.bmcSessionId >>> 0, 4);
  return Buffer.concat([b, r.authCode]);
}

/** Decode RAKP Message 3; undefined when malformed. */
export function decodeRakp3(b: Buffer): Rakp3 | undefined {
  if (b.length < 8) return undefined;
  return { tag: b[0] ?? 0, status: b[1] ?? 0, bmcSessionId: b.readUInt32LE(4), authCode: Buffer.from(b.subarray(8)) };
}

/** RAKP Message 4 fields. */
export interface Rakp4 {
  readonly tag: number;
  readonly status: number;
  readonly consoleSessionId: number;
  /** Integrity check value: truncated HMAC keyed with the SIK. */
  readonly icv: Buffer;
}

/** Encode RAKP Message 4. */
export function encodeRakp4(r: Rakp4): Buffer {
  const b = Buffer.alloc(8);
  b[0] = r.tag;
  b[1] = r.status;
  b.writeUInt32LE(r.consoleSessionId >>> 0, 4);
  return Buffer.concat([b, r.status === RakpStatus.OK ? r.icv : Buffer.alloc(0)]);
}

/** Decode RAKP Message 4; undefined when malformed. */
export function decodeRakp4(b: Buffer): Rakp4 | undefined {
  if (b.length < 8) return undefined;
  return { tag: b[0] ?? 0, status: b[1] ?? 0, consoleSessionId: b.readUInt32LE(4), icv: Buffer.from(b.subarray(8)) };
}

/** Everything both ends know once RAKP 2 has been exchanged. */
export interface RakpContext {
  readonly suite: CipherSuite;
  readonly consoleSessionId: number;
  readonly bmcSessionId: number;
  readonly consoleRandom: Buffer;
  readonly bmcRandom: Buffer;
  readonly guid: Buffer;
  /** Role byte exactly as sent in RAKP 1. */
  readonly role: number;
  readonly username: string;
}

function u32(value: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(value >>> 0, 0);
  return b;
}

function nameField(ctx: RakpContext): Buffer[] {
  const name = Buffer.from(ctx.username, 'utf8');
  return [Buffer.from([ctx.role, name.length]), name];
}

/** RAKP 2 key exchange authentication code: HMAC-Kuid(SIDm, SIDc, Rm, Rc, GUIDc, ROLEm, ULENGTHm, UNAMEm). */
export function rakp2AuthCode(ctx: RakpContext, kuid: Buffer): Buffer {
  return hmac(
    ctx.suite.hash,
    kuid,
    u32(ctx.consoleSessionId),
    u32(ctx.bmcSessionId),
    ctx.consoleRandom,
    ctx.bmcRandom,
    ctx.guid,
    ...nameField(ctx),
  );
}

/** RAKP 3 key exchange authentication code: HMAC-Kuid(Rc, SIDm, ROLEm, ULENGTHm, UNAMEm). */
export function rakp3AuthCode(ctx: RakpContext, kuid: Buffer): Buffer {
  return hmac(ctx.suite.hash, kuid, ctx.bmcRandom, u32(ctx.consoleSessionId), ...nameField(ctx));
}

/** Session integrity key: HMAC-KG(Rm, Rc, ROLEm, ULENGTHm, UNAMEm); KG is Kuid when the BMC has no BMC key. */
export function sessionIntegrityKey(ctx: RakpContext, kg: Buffer): Buffer {
  return hmac(ctx.suite.hash, kg, ctx.consoleRandom, ctx.bmcRandom, ...nameField(ctx));
}

/** RAKP 4 integrity check value: HMAC-SIK(Rm, SIDc, GUIDc), truncated for the suite. */
export function rakp4Icv(ctx: RakpContext, sik: Buffer): Buffer {
  return hmac(ctx.suite.hash, sik, ctx.consoleRandom, u32(ctx.bmcSessionId), ctx.guid).subarray(
    0,
    ctx.suite.rakp4IcvLength,
  );
}
