/**
 * Request and response bodies of the IPMI commands stackctl uses, in both
 * directions so the lab BMC speaks exactly what the client expects:
 * channel discovery (App 38h, 54h), chassis (Chassis 01h, 02h, 08h, 09h) and
 * Get Device ID (App 01h).
 */
import type { BootSetting } from '../driver.js';

/** Channel number meaning "the channel this request arrived on". */
export const CURRENT_CHANNEL = 0x0e;

/** Chassis Control actions (IPMI v2.0 section 28.3). */
export const ChassisAction = {
  /** Hard power off. */
  POWER_DOWN: 0x00,
  /** Power on. */
  POWER_UP: 0x01,
  /** Power off, wait, power on. */
  POWER_CYCLE: 0x02,
  /** Hard reset. */
  HARD_RESET: 0x03,
  /** Diagnostic interrupt (NMI). */
  DIAGNOSTIC_INTERRUPT: 0x04,
  /** Soft shutdown through ACPI (power button emulation). */
  SOFT_SHUTDOWN: 0x05,
} as const;

/** Decoded Get Chassis Status response (only what stackctl reads or serves). */
export interface ChassisStatus {
  readonly powerOn: boolean;
  /** Power restore policy: 0 stay off, 1 restore previous, 2 always on, 3 unknown. */
  readonly restorePolicy: number;
}

/** Encode a Get Chassis Status response body. */
export function encodeChassisStatus(s: ChassisStatus): Buffer {
  return Buffer.from([(s.powerOn ? 0x01 : 0x00) | ((s.restorePolicy & 0x03) << 5), 0x00, 0x00]);
}

/** Decode a Get Chassis Status response body; undefined when too short. */
export function decodeChassisStatus(data: Buffer): ChassisStatus | undefined {
  if (data.length < 3) return undefined;
  const b = data[0] ?? 0;
  return { powerOn: (b & 0x01) !== 0, restorePolicy: (b >> 5) & 0x03 };
}

/** System boot option parameters (IPMI v2.0 table 28-14) used here. */
export const BootParameter = {
  /** 0: set-in-progress lock around a group of changes. */
  SET_IN_PROGRESS: 0x00,
  /** 3: which events make the BMC clear the boot flags' valid bit. */
  VALID_BIT_CLEARING: 0x03,
  /** 4: boot info acknowledge (tells BIOS the flags are new). */
  BOOT_INFO_ACK: 0x04,
  /** 5: boot flags: device, persistence, BIOS/UEFI. */
  BOOT_FLAGS: 0x05,
} as const;

/** Values of parameter 0 (set-in-progress). */
export const SetInProgress = {
  /** Set complete: the lock is free. */
  COMPLETE: 0x00,
  /** Set in progress: the lock is held. */
  IN_PROGRESS: 0x01,
  /** Commit write (optional in BMCs). */
  COMMIT_WRITE: 0x02,
} as const;

/** Boot device selector values of boot flags byte 2, bits 5:2, and what they mean to stackctl. */
export const BOOT_DEVICE_SELECTORS: Readonly<Record<number, BootSetting['device']>> = {
  /** 0000b: no override. */
  0x0: 'none',
  /** 0001b: force PXE. */
  0x1: 'pxe',
  /** 0010b: force boot from default hard drive. */
  0x2: 'disk',
  /** 0011b: force boot from default hard drive, request safe mode. */
  0x3: 'disk',
  /** 0100b: force boot from default diagnostic partition. */
  0x4: 'other',
  /** 0101b: force boot from default CD/DVD. */
  0x5: 'other',
  /** 0110b: force boot into BIOS setup. */
  0x6: 'other',
  /** 1111b: force boot from default floppy / removable media. */
  0xf: 'other',
};

/** Selector stackctl writes for each device it sets. */
export const BOOT_DEVICE_TO_SELECTOR = {
  /** PXE. */
  pxe: 0x1,
  /** Default hard drive. */
  disk: 0x2,
  /** No override. */
  none: 0x0,
} as const;

const FLAG_VALID = 0x80;
const FLAG_PERSISTENT = 0x40;
const FLAG_EFI = 0x20;

/** Encode the 5 data bytes of boot flags (parameter 5). */
export function encodeBootFlags(
  device: keyof typeof BOOT_DEVICE_TO_SELECTOR,
  persistent: boolean,
  uefi: boolean,
): Buffer {
  const flags = Buffer.alloc(5);
  if (device !== 'none') flags[0] = FLAG_VALID | (persistent ? FLAG_PERSISTENT : 0) | (uefi ? FLAG_EFI : 0);
  flags[1] = (BOOT_DEVICE_TO_SELECTOR[device] & 0x0f) << 2;
  return flags;
}

/** Decode boot flags (parameter 5 data); undefined when too short. */
export function decodeBootFlags(data: Buffer): BootSetting | undefined {
  if (data.length < 2) return undefined;
  const b1 = data[0] ?? 0;
  const selector = ((data[1] ?? 0) >> 2) & 0x0f;
  const persistent = (b1 & FLAG_PERSISTENT) !== 0;
  const uefi = (b1 & FLAG_EFI) !== 0;
  // NOTE: a cleared valid bit means the BMC will not override anything, whatever the selector says.
  const device = (b1 & FLAG_VALID) === 0 ? 'none' : (BOOT_DEVICE_SELECTORS[selector] ?? 'other');
  return { device, persistent, uefi };
}

/** Decoded Get System Boot Options response. */
export interface BootOptionResponse {
  readonly parameter: number;
  /** Bit 7 of the parameter byte: the parameter is invalid / locked. */
  readonly invalid: boolean;
  readonly data: Buffer;
}

/** Decode a Get System Boot Options response body. */
export function decodeBootOptionResponse(data: Buffer): BootOptionResponse | undefined {
  if (data.length < 2) return undefined;
  const p = data[1] ?? 0;
  return { parameter: p & 0x7f, invalid: (p & 0x80) !== 0, data: data.subarray(2) };
}

/** Encode a Get System Boot Options response body (parameter version 1). */
export function encodeBootOptionResponse(parameter: number, data: Buffer): Buffer {
  return Buffer.concat([Buffer.from([0x01, parameter & 0x7f]), data]);
}

/** Identity from Get Device ID. */
export interface DeviceId {
  readonly deviceId: number;
  readonly deviceRevision: number;
  readonly firmwareMajor: number;
  /** Minor firmware revision as a number (BCD decoded). */
  readonly firmwareMinor: number;
  /** IPMI version, e.g. "2.0". */
  readonly ipmiVersion: string;
  readonly manufacturerId: number;
  readonly productId: number;
}

function fromBcd(b: number): number {
  return (b >> 4) * 10 + (b & 0x0f);
}
function toBcd(n: number): number {
  return ((Math.floor(n / 10) % 10) << 4) | (n % 10);
}

/** Encode a Get Device ID response body. */
export function encodeDeviceId(d: DeviceId): Buffer {
  const [major = '2', minor = '0'] = d.ipmiVersion.split('.');
  const b = Buffer.alloc(11);
  b[0] = d.deviceId;
  b[1] = d.deviceRevision & 0x0f;
  b[2] = d.firmwareMajor & 0x7f; // bit 7 clear: device available
  b[3] = toBcd(d.firmwareMinor);
  b[4] = (Number(minor) << 4) | Number(major);
  b[5] = 0x80; // chassis device
  b.writeUIntLE(d.manufacturerId & 0xfffff, 6, 3);
  b.writeUInt16LE(d.productId, 9);
  return b;
}

/** Decode a Get Device ID response body; undefined when too short. */
export function decodeDeviceId(data: Buffer): DeviceId | undefined {
  if (data.length < 11) return undefined;
  const v = data[4] ?? 0;
  return {
    deviceId: data[0] ?? 0,
    deviceRevision: (data[1] ?? 0) & 0x0f,
    firmwareMajor: (data[2] ?? 0) & 0x7f,
    firmwareMinor: fromBcd(data[3] ?? 0),
    ipmiVersion: `${v & 0x0f}.${v >> 4}`,
    manufacturerId: data.readUIntLE(6, 3) & 0xfffff,
    productId: data.readUInt16LE(9),
  };
}

/** Decoded Get Channel Authentication Capabilities response. */
export interface ChannelAuthCapabilities {
  readonly channel: number;
  /** The BMC answered the IPMI v2.0 form and supports RMCP+ sessions. */
  readonly rmcpPlus: boolean;
  /** v1.5 authentication types the channel offers (bit mask); stackctl never uses them. */
  readonly v15AuthTypes: number;
  /** Anonymous (null user, null password) login is enabled: worth a warning, never used. */
  readonly anonymousLogin: boolean;
  readonly nonNullUsers: boolean;
}

/** Encode a Get Channel Authentication Capabilities request asking for the v2.0 extended form. */
export function encodeAuthCapabilitiesRequest(privilege: number): Buffer {
  return Buffer.from([0x80 | CURRENT_CHANNEL, privilege & 0x0f]);
}

/** Encode a Get Channel Authentication Capabilities response offering RMCP+ only. */
export function encodeAuthCapabilities(channel: number): Buffer {
  return Buffer.from([channel, 0x80, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00]);
}

/** Decode a Get Channel Authentication Capabilities response body. */
export function decodeAuthCapabilities(data: Buffer): ChannelAuthCapabilities | undefined {
  if (data.length < 8) return undefined;
  const types = data[1] ?? 0;
  const status = data[2] ?? 0;
  const extended = data[3] ?? 0;
  return {
    channel: data[0] ?? 0,
    rmcpPlus: (types & 0x80) !== 0 && (extended & 0x02) !== 0,
    v15AuthTypes: types & 0x3f,
    anonymousLogin: (status & 0x01) !== 0,
    nonNullUsers: (status & 0x04) !== 0,
  };
}

/** One cipher suite as listed by Get Channel Cipher Suites. */
export interface CipherSuiteRecord {
  readonly id: number;
  /** Set for OEM suites (start byte C1h); stackctl never picks those. */
  readonly oemIana?: number;
  readonly auth: readonly number[];
  readonly integrity: readonly number[];
  readonly confidentiality: readonly number[];
}

/** Start-of-record bytes. */
const RECORD_STANDARD = 0xc0;
const RECORD_OEM = 0xc1;

/** Encode records for Get Channel Cipher Suites (the BMC slices the result 16 bytes at a time). */
export function encodeCipherSuiteRecords(records: readonly CipherSuiteRecord[]): Buffer {
  const parts: number[] = [];
  for (const r of records) {
    parts.push(RECORD_STANDARD, r.id);
    for (const a of r.auth) parts.push(a & 0x3f);
    for (const a of r.integrity) parts.push(0x40 | (a & 0x3f));
    for (const a of r.confidentiality) parts.push(0x80 | (a & 0x3f));
  }
  return Buffer.from(parts);
}

/** Parse concatenated cipher suite records; stops at the first byte that is not a record start. */
export function parseCipherSuiteRecords(bytes: Buffer): CipherSuiteRecord[] {
  const out: CipherSuiteRecord[] = [];
  let i = 0;
  while (i + 1 < bytes.length) {
    const start = bytes[i];
    if (start !== RECORD_STANDARD && start !== RECORD_OEM) break;
    const id = bytes[i + 1] ?? 0;
    i += 2;
    let oemIana: number | undefined;
    if (start === RECORD_OEM) {
      if (i + 3 > bytes.length) break;
      oemIana = bytes.readUIntLE(i, 3);
      i += 3;
    }
    const auth: number[] = [];
    const integrity: number[] = [];
    const confidentiality: number[] = [];
    while (i < bytes.length && (bytes[i] ?? 0) < RECORD_STANDARD) {
      const b = bytes[i] ?? 0;
      const tag = b & 0xc0;
      if (tag === 0x00) auth.push(b & 0x3f);
      else if (tag === 0x40) integrity.push(b & 0x3f);
      else confidentiality.push(b & 0x3f);
      i += 1;
    }
    out.push({ id, ...(oemIana === undefined ? {} : { oemIana }), auth, integrity, confidentiality });
  }
  return out;
}
