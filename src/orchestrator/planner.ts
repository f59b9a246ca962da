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
import { serviceCaFile } from '../certs/served.js';
import type { Catalog } from '../roles/catalog.js';
import type { Plan, PlanAction, PlanHost } from '../roles/plan.js';
import { STEPS, type Container, type Service, type StepNumber } from '../roles/schema.js';

/** Per-input hashes of a container, kept in a label so a changed input can be named. */
export interface ContainerInputs {
  /** The image reference (not secret). */
  readonly image: string;
  /** sha256 of the container's options in the service file. */
  readonly options: string;
  /** Config file path on the node -> sha256 of its content (the files that recreate it when they change). */
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
  /**
   * The files it re-reads in place (config `reload: true`), path -> sha256: not part of its hash or
   * inputs; when one changes the deploy uploads it and waits for the container's health check.
   */
  readonly reloads?: Readonly<Record<string, string>>;
  /** The service file's table for this container. */
  readonly definition: Container;
  /**
   * The node whose container of the same name must be running and healthy before this
   * one is created or started (the service's bootstrap node, for `bootstrap_first` services).
   */
  readonly after?: string;
  /**
   * The service's HTTP frontend through the internal VIP: once the container is healthy, the
   * deploy waits until HAProxy passes requests to it (a backend is marked up after its checks),
   * so that the services started next find the API answering.
   */
  readonly frontend?: string;
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

/** A service's preparation of a node's own OS (modules, devices, host units), before its containers. */
export interface HostWork extends PlanHost {
  readonly node: string;
}

/** What one node does in one step. */
export interface NodeWork {
  readonly node: string;
  readonly role: string;
  /** Host preparations of the step's services on this node; done before anything else of the step. */
  readonly host: readonly HostWork[];
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
    }
  | {
      /** A service's Keystone user (in the service project) and its catalog endpoints. */
      readonly kind: 'register';
      readonly node: string;
      readonly service: string;
      /** The user name. */
      readonly name: string;
      readonly passwordSecret: string;
      readonly roles: readonly string[];
      readonly catalog: readonly {
        readonly type: string;
        readonly name: string;
        readonly endpoints: readonly { readonly interface: string; readonly url: string }[];
      }[];
      readonly hash: string;
    }
  | {
      /** The cloud's starter flavours, images and networks (inventory `cloud.resources`). */
      readonly kind: 'resources';
      readonly node: string;
      readonly service: string;
      readonly name: 'flavors-images';
      readonly resources: NonNullable<Plan['cloud']['resources']>;
      readonly hash: string;
    };

/** What run-once work needs to reach Keystone as the admin. */
export interface IdentityAccess {
  /** Internal identity endpoint (v3). */
  readonly authUrl: string;
  /** The CA file the client verifies an https:// authUrl with, in the identity container. */
  readonly caFile?: string;
  readonly region: string;
  /** Secret holding the admin password. */
  readonly adminPasswordSecret: string;
}

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
  /** How step 5's registration reaches Keystone (absent when the plan has no Keystone). */
  readonly identity?: IdentityAccess;
  /** Plan actions this version of the executor does not perform (reported, not hidden). */
  readonly unsupported: readonly PlanAction[];
}

/** The secret of Keystone's bootstrap admin (roles/services/keystone.yaml). */
export const IDENTITY_ADMIN_PASSWORD = 'keystone_admin_password';

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
  const internalVip = plan.vips.internal_api;
  // https:// when HAProxy serves the internal VIP over TLS (the container's curl verifies it with the CA)
  const internalScheme = plan.tls?.includes('internal') ? 'https' : 'http';
  const frontendOf = new Map<string, string>();
  for (const p of plan.services) {
    const f = (svc(p.name).haproxy ?? []).find((x) => x.mode === 'http' && x.vip_networks.includes('internal_api'));
    if (f && internalVip) frontendOf.set(p.name, `${internalScheme}://${internalVip}:${f.port}${f.check ?? '/'}`);
  }
  const containers = new Map<string, ContainerWork>();
  for (const node of plan.nodes) {
    for (const c of node.containers) {
      const service = svc(c.service);
      const first = service.bootstrap_first ? bootstrapOf.get(c.service) : undefined;
      const definition = service.containers.find((d) => d.name === c.name)!;
      const reads = (service.config ?? []).filter((f) => !f.containers || f.containers.includes(c.name));
      const configs: Record<string, string> = {};
      const reloads: Record<string, string> = {};
      for (const f of reads)
        (f.reload ? reloads : configs)[f.dest] = node.configs.find((x) => x.dest === f.dest)!.sha256;
      containers.set(`${node.name}/${c.name}`, {
        node: node.name,
        service: c.service,
        step: c.step,
        name: c.name,
        image: c.image,
        hash: c.hash,
        inputs: { image: c.image, options: sha256(canonicalJson(definition)), configs },
        ...(Object.keys(reloads).length ? { reloads } : {}),
        definition,
        ...(first && first !== node.name ? { after: first } : {}),
        ...(frontendOf.has(c.service) ? { frontend: frontendOf.get(c.service)! } : {}),
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
        const nodeConfigs = plan.nodes.find((n) => n.name === a.node)?.configs ?? [];
        const reads = (task.reads ?? []).map((dest) => nodeConfigs.find((c) => c.dest === dest)?.sha256 ?? dest);
        runOnce.push({
          kind: 'task',
          node: a.node,
          service: a.service,
          name: task.name,
          container,
          command: task.command,
          hash: sha256(
            `${container.hash}\n${canonicalJson(task.command)}${reads.length ? `\n${reads.join('\n')}` : ''}`,
          ),
        });
      } else if (a.kind === 'register') {
        const service = svc(a.service);
        const user = service.service_user!;
        const byType = new Map<string, { interface: string; url: string }[]>();
        for (const e of plan.services.find((p) => p.name === a.service)?.endpoints ?? [])
          byType.set(e.type, [...(byType.get(e.type) ?? []), { interface: e.interface, url: e.url }]);
        const catalogEntries = (service.endpoints ?? []).map((e) => ({
          type: e.type,
          name: e.service_name,
          endpoints: byType.get(e.type) ?? [],
        }));
        const roles = user.roles ?? ['admin'];
        runOnce.push({
          kind: 'register',
          node: a.node,
          service: a.service,
          name: user.name,
          passwordSecret: user.password,
          roles,
          catalog: catalogEntries,
          // The password's own digest joins this hash in the executor: a rotated password registers again.
          hash: sha256(canonicalJson({ user: user.name, roles, catalog: catalogEntries, region: plan.cloud.region })),
        });
      } else if (a.kind === 'resources') {
        // Flavours need the compute service (the action's); images need the image store as well.
        const all = plan.cloud.resources;
        const store = catalog.provides.imageStore?.service;
        // Networks need a service with the catalog's network endpoint (Neutron) in this run.
        const network = plan.services.some((s) => wantService(s.name) && s.endpoints.some((e) => e.type === 'network'));
        const resources = all && {
          flavors: all.flavors,
          images: store && wantService(store) ? all.images : [],
          ...(network && all.external_network ? { external_network: all.external_network } : {}),
          ...(network && all.tenant_network ? { tenant_network: all.tenant_network } : {}),
        };
        if (resources)
          runOnce.push({
            kind: 'resources',
            node: a.node,
            service: a.service,
            name: 'flavors-images',
            resources,
            hash: sha256(canonicalJson(resources)),
          });
      } else if (a.kind !== 'container' && a.kind !== 'host') unsupported.push(a);
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
      const host = (node.host ?? [])
        .filter((h) => h.step === ps.step && (h.registryTrust !== undefined || wantService(h.service)))
        .map((h) => ({ ...h, node: node.name }));
      if (configs.length || work.length || images.length || host.length)
        nodes.push({ node: node.name, role: node.role, host, configs, containers: work, images });
    }
    if (nodes.length || runOnce.length) steps.push({ step: ps.step, title: STEPS[ps.step], nodes, runOnce });
  }
  const identity = plan.services
    .find((p) => p.name === catalog.provides.identity?.service)
    ?.endpoints.find((e) => e.type === 'identity' && e.interface === 'internal');
  return {
    cloud: plan.cloud.name,
    steps,
    unsupported,
    ...(identity
      ? {
          identity: {
            authUrl: identity.url,
            // the CA in the identity service's container, for an https:// endpoint (tls.internal)
            ...(identity.url.startsWith('https://')
              ? { caFile: serviceCaFile(catalog.provides.identity!.service) }
              : {}),
            region: plan.cloud.region,
            adminPasswordSecret: IDENTITY_ADMIN_PASSWORD,
          },
        }
      : {}),
  };
}
