import { existsSync, readFileSync } from 'node:fs';
import type { BootDevice, BootSetting, PowerState } from '../../bmc/driver.js';
import { RemoteError } from '../../core/errors.js';
import { writeFileAtomic } from '../../core/fs.js';
import type { LocalEngine } from '../../remote/docker-local.js';
import type { MachineBackend } from './machine.js';

/** Power actions of a container node and the Docker call behind each (CONVENTIONS.md 5). */
export const CONTAINER_POWER_ACTIONS = {
  /** Power on: start the container (its entrypoint "boots" sshd and dockerd). */
  on: 'docker start',
  /** Hard power off: SIGKILL, like pulling the plug. */
  off: 'docker kill',
  /** ACPI shutdown: SIGTERM, then SIGKILL after the grace period. */
  soft: 'docker stop',
  /** Hard reset of a running machine. */
  reset: 'docker restart',
} as const;

/** Options of a container machine. */
export interface ContainerMachineOptions {
  /** Node name (logs). */
  readonly name: string;
  /** The node's container. */
  readonly container: string;
  /** JSON file keeping the boot device: a container has no firmware to hold it. */
  readonly bootFile: string;
  readonly engine: LocalEngine;
  /** Grace period of a soft power off, seconds. */
  readonly stopTimeoutS?: number;
}

const DEFAULT_BOOT: BootSetting = { device: 'disk', persistent: true, uefi: false };

/**
 * A lab node container behind a virtual BMC (DESIGN.md 5). The container is
 * the machine: running = powered on. The boot device has no effect on a
 * container (it always "boots from disk") but is kept and reported, with a
 * one-time setting falling back to the persistent one at the next power-on,
 * as firmware does, so provisioning code sees consistent answers.
 */
export class ContainerMachine implements MachineBackend {
  readonly name: string;
  readonly #o: ContainerMachineOptions;

  constructor(options: ContainerMachineOptions) {
    this.name = options.name;
    this.#o = options;
  }

  async powerState(): Promise<PowerState> {
    const c = await this.#o.engine.container(this.#o.container);
    if (!c) {
      throw new RemoteError(
        'E_NODE_CONTAINER_GONE',
        `node ${this.name}: container ${this.#o.container} does not exist`,
        {
          hint: 'Recreate the lab with `stackctl lab up --kind container`.',
        },
      );
    }
    return c.running ? 'on' : 'off';
  }

  async powerOn(): Promise<void> {
    if ((await this.powerState()) === 'on') return;
    await this.#o.engine.start(this.#o.container);
    this.#booted();
  }

  async powerOff(): Promise<void> {
    await this.#o.engine.kill(this.#o.container);
  }

  async softOff(): Promise<void> {
    await this.#o.engine.stop(this.#o.container, this.#o.stopTimeoutS ?? 10);
  }

  async reset(): Promise<void> {
    if ((await this.powerState()) === 'off') return;
    await this.#o.engine.restart(this.#o.container, 0);
    this.#booted();
  }

  async setBootDevice(device: BootDevice | 'none', persistent: boolean, uefi: boolean): Promise<void> {
    const st = this.#read();
    const boot = { device, persistent, uefi };
    this.#write({ current: boot, persistent: persistent ? boot : st.persistent });
  }

  async getBootDevice(): Promise<BootSetting> {
    return this.#read().current;
  }

  /** A boot happened: a one-time boot device is used up. */
  #booted(): void {
    const st = this.#read();
    if (!st.current.persistent) this.#write({ current: st.persistent, persistent: st.persistent });
  }

  #read(): { current: BootSetting; persistent: BootSetting } {
    if (!existsSync(this.#o.bootFile)) return { current: DEFAULT_BOOT, persistent: DEFAULT_BOOT };
    return JSON.parse(readFileSync(this.#o.bootFile, 'utf8')) as { current: BootSetting; persistent: BootSetting };
  }

  #write(st: { current: BootSetting; persistent: BootSetting }): void {
    writeFileAtomic(this.#o.bootFile, JSON.stringify(st, null, 2) + '\n');
  }
}
