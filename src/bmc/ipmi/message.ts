/**
 * IPMI LAN messages: the request/response frame inside a session packet
 * (IPMI v2.0 section 13.8), with its two checksums and 6-bit sequence number.
 */

/** Slave address of the BMC on the IPMB. */
export const BMC_SLAVE_ADDRESS = 0x20;

/** Software id of a remote console (bit 0 set = software id, not a slave address). */
export const REMOTE_CONSOLE_SWID = 0x81;

/** Network function codes used here (requests; responses add 1). */
export const NetFn = {
  /** Chassis device: power, boot options. */
  CHASSIS: 0x00,
  /** Application: device id, sessions, channels. */
  APP: 0x06,
} as const;

/** Commands, named by network function. */
export const Command = {
  /** App 01h: Get Device ID. */
  GET_DEVICE_ID: 0x01,
  /** App 38h: Get Channel Authentication Capabilities. */
  GET_CHANNEL_AUTH_CAPABILITIES: 0x38,
  /** App 3Bh: Set Session Privilege Level. */
  SET_SESSION_PRIVILEGE_LEVEL: 0x3b,
  /** App 3Ch: Close Session. */
  CLOSE_SESSION: 0x3c,
  /** App 54h: Get Channel Cipher Suites. */
  GET_CHANNEL_CIPHER_SUITES: 0x54,
  /** Chassis 01h: Get Chassis Status. */
  GET_CHASSIS_STATUS: 0x01,
  /** Chassis 02h: Chassis Control. */
  CHASSIS_CONTROL: 0x02,
  /** Chassis 08h: Set System Boot Options. */
  SET_SYSTEM_BOOT_OPTIONS: 0x08,
  /** Chassis 09h: Get System Boot Options. */
  GET_SYSTEM_BOOT_OPTIONS: 0x09,
} as const;

/** A decoded request (what a BMC receives). */
export interface IpmiRequest {
  readonly netFn: number;
  readonly cmd: number;
  /** 6-bit request sequence number the response echoes. */
  readonly rqSeq: number;
  readonly data: Buffer;
  readonly rsAddr?: number;
  readonly rqAddr?: number;
  readonly rqLun?: number;
}

/** A decoded response (what a console receives). */
export interface IpmiResponse {
  /** Network function of the request (even number). */
  readonly netFn: number;
  readonly cmd: number;
  readonly rqSeq: number;
  readonly completionCode: number;
  /** Response data after the completion code. */
  readonly data: Buffer;
}

/** Two's-complement checksum: the bytes plus the checksum sum to zero modulo 256. */
export function checksum(bytes: Buffer, start = 0, end = bytes.length): number {
  let sum = 0;
  for (let i = start; i < end; i++) sum = (sum + (bytes[i] ?? 0)) & 0xff;
  return (0x100 - sum) & 0xff;
}

function frame(addrA: number, netFnLun: number, addrB: number, seqLun: number, cmd: number, body: Buffer): Buffer {
  const msg = Buffer.alloc(7 + body.length);
  msg[0] = addrA;
  msg[1] = netFnLun;
  msg[2] = checksum(msg, 0, 2);
  msg[3] = addrB;
  msg[4] = seqLun;
  msg[5] = cmd;
  body.copy(msg, 6);
  msg[msg.length - 1] = checksum(msg, 3, msg.length - 1);
  return msg;
}

interface Frame {
  readonly addrA: number;
  readonly netFn: number;
  readonly lunA: number;
  readonly addrB: number;
  readonly seq: number;
  readonly lunB: number;
  readonly cmd: number;
  readonly body: Buffer;
}

function unframe(msg: Buffer): Frame | undefined {
  if (msg.length < 7) return undefined;
  if (checksum(msg, 0, 2) !== msg[2] || checksum(msg, 3, msg.length - 1) !== msg[msg.length - 1]) return undefined;
  const b1 = msg[1] ?? 0;
  const b4 = msg[4] ?? 0;
  return {
    addrA: msg[0] ?? 0,
    netFn: b1 >> 2,
    lunA: b1 & 0x03,
    addrB: msg[3] ?? 0,
    seq: b4 >> 2,
    lunB: b4 & 0x03,
    cmd: msg[5] ?? 0,
    body: msg.subarray(6, msg.length - 1),
  };
}

/** Encode a request from the remote console to the BMC. */
export function encodeRequest(req: IpmiRequest): Buffer {
  return frame(
    req.rsAddr ?? BMC_SLAVE_ADDRESS,
    (req.netFn << 2) & 0xfc,
    req.rqAddr ?? REMOTE_CONSOLE_SWID,
    ((req.rqSeq & 0x3f) << 2) | ((req.rqLun ?? 0) & 0x03),
    req.cmd,
    req.data,
  );
}

/** Decode a request; undefined when truncated, a checksum is wrong, or it is a response. */
export function decodeRequest(msg: Buffer): IpmiRequest | undefined {
  const f = unframe(msg);
  if (!f || (f.netFn & 1) !== 0) return undefined;
  return { netFn: f.netFn, cmd: f.cmd, rqSeq: f.seq, data: f.body, rsAddr: f.addrA, rqAddr: f.addrB, rqLun: f.lunB };
}

/** Encode the response to a request (same sequence, odd network function). */
export function encodeResponse(req: IpmiRequest, completionCode: number, data: Buffer = Buffer.alloc(0)): Buffer {
  return frame(
    req.rqAddr ?? REMOTE_CONSOLE_SWID,
    (((req.netFn | 1) << 2) & 0xfc) | ((req.rqLun ?? 0) & 0x03),
    req.rsAddr ?? BMC_SLAVE_ADDRESS,
    (req.rqSeq & 0x3f) << 2,
    req.cmd,
    Buffer.concat([Buffer.from([completionCode]), data]),
  );
}

/** Decode a response; undefined when truncated, a checksum is wrong, or it is a request. */
export function decodeResponse(msg: Buffer): IpmiResponse | undefined {
  const f = unframe(msg);
  if (!f || (f.netFn & 1) !== 1 || f.body.length < 1) return undefined;
  return {
    netFn: f.netFn & 0x3e,
    cmd: f.cmd,
    rqSeq: f.seq,
    completionCode: f.body[0] ?? 0xff,
    data: f.body.subarray(1),
  };
}
