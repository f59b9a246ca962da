import { parseBmcAddress } from '../core/bmc-address.js';
import type { BmcDriver, BmcTarget } from './driver.js';
import { IpmiDriver, type IpmiDriverOptions } from './ipmi/driver.js';
import type { IpmiTransport } from './ipmi/transport.js';
import { RedfishDriver, type RedfishDriverOptions } from './redfish/driver.js';

/** Options passed to the driver of each protocol. */
export interface DriverOptions {
  /** One UDP socket for every IPMI BMC of a command. */
  readonly ipmiTransport?: IpmiTransport;
  readonly ipmi?: Omit<IpmiDriverOptions, 'transport'>;
  readonly redfish?: RedfishDriverOptions;
}

/** Drivers by the `driver` of an address scheme (core/bmc-address.ts BMC_SCHEMES). */
const FACTORIES: Readonly<Record<'ipmi' | 'redfish', (t: BmcTarget, o: DriverOptions) => BmcDriver>> = {
  ipmi: (t, o) => new IpmiDriver(t, { ...o.ipmi, ...(o.ipmiTransport ? { transport: o.ipmiTransport } : {}) }),
  redfish: (t, o) => new RedfishDriver(t, o.redfish),
};

/**
 * Pick the driver from the address scheme (CONVENTIONS.md 4). An unknown
 * scheme throws an InputError naming the address and the known schemes.
 */
export function createDriver(target: BmcTarget, options: DriverOptions = {}): BmcDriver {
  return FACTORIES[parseBmcAddress(target.address).driver](target, options);
}
