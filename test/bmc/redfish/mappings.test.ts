import { describe, expect, it } from 'vitest';
import { BootDevice, PowerState } from '../../../src/bmc/driver.js';
import {
  BOOT_DEVICE_TARGET,
  BOOT_MODE,
  BOOT_PERSISTENCE,
  bootSettingFrom,
  chooseResetType,
  POWER_ACTION_RESET,
  PowerAction,
  REDFISH_BOOT_ENABLED,
  REDFISH_BOOT_MODE,
  REDFISH_BOOT_TARGET,
  REDFISH_POWER_STATE,
  REDFISH_TRANSITIONAL_POWER_STATES,
} from '../../../src/bmc/redfish/mappings.js';

const OUR_POWER_STATES: ReadonlySet<string> = new Set(Object.values(PowerState));

describe('Redfish mapping tables', () => {
  it.each(Object.entries(REDFISH_POWER_STATE))('maps Redfish PowerState %s to a known state (%s)', (redfish, ours) => {
    expect(OUR_POWER_STATES.has(ours)).toBe(true);
    // A settled state maps to the state of the same name; transitional ones are flagged.
    if (!REDFISH_TRANSITIONAL_POWER_STATES.has(redfish) && redfish !== 'Paused') {
      expect(ours).toBe(redfish.toLowerCase());
    }
  });

  it('lists every transitional state in the power-state table', () => {
    for (const state of REDFISH_TRANSITIONAL_POWER_STATES) expect(REDFISH_POWER_STATE).toHaveProperty(state);
  });

  it.each(Object.entries(POWER_ACTION_RESET))(
    'plans action %s with a fallback among its candidates',
    (action, plan) => {
      expect(Object.values(PowerAction)).toContain(action);
      expect(plan.candidates.length).toBeGreaterThan(0);
      expect(plan.candidates).toContain(plan.fallback);
      expect(OUR_POWER_STATES.has(plan.expect)).toBe(true);
      // Each candidate is picked when it is the only one allowed; the fallback when nothing is advertised.
      for (const candidate of plan.candidates)
        expect(chooseResetType(action as PowerAction, [candidate])).toBe(candidate);
      expect(chooseResetType(action as PowerAction, undefined)).toBe(plan.fallback);
      expect(chooseResetType(action as PowerAction, ['Nmi'])).toBeUndefined();
      // The first candidate wins when all are allowed.
      expect(chooseResetType(action as PowerAction, [...plan.candidates].reverse())).toBe(plan.candidates[0]);
    },
  );

  it('has a reset plan for every power action', () => {
    expect(Object.keys(POWER_ACTION_RESET).sort()).toEqual(Object.values(PowerAction).sort());
  });

  it.each(Object.entries(BOOT_DEVICE_TARGET))('round-trips boot device %s through target %s', (device, target) => {
    expect(Object.values(BootDevice)).toContain(device);
    expect(REDFISH_BOOT_TARGET[target]).toBe(device);
  });

  it.each(Object.entries(REDFISH_BOOT_TARGET))('reads boot target %s as %s', (target, device) => {
    expect(bootSettingFrom(target, 'Continuous', 'UEFI')).toEqual({
      device: target === 'None' ? 'none' : device,
      persistent: true,
      uefi: true,
    });
  });

  it('reads an unknown boot target as other', () => {
    expect(bootSettingFrom('Floppy', 'Once', 'Legacy')).toEqual({ device: 'other', persistent: false, uefi: false });
  });

  it.each(Object.entries(REDFISH_BOOT_ENABLED))('reads BootSourceOverrideEnabled %s', (enabled, state) => {
    const setting = bootSettingFrom('Pxe', enabled, 'Legacy');
    expect(setting.device).toBe(state.active ? 'pxe' : 'none');
    expect(setting.persistent).toBe(state.persistent);
  });

  it.each(Object.entries(BOOT_PERSISTENCE))('writes persistence %s as an active override %s', (_key, enabled) => {
    expect(REDFISH_BOOT_ENABLED[enabled]?.active).toBe(true);
    expect(REDFISH_BOOT_ENABLED[enabled]?.persistent).toBe(_key === 'persistent');
  });

  it.each(Object.entries(BOOT_MODE))('round-trips boot mode %s through %s', (key, mode) => {
    expect(REDFISH_BOOT_MODE[mode]).toBe(key === 'uefi');
  });
});
