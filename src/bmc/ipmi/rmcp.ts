/**
 * RMCP framing (the 4-byte header in front of every IPMI-over-LAN datagram)
 * and the ASF presence ping/pong that tells whether anything answers at all
 * before a session is attempted.
 */

/** RMCP version byte for ASF 2.0 / IPMI: 06h. */
export const RMCP_VERSION = 0x06;

/** Length of the RMCP header: version, reserved, sequence, class. */
export const RMCP_HEADER_LENGTH = 4;

/** RMCP sequence number meaning "no RMCP ACK wanted": IPMI never uses RMCP ACKs. */
export const RMCP_NO_ACK_SEQUENCE = 0xff;

/** RMCP message classes. */
export const RmcpClass = {
  /** Alert Standard Format messages (presence ping and pong). */
  ASF: 0x06,
  /** IPMI messages (sessions, commands). */
  IPMI: 0x07,
} as const;
export type RmcpClass = (typeof RmcpClass)[keyof typeof RmcpClass];

/** IANA enterprise number of the ASF forum, carried in every ASF message. */
export const ASF_IANA = 0x000011be;

/** ASF message types. */
export const AsfMessageType = {
  /** Presence ping, sent by the console. */
  PING: 0x80,
  /** Presence pong, the BMC's answer. */
  PONG: 0x40,
} as const;

/** Bit in the pong's "supported entities" byte meaning "IPMI is supported". */
const ASF_ENTITY_IPMI = 0x80;

/** Build the 4-byte RMCP header for a message class. */
export function rmcpHeader(cls: RmcpClass): Buffer {
  return Buffer.from([RMCP_VERSION, 0x00, RMCP_NO_ACK_SEQUENCE, cls]);
}

/** Read the RMCP class of a datagram, or undefined when it is not RMCP at all. */
export function rmcpClassOf(datagram: Buffer): RmcpClass | undefined {
  if (datagram.length < RMCP_HEADER_LENGTH || datagram[0] !== RMCP_VERSION) return undefined;
  // NOTE: bit 7 of the class byte flags an RMCP ACK; IPMI never asks for one, so treat it as foreign.
  const cls = datagram[3];
  return cls === RmcpClass.ASF || cls === RmcpClass.IPMI ? cls : undefined;
}

/** A decoded ASF message. */
export interface AsfMessage {
  readonly type: number;
  /** Message tag, echoed by the pong so the console can match it to its ping. */
  readonly tag: number;
  /** For a pong: whether the BMC says it speaks IPMI. */
  readonly ipmiSupported: boolean;
}

function asf(type: number, tag: number, data: Buffer): Buffer {
  const body = Buffer.alloc(8 + data.length);
  body.writeUInt32BE(ASF_IANA, 0);
  body[4] = type;
  body[5] = tag & 0xff;
  body[6] = 0x00;
  body[7] = data.length;
  data.copy(body, 8);
  return Buffer.concat([rmcpHeader(RmcpClass.ASF), body]);
}

/** Encode an ASF presence ping. */
export function encodeAsfPing(tag: number): Buffer {
  return asf(AsfMessageType.PING, tag, Buffer.alloc(0));
}

/** Encode an ASF presence pong announcing IPMI support. */
export function encodeAsfPong(tag: number): Buffer {
  const data = Buffer.alloc(16);
  // IANA and OEM-defined fields stay zero: no OEM extensions are offered.
  data[8] = ASF_ENTITY_IPMI | 0x01; // IPMI supported, ASF version 1.0
  data[9] = 0x00; // no supported interactions beyond IPMI
  return asf(AsfMessageType.PONG, tag, data);
}

/** Decode an ASF message (ping or pong); undefined when malformed. */
export function decodeAsf(datagram: Buffer): AsfMessage | undefined {
  if (rmcpClassOf(datagram) !== RmcpClass.ASF || datagram.length < RMCP_HEADER_LENGTH + 8) return undefined;
  const body = datagram.subarray(RMCP_HEADER_LENGTH);
  if (body.readUInt32BE(0) !== ASF_IANA) return undefined;
  const type = body[4] ?? 0;
  const tag = body[5] ?? 0;
  const length = body[7] ?? 0;
  if (body.length < 8 + length) return undefined;
  const entities = length >= 9 ? (body[8 + 8] ?? 0) : 0;
  return { type, tag, ipmiSupported: (entities & ASF_ENTITY_IPMI) !== 0 };
}
