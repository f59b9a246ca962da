/** The shipped lab inventory's plan and a fake Docker engine per node, for status tests without a lab. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { labelsFor } from '../../src/orchestrator/state.js';
import { planDeploy, type ContainerWork, type DeployPlan } from '../../src/orchestrator/planner.js';
import type { ContainerEngine, ContainerInfo, ExecResult } from '../../src/remote/index.js';
import type { Plan } from '../../src/roles/plan.js';
import { catalog, planFromText } from '../helpers/plan.js';

const labText = readFileSync(join(import.meta.dirname, '..', '..', 'inventories', 'lab.yaml'), 'utf8');

/**
 * The plan of inventories/lab.yaml (ctl-0 Controller, cmp-0 Compute) and its deploy plan for `services`;
 * with `pin`, every image pinned to that digest.
 */
export function labPlan(
  services?: readonly string[],
  pin?: string,
): { plan: Plan; deployPlan: DeployPlan; services: string[] } {
  const pins = pin ? new Map(planFromText(labText).plan.images.map((i) => [i.ref, pin] as const)) : undefined;
  const { plan } = planFromText(labText, undefined, undefined, pins);
  const all = services ?? plan.services.map((s) => s.name);
  return { plan, deployPlan: planDeploy(plan, catalog, { services: all }), services: [...all] };
}

/** Every container of the deploy plan on `node`. */
export function workOn(dp: DeployPlan, node: string): ContainerWork[] {
  return dp.steps.flatMap((s) => s.nodes.filter((n) => n.node === node).flatMap((n) => n.containers));
}

/** The inspect result of a container deployed exactly as planned, running and healthy. */
export function deployed(cloud: string, w: ContainerWork, over: Partial<ContainerInfo['state']> = {}): ContainerInfo {
  return {
    id: `id-${w.name}`,
    name: w.name,
    image: w.image,
    imageId: 'sha256:0',
    labels: labelsFor(cloud, w),
    state: {
      status: 'running',
      running: true,
      exitCode: 0,
      startedAt: '2026-11-22T17:00:00Z',
      finishedAt: '0001-01-01T00:00:00Z',
      ...(w.definition.healthcheck ? { health: 'healthy' } : {}),
      oomKilled: false,
      ...over,
    },
    restartCount: 0,
  };
}

/** One exec call a fake engine received. */
export interface ExecCall {
  readonly container: string;
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, unknown>> | undefined;
}

/**
 * A fake engine: `containers` by name, `exec` answered by `answer`, images by id with the registry
 * digests in `imageDigests` (`repository@sha256:…`); `inspected` records the image inspects.
 */
export function fakeEngine(
  containers: ReadonlyMap<string, ContainerInfo>,
  answer: (container: string, argv: readonly string[]) => ExecResult,
  calls: ExecCall[] = [],
  imageDigests: ReadonlyMap<string, readonly string[]> = new Map(),
  inspected: string[] = [],
): ContainerEngine {
  const engine: Partial<ContainerEngine> = {
    version: async () => ({ version: '20.10.24', apiVersion: '1.41' }),
    inspectContainer: async (ref) => containers.get(ref),
    inspectImage: async (ref) => {
      inspected.push(ref);
      return { id: ref, tags: [], digests: imageDigests.get(ref) ?? [], created: '', size: 0, labels: {} };
    },
    exec: async (container, argv, opts) => {
      calls.push({ container, argv, env: opts?.env });
      return answer(container, argv);
    },
    close: async () => undefined,
  };
  return engine as ContainerEngine;
}
