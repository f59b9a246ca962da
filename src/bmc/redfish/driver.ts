import { setTimeout as delay } from 'node:timers/promises';
import { isLoopbackHost } from '../../core/bmc-address.js';
import { InputError } from '../../core/errors.js';
import type { BmcDriver, BmcIdentity, BmcTarget, BootDevice, BootOptions, BootSetting, PowerState } from '../driver.js';
import { parseRedfishAddress, type RedfishAddress } from './address.js';
import { createTransport, type RequestFn, type Transport } from './http.js';
import { sharedHostLimiters, type HostLimiters } from './limiter.js';
import { PowerAction } from './mappings.js';
import { RedfishSession } from './session.js';
import { RedfishSystem } from './system.js';
import { loadCaBundle, probeCertificate, readTextFile, type ProbeCertificate, type ReadTextFile } from './tls.js';

/** Defaults of the driver's timing knobs. */
export const REDFISH_DEFAULTS = {
  /** One HTTP exchange (connect, TLS, answer); BMC web servers are slow but not this slow. */
  timeoutMs: 15_000,
  /** A hard power action shows in PowerState within this time on real servers. */
  powerDeadlineMs: 60_000,
  /** An operating system gets this long to shut down after a graceful request. */
  softOffDeadlineMs: 300_000,
  /** Pause between two PowerState reads while waiting. */
  pollIntervalMs: 1_000,
  /** Busy (503/429) answers in a row that are waited out. */
  maxBusyRetries: 3,
  /** The longest single Retry-After wait honoured. */
  maxRetryAfterMs: 30_000,
} as const;

/** Side effects and knobs of a RedfishDriver; every field has a default (CONVENTIONS.md 8). */
export interface RedfishDriverOptions {
  /** Replaces the node:http(s) transport (then `caBundle`/`insecure` are the caller's business). */
  readonly request?: RequestFn;
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
  /** Operator-facing warnings (plain HTTP, TLS verification off). Default: stderr. */
  readonly warn?: (line: string) => void;
  /** Debug lines, one per request (method, path, status). Default: dropped. */
  readonly trace?: (line: string) => void;
  /** Per-BMC request limiters; default shared by the whole process. */
  readonly limiters?: HostLimiters;
  readonly readFile?: ReadTextFile;
  readonly probeCertificate?: ProbeCertificate;
  readonly timeoutMs?: number;
  readonly powerDeadlineMs?: number;
  readonly softOffDeadlineMs?: number;
  readonly pollIntervalMs?: number;
  readonly maxBusyRetries?: number;
  readonly maxRetryAfterMs?: number;
}

interface Connection {
  readonly session: RedfishSession;
  readonly system: RedfishSystem;
  readonly transport: Transport | undefined;
}

/**
 * A node's BMC spoken to over Redfish. Nothing touches the network until the
 * first operation; `validate()` is synchronous and offline.
 */
export class RedfishDriver implements BmcDriver {
  readonly kind = 'redfish';
  readonly target: BmcTarget;
  readonly #options: RedfishDriverOptions;
  readonly #warn: (line: string) => void;
  #connection: Connection | undefined;

  constructor(target: BmcTarget, options: RedfishDriverOptions = {}) {
    this.target = target;
    this.#options = options;
    this.#warn = options.warn ?? ((line) => process.stderr.write(`warning: ${line}\n`));
  }

  /** Check the address form, the credentials and the CA bundle; throws InputError. */
  validate(): void {
    this.#check();
  }

  /** Sessions this driver opened on the BMC so far (diagnostics). */
  get sessionsCreated(): number {
    return this.#connection?.session.sessionsCreated ?? 0;
  }

  async powerState(): Promise<PowerState> {
    return await this.#connect().system.powerState();
  }
  async powerOn(): Promise<void> {
    return await this.#connect().system.setPower(PowerAction.ON);
  }
  async powerOff(): Promise<void> {
    return await this.#connect().system.setPower(PowerAction.OFF);
  }
  async softOff(): Promise<void> {
    return await this.#connect().system.setPower(PowerAction.SOFT_OFF);
  }
  async powerCycle(): Promise<void> {
    return await this.#connect().system.setPower(PowerAction.CYCLE);
  }
  async setBootDevice(device: BootDevice, options?: BootOptions): Promise<void> {
    return await this.#connect().system.setBootDevice(device, options);
  }
  async getBootDevice(): Promise<BootSetting> {
    return await this.#connect().system.getBootDevice();
  }
  async identify(): Promise<BmcIdentity> {
    return await this.#connect().system.identify();
  }

  /** Delete the session and drop pooled sockets; a later call logs in again. */
  async close(): Promise<void> {
    const connection = this.#connection;
    this.#connection = undefined;
    if (!connection) return;
    try {
      await connection.session.close();
    } finally {
      connection.transport?.close();
    }
  }

  #check(): { address: RedfishAddress; ca: string | undefined } {
    const { node, username, password, caBundle, insecure } = this.target;
    const address = parseRedfishAddress(node, this.target.address);
    if (address.protocol === 'http' && !isLoopbackHost(address.host) && !this.target.insecureHttp) {
      throw new InputError(
        'E_REDFISH_PLAIN_HTTP',
        `node ${node}: ${address.raw} would send the BMC credentials in clear text to ${address.host}`,
        {
          hint:
            'Use redfish+https. If this BMC truly has no HTTPS, set insecure_http: true in its inventory bmc entry; ' +
            'anyone on the path can then read the BMC password.',
          details: { node, address: address.raw },
        },
      );
    }
    if (username.trim() === '' || password.empty) {
      throw new InputError('E_REDFISH_CREDENTIALS', `node ${node}: the Redfish BMC needs a user name and a password`, {
        hint: "Set the node's bmc credentials entry in the secrets file.",
        details: { node, address: address.raw },
      });
    }
    const ca =
      address.protocol === 'https' && caBundle !== undefined && !insecure
        ? loadCaBundle(node, caBundle, this.#options.readFile ?? readTextFile)
        : undefined;
    return { address, ca };
  }

  #connect(): Connection {
    if (this.#connection) return this.#connection;
    const { address, ca } = this.#check();
    const o = this.#options;
    const { node } = this.target;
    if (address.protocol === 'http') {
      this.#warn(
        `node ${node}: Redfish over plain HTTP (${address.raw}): credentials and session tokens cross the network unencrypted; use it in a lab only`,
      );
    } else if (this.target.insecure) {
      this.#warn(
        `node ${node}: TLS certificate verification is off for ${address.raw} (insecure); anyone on the path can impersonate this BMC`,
      );
    }
    const limiters = o.limiters ?? sharedHostLimiters;
    const transport =
      o.request === undefined
        ? createTransport({
            maxSockets: limiters.perHost,
            insecure: this.target.insecure ?? false,
            ...(ca ? { ca } : {}),
          })
        : undefined;
    const now = o.now ?? Date.now;
    const sleep = o.sleep ?? ((ms: number) => delay(ms));
    const peer = { node, address: address.raw };
    const session = new RedfishSession({
      peer,
      origin: address.origin,
      host: address.host,
      port: address.port,
      username: this.target.username,
      password: this.target.password,
      request: o.request ?? (transport as Transport).request,
      limiter: limiters.for(address.hostKey),
      now,
      sleep,
      timeoutMs: o.timeoutMs ?? REDFISH_DEFAULTS.timeoutMs,
      maxBusyRetries: o.maxBusyRetries ?? REDFISH_DEFAULTS.maxBusyRetries,
      maxRetryAfterMs: o.maxRetryAfterMs ?? REDFISH_DEFAULTS.maxRetryAfterMs,
      probeCertificate: o.probeCertificate ?? probeCertificate,
      trace: o.trace ?? (() => undefined),
      warn: this.#warn,
    });
    const system = new RedfishSystem(
      session,
      address.systemPath,
      peer,
      {
        now,
        sleep,
        powerDeadlineMs: o.powerDeadlineMs ?? REDFISH_DEFAULTS.powerDeadlineMs,
        softOffDeadlineMs: o.softOffDeadlineMs ?? REDFISH_DEFAULTS.softOffDeadlineMs,
        pollIntervalMs: o.pollIntervalMs ?? REDFISH_DEFAULTS.pollIntervalMs,
      },
      this.#warn,
    );
    this.#connection = { session, system, transport };
    return this.#connection;
  }
}
