import { Secret } from '../../../src/core/secret.js';
import type { BmcTarget } from '../../../src/bmc/driver.js';
import { RedfishDriver, type RedfishDriverOptions } from '../../../src/bmc/redfish/driver.js';
import { HostLimiters } from '../../../src/bmc/redfish/limiter.js';
import { InMemoryMachine } from '../../../src/lab/vbmc/machine.js';
import { VirtualRedfishBmc, type VirtualRedfishBmcOptions } from '../../../src/lab/vbmc/redfish/server.js';

/** The lab credentials of the virtual BMCs in these tests. */
export const USER = 'admin';
export const PASSWORD = 'pw-Zq81!never-printed';

/** A running virtual BMC over an in-memory machine. */
export interface RunningBmc {
  readonly bmc: VirtualRedfishBmc;
  readonly machine: InMemoryMachine;
  readonly address: string;
}

/** Start a virtual BMC on a free loopback port. */
export async function startBmc(
  options: Partial<Omit<VirtualRedfishBmcOptions, 'machine'>> & { readonly machine?: InMemoryMachine } = {},
): Promise<RunningBmc> {
  const machine = options.machine ?? new InMemoryMachine({ name: 'ctl-0' });
  const bmc = new VirtualRedfishBmc({
    username: USER,
    password: new Secret(PASSWORD),
    ...options,
    machine,
  });
  const { bmcAddress } = await bmc.listen({ host: '127.0.0.1', port: 0 });
  return { bmc, machine, address: bmcAddress };
}

/** Everything a driver said, to check for warnings and for leaks. */
export interface Transcript {
  readonly warnings: string[];
  readonly traces: string[];
}

/** A driver for a BMC with its own limiters and a transcript of its output. */
export function driverFor(
  address: string,
  options: RedfishDriverOptions & {
    readonly node?: string;
    readonly password?: string;
    readonly target?: Partial<BmcTarget>;
  } = {},
): { driver: RedfishDriver; transcript: Transcript } {
  const { node, password, target: overrides, ...driverOptions } = options;
  const transcript: Transcript = { warnings: [], traces: [] };
  const target: BmcTarget = {
    node: node ?? 'ctl-0',
    address,
    username: USER,
    password: new Secret(password ?? PASSWORD),
    ...overrides,
  };
  const driver = new RedfishDriver(target, {
    limiters: new HostLimiters(),
    warn: (line) => transcript.warnings.push(line),
    trace: (line) => transcript.traces.push(line),
    pollIntervalMs: 5,
    ...driverOptions,
  });
  return { driver, transcript };
}

/** A clock that only moves when slept on, so deadlines pass instantly. */
export function fakeClock(): { now: () => number; sleep: (ms: number) => Promise<void>; slept: number[] } {
  let t = 1_000_000;
  const slept: number[] = [];
  return {
    now: () => t,
    sleep: async (ms) => {
      slept.push(ms);
      t += ms;
      await new Promise((resolve) => setImmediate(resolve));
    },
    slept,
  };
}
