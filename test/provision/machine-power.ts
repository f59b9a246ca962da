/**
 * A lab machine seen through the BMC calls the inspect workflow makes: the
 * virtual BMC servers translate the same calls into these methods.
 */
import type { BootDevice, BootOptions } from '../../src/bmc/driver.js';
import type { MachineBackend } from '../../src/lab/vbmc/machine.js';
import type { InspectPower } from '../../src/provision/inspect.js';

/** The workflow's power interface on top of a machine backend (QEMU or in memory). */
export function machinePower(machine: MachineBackend): InspectPower {
  return {
    powerState: () => machine.powerState(),
    powerOn: () => machine.powerOn(),
    powerOff: () => machine.powerOff(),
    setBootDevice: (device: BootDevice, options?: BootOptions) =>
      machine.setBootDevice(device, options?.persistent ?? false, options?.uefi ?? false),
  };
}
