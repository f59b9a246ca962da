/**
 * Session-layer packets: the IPMI v1.5 header (only used, unauthenticated,
 * for Get Channel Authentication Capabilities before a session exists) and
 * the RMCP+ (v2.0) header with its integrity trailer and AES payload
 * (IPMI v2.0 section 13.6). Decoding never throws: it reports why a datagram
 * was dropped so callers can count it.
 */
import { decryptPayload, encryptPayload, hmac, sameBytes, type CipherSuite, type RandomBytes } from './crypto.js';
import { RMCP_HEADER_LENGTH, RmcpClass, rmcpClassOf, rmcpHeader } from './rmcp.js';

/** Authentication type byte of the session header. */
export const AuthType = {
  /** IPMI v1.5 without authentication: only for pre-session discovery. */
  NONE: 0x00,
  /** IPMI v1.5 MD2: never used. */
  MD2: 0x01,
  /** IPMI v1.5 MD5: never used. */
  MD5: 0x02,
  /** IPMI v1.5 straight password: never used (the password would travel in clear). */
  STRAIGHT_PASSWORD: 0x04,
  /** IPMI v1.5 OEM: never used. */
  OEM: 0x05,
  /** RMCP+ (IPMI v2.0) format. */
  RMCP_PLUS: 0x06,
} as const;

/** RMCP+ payload types (IPMI v2.0 table 13-16). */
export const PayloadType = {
  /** An IPMI request or response message. */
  IPMI: 0x00,
  /** RMCP+ Open Session Request. */
  OPEN_SESSION_REQUEST: 0x10,
  /** RMCP+ Open Session Response. */
  OPEN_SESSION_RESPONSE: 0x11,
  /** RAKP Message 1 (console to BMC). */
  RAKP1: 0x12,
  /** RAKP Message 2 (BMC to console). */
  RAKP2: 0x13,
  /** RAKP Message 3 (console to BMC). */
  RAKP3: 0x14,
  /** RAKP Message 4 (BMC to console). */
  RAKP4: 0x15,
} as const;

/** Bits of the payload type byte. */
const PAYLOAD_ENCRYPTED = 0x80;
const PAYLOAD_AUTHENTICATED = 0x40;
const PAYLOAD_TYPE_MASK = 0x3f;
/** OEM explicit payloads carry 6 more header bytes; stackctl never uses them. */
const PAYLOAD_TYPE_OEM = 0x02;
/** "Next header" byte of the integrity trailer: always 07h. */
const NEXT_HEADER = 0x07;
/** Size of the v2.0 session header after the RMCP header. */
const V2_HEADER_LENGTH = 12;

/** Why a datagram was dropped instead of answered or delivered. */
export const DropReason = {
  /** Not RMCP/IPMI, truncated, bad checksum or lengths that do not add up. */
  MALFORMED: 'malformed',
  /** The AuthCode (HMAC) did not match. */
  BAD_INTEGRITY: 'badIntegrity',
  /** The AES payload did not decrypt to valid padding. */
  BAD_CONFIDENTIALITY: 'badConfidentiality',
  /** A session packet without the integrity and confidentiality the session requires. */
  UNPROTECTED: 'unprotected',
  /** The session id is not one we know. */
  UNKNOWN_SESSION: 'unknownSession',
  /** The session sequence number was seen already or lies outside the window. */
  REPLAY: 'replay',
  /** Well formed but not what the exchange in progress waits for (e.g. a late duplicate). */
  UNEXPECTED: 'unexpected',
  /** Nothing was waiting for a datagram from that address. */
  UNSOLICITED: 'unsolicited',
  /** A format or algorithm stackctl refuses (v1.5 authentication, OEM payloads). */
  UNSUPPORTED: 'unsupported',
} as const;
export type DropReason = (typeof DropReason)[keyof typeof DropReason];

/** Keys a session uses to protect its packets. */
export interface PacketProtection {
  readonly suite: CipherSuite;
  readonly k1: Buffer;
  readonly aesKey: Buffer;
  readonly random?: RandomBytes;
}

/** Encode an IPMI v1.5 packet without authentication (pre-session discovery only). */
export function encodeV15(message: Buffer): Buffer {
  const header = Buffer.alloc(10);
  header[0] = AuthType.NONE;
  // sequence and session id stay zero: there is no session yet
  header[9] = message.length;
  return Buffer.concat([rmcpHeader(RmcpClass.IPMI), header, message]);
}

/** What to put in an RMCP+ packet. */
export interface V2PacketFields {
  readonly payloadType: number;
  /** Session id of the receiver (0 before a session exists). */
  readonly sessionId: number;
  /** Session sequence number (0 outside a session). */
  readonly sequence: number;
  readonly payload: Buffer;
}

/** Encode an RMCP+ packet; with `protection` the payload is encrypted and the packet authenticated. */
export function encodeV2(fields: V2PacketFields, protection?: PacketProtection): Buffer {
  const payload = protection
    ? encryptPayload(protection.aesKey, fields.payload, protection.random)
    : Buffer.from(fields.payload);
  const header = Buffer.alloc(V2_HEADER_LENGTH);
  header[0] = AuthType.RMCP_PLUS;
  header[1] = (fields.payloadType & PAYLOAD_TYPE_MASK) | (protection ? PAYLOAD_ENCRYPTED | PAYLOAD_AUTHENTICATED : 0);
  header.writeUInt32LE(fields.sessionId >>> 0, 2);
  header.writeUInt32LE(fields.sequence >>> 0, 6);
  header.writeUInt16LE(payload.length, 10);
  if (!protection) return Buffer.concat([rmcpHeader(RmcpClass.IPMI), header, payload]);
  // Integrity pad: make header + payload + pad + pad length + next header a multiple of 4 bytes.
  const padLength = (4 - ((V2_HEADER_LENGTH + payload.length + 2) % 4)) % 4;
  const trailer = Buffer.alloc(padLength + 2, 0xff);
  trailer[padLength] = padLength;
  trailer[padLength + 1] = NEXT_HEADER;
  const covered = Buffer.concat([header, payload, trailer]);
  const authCode = hmac(protection.suite.hash, protection.k1, covered).subarray(0, protection.suite.integrityLength);
  return Buffer.concat([rmcpHeader(RmcpClass.IPMI), covered, authCode]);
}

/** A datagram split into its session-layer parts, before integrity checks. */
export type ParsedPacket =
  | { readonly kind: 'asf' }
  | {
      readonly kind: 'v15';
      readonly sessionId: number;
      readonly sequence: number;
      /** The IPMI message. */
      readonly message: Buffer;
    }
  | {
      readonly kind: 'v2';
      readonly payloadType: number;
      readonly encrypted: boolean;
      readonly authenticated: boolean;
      readonly sessionId: number;
      readonly sequence: number;
      /** Payload as carried (still encrypted when `encrypted`). */
      readonly payload: Buffer;
      /** Bytes after the payload (integrity pad, pad length, next header, AuthCode). */
      readonly trailer: Buffer;
      /** The whole datagram, for the integrity check. */
      readonly datagram: Buffer;
    }
  | { readonly kind: 'drop'; readonly reason: DropReason };

/** Split a datagram into its parts; never throws. */
export function parsePacket(datagram: Buffer): ParsedPacket {
  const cls = rmcpClassOf(datagram);
  if (cls === RmcpClass.ASF) return { kind: 'asf' };
  if (cls !== RmcpClass.IPMI || datagram.length < RMCP_HEADER_LENGTH + 1) {
    return { kind: 'drop', reason: DropReason.MALFORMED };
  }
  const s = datagram.subarray(RMCP_HEADER_LENGTH);
  const authType = s[0];
  if (authType === AuthType.NONE) {
    if (s.length < 10) return { kind: 'drop', reason: DropReason.MALFORMED };
    const length = s[9] ?? 0;
    // NOTE: some BMCs append a legacy pad byte after the message, so allow trailing bytes.
    if (s.length < 10 + length) return { kind: 'drop', reason: DropReason.MALFORMED };
    return {
      kind: 'v15',
      sequence: s.readUInt32LE(1),
      sessionId: s.readUInt32LE(5),
      message: s.subarray(10, 10 + length),
    };
  }
  if (authType !== AuthType.RMCP_PLUS) return { kind: 'drop', reason: DropReason.UNSUPPORTED };
  if (s.length < V2_HEADER_LENGTH) return { kind: 'drop', reason: DropReason.MALFORMED };
  const typeByte = s[1] ?? 0;
  if ((typeByte & PAYLOAD_TYPE_MASK) === PAYLOAD_TYPE_OEM) return { kind: 'drop', reason: DropReason.UNSUPPORTED };
  const length = s.readUInt16LE(10);
  if (s.length < V2_HEADER_LENGTH + length) return { kind: 'drop', reason: DropReason.MALFORMED };
  return {
    kind: 'v2',
    payloadType: typeByte & PAYLOAD_TYPE_MASK,
    encrypted: (typeByte & PAYLOAD_ENCRYPTED) !== 0,
    authenticated: (typeByte & PAYLOAD_AUTHENTICATED) !== 0,
    sessionId: s.readUInt32LE(2),
    sequence: s.readUInt32LE(6),
    payload: s.subarray(V2_HEADER_LENGTH, V2_HEADER_LENGTH + length),
    trailer: s.subarray(V2_HEADER_LENGTH + length),
    datagram,
  };
}

/** The clear payload of a protected packet, or why it was refused. */
export type OpenResult =
  { readonly ok: true; readonly payload: Buffer } | { readonly ok: false; readonly reason: DropReason };

/**
 * Check the AuthCode of a protected packet and decrypt its payload. Packets
 * that lack either protection are refused: once a session uses a suite with
 * integrity and confidentiality, a clear packet can only be forged.
 */
export function openV2(packet: Extract<ParsedPacket, { kind: 'v2' }>, protection: PacketProtection): OpenResult {
  if (!packet.authenticated || !packet.encrypted) return { ok: false, reason: DropReason.UNPROTECTED };
  const codeLength = protection.suite.integrityLength;
  const trailer = packet.trailer;
  if (trailer.length < codeLength + 2) return { ok: false, reason: DropReason.MALFORMED };
  const covered = packet.datagram.subarray(RMCP_HEADER_LENGTH, packet.datagram.length - codeLength);
  const expected = hmac(protection.suite.hash, protection.k1, covered).subarray(0, codeLength);
  if (!sameBytes(expected, packet.datagram.subarray(packet.datagram.length - codeLength))) {
    return { ok: false, reason: DropReason.BAD_INTEGRITY };
  }
  const padLength = trailer[trailer.length - codeLength - 2] ?? 0;
  if (padLength + 2 + codeLength !== trailer.length || trailer[trailer.length - codeLength - 1] !== NEXT_HEADER) {
    return { ok: false, reason: DropReason.MALFORMED };
  }
  const clear = decryptPayload(protection.aesKey, packet.payload);
  return clear ? { ok: true, payload: clear } : { ok: false, reason: DropReason.BAD_CONFIDENTIALITY };
}
