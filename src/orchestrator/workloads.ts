/**
 * Users' workloads inside a container (a service file's `workloads:`: nova_libvirt's guests, which
 * QEMU runs in it): recreating the container stops them. The deploy's observation (its dry run)
 * and the recreate itself ask here what runs.
 */
import type { ContainerEngine } from '../remote/index.js';
import type { ContainerWork } from './planner.js';

/** How long listing a container's workloads may take. */
export const WORKLOAD_LIST_TIMEOUT_MS = 30_000;

/** What a container runs: its workloads by name, or why they could not be listed. */
export type WorkloadList = { readonly running: readonly string[] } | { readonly error: string };

/**
 * The workloads the container runs now; undefined when it declares none or is not running (a
 * container that is not running holds none).
 */
export async function listWorkloads(docker: ContainerEngine, w: ContainerWork): Promise<WorkloadList | undefined> {
  const spec = w.definition.workloads;
  if (!spec || !(await docker.inspectContainer(w.name))?.state.running) return undefined;
  const r = await docker.exec(w.name, spec.list, { timeoutMs: WORKLOAD_LIST_TIMEOUT_MS });
  if (r.code !== 0)
    return { error: `${spec.list.join(' ')}: exit ${r.code}, ${(r.stderr || r.stdout).trim().slice(0, 300)}` };
  return {
    running: r.stdout
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean),
  };
}

/**
 * Why recreating the container is refused, as a phrase after "would be recreated (…), ": the
 * workloads it would stop, or that they cannot be listed; undefined when nothing runs.
 */
export function workloadsStopped(w: ContainerWork, list: WorkloadList | undefined): string | undefined {
  const what = w.definition.workloads?.what ?? 'workloads';
  if (!list) return undefined;
  if ('error' in list) return `and its ${what} cannot be listed (${list.error})`;
  return list.running.length
    ? `stopping the ${list.running.length} ${what} it runs: ${list.running.join(', ')}`
    : undefined;
}
