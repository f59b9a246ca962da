import { RemoteError } from '../../core/errors.js';
import type { BmcIdentity, BootDevice, BootOptions, BootSetting, PowerState } from '../driver.js';
import { RedfishStatusError, seconds, type Peer } from './faults.js';
import {
  BOOT_DEVICE_TARGET,
  BOOT_MODE,
  BOOT_PERSISTENCE,
  bootSettingFrom,
  chooseResetType,
  POWER_ACTION_RESET,
  PowerAction,
  REDFISH_POWER_STATE,
  REDFISH_TRANSITIONAL_POWER_STATES,
} from './mappings.js';
import { actionInfoAllowable, readSystem, stringAt, type SystemView } from './resources.js';
import type { RedfishSession } from './session.js';

/** Timing of power read-backs. */
export interface PowerTiming {
  readonly now: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  /** How long a hard power action may take to show in PowerState. */
  readonly powerDeadlineMs: number;
  /** How long a graceful shutdown may take (the OS shuts down first). */
  readonly softOffDeadlineMs: number;
  /** Pause between two read-backs. */
  readonly pollIntervalMs: number;
}

/** The operations on one ComputerSystem resource. */
export class RedfishSystem {
  readonly #session: RedfishSession;
  readonly #path: string;
  readonly #peer: Peer;
  readonly #timing: PowerTiming;
  readonly #warn: (line: string) => void;

  constructor(
    session: RedfishSession,
    systemPath: string,
    peer: Peer,
    timing: PowerTiming,
    warn: (line: string) => void,
  ) {
    this.#session = session;
    this.#path = systemPath;
    this.#peer = peer;
    this.#timing = timing;
    this.#warn = warn;
  }

  /** GET the system resource. */
  async read(): Promise<SystemView> {
    const res = await this.#session.call('GET', this.#path);
    return readSystem(res.json, this.#path, res.headers['etag']);
  }

  /** The current power state. */
  async powerState(): Promise<PowerState> {
    return this.#power(await this.read());
  }

  /**
   * Run a power action and wait until PowerState shows it. Re-entrant: an
   * action whose end state already holds sends nothing.
   */
  async setPower(action: PowerAction): Promise<void> {
    const system = await this.read();
    const current = this.#power(system);
    const settled = !REDFISH_TRANSITIONAL_POWER_STATES.has(system.powerState ?? '');
    let effective = action;
    if (settled && current === 'on' && action === PowerAction.ON) return;
    if (settled && current === 'off' && (action === PowerAction.OFF || action === PowerAction.SOFT_OFF)) return;
    // A cycle of a machine that is off means "boot it": what IPMI BMCs and Ironic's reboot do.
    if (current === 'off' && action === PowerAction.CYCLE) effective = PowerAction.ON;

    const allowable = system.reset.allowable ?? (await this.#allowableFromActionInfo(system.reset.actionInfo));
    const resetType = chooseResetType(effective, allowable);
    if (resetType === undefined) {
      throw new RemoteError(
        'E_REDFISH_RESET_UNSUPPORTED',
        `node ${this.#peer.node}: the BMC at ${this.#peer.address} offers no ResetType for "${effective}" (it allows ${allowable?.join(', ') || 'none'})`,
        {
          hint: `stackctl needs one of ${POWER_ACTION_RESET[effective].candidates.join(', ')}; check the BMC firmware and licence.`,
          details: { node: this.#peer.node, address: this.#peer.address, action: effective, allowable },
        },
      );
    }
    await this.#session.call('POST', system.reset.target, { ResetType: resetType });
    const deadline = effective === PowerAction.SOFT_OFF ? this.#timing.softOffDeadlineMs : this.#timing.powerDeadlineMs;
    await this.#waitForPower(POWER_ACTION_RESET[effective].expect, resetType, deadline);
  }

  /** Set the boot source override; sends If-Match when the service gave an ETag and retries once on 412. */
  async setBootDevice(device: BootDevice, options: BootOptions = {}): Promise<void> {
    const system = await this.read();
    const target = BOOT_DEVICE_TARGET[device];
    const { allowedTargets, allowedModes } = system.boot;
    if (allowedTargets && !allowedTargets.includes(target)) {
      throw new RemoteError(
        'E_REDFISH_BOOT_UNSUPPORTED',
        `node ${this.#peer.node}: the BMC at ${this.#peer.address} does not offer boot target ${target} (it allows ${allowedTargets.join(', ')})`,
        { hint: 'Enable network boot / the disk in the firmware setup.', details: { node: this.#peer.node, target } },
      );
    }
    const boot: Record<string, string> = {
      BootSourceOverrideTarget: target,
      BootSourceOverrideEnabled: options.persistent ? BOOT_PERSISTENCE.persistent : BOOT_PERSISTENCE.once,
    };
    const mode = options.uefi ? BOOT_MODE.uefi : BOOT_MODE.legacy;
    if (system.boot.mode !== undefined || allowedModes !== undefined) {
      if (allowedModes && !allowedModes.includes(mode)) {
        throw new RemoteError(
          'E_REDFISH_BOOT_UNSUPPORTED',
          `node ${this.#peer.node}: the BMC at ${this.#peer.address} does not offer boot mode ${mode} (it allows ${allowedModes.join(', ')})`,
          { hint: 'Set the node boot mode the firmware supports.', details: { node: this.#peer.node, mode } },
        );
      }
      boot['BootSourceOverrideMode'] = mode;
    } else {
      this.#warn(
        `node ${this.#peer.node}: the BMC does not expose BootSourceOverrideMode; the firmware keeps its mode`,
      );
    }
    const patch = (etag: string | undefined): Promise<unknown> =>
      this.#session.call('PATCH', this.#path, { Boot: boot }, etag !== undefined ? { 'If-Match': etag } : {});
    try {
      await patch(system.etag);
    } catch (err) {
      if (!(err instanceof RedfishStatusError) || err.status !== 412) throw err;
      // The resource changed between our read and our write (another client, or the BMC itself): read again, once.
      const fresh = await this.read();
      try {
        await patch(fresh.etag);
      } catch (again) {
        if (!(again instanceof RedfishStatusError) || again.status !== 412) throw again;
        throw new RemoteError(
          'E_REDFISH_PRECONDITION',
          `node ${this.#peer.node}: the system at ${this.#peer.address} kept changing while its boot device was set (HTTP 412 twice)`,
          {
            hint: 'Another client is changing this system at the same time; stop it and try again.',
            details: { node: this.#peer.node, address: this.#peer.address },
            cause: again,
          },
        );
      }
    }
  }

  /** Read the boot source override back. */
  async getBootDevice(): Promise<BootSetting> {
    const { boot } = await this.read();
    return bootSettingFrom(boot.target, boot.enabled, boot.mode);
  }

  /** Manufacturer, model, serial, UUID and BIOS version of the system, and the BMC firmware version. */
  async identify(): Promise<BmcIdentity> {
    const system = await this.read();
    let firmwareVersion: string | undefined;
    if (system.managedBy !== undefined) {
      const manager = await this.#session.call('GET', system.managedBy);
      firmwareVersion = stringAt(manager.json, 'FirmwareVersion');
    }
    const identity: Record<string, string> = {};
    const fields: ReadonlyArray<[string, string | undefined]> = [
      ['manufacturer', system.manufacturer],
      ['model', system.model],
      ['serialNumber', system.serialNumber],
      ['uuid', system.uuid],
      ['biosVersion', system.biosVersion],
      ['systemId', system.id],
      ['firmwareVersion', firmwareVersion],
    ];
    for (const [key, value] of fields) if (value !== undefined) identity[key] = value;
    return identity;
  }

  #power(system: SystemView): PowerState {
    const mapped = system.powerState !== undefined ? REDFISH_POWER_STATE[system.powerState] : undefined;
    if (mapped === undefined) {
      throw new RemoteError(
        'E_REDFISH_POWER_UNKNOWN',
        `node ${this.#peer.node}: the BMC at ${this.#peer.address} reports power state ${JSON.stringify(system.powerState ?? null)}`,
        {
          hint: `Known states: ${Object.keys(REDFISH_POWER_STATE).join(', ')}. The BMC may still be starting; try again.`,
          details: { node: this.#peer.node, address: this.#peer.address, powerState: system.powerState },
        },
      );
    }
    return mapped;
  }

  async #allowableFromActionInfo(path: string | undefined): Promise<readonly string[] | undefined> {
    if (path === undefined) return undefined;
    const info = await this.#session.call('GET', path);
    return actionInfoAllowable(info.json, 'ResetType');
  }

  /** Poll PowerState until it settles on `expect`; a BMC that said 2xx and did nothing fails at the deadline. */
  async #waitForPower(expect: PowerState, resetType: string, deadlineMs: number): Promise<void> {
    const { now, sleep, pollIntervalMs } = this.#timing;
    const start = now();
    for (;;) {
      const system = await this.read();
      const state = system.powerState;
      if (
        state !== undefined &&
        !REDFISH_TRANSITIONAL_POWER_STATES.has(state) &&
        REDFISH_POWER_STATE[state] === expect
      ) {
        return;
      }
      const left = deadlineMs - (now() - start);
      if (left <= 0) {
        throw new RemoteError(
          'E_REDFISH_POWER_UNCHANGED',
          `node ${this.#peer.node}: the BMC at ${this.#peer.address} accepted ResetType ${resetType} but PowerState is still ${state ?? 'unknown'} after ${seconds(deadlineMs)} (expected ${expect})`,
          {
            hint: 'The BMC acknowledged the request without acting on it. Check its event log; a BMC reset or firmware update often cures this, then run the command again.',
            details: { node: this.#peer.node, address: this.#peer.address, resetType, powerState: state, expect },
          },
        );
      }
      await sleep(Math.min(pollIntervalMs, left));
    }
  }
}
