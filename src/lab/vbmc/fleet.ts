import { parseBmcAddress } from '../../core/bmc-address.js';
import { InputError } from '../../core/errors.js';
import type { Secret } from '../../core/secret.js';
import { IpmiBmcServer } from './ipmi/server.js';
import { InMemoryMachine, type MachineBackend } from './machine.js';
import { VirtualRedfishBmc } from './redfish/server.js';

/** One virtual BMC to run. */
export interface VbmcSpec {
  readonly node: string;
  /** The node's inventory address: ipmi://127.0.0.1:PORT or redfish+http(s)://127.0.0.1:PORT/redfish/v1/Systems/ID. */
  readonly address: string;
  readonly username: string;
  readonly password: Secret;
  /** The machine it controls; an in-memory machine by default. */
  readonly machine?: MachineBackend;
}

/** A running virtual BMC. */
export interface RunningVbmc {
  readonly node: string;
  readonly address: string;
  readonly driver: 'ipmi' | 'redfish';
  readonly machine: MachineBackend;
  close(): Promise<void>;
}

/**
 * Start many virtual BMCs in this process, each on its own port with its own
 * credentials, at exactly the addresses the inventory names. On a failure
 * (a port in use) the ones already started are stopped again.
 */
export async function startFleet(specs: readonly VbmcSpec[]): Promise<RunningVbmc[]> {
  const running: RunningVbmc[] = [];
  try {
    for (const spec of specs) running.push(await startOne(spec));
  } catch (e) {
    await Promise.allSettled(running.map((r) => r.close()));
    throw e;
  }
  return running;
}

async function startOne(spec: VbmcSpec): Promise<RunningVbmc> {
  const addr = parseBmcAddress(spec.address);
  const machine = spec.machine ?? new InMemoryMachine({ name: spec.node });
  try {
    if (addr.driver === 'ipmi') {
      const server = new IpmiBmcServer({ backend: machine, username: spec.username, password: spec.password });
      await server.listen({ host: addr.host, port: addr.port });
      return { node: spec.node, address: spec.address, driver: 'ipmi', machine, close: () => server.close() };
    }
    if (addr.scheme === 'redfish+https') {
      throw new InputError('E_VBMC_TLS', `node ${spec.node}: the lab's virtual BMCs serve Redfish over plain HTTP`, {
        hint: 'Address lab BMCs as redfish+http://127.0.0.1:PORT/redfish/v1/Systems/ID.',
      });
    }
    const systemId = decodeURIComponent(addr.systemPath.split('/').pop()!);
    const server = new VirtualRedfishBmc({ machine, username: spec.username, password: spec.password, systemId });
    await server.listen({ host: addr.host, port: addr.port });
    return { node: spec.node, address: spec.address, driver: 'redfish', machine, close: () => server.close() };
  } catch (e) {
    if (e instanceof InputError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    throw new InputError(
      'E_VBMC_LISTEN',
      `node ${spec.node}: cannot listen at ${spec.address}${code ? ` (${code})` : ''}`,
      {
        hint:
          code === 'EADDRINUSE'
            ? 'Another process uses that port: stop it (stackctl lab bmc stop) or change the port in the inventory.'
            : 'Check the address.',
        cause: e,
      },
    );
  }
}
