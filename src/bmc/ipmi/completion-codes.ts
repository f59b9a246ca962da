/**
 * IPMI completion codes (IPMI v2.0 table 5-2) mapped to named errors. The
 * table is the single source of truth: the session retries the codes marked
 * `retry` with backoff, and every other non-zero code becomes a RemoteError
 * whose code is `E_IPMI_` + the entry's name.
 */
import { RemoteError } from '../../core/errors.js';

/** What stackctl knows about one completion code. */
export interface CompletionCodeInfo {
  /** Stable name; the error code is `E_IPMI_<name>`. */
  readonly name: string;
  /** What the BMC meant, for the message. */
  readonly meaning: string;
  /** Transient: retry the command after a backoff. */
  readonly retry: boolean;
  /** What the operator can do. */
  readonly hint: string;
}

const FIRMWARE_HINT = 'The BMC refused a command stackctl believes valid; check its firmware version and report it.';
const TRANSIENT_HINT = 'The BMC stayed busy through every retry; try again later or reset the BMC (mc reset cold).';

/** Completion codes by value. Unknown values fall back to UNSPECIFIED with the number in the message. */
export const COMPLETION_CODES: Readonly<Record<number, CompletionCodeInfo>> = {
  /** Node busy: the BMC cannot take the command now. */
  0xc0: { name: 'NODE_BUSY', meaning: 'node busy', retry: true, hint: TRANSIENT_HINT },
  /** Invalid command: not implemented by this BMC. */
  0xc1: { name: 'INVALID_COMMAND', meaning: 'invalid command', retry: false, hint: FIRMWARE_HINT },
  /** Command invalid for the given LUN. */
  0xc2: { name: 'INVALID_FOR_LUN', meaning: 'command invalid for given LUN', retry: false, hint: FIRMWARE_HINT },
  /** Timeout while processing the command. */
  0xc3: { name: 'PROCESSING_TIMEOUT', meaning: 'timeout while processing command', retry: true, hint: TRANSIENT_HINT },
  /** Out of space. */
  0xc4: { name: 'OUT_OF_SPACE', meaning: 'out of space', retry: false, hint: 'Free space on the BMC (clear its SEL).' },
  /** Reservation cancelled or invalid. */
  0xc5: { name: 'RESERVATION_CANCELLED', meaning: 'reservation cancelled', retry: true, hint: TRANSIENT_HINT },
  /** Request data truncated. */
  0xc6: { name: 'DATA_TRUNCATED', meaning: 'request data truncated', retry: false, hint: FIRMWARE_HINT },
  /** Request data length invalid. */
  0xc7: { name: 'DATA_LENGTH_INVALID', meaning: 'request data length invalid', retry: false, hint: FIRMWARE_HINT },
  /** Request data field length limit exceeded. */
  0xc8: {
    name: 'DATA_TOO_LONG',
    meaning: 'request data field length limit exceeded',
    retry: false,
    hint: FIRMWARE_HINT,
  },
  /** Parameter out of range. */
  0xc9: { name: 'PARAMETER_OUT_OF_RANGE', meaning: 'parameter out of range', retry: false, hint: FIRMWARE_HINT },
  /** Cannot return the number of requested data bytes. */
  0xca: { name: 'CANNOT_RETURN_BYTES', meaning: 'cannot return requested bytes', retry: false, hint: FIRMWARE_HINT },
  /** Requested sensor, data or record not present. */
  0xcb: { name: 'NOT_PRESENT', meaning: 'requested data not present', retry: false, hint: FIRMWARE_HINT },
  /** Invalid data field in request: the BMC does not support the value (e.g. a boot device). */
  0xcc: {
    name: 'INVALID_DATA_FIELD',
    meaning: 'invalid data field in request',
    retry: false,
    hint: 'The BMC does not support this setting; check that the machine supports it (e.g. UEFI boot).',
  },
  /** Command illegal for the sensor or record type. */
  0xcd: { name: 'ILLEGAL_FOR_TYPE', meaning: 'command illegal for record type', retry: false, hint: FIRMWARE_HINT },
  /** Command response could not be provided. */
  0xce: { name: 'NO_RESPONSE', meaning: 'response could not be provided', retry: true, hint: TRANSIENT_HINT },
  /** Cannot execute a duplicated request. */
  0xcf: { name: 'DUPLICATED_REQUEST', meaning: 'cannot execute duplicated request', retry: false, hint: FIRMWARE_HINT },
  /** SDR repository in update mode. */
  0xd0: { name: 'SDR_UPDATE_MODE', meaning: 'SDR repository in update mode', retry: true, hint: TRANSIENT_HINT },
  /** Device in firmware update mode. */
  0xd1: {
    name: 'FIRMWARE_UPDATE_MODE',
    meaning: 'device in firmware update mode',
    retry: true,
    hint: 'Wait for the BMC firmware update to finish.',
  },
  /** BMC initialisation in progress. */
  0xd2: { name: 'BMC_INITIALIZING', meaning: 'BMC initialization in progress', retry: true, hint: TRANSIENT_HINT },
  /** Destination unavailable. */
  0xd3: { name: 'DESTINATION_UNAVAILABLE', meaning: 'destination unavailable', retry: false, hint: FIRMWARE_HINT },
  /** Insufficient privilege level for the command. */
  0xd4: {
    name: 'INSUFFICIENT_PRIVILEGE',
    meaning: 'insufficient privilege level',
    retry: false,
    hint: 'Give the BMC user the operator or administrator privilege on this channel.',
  },
  /** Command not supported in the present state (e.g. power cycle while off). */
  0xd5: {
    name: 'INVALID_STATE',
    meaning: 'command not supported in present state',
    retry: false,
    hint: 'Check the machine state (power, firmware mode) and try again.',
  },
  /** Command sub-function disabled or unavailable. */
  0xd6: {
    name: 'SUBFUNCTION_DISABLED',
    meaning: 'command sub-function disabled or unavailable',
    retry: false,
    hint: 'Enable the function in the BMC settings.',
  },
  /** Unspecified error. */
  0xff: { name: 'UNSPECIFIED', meaning: 'unspecified error', retry: false, hint: FIRMWARE_HINT },
};

/** Command-specific codes (80h-BEh) of the boot options commands (IPMI v2.0 section 28.12-28.13). */
export const BOOT_OPTION_CODES: Readonly<Record<number, CompletionCodeInfo>> = {
  /** The BMC does not implement this boot option parameter. */
  0x80: { name: 'PARAMETER_NOT_SUPPORTED', meaning: 'parameter not supported', retry: false, hint: FIRMWARE_HINT },
  /** Someone else is setting boot options right now (set-in-progress is held). */
  0x81: {
    name: 'SET_IN_PROGRESS',
    meaning: 'boot options set already in progress',
    retry: true,
    hint: 'Another tool is changing the boot options; try again when it has finished.',
  },
  /** The parameter is read-only. */
  0x82: { name: 'READ_ONLY_PARAMETER', meaning: 'parameter is read-only', retry: false, hint: FIRMWARE_HINT },
};

const PRIVILEGE_HINT = 'Give the BMC user the operator or administrator privilege on this channel.';

/** Command-specific codes of Set Session Privilege Level (IPMI v2.0 section 22.18). */
export const SET_PRIVILEGE_CODES: Readonly<Record<number, CompletionCodeInfo>> = {
  /** The user may not use the requested level on this channel. */
  0x80: {
    name: 'INSUFFICIENT_PRIVILEGE',
    meaning: 'requested privilege level not available for this user',
    retry: false,
    hint: PRIVILEGE_HINT,
  },
  /** The level exceeds the limit negotiated for the session. */
  0x81: {
    name: 'INSUFFICIENT_PRIVILEGE',
    meaning: 'requested privilege level exceeds the session limit',
    retry: false,
    hint: PRIVILEGE_HINT,
  },
  /** The BMC refuses to disable user-level authentication. */
  0x82: {
    name: 'PRIVILEGE_CHANGE_REFUSED',
    meaning: 'cannot disable user level authentication',
    retry: false,
    hint: FIRMWARE_HINT,
  },
};

/** Describe a completion code, falling back to the generic table and then to UNSPECIFIED. */
export function completionCodeInfo(
  code: number,
  specific: Readonly<Record<number, CompletionCodeInfo>> = {},
): CompletionCodeInfo {
  const known = specific[code] ?? COMPLETION_CODES[code];
  if (known) return known;
  return {
    name: 'UNSPECIFIED',
    meaning: `completion code ${code.toString(16).toUpperCase().padStart(2, '0')}h`,
    retry: false,
    hint: FIRMWARE_HINT,
  };
}

/** Where the command went, for messages. */
export interface CommandContext {
  readonly node: string;
  readonly address: string;
  /** Command name, e.g. "Chassis Control". */
  readonly command: string;
}

/** Build the RemoteError for a non-zero completion code. */
export function completionCodeError(
  code: number,
  ctx: CommandContext,
  specific: Readonly<Record<number, CompletionCodeInfo>> = {},
): RemoteError {
  const info = completionCodeInfo(code, specific);
  const hex = code.toString(16).toUpperCase().padStart(2, '0');
  return new RemoteError(
    `E_IPMI_${info.name}`,
    `${ctx.command} refused by the BMC of node ${ctx.node} at ${ctx.address}: ${info.meaning} (${hex}h)`,
    { hint: info.hint, details: { node: ctx.node, address: ctx.address, command: ctx.command, completionCode: code } },
  );
}
