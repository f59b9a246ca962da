/**
 * System boot options of a virtual BMC (IPMI v2.0 section 28.12-28.13): the
 * boot flags live in the machine backend; the bookkeeping parameters
 * (set-in-progress, valid-bit clearing, boot info acknowledge) live here.
 */
import {
  BOOT_DEVICE_SELECTORS,
  BootParameter,
  SetInProgress,
  decodeBootFlags,
  encodeBootOptionResponse,
} from '../../../bmc/ipmi/commands.js';
import type { MachineBackend } from '../machine.js';
import type { BootSetting } from '../../../bmc/driver.js';

/** Completion codes the boot option handlers return. */
export const BootOptionCode = {
  /** Success. */
  OK: 0x00,
  /** Parameter not supported. */
  PARAMETER_NOT_SUPPORTED: 0x80,
  /** Set already in progress (another console holds the lock). */
  SET_IN_PROGRESS: 0x81,
  /** Request data length invalid. */
  DATA_LENGTH_INVALID: 0xc7,
  /** Invalid data field in request (a device the machine cannot boot). */
  INVALID_DATA_FIELD: 0xcc,
} as const;

/** Selector written in answers for a backend device that has no IPMI equivalent. */
const OTHER_SELECTOR = 0xf;

/** Per-BMC boot option state that is not the machine's own. */
export class BootOptionsState {
  #setInProgress: number = SetInProgress.COMPLETE;
  #validBitClearing = 0x00;
  #ack = Buffer.from([0x00, 0x00]);
  /** Flags bytes 3-5 (console redirection, BIOS verbosity…): stored and echoed, not acted upon. */
  #extra = Buffer.alloc(3);

  /** Handle Set System Boot Options; returns a completion code. */
  async set(backend: MachineBackend, data: Buffer): Promise<number> {
    if (data.length < 1) return BootOptionCode.DATA_LENGTH_INVALID;
    const parameter = (data[0] ?? 0) & 0x7f;
    const value = data.subarray(1);
    switch (parameter) {
      case BootParameter.SET_IN_PROGRESS: {
        if (value.length !== 1) return BootOptionCode.DATA_LENGTH_INVALID;
        const v = (value[0] ?? 0) & 0x03;
        if (v === 0x03) return BootOptionCode.INVALID_DATA_FIELD;
        if (v === SetInProgress.IN_PROGRESS && this.#setInProgress === SetInProgress.IN_PROGRESS) {
          return BootOptionCode.SET_IN_PROGRESS;
        }
        // Commit-write applies nothing extra: every write below takes effect at once.
        this.#setInProgress = v === SetInProgress.COMMIT_WRITE ? this.#setInProgress : v;
        return BootOptionCode.OK;
      }
      case BootParameter.VALID_BIT_CLEARING:
        if (value.length !== 1) return BootOptionCode.DATA_LENGTH_INVALID;
        this.#validBitClearing = (value[0] ?? 0) & 0x1f;
        return BootOptionCode.OK;
      case BootParameter.BOOT_INFO_ACK: {
        if (value.length !== 2) return BootOptionCode.DATA_LENGTH_INVALID;
        const mask = value[0] ?? 0;
        const bits = value[1] ?? 0;
        this.#ack = Buffer.from([0x00, ((this.#ack[1] ?? 0) & ~mask) | (bits & mask)]);
        return BootOptionCode.OK;
      }
      case BootParameter.BOOT_FLAGS: {
        if (value.length !== 5) return BootOptionCode.DATA_LENGTH_INVALID;
        const flags = decodeBootFlags(value);
        if (!flags) return BootOptionCode.DATA_LENGTH_INVALID;
        const selector = ((value[1] ?? 0) >> 2) & 0x0f;
        if (flags.device === 'other' || BOOT_DEVICE_SELECTORS[selector] === undefined) {
          return BootOptionCode.INVALID_DATA_FIELD;
        }
        await backend.setBootDevice(flags.device, flags.persistent, flags.uefi);
        value.copy(this.#extra, 0, 2, 5);
        return BootOptionCode.OK;
      }
      default:
        return BootOptionCode.PARAMETER_NOT_SUPPORTED;
    }
  }

  /** Handle Get System Boot Options; returns a completion code and the response body. */
  async get(backend: MachineBackend, data: Buffer): Promise<{ cc: number; body?: Buffer }> {
    if (data.length < 3) return { cc: BootOptionCode.DATA_LENGTH_INVALID };
    const parameter = (data[0] ?? 0) & 0x7f;
    switch (parameter) {
      case BootParameter.SET_IN_PROGRESS:
        return { cc: 0, body: encodeBootOptionResponse(parameter, Buffer.from([this.#setInProgress])) };
      case BootParameter.VALID_BIT_CLEARING:
        return { cc: 0, body: encodeBootOptionResponse(parameter, Buffer.from([this.#validBitClearing])) };
      case BootParameter.BOOT_INFO_ACK:
        return { cc: 0, body: encodeBootOptionResponse(parameter, Buffer.from(this.#ack)) };
      case BootParameter.BOOT_FLAGS:
        return { cc: 0, body: encodeBootOptionResponse(parameter, this.#flags(await backend.getBootDevice())) };
      default:
        return { cc: BootOptionCode.PARAMETER_NOT_SUPPORTED };
    }
  }

  #flags(setting: BootSetting): Buffer {
    const flags = Buffer.alloc(5);
    this.#extra.copy(flags, 2);
    if (setting.device === 'none') return flags;
    flags[0] = 0x80 | (setting.persistent ? 0x40 : 0) | (setting.uefi ? 0x20 : 0);
    const selector = setting.device === 'pxe' ? 0x1 : setting.device === 'disk' ? 0x2 : OTHER_SELECTOR;
    flags[1] = ((flags[1] ?? 0) & 0xc3) | (selector << 2);
    return flags;
  }
}
