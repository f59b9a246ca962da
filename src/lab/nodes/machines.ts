/**
 * Which machine stands behind each lab node's virtual BMC. `lab up --kind
 * container` and `lab up --kind vm` record their nodes in
 * `<inventory>.lab/machines.json`; the BMC process (`lab bmc serve`) reads it
 * and drives those containers or QEMU VMs. Nodes not listed keep the
 * in-memory machine.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from '../../core/fs.js';
import { localEngine, type LocalEngine } from '../../remote/docker-local.js';
import { ContainerMachine } from '../vbmc/container.js';
import type { MachineBackend } from '../vbmc/machine.js';
import { QemuMachine, type QemuNic } from '../vbmc/qemu.js';

/** One recorded machine: names and paths only, never secrets. */
export type LabMachineRecord =
  | { readonly kind: 'container'; readonly container: string }
  | {
      readonly kind: 'qemu';
      /** QMP socket, pid file, serial log and boot setting (src/lab/vbmc/qemu.ts). */
      readonly runDir: string;
      readonly disk: string;
      readonly diskSerial: string;
      readonly memoryMiB: number;
      readonly cpus: number;
      readonly nics: readonly QemuNic[];
    };

/** The file's content. */
export interface LabMachinesFile {
  readonly version: 1;
  readonly nodes: Readonly<Record<string, LabMachineRecord>>;
}

/** Path of the machines file in a lab folder. */
export const machinesFile = (labDir: string): string => join(labDir, 'machines.json');

/** Record the lab's machines. */
export function writeLabMachines(labDir: string, nodes: Readonly<Record<string, LabMachineRecord>>): void {
  const body: LabMachinesFile = { version: 1, nodes };
  writeFileAtomic(machinesFile(labDir), JSON.stringify(body, null, 2) + '\n');
}

/** Read the recorded machines; empty when there is no file. */
export function readLabMachines(labDir: string): LabMachinesFile {
  const f = machinesFile(labDir);
  if (!existsSync(f)) return { version: 1, nodes: {} };
  return JSON.parse(readFileSync(f, 'utf8')) as LabMachinesFile;
}

/** Backends of the recorded machines, by node name. */
export function labMachines(labDir: string, engine: LocalEngine = localEngine()): Map<string, MachineBackend> {
  const out = new Map<string, MachineBackend>();
  for (const [node, m] of Object.entries(readLabMachines(labDir).nodes)) {
    if (m.kind === 'qemu') {
      const { runDir, disk, diskSerial, memoryMiB, cpus, nics } = m;
      out.set(node, new QemuMachine({ name: node, runDir, disk, diskSerial, memoryMiB, cpus, nics }));
      continue;
    }
    out.set(
      node,
      new ContainerMachine({ name: node, container: m.container, engine, bootFile: join(labDir, `boot-${node}.json`) }),
    );
  }
  return out;
}
