import type { Secret } from '../core/secret.js';

/** Power states a BMC can report, normalised across protocols. */
export const PowerState = {
  /** The machine is running. */
  ON: 'on',
  /** The machine is off. */
  OFF: 'off',
} as const;
export type PowerState = (typeof PowerState)[keyof typeof PowerState];

/** Boot devices stackctl sets: the network (PXE) or the first disk. */
export const BootDevice = {
  /** Boot from the network (PXE / iPXE). */
  PXE: 'pxe',
  /** Boot from the local disk. */
  DISK: 'disk',
} as const;
export type BootDevice = (typeof BootDevice)[keyof typeof BootDevice];

/** Options of a boot-device change. */
export interface BootOptions {
  /** Keep the setting for every boot (true) or the next boot only (false, the default). */
  readonly persistent?: boolean;
  /** Boot in UEFI mode (true) or legacy BIOS mode (false, the default). */
  readonly uefi?: boolean;
}

/** What `getBootDevice` reads back. */
export interface BootSetting {
  readonly device: BootDevice | 'none' | 'other';
  readonly persistent: boolean;
  readonly uefi: boolean;
}

/** Identity of the BMC and the system it manages. */
export interface BmcIdentity {
  readonly manufacturer?: string;
  readonly model?: string;
  readonly firmwareVersion?: string;
  /** IPMI: device id / manufacturer id / product id; Redfish: system Id, UUID, serial. */
  readonly [key: string]: string | number | boolean | undefined;
}

/** Everything a driver needs to reach one node's BMC. Built from inventory + secrets. */
export interface BmcTarget {
  /** Node name from the inventory: every error names it. */
  readonly node: string;
  /** `ipmi://host[:port]`, `redfish+https://host/redfish/v1/Systems/ID`, `redfish+http://…` (lab). */
  readonly address: string;
  readonly username: string;
  readonly password: Secret;
  /** Redfish: PEM CA bundle for TLS verification. */
  readonly caBundle?: string;
  /** Redfish: skip TLS verification (explicit operator flag; prints a warning). */
  readonly insecure?: boolean;
  /** Redfish: allow `redfish+http://` to a BMC that is not on loopback (inventory `bmc.insecure_http`). */
  readonly insecureHttp?: boolean;
}

/**
 * One node's BMC, whatever the protocol (CONVENTIONS.md 3-4). Every method
 * rejects with a StackctlError subclass naming the node and the address:
 * AuthError for refused credentials, TimeoutError for an unreachable BMC,
 * RemoteError for anything else the BMC refused.
 */
export interface BmcDriver {
  /** Driver name: `ipmi` or `redfish`. */
  readonly kind: string;
  /** Synchronous, offline check of the target (address form, credentials present). Throws InputError. */
  validate(): void;
  powerState(): Promise<PowerState>;
  powerOn(): Promise<void>;
  /** Hard power off. */
  powerOff(): Promise<void>;
  /** Graceful (ACPI) shutdown request. */
  softOff(): Promise<void>;
  powerCycle(): Promise<void>;
  setBootDevice(device: BootDevice, options?: BootOptions): Promise<void>;
  getBootDevice(): Promise<BootSetting>;
  identify(): Promise<BmcIdentity>;
  /** Release sessions and sockets. Safe to call twice. */
  close(): Promise<void>;
}
