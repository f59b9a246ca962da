/**
 * IPMI 2.0 (RMCP+ / lanplus) implementation of the BmcDriver interface.
 *
 * The driver keeps one session per BMC and reuses it while it is fresh. An
 * authentication failure is remembered: later calls fail at once without
 * touching the BMC, because BMCs lock accounts after repeated failures.
 */
import { AuthError, InputError, RemoteError, TimeoutError } from '../../core/errors.js';
import type { BmcDriver, BmcIdentity, BmcTarget, BootDevice, BootOptions, BootSetting, PowerState } from '../driver.js';
import { IPMI_DEFAULT_PORT, parseIpmiAddress, type IpmiAddress } from './address.js';
import {
  BOOT_DEVICE_TO_SELECTOR,
  BootParameter,
  ChassisAction,
  SetInProgress,
  decodeBootFlags,
  decodeBootOptionResponse,
  decodeChassisStatus,
  decodeDeviceId,
  encodeBootFlags,
} from './commands.js';
import { BOOT_OPTION_CODES } from './completion-codes.js';
import type { RandomBytes } from './crypto.js';
import { Command, NetFn } from './message.js';
import { Privilege } from './privilege.js';
import { IpmiSession, presencePing } from './session.js';
import { IpmiTransport, type TransportCounters } from './transport.js';

/** Defaults of the driver options. */
export const IPMI_DEFAULTS = {
  /** Wait for each attempt (ms): BMCs answer in a few ms, slow ones in a few hundred. */
  timeoutMs: 1000,
  /** Retransmissions after the first attempt: 4 attempts, about 4 s before a TimeoutError. */
  retries: 3,
  /** Retries of a command answered "busy" (C0h and friends). */
  busyRetries: 4,
  /** First backoff after a "busy" answer (ms), doubled each time. */
  busyBackoffMs: 100,
  /** Reuse an idle session for this long (ms); BMCs drop idle sessions after about 60 s. */
  sessionIdleMs: 30_000,
  /** Minimum interval between two requests to one BMC when the driver owns its transport (ms). */
  minIntervalMs: 0,
} as const;

/** Options of an IPMI driver; every side effect has a default (CONVENTIONS.md 8). */
export interface IpmiDriverOptions {
  /** A transport shared with other drivers (one UDP socket for many BMCs). The driver never closes it. */
  readonly transport?: IpmiTransport;
  readonly timeoutMs?: number;
  readonly retries?: number;
  readonly busyRetries?: number;
  readonly busyBackoffMs?: number;
  readonly sessionIdleMs?: number;
  /** Pacing for a transport the driver creates itself; a shared transport has its own. */
  readonly minIntervalMs?: number;
  /** Privilege to use; operator suffices for power and boot device. Default administrator. */
  readonly privilege?: Privilege;
  /** Cipher suites to consider, best first. Default [17, 3]; anything else is refused. */
  readonly suites?: readonly number[];
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
  readonly random?: RandomBytes;
}

/** IANA enterprise numbers of common BMC vendors, for identify(). */
export const MANUFACTURERS: Readonly<Record<number, string>> = {
  /** IBM. */
  2: 'IBM',
  /** Hewlett Packard Enterprise. */
  11: 'Hewlett Packard Enterprise',
  /** Intel. */
  343: 'Intel',
  /** Dell. */
  674: 'Dell',
  /** MontaVista (OpenIPMI's simulator uses it). */
  4753: 'MontaVista',
  /** Quanta. */
  7244: 'Quanta',
  /** Supermicro. */
  10876: 'Supermicro',
  /** Lenovo. */
  19046: 'Lenovo',
  /** Fujitsu. */
  10368: 'Fujitsu',
};

/** A BMC reached over IPMI 2.0 LAN+. */
export class IpmiDriver implements BmcDriver {
  readonly kind = 'ipmi';
  readonly #target: BmcTarget;
  readonly #options: IpmiDriverOptions;
  readonly #ownsTransport: boolean;
  readonly #transport: IpmiTransport;
  readonly #now: () => number;
  #session: Promise<IpmiSession> | undefined;
  #authFailure: AuthError | undefined;
  #validated = false;
  #closed = false;

  constructor(target: BmcTarget, options: IpmiDriverOptions = {}) {
    this.#target = target;
    this.#options = options;
    this.#ownsTransport = options.transport === undefined;
    this.#transport =
      options.transport ??
      new IpmiTransport({
        minIntervalMs: options.minIntervalMs ?? IPMI_DEFAULTS.minIntervalMs,
        ...(options.now ? { now: options.now } : {}),
        ...(options.sleep ? { sleep: options.sleep } : {}),
      });
    this.#now = options.now ?? Date.now;
  }

  /** Counters of the transport this driver uses (shared with other drivers when the transport is). */
  get counters(): TransportCounters {
    return this.#transport.counters;
  }

  /** Synchronous, offline check: address form, user name and password present and within IPMI limits. */
  validate(): void {
    this.#address();
    const { node, username, password } = this.#target;
    const ulen = Buffer.byteLength(username, 'utf8');
    if (ulen === 0) {
      throw new InputError('E_IPMI_NULL_USER', `node ${node}: the BMC user name is empty`, {
        hint: 'stackctl never logs in as the null (anonymous) user; set a named BMC user for this node.',
        details: { node },
      });
    }
    if (ulen > 16) {
      throw new InputError('E_IPMI_USERNAME_TOO_LONG', `node ${node}: the BMC user name is longer than 16 bytes`, {
        hint: 'IPMI user names have at most 16 bytes.',
        details: { node },
      });
    }
    if (password.empty) {
      throw new InputError('E_IPMI_NO_PASSWORD', `node ${node}: the BMC password is empty`, {
        hint: 'Set the BMC password of this node in the secrets file.',
        details: { node },
      });
    }
    if (Buffer.byteLength(password.reveal(), 'utf8') > 20) {
      throw new InputError('E_IPMI_PASSWORD_TOO_LONG', `node ${node}: the BMC password is longer than 20 bytes`, {
        hint: 'IPMI 2.0 passwords have at most 20 bytes.',
        details: { node },
      });
    }
  }

  #parsed: IpmiAddress | undefined;

  #address(): IpmiAddress {
    this.#parsed ??= parseIpmiAddress(this.#target.node, this.#target.address);
    return this.#parsed;
  }

  /** The address as shown in messages, with the port made explicit. */
  #label(a: IpmiAddress): string {
    return a.port === IPMI_DEFAULT_PORT ? `ipmi://${a.host}` : `ipmi://${a.host}:${a.port}`;
  }

  #openSession(): Promise<IpmiSession> {
    const a = this.#address();
    const o = this.#options;
    const session = IpmiSession.open({
      transport: this.#transport,
      peer: a,
      node: this.#target.node,
      address: this.#label(a),
      username: this.#target.username,
      password: this.#target.password,
      privilege: o.privilege ?? Privilege.ADMINISTRATOR,
      timeoutMs: o.timeoutMs ?? IPMI_DEFAULTS.timeoutMs,
      retries: o.retries ?? IPMI_DEFAULTS.retries,
      busyRetries: o.busyRetries ?? IPMI_DEFAULTS.busyRetries,
      busyBackoffMs: o.busyBackoffMs ?? IPMI_DEFAULTS.busyBackoffMs,
      ...(o.suites ? { suites: o.suites } : {}),
      ...(o.random ? { random: o.random } : {}),
      ...(o.now ? { now: o.now } : {}),
      ...(o.sleep ? { sleep: o.sleep } : {}),
    });
    session.catch((err: unknown) => {
      if (err instanceof AuthError) this.#authFailure = err;
    });
    return session;
  }

  /**
   * Run `fn` in a session: reuse a fresh one, replace a stale one, and retry once if a reused one went silent.
   * With `once` (a command that must not be carried out twice, like a power cycle), `fn` is never run again:
   * when its answers are lost the BMC may well have acted, and a new session would make it act a second time.
   * A reused session is checked with a harmless read first instead, so a BMC that forgot it still gets a fresh one.
   */
  async #withSession<T>(fn: (s: IpmiSession) => Promise<T>, opts: { once?: boolean } = {}): Promise<T> {
    if (!this.#validated) {
      this.validate();
      this.#validated = true;
    }
    if (this.#closed) {
      throw new RemoteError('E_IPMI_DRIVER_CLOSED', `the IPMI driver of node ${this.#target.node} was closed`, {
        hint: 'Create a new driver.',
      });
    }
    if (this.#authFailure) throw this.#authFailure;
    const idleMs = this.#options.sessionIdleMs ?? IPMI_DEFAULTS.sessionIdleMs;
    let reused = false;
    if (this.#session) {
      const current = await this.#session.catch(() => undefined);
      if (current && this.#now() - current.lastUsed < idleMs) reused = true;
      else {
        this.#session = undefined;
        if (current) await current.close();
      }
    }
    this.#session ??= this.#openSession();
    const pending = this.#session;
    let session: IpmiSession;
    try {
      session = await pending;
    } catch (err) {
      if (this.#session === pending) this.#session = undefined;
      throw err;
    }
    if (reused && opts.once) {
      try {
        await session.command('Get Chassis Status', NetFn.CHASSIS, Command.GET_CHASSIS_STATUS, Buffer.alloc(0));
      } catch (err) {
        if (!(err instanceof TimeoutError)) throw err;
        session = await this.#reopen(pending);
      }
      reused = false;
    }
    try {
      return await fn(session);
    } catch (err) {
      if (!(err instanceof TimeoutError) || !reused) throw err;
      // NOTE: a BMC that rebooted or expired our session ignores its packets; one fresh session tells the two apart.
      return fn(await this.#reopen(pending));
    }
  }

  /** A new session in place of `stale` (shared with concurrent callers that replaced it already). */
  #reopen(stale: Promise<IpmiSession>): Promise<IpmiSession> {
    if (this.#session === stale) this.#session = undefined;
    this.#session ??= this.#openSession();
    return this.#session;
  }

  /** ASF presence ping: true when something answering as an IPMI BMC is there (no credentials used). */
  async ping(): Promise<boolean> {
    const a = this.#address();
    return presencePing(this.#transport, a, {
      node: this.#target.node,
      address: this.#label(a),
      timeoutMs: this.#options.timeoutMs ?? IPMI_DEFAULTS.timeoutMs,
      retries: this.#options.retries ?? IPMI_DEFAULTS.retries,
    });
  }

  async powerState(): Promise<PowerState> {
    return this.#withSession(async (s) => {
      const res = await s.command('Get Chassis Status', NetFn.CHASSIS, Command.GET_CHASSIS_STATUS, Buffer.alloc(0));
      const status = decodeChassisStatus(res.data);
      if (!status) throw this.#malformed('Get Chassis Status');
      return status.powerOn ? 'on' : 'off';
    });
  }

  #control(name: string, action: number, opts: { once?: boolean } = {}): Promise<void> {
    return this.#withSession(async (s) => {
      await s.command(name, NetFn.CHASSIS, Command.CHASSIS_CONTROL, Buffer.from([action]), {
        privilege: Privilege.OPERATOR,
      });
    }, opts);
  }

  powerOn(): Promise<void> {
    return this.#control('Chassis Control (power up)', ChassisAction.POWER_UP);
  }

  powerOff(): Promise<void> {
    return this.#control('Chassis Control (power down)', ChassisAction.POWER_DOWN);
  }

  softOff(): Promise<void> {
    return this.#control('Chassis Control (soft shutdown)', ChassisAction.SOFT_SHUTDOWN);
  }

  /**
   * Power cycle, carried out once: retransmissions keep the request's sequence number (rqSeq), from which
   * the BMC recognises a duplicate and answers it without cycling again, and the command is never re-sent
   * in a new session (see #withSession).
   */
  async powerCycle(): Promise<void> {
    try {
      await this.#control('Chassis Control (power cycle)', ChassisAction.POWER_CYCLE, { once: true });
    } catch (err) {
      // NOTE: the spec lets a BMC refuse a power cycle while off (D5h); the operator meant "make it boot".
      if (err instanceof RemoteError && err.code === 'E_IPMI_INVALID_STATE' && (await this.powerState()) === 'off') {
        await this.powerOn();
        return;
      }
      if (err instanceof TimeoutError) {
        throw new TimeoutError(err.code, err.message, {
          hint:
            'The BMC may have power-cycled the machine and only its answer been lost, so stackctl did not send the ' +
            'command again. Look at the machine (power state, console) before asking for another cycle.',
          cause: err,
          details: err.details,
        });
      }
      throw err;
    }
  }

  async setBootDevice(device: BootDevice, options: BootOptions = {}): Promise<void> {
    if (!(device in BOOT_DEVICE_TO_SELECTOR)) {
      throw new InputError('E_IPMI_BOOT_DEVICE', `node ${this.#target.node}: unknown boot device "${String(device)}"`, {
        hint: 'Use pxe or disk.',
      });
    }
    await this.#withSession(async (s) => {
      const set = (name: string, parameter: number, data: Buffer, allow?: ReadonlySet<number>) =>
        s.command(
          `Set System Boot Options (${name})`,
          NetFn.CHASSIS,
          Command.SET_SYSTEM_BOOT_OPTIONS,
          Buffer.concat([Buffer.from([parameter]), data]),
          { specific: BOOT_OPTION_CODES, privilege: Privilege.OPERATOR, ...(allow ? { allow } : {}) },
        );
      // Optional parameters: BMCs that lack them answer 80h (not supported) or CCh; go on without them.
      const optional = new Set([0x80, 0xcc]);
      const lock = await set(
        'set in progress',
        BootParameter.SET_IN_PROGRESS,
        Buffer.from([SetInProgress.IN_PROGRESS]),
        optional,
      );
      const locked = lock.completionCode === 0;
      try {
        // Clear the BIOS acknowledge bit so the firmware reads the new flags at the next boot.
        await set('boot info acknowledge', BootParameter.BOOT_INFO_ACK, Buffer.from([0x01, 0x01]), optional);
        await set(
          'boot flags',
          BootParameter.BOOT_FLAGS,
          encodeBootFlags(device, options.persistent ?? false, options.uefi ?? false),
        );
      } finally {
        if (locked) {
          await set(
            'set complete',
            BootParameter.SET_IN_PROGRESS,
            Buffer.from([SetInProgress.COMPLETE]),
            optional,
          ).catch(() => undefined);
        }
      }
    });
  }

  async getBootDevice(): Promise<BootSetting> {
    return this.#withSession(async (s) => {
      const res = await s.command(
        'Get System Boot Options (boot flags)',
        NetFn.CHASSIS,
        Command.GET_SYSTEM_BOOT_OPTIONS,
        Buffer.from([BootParameter.BOOT_FLAGS, 0x00, 0x00]),
        { specific: BOOT_OPTION_CODES },
      );
      const opt = decodeBootOptionResponse(res.data);
      const flags = opt && opt.parameter === BootParameter.BOOT_FLAGS ? decodeBootFlags(opt.data) : undefined;
      if (!flags) throw this.#malformed('Get System Boot Options');
      return flags;
    });
  }

  async identify(): Promise<BmcIdentity> {
    return this.#withSession(async (s) => {
      const res = await s.command('Get Device ID', NetFn.APP, Command.GET_DEVICE_ID, Buffer.alloc(0));
      const d = decodeDeviceId(res.data);
      if (!d) throw this.#malformed('Get Device ID');
      return {
        manufacturer: MANUFACTURERS[d.manufacturerId] ?? `IANA ${d.manufacturerId}`,
        model: `product 0x${d.productId.toString(16).padStart(4, '0')}`,
        firmwareVersion: `${d.firmwareMajor}.${String(d.firmwareMinor).padStart(2, '0')}`,
        manufacturerId: d.manufacturerId,
        productId: d.productId,
        deviceId: d.deviceId,
        deviceRevision: d.deviceRevision,
        ipmiVersion: d.ipmiVersion,
        cipherSuite: s.suite.id,
      };
    });
  }

  #malformed(command: string): RemoteError {
    return new RemoteError(
      'E_IPMI_MALFORMED_RESPONSE',
      `the BMC of node ${this.#target.node} at ${this.#target.address} sent a malformed answer to ${command}`,
      { hint: 'Update the BMC firmware, or report the BMC model.', details: { node: this.#target.node, command } },
    );
  }

  /** Close the session and, when the driver owns it, the socket. Safe to call twice. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const pending = this.#session;
    this.#session = undefined;
    const session = await pending?.catch(() => undefined);
    await session?.close();
    if (this.#ownsTransport) await this.#transport.close();
  }
}
