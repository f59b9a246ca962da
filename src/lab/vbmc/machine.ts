import type { BootDevice, BootSetting, PowerState } from '../../bmc/driver.js';

/**
 * The machine behind a virtual BMC: a QEMU VM (via QMP), a container node, or
 * an in-memory machine for tests. Virtual BMC servers (IPMI and Redfish)
 * translate protocol requests into these calls and nothing else.
 */
export interface MachineBackend {
  /** A stable name, used in logs. */
  readonly name: string;
  powerState(): Promise<PowerState>;
  powerOn(): Promise<void>;
  powerOff(): Promise<void>;
  /** Graceful shutdown request (ACPI power button). */
  softOff(): Promise<void>;
  /** Hard reset of a running machine. */
  reset(): Promise<void>;
  setBootDevice(device: BootDevice | 'none', persistent: boolean, uefi: boolean): Promise<void>;
  getBootDevice(): Promise<BootSetting>;
}

/** A change of an in-memory machine's power: switched on, switched off, or reset while on. */
export type PowerTransition = 'on' | 'off' | 'reset';

/** Options of an in-memory machine. */
export interface InMemoryMachineOptions {
  readonly name: string;
  readonly power?: PowerState;
  readonly boot?: BootSetting;
}

/**
 * A machine that exists only in memory: power and boot device are fields. It
 * is a first-class backend (CONVENTIONS.md 15): tests and benchmarks use it to
 * drive real protocol servers without QEMU. A one-time boot setting falls back
 * to the persistent one at the next power-on, as real firmware does.
 */
export class InMemoryMachine implements MachineBackend {
  readonly name: string;
  #power: PowerState;
  #boot: BootSetting;
  #persistentBoot: BootSetting;
  /** How many times the machine was powered on or reset (a boot happened). */
  boots = 0;
  /** The boot device used by the last boot. */
  lastBootDevice: BootSetting['device'] = 'none';
  /** Every power change, in order (a power cycle shows as `off`, `on`); requests that change nothing are not listed. */
  readonly transitions: PowerTransition[] = [];

  constructor(options: InMemoryMachineOptions) {
    this.name = options.name;
    this.#power = options.power ?? 'off';
    this.#boot = options.boot ?? { device: 'disk', persistent: true, uefi: false };
    this.#persistentBoot = this.#boot.persistent ? this.#boot : { device: 'disk', persistent: true, uefi: false };
  }

  async powerState(): Promise<PowerState> {
    return this.#power;
  }
  async powerOn(): Promise<void> {
    if (this.#power === 'on') return;
    this.#power = 'on';
    this.transitions.push('on');
    this.#boot_();
  }
  async powerOff(): Promise<void> {
    if (this.#power === 'on') this.transitions.push('off');
    this.#power = 'off';
  }
  async softOff(): Promise<void> {
    await this.powerOff();
  }
  async reset(): Promise<void> {
    if (this.#power === 'off') return;
    this.transitions.push('reset');
    this.#boot_();
  }
  async setBootDevice(device: BootDevice | 'none', persistent: boolean, uefi: boolean): Promise<void> {
    this.#boot = { device, persistent, uefi };
    if (persistent) this.#persistentBoot = this.#boot;
  }
  async getBootDevice(): Promise<BootSetting> {
    return this.#boot;
  }
  #boot_(): void {
    this.boots += 1;
    this.lastBootDevice = this.#boot.device;
    if (!this.#boot.persistent) this.#boot = this.#persistentBoot;
  }
}
