import { BootDevice, PowerState, type BootSetting } from '../driver.js';

/**
 * Translation tables between Redfish values and stackctl's (CONVENTIONS.md 5).
 * Tests iterate every entry, so adding a row is enough to support a value.
 */

/** Redfish `ComputerSystem.PowerState` → our power state. Transitional states count as where they lead. */
export const REDFISH_POWER_STATE: Readonly<Record<string, PowerState>> = {
  /** The system is powered on. */
  On: PowerState.ON,
  /** The system is powered off (standby power only). */
  Off: PowerState.OFF,
  /** Power-on in progress: reported as on, but a read-back keeps waiting. */
  PoweringOn: PowerState.ON,
  /** Power-off in progress: reported as off, but a read-back keeps waiting. */
  PoweringOff: PowerState.OFF,
  /** Powered but halted (hypervisor pause): the machine still holds power. */
  Paused: PowerState.ON,
};

/** Redfish power states that are still moving; a read-back after a Reset does not stop on them. */
export const REDFISH_TRANSITIONAL_POWER_STATES: ReadonlySet<string> = new Set(['PoweringOn', 'PoweringOff']);

/** The power actions a BmcDriver offers. */
export const PowerAction = {
  /** Power on. */
  ON: 'on',
  /** Hard power off. */
  OFF: 'off',
  /** ACPI (graceful) shutdown request. */
  SOFT_OFF: 'soft-off',
  /** Off then on (a hard reset when only that is offered). */
  CYCLE: 'cycle',
} as const;
export type PowerAction = (typeof PowerAction)[keyof typeof PowerAction];

/** How one power action is sent as a `ComputerSystem.Reset` and what it should lead to. */
export interface ResetPlan {
  /** ResetType values in order of preference; the first one the system allows is used. */
  readonly candidates: readonly string[];
  /** Used when the system does not advertise its allowable values: the most widely implemented one. */
  readonly fallback: string;
  /** The power state a read-back must see once the action has taken effect. */
  readonly expect: PowerState;
}

/** Our power action → Redfish `ResetType`. */
export const POWER_ACTION_RESET: Readonly<Record<PowerAction, ResetPlan>> = {
  /** `On`, or `ForceOn` on services that only offer that. */
  [PowerAction.ON]: { candidates: ['On', 'ForceOn'], fallback: 'On', expect: PowerState.ON },
  /** Immediate removal of power. */
  [PowerAction.OFF]: { candidates: ['ForceOff'], fallback: 'ForceOff', expect: PowerState.OFF },
  /** ACPI power button: the OS shuts down by itself. */
  [PowerAction.SOFT_OFF]: { candidates: ['GracefulShutdown'], fallback: 'GracefulShutdown', expect: PowerState.OFF },
  /**
   * `PowerCycle` matches IPMI's chassis power cycle exactly, but many services
   * only offer `ForceRestart`; that one is the fallback as nearly all have it.
   */
  [PowerAction.CYCLE]: { candidates: ['PowerCycle', 'ForceRestart'], fallback: 'ForceRestart', expect: PowerState.ON },
};

/** Our boot device → Redfish `Boot.BootSourceOverrideTarget`. */
export const BOOT_DEVICE_TARGET: Readonly<Record<BootDevice, string>> = {
  /** Network boot. */
  [BootDevice.PXE]: 'Pxe',
  /** The system's default hard disk. */
  [BootDevice.DISK]: 'Hdd',
};

/** Redfish `BootSourceOverrideTarget` → what getBootDevice reports; any value not listed reads as `other`. */
export const REDFISH_BOOT_TARGET: Readonly<Record<string, BootSetting['device']>> = {
  /** No override: the firmware's own boot order applies. */
  None: 'none',
  /** Network boot. */
  Pxe: 'pxe',
  /** The default hard disk. */
  Hdd: 'disk',
  /** CD/DVD (virtual media): not a device stackctl sets. */
  Cd: 'other',
  /** USB media. */
  Usb: 'other',
  /** Firmware setup screen. */
  BiosSetup: 'other',
  /** UEFI HTTP boot. */
  UefiHttp: 'other',
  /** A UEFI device path given in UefiTargetBootSourceOverride. */
  UefiTarget: 'other',
};

/** `persistent` flag → Redfish `Boot.BootSourceOverrideEnabled`. */
export const BOOT_PERSISTENCE = {
  /** The next boot only; the BMC then falls back to `Disabled`. */
  once: 'Once',
  /** Every boot until changed. */
  persistent: 'Continuous',
} as const;

/** Redfish `BootSourceOverrideEnabled` → whether an override is active and whether it persists. */
export const REDFISH_BOOT_ENABLED: Readonly<
  Record<string, { readonly active: boolean; readonly persistent: boolean }>
> = {
  /** No override in force. */
  Disabled: { active: false, persistent: false },
  /** Override for the next boot only. */
  Once: { active: true, persistent: false },
  /** Override for every boot. */
  Continuous: { active: true, persistent: true },
};

/** `uefi` flag → Redfish `Boot.BootSourceOverrideMode`. */
export const BOOT_MODE = {
  /** UEFI firmware interface. */
  uefi: 'UEFI',
  /** Legacy PC BIOS. */
  legacy: 'Legacy',
} as const;

/** Redfish `BootSourceOverrideMode` → our `uefi` flag. */
export const REDFISH_BOOT_MODE: Readonly<Record<string, boolean>> = {
  /** UEFI firmware interface. */
  UEFI: true,
  /** Legacy PC BIOS. */
  Legacy: false,
};

/** Choose the ResetType for an action given what the system advertises (undefined: not advertised). */
export function chooseResetType(action: PowerAction, allowable: readonly string[] | undefined): string | undefined {
  const plan = POWER_ACTION_RESET[action];
  if (!allowable) return plan.fallback;
  return plan.candidates.find((c) => allowable.includes(c));
}

/** Read a boot setting back from the three Redfish `Boot` properties. */
export function bootSettingFrom(target?: string, enabled?: string, mode?: string): BootSetting {
  const state = (enabled !== undefined ? REDFISH_BOOT_ENABLED[enabled] : undefined) ?? {
    active: target !== undefined && target !== 'None',
    persistent: false,
  };
  const device = !state.active || target === undefined ? 'none' : (REDFISH_BOOT_TARGET[target] ?? 'other');
  return { device, persistent: state.persistent, uefi: (mode !== undefined && REDFISH_BOOT_MODE[mode]) || false };
}
