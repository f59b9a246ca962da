import type { BootSetting, PowerState } from '../../../bmc/driver.js';
import type { MachineBackend } from '../machine.js';

/**
 * The virtual BMC's own translation tables between the machine backend and
 * Redfish values. Written apart from the client's on purpose: a shared table
 * would hide a mistake on both sides of the wire.
 */

/** Machine power state → Redfish `PowerState`. */
export const MACHINE_POWER_STATE: Readonly<Record<PowerState, string>> = {
  /** Running. */
  on: 'On',
  /** Off. */
  off: 'Off',
};

/** Machine boot device → Redfish `BootSourceOverrideTarget`. */
export const MACHINE_BOOT_TARGET: Readonly<Record<BootSetting['device'], string>> = {
  /** Network boot. */
  pxe: 'Pxe',
  /** First disk. */
  disk: 'Hdd',
  /** No override. */
  none: 'None',
  /** A device Redfish has no name for here: shown as no override. */
  other: 'None',
};

/** Redfish `BootSourceOverrideTarget` values this BMC accepts → machine boot device. */
export const REDFISH_TARGET_DEVICE: Readonly<Record<string, 'pxe' | 'disk' | 'none'>> = {
  /** Clears the override. */
  None: 'none',
  /** Network boot. */
  Pxe: 'pxe',
  /** First disk. */
  Hdd: 'disk',
};

/** Redfish `BootSourceOverrideEnabled` values this BMC accepts. */
export const OVERRIDE_ENABLED_VALUES: readonly string[] = ['Disabled', 'Once', 'Continuous'];

/** Redfish `BootSourceOverrideMode` → machine `uefi` flag. */
export const REDFISH_MODE_UEFI: Readonly<Record<string, boolean>> = {
  /** UEFI firmware interface. */
  UEFI: true,
  /** Legacy BIOS. */
  Legacy: false,
};

/** What one ResetType does to the machine. */
export type ResetEffect = (machine: MachineBackend) => Promise<void>;

/** Redfish `ResetType` → effect on the machine; the keys are the default allowable values. */
export const RESET_EFFECTS: Readonly<Record<string, ResetEffect>> = {
  /** Power on; nothing when already on. */
  On: (m) => m.powerOn(),
  /** Power on regardless of the power button policy. */
  ForceOn: (m) => m.powerOn(),
  /** Cut power at once. */
  ForceOff: (m) => m.powerOff(),
  /** ACPI power button: the OS shuts down. */
  GracefulShutdown: (m) => m.softOff(),
  /** ACPI shutdown, then power on again. */
  GracefulRestart: async (m) => {
    if ((await m.powerState()) === 'off') return;
    await m.softOff();
    await m.powerOn();
  },
  /** Hard reset of a running machine; an off machine stays off, as on most BMCs. */
  ForceRestart: (m) => m.reset(),
  /** Off then on; an off machine is simply powered on. */
  PowerCycle: async (m) => {
    if ((await m.powerState()) === 'on') await m.powerOff();
    await m.powerOn();
  },
  /** A short press of the power button: on when off, ACPI shutdown when on. */
  PushPowerButton: async (m) => ((await m.powerState()) === 'on' ? m.softOff() : m.powerOn()),
};
