/**
 * Command handlers of the virtual BMC: each IPMI command becomes calls on a
 * MachineBackend and nothing else. The privilege table says which session
 * level each command needs, as a real BMC enforces it.
 */
import { NetFn, Command, type IpmiRequest } from '../../../bmc/ipmi/message.js';
import { ChassisAction, encodeChassisStatus, encodeDeviceId, type DeviceId } from '../../../bmc/ipmi/commands.js';
import { Privilege } from '../../../bmc/ipmi/privilege.js';
import type { MachineBackend } from '../machine.js';
import type { BootOptionsState } from './boot-options.js';

/** Generic completion codes the handlers return. */
export const CC = {
  /** Success. */
  OK: 0x00,
  /** Command not implemented. */
  INVALID_COMMAND: 0xc1,
  /** Request data length invalid. */
  DATA_LENGTH_INVALID: 0xc7,
  /** Invalid data field in request. */
  INVALID_DATA_FIELD: 0xcc,
  /** The session's privilege is too low for the command. */
  INSUFFICIENT_PRIVILEGE: 0xd4,
  /** Not possible in the present state (e.g. power cycle while off). */
  INVALID_STATE: 0xd5,
  /** The backend failed. */
  UNSPECIFIED: 0xff,
  /** Close Session: no such session (command-specific 87h). */
  INVALID_SESSION_ID: 0x87,
} as const;

/** Privilege each in-session command needs, keyed by `netFn:cmd`. Commands not listed are answered C1h. */
export const COMMAND_PRIVILEGE: Readonly<Record<string, number>> = {
  /** Get Device ID: read-only. */
  [`${NetFn.APP}:${Command.GET_DEVICE_ID}`]: Privilege.USER,
  /** Get Channel Authentication Capabilities: allowed at any level. */
  [`${NetFn.APP}:${Command.GET_CHANNEL_AUTH_CAPABILITIES}`]: Privilege.CALLBACK,
  /** Get Channel Cipher Suites: allowed at any level. */
  [`${NetFn.APP}:${Command.GET_CHANNEL_CIPHER_SUITES}`]: Privilege.CALLBACK,
  /** Set Session Privilege Level: allowed at any level (bounded by the session maximum). */
  [`${NetFn.APP}:${Command.SET_SESSION_PRIVILEGE_LEVEL}`]: Privilege.CALLBACK,
  /** Close Session: allowed at any level. */
  [`${NetFn.APP}:${Command.CLOSE_SESSION}`]: Privilege.CALLBACK,
  /** Get Chassis Status: read-only. */
  [`${NetFn.CHASSIS}:${Command.GET_CHASSIS_STATUS}`]: Privilege.USER,
  /** Chassis Control: changes the machine. */
  [`${NetFn.CHASSIS}:${Command.CHASSIS_CONTROL}`]: Privilege.OPERATOR,
  /** Set System Boot Options: changes the machine. */
  [`${NetFn.CHASSIS}:${Command.SET_SYSTEM_BOOT_OPTIONS}`]: Privilege.OPERATOR,
  /** Get System Boot Options: read-only. */
  [`${NetFn.CHASSIS}:${Command.GET_SYSTEM_BOOT_OPTIONS}`]: Privilege.USER,
};

/** What a handler may touch. */
export interface CommandEnv {
  readonly backend: MachineBackend;
  readonly device: DeviceId;
  readonly boot: BootOptionsState;
  /** Current privilege of the session. */
  readonly privilege: number;
  /** Highest privilege the session may raise itself to. */
  readonly maxPrivilege: number;
  setPrivilege(level: number): void;
  /** Id of the session the request arrived in (for Close Session). */
  readonly sessionId: number;
  closeSession(): void;
  /** Answer for the channel discovery commands, shared with the pre-session path. */
  discovery(req: IpmiRequest): { cc: number; data?: Buffer } | undefined;
}

/** A handler's answer: completion code and optional body. */
export interface CommandResult {
  readonly cc: number;
  readonly data?: Buffer;
}

/** Run one in-session command. Backend failures become FFh, never exceptions. */
export async function handleCommand(req: IpmiRequest, env: CommandEnv): Promise<CommandResult> {
  const needed = COMMAND_PRIVILEGE[`${req.netFn}:${req.cmd}`];
  if (needed === undefined) return { cc: CC.INVALID_COMMAND };
  if (env.privilege < needed) return { cc: CC.INSUFFICIENT_PRIVILEGE };
  try {
    return await dispatch(req, env);
  } catch {
    return { cc: CC.UNSPECIFIED };
  }
}

async function dispatch(req: IpmiRequest, env: CommandEnv): Promise<CommandResult> {
  const { backend } = env;
  if (req.netFn === NetFn.APP) {
    switch (req.cmd) {
      case Command.GET_DEVICE_ID:
        return { cc: CC.OK, data: encodeDeviceId(env.device) };
      case Command.SET_SESSION_PRIVILEGE_LEVEL: {
        if (req.data.length !== 1) return { cc: CC.DATA_LENGTH_INVALID };
        const level = (req.data[0] ?? 0) & 0x0f;
        if (level === 0) return { cc: CC.OK, data: Buffer.from([env.privilege]) }; // 0 = just report
        // 81h: requested level not available for this user; 80h: level above the session's maximum.
        if (level < Privilege.USER || level > Privilege.OEM) return { cc: 0x80 };
        if (level > env.maxPrivilege) return { cc: 0x81 };
        env.setPrivilege(level);
        return { cc: CC.OK, data: Buffer.from([level]) };
      }
      case Command.CLOSE_SESSION: {
        if (req.data.length < 4) return { cc: CC.DATA_LENGTH_INVALID };
        if (req.data.readUInt32LE(0) !== env.sessionId) return { cc: CC.INVALID_SESSION_ID };
        env.closeSession();
        return { cc: CC.OK };
      }
      default:
        return env.discovery(req) ?? { cc: CC.INVALID_COMMAND };
    }
  }
  switch (req.cmd) {
    case Command.GET_CHASSIS_STATUS:
      return {
        cc: CC.OK,
        data: encodeChassisStatus({ powerOn: (await backend.powerState()) === 'on', restorePolicy: 0 }),
      };
    case Command.CHASSIS_CONTROL:
      return chassisControl(req, backend);
    case Command.SET_SYSTEM_BOOT_OPTIONS:
      return { cc: await env.boot.set(backend, req.data) };
    case Command.GET_SYSTEM_BOOT_OPTIONS: {
      const r = await env.boot.get(backend, req.data);
      return r.body ? { cc: r.cc, data: r.body } : { cc: r.cc };
    }
    default:
      return { cc: CC.INVALID_COMMAND };
  }
}

async function chassisControl(req: IpmiRequest, backend: MachineBackend): Promise<CommandResult> {
  if (req.data.length !== 1) return { cc: CC.DATA_LENGTH_INVALID };
  const on = (await backend.powerState()) === 'on';
  switch ((req.data[0] ?? 0) & 0x0f) {
    case ChassisAction.POWER_DOWN:
      await backend.powerOff();
      return { cc: CC.OK };
    case ChassisAction.POWER_UP:
      await backend.powerOn();
      return { cc: CC.OK };
    case ChassisAction.POWER_CYCLE:
      // The spec lets a BMC refuse a cycle of a machine that is off; real ones commonly do.
      if (!on) return { cc: CC.INVALID_STATE };
      await backend.powerOff();
      await backend.powerOn();
      return { cc: CC.OK };
    case ChassisAction.HARD_RESET:
      if (!on) return { cc: CC.INVALID_STATE };
      await backend.reset();
      return { cc: CC.OK };
    case ChassisAction.SOFT_SHUTDOWN:
      await backend.softOff();
      return { cc: CC.OK };
    default:
      return { cc: CC.INVALID_DATA_FIELD };
  }
}
