/**
 * The deploy planner (DESIGN.md 2): turns the pure Plan into ordered deploy
 * steps, kept apart from the executor that performs them. Pure and
 * deterministic: no I/O, no clock.
 *
 * Each step is a barrier across nodes. Within a step every node gets its
 * work (configs to upload, containers to ensure), and the step's run-once
 * work (database creation, bootstrap tasks) runs afterwards on the service's
 * bootstrap node.
 */
import { canonicalJson, sha256 } from '../core/hash.js';
import { UsageError } from '../core/errors.js';
import type { Catalog } from '../roles/catalog.js';
import type { Plan, PlanAction } from '../roles/plan.js';
import { STEPS, type Container, type Service, type StepNumber } from '../roles/schema.js';

/** Per-input hashes of a container, kept in a label so a changed input can be named. */
export interface ContainerInputs {
  /** The image reference (not secret). */
  readonly image: string;
  /** sha256 of the container's options in the service file. */
  readonly options: string;
  /** Config file path on the node -> sha256 of its content. */
  readonly configs: Readonly<Record<string, string>>;
}

/** A container to ensure on a node. */
export interface ContainerWork {
  readonly node: string;
  readonly service: string;
  readonly step: StepNumber;
  readonly name: string;
  readonly image: string;
  /** The plan's container hash: the `org.stackctl.hash` label. */
  readonly hash: string;
  readonly inputs: ContainerInputs;
  /** The service file's table for this container. */
  readonly definition: Container;
  /**
   * The node whose container of the same name must be running and healthy before this
   * one is created or started (the service's bootstrap node, for `bootstrap_first` services).
   */
  readonly after?: string;
}

/** A config file to place on a node. */
export interface ConfigWork {
  readonly node: string;
  readonly service: string;
  readonly dest: string;
  /** Octal text such as 0640. */
  readonly mode: string;
  readonly sha256: string;
}

/** What one node does in one step. */
export interface NodeWork {
  readonly node: string;
  readonly role: string;
  readonly configs: readonly ConfigWork[];
  readonly containers: readonly ContainerWork[];
  /** Images the step's run-once tasks on this node need (pulled with the step's other images). */
  readonly images: readonly string[];
}

/** Work done once per cloud on a service's bootstrap node. */
export type RunOnceWork =
  | {
      readonly kind: 'database';
      readonly node: string;
      readonly service: string;
      readonly name: string;
      readonly user: string;
      /** Name of the secret holding the user's password. */
      readonly passwordSecret: string;
      /** Identity of this work's inputs: a change means run again. */
      readonly hash: string;
    }
  | {
      readonly kind: 'task';
      readonly node: string;
      readonly service: string;
      readonly name: string;
      /** The container whose image, volumes and config the task borrows. */
      readonly container: ContainerWork;
      readonly command: readonly string[];
      readonly hash: string;
    };

/** One barrier of the deploy. */
export interface DeployStep {
  readonly step: StepNumber;
  readonly title: string;
  readonly nodes: readonly NodeWork[];
  readonly runOnce: readonly RunOnceWork[];
}

/** The ordered deploy. */
export interface DeployPlan {
  readonly cloud: string;
  readonly steps: readonly DeployStep[];
  /** Plan actions this version of the executor does not perform (reported, not hidden). */
  readonly unsupported: readonly PlanAction[];
}

/** Which part of the plan to deploy. */
export interface PlanFilter {
  /** Only these services (all when absent). */
  readonly services?: readonly string[];
  /** Only these steps (all when absent). */
  readonly steps?: readonly StepNumber[];
}

/** Parse `--steps` text: `3`, `1-5`, `2,4`. */
export function parseSteps(text: string): StepNumber[] {
  const out = new Set<StepNumber>();
  for (const part of text.split(',')) {
    const m = /^\s*([1-5])(?:\s*-\s*([1-5]))?\s*$/.exec(part);
    if (!m || (m[2] !== undefined && Number(m[2]) < Number(m[1]))) {
      throw new UsageError('E_STEPS', `'${text}' is not a list of deploy steps`, {
        hint: 'Steps are 1 to 5, e.g. --steps 1-5, --steps 2, --steps 2,4.',
      });
    }
    for (let s = Number(m[1]); s <= Number(m[2] ?? m[1]); s++) out.add(s as StepNumber);
  }
  return [...out].sort();
}

/** The first step in which anything of a service happens: its configs must be on the node by then. */
function firstStep(svc: Service): StepNumber {
  return Math.min(svc.step, ...(svc.tasks ?? []).map((t) => t.step)) as StepNumber;
}

/** Turn the plan into deploy steps. Throws UsageError for an unknown service in the filter. */
export function planDeploy(plan: Plan, catalog: Catalog, filter: PlanFilter = {}): DeployPlan {
  const deployed = new Set(plan.services.map((s) => s.name));
  for (const s of filter.services ?? []) {
    if (!deployed.has(s)) {
      throw new UsageError('E_UNKNOWN_SERVICE', `service '${s}' is not part of this cloud's plan`, {
        hint: `Services of this plan: ${[...deployed].join(', ')}.`,
      });
    }
  }
  const wantService = (s: string): boolean => !filter.services || filter.services.includes(s);
  const wantStep = (s: StepNumber): boolean => !filter.steps || filter.steps.includes(s);
  const svc = (name: string): Service => catalog.services.get(name)!;

  // Containers of every node, with their per-input hashes.
  const bootstrapOf = new Map(plan.services.map((s) => [s.name, s.bootstrap]));
  const containers = new Map<string, ContainerWork>();
  for (const node of plan.nodes) {
    for (const c of node.containers) {
      const service = svc(c.service);
      const first = service.bootstrap_first ? bootstrapOf.get(c.service) : undefined;
      const definition = service.containers.find((d) => d.name === c.name)!;
      const reads = (service.config ?? []).filter((f) => !f.containers || f.containers.includes(c.name));
      const configs: Record<string, string> = {};
      for (const f of reads) configs[f.dest] = node.configs.find((x) => x.dest === f.dest)!.sha256;
      containers.set(`${node.name}/${c.name}`, {
        node: node.name,
        service: c.service,
        step: c.step,
        name: c.name,
        image: c.image,
        hash: c.hash,
        inputs: { image: c.image, options: sha256(canonicalJson(definition)), configs },
        definition,
        ...(first && first !== node.name ? { after: first } : {}),
      });
    }
  }

  const unsupported: PlanAction[] = [];
  const steps: DeployStep[] = [];
  for (const ps of plan.steps) {
    if (!wantStep(ps.step)) continue;
    const runOnce: RunOnceWork[] = [];
    for (const a of ps.actions) {
      if (!wantService(a.service)) continue;
      if (a.kind === 'database') {
        const db = (svc(a.service).databases ?? []).find((d) => d.name === a.database)!;
        runOnce.push({
          kind: 'database',
          node: a.node,
          service: a.service,
          name: db.name,
          user: db.user,
          passwordSecret: db.password,
          hash: sha256(canonicalJson({ database: db })),
        });
      } else if (a.kind === 'task') {
        const task = (svc(a.service).tasks ?? []).find((t) => t.name === a.task)!;
        const container = containers.get(`${a.node}/${task.container}`)!;
        runOnce.push({
          kind: 'task',
          node: a.node,
          service: a.service,
          name: task.name,
          container,
          command: task.command,
          hash: sha256(`${container.hash}\n${canonicalJson(task.command)}`),
        });
      } else if (a.kind === 'register') unsupported.push(a);
    }
    const nodes: NodeWork[] = [];
    for (const node of plan.nodes) {
      const configs: ConfigWork[] = node.configs
        .filter((c) => wantService(c.service) && firstStep(svc(c.service)) === ps.step)
        .map((c) => ({ node: node.name, service: c.service, dest: c.dest, mode: c.mode, sha256: c.sha256 }));
      const work = node.containers
        .filter((c) => c.step === ps.step && wantService(c.service))
        .map((c) => containers.get(`${node.name}/${c.name}`)!);
      // A task borrows its container's image, which may belong to a later step: pull it now.
      const images = [
        ...new Set(runOnce.flatMap((w) => (w.kind === 'task' && w.node === node.name ? [w.container.image] : []))),
      ];
      if (configs.length || work.length || images.length)
        nodes.push({ node: node.name, role: node.role, configs, containers: work, images });
    }
    if (nodes.length || runOnce.length) steps.push({ step: ps.step, title: STEPS[ps.step], nodes, runOnce });
  }
  return { cloud: plan.cloud.name, steps, unsupported };
}
