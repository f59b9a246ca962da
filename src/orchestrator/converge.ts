/**
 * A deploy as the engine's phases: what the nodes run now (observed over SSH
 * and Docker) against the deploy plan of the inventory's release. Pure: the
 * observation is an input, so `deploy --dry-run` prints exactly the phases a
 * deploy performs.
 *
 * Per deploy step (TripleO's 1-5, steps are barriers):
 * 1. `pull`: the images the step's changed containers and tasks need and the
 *    node lacks, on every node, before anything stops;
 * 2. `apply`: on every node in parallel, configs and containers that are
 *    created, started, or recreated without a rolling restart;
 * 3. `roll`: a service that runs on several nodes and whose running containers
 *    change rolls node by node, as an upgrade does: its load-balancer backends
 *    drained, its containers recreated, health gated, backends enabled and seen
 *    UP; a quorum cluster (Galera, RabbitMQ) one member at a time with its
 *    cluster check between members;
 * 4. `run-once`: databases, tasks and registrations whose input hash changed.
 * Host preparation comes first, before step 1. A service on one node, or one
 * whose file says it does not roll, is recreated in place, and the plan says
 * for which step its API is down.
 */
import type { Service } from '../roles/schema.js';
import { hostSummary } from './host.js';
import type { ServiceRoles } from '../roles/service-roles.js';
import type { Availability, NodeAction, Phase, Step, TargetContainer } from './model.js';
import type { ContainerWork, DeployPlan, DeployStep, RunOnceWork } from './planner.js';
import { ContainerAction, type ConfigDiff, type ContainerDiff } from './state.js';

/** What a deploy found on the nodes, for every item of the plan it could look at. */
export interface Observation {
  /** `node/container` -> the decision for that container. */
  readonly containers: ReadonlyMap<string, ContainerDiff>;
  /** `node/dest` -> the decision for that config file. */
  readonly configs: ReadonlyMap<string, ConfigDiff>;
  /** `node/image` -> whether the node has it. */
  readonly images: ReadonlyMap<string, boolean>;
  /** Run-once work found done (its marker holds its input hash), by `runOnceKey`. */
  readonly done: ReadonlySet<string>;
  /** Nodes that could not be looked at, with the error. */
  readonly unreachable: ReadonlyMap<string, unknown>;
  /**
   * `node/container` -> why a container the deploy leaves alone (its hash is the plan's) is not well:
   * Docker restarting it or its health check failing. A deploy does not call such a cloud converged:
   * it gates their health, and fails with their log when they do not recover.
   */
  readonly unwell?: ReadonlyMap<string, string>;
  /**
   * `node/container` -> what recreating a container that runs users' workloads would stop (its
   * guests, or that they could not be listed): the run refuses it (E_WORKLOADS_RUNNING).
   */
  readonly workloads?: ReadonlyMap<string, string>;
}

/** The identity of a run-once work. */
export const runOnceKey = (w: RunOnceWork): string => `${w.node}/${w.kind}/${w.service}/${w.name}`;

/** What the converge planner needs of the catalog. */
export interface ConvergeCatalog {
  readonly services: ReadonlyMap<string, Service>;
  readonly roles: ReadonlyMap<string, { readonly update_serial: number }>;
  readonly provides: ServiceRoles;
}

/** A service whose API the deploy takes down, and why. */
export interface Outage {
  readonly step: number;
  readonly service: string;
  readonly nodes: readonly string[];
  readonly reason: 'single-node' | 'not-rolling';
}

/** The deploy as phases, with the outages it declares. */
export interface ConvergePlan {
  readonly phases: readonly Phase<NodeAction>[];
  readonly outages: readonly Outage[];
}

/** One line of a dry run: what the deploy does with one object. */
export interface Prediction {
  readonly step: number;
  readonly node: string;
  readonly object: 'host' | 'container' | 'config' | RunOnceWork['kind'];
  readonly name: string;
  /** create, recreate, start, reload, unchanged, upload, run, done, check */
  readonly action: string;
  readonly detail: string;
}

/** The target container of a decision, as an action carries it. */
function target(c: ContainerDiff, from?: string): TargetContainer {
  return {
    name: c.work.name,
    service: c.work.service,
    image: c.work.image,
    hash: c.work.hash,
    ...(from && from !== c.work.image ? { from } : {}),
  };
}

/**
 * Nodes restarted at once in a rolling round: the smallest update_serial of their roles, never
 * every node (one stays up), and one for quorum clusters (they keep their quorum).
 */
export function rollingSerial(quorum: boolean, nodeRoles: readonly string[], catalog: ConvergeCatalog): number {
  if (quorum) return 1;
  const serial = Math.min(...nodeRoles.map((r) => catalog.roles.get(r)?.update_serial ?? 1));
  return Math.max(1, Math.min(serial, nodeRoles.length - 1));
}

/** Turn what the deploy observed into phases. */
export function planConverge(plan: DeployPlan, obs: Observation, catalog: ConvergeCatalog): ConvergePlan {
  const phases: Phase<NodeAction>[] = [];
  const outages: Outage[] = [];
  const live = (node: string): boolean => !obs.unreachable.has(node);
  const svc = (name: string): Service | undefined => catalog.services.get(name);
  const roleOf = new Map(plan.steps.flatMap((st) => st.nodes.map((n) => [n.node, n.role] as const)));
  const order = [...new Set(plan.steps.flatMap((st) => st.nodes.map((n) => n.node)))];
  /** Nodes that run each service anywhere in the plan. */
  const runsOn = new Map<string, Set<string>>();
  for (const st of plan.steps)
    for (const n of st.nodes)
      for (const c of n.containers) runsOn.set(c.service, (runsOn.get(c.service) ?? new Set()).add(n.node));

  // Host preparation, before step 1: a node lacking what a later step needs fails before anything changed.
  const hostActions: NodeAction[] = [];
  for (const node of order.filter(live)) {
    const services = [
      ...new Set(
        plan.steps.flatMap((st) =>
          st.nodes.filter((n) => n.node === node).flatMap((n) => n.host.map((h) => h.service)),
        ),
      ),
    ];
    if (services.length) hostActions.push({ kind: 'host', node, services });
  }
  if (hostActions.length)
    phases.push({
      id: 'host',
      kind: 'host',
      title: 'host preparation of every step, before step 1',
      services: [],
      onFailure: 'budget',
      steps: [{ title: 'host preparation', actions: hostActions }],
    });

  for (const st of plan.steps) phases.push(...stepPhases(st));
  return { phases, outages };

  function stepPhases(st: DeployStep): Phase<NodeAction>[] {
    const out: Phase<NodeAction>[] = [];
    const nodes = st.nodes.filter((n) => live(n.node));
    const diffsOf = (node: string, w: readonly ContainerWork[]): ContainerDiff[] =>
      w.map((c) => obs.containers.get(`${node}/${c.name}`)).filter((d): d is ContainerDiff => d !== undefined);

    // Which services roll: running containers change on at least one of several nodes.
    const recreated = new Map<string, string[]>(); // service -> nodes with a recreate
    for (const n of nodes)
      for (const d of diffsOf(n.node, n.containers))
        if (d.action === ContainerAction.RECREATE)
          recreated.set(d.work.service, [...(recreated.get(d.work.service) ?? []), n.node]);
    const rolls = new Set<string>();
    for (const [service, where] of recreated) {
      const everywhere = [...(runsOn.get(service) ?? [])];
      const s = svc(service);
      if (everywhere.length > 1 && s?.upgrade.rolling !== false) rolls.add(service);
      else
        outages.push({
          step: st.step,
          service,
          nodes: where,
          reason: everywhere.length > 1 ? 'not-rolling' : 'single-node',
        });
    }
    const rollingOn = (service: string, node: string): boolean =>
      rolls.has(service) && (recreated.get(service) ?? []).includes(node);

    // 1. pull: what the changed containers and the step's tasks need, where the node lacks it.
    const pulls: NodeAction[] = [];
    for (const n of nodes) {
      const needed = [
        ...diffsOf(n.node, n.containers)
          .filter((d) => d.action === ContainerAction.CREATE || d.action === ContainerAction.RECREATE)
          .map((d) => d.work.image),
        ...n.images,
      ];
      const images = [...new Set(needed)].filter((i) => obs.images.get(`${n.node}/${i}`) === false);
      if (images.length) pulls.push({ kind: 'pull', node: n.node, images });
    }
    if (pulls.length)
      out.push({
        id: `step:${st.step}:pull`,
        kind: 'pull',
        title: `step ${st.step} (${st.title}): pull, before anything stops`,
        deployStep: st.step,
        services: [],
        onFailure: 'budget',
        steps: [{ title: 'pull', actions: pulls }],
      });

    // 2. apply: per node, per service in order: changed configs, containers not rolled.
    const apply: NodeAction[] = [];
    const applied = new Set<string>();
    for (const n of nodes) {
      // in the plan's order of the node's containers (placement before nova-api before its conductor),
      // then the services that only place configs at this step
      const services = [...new Set([...n.containers.map((c) => c.service), ...n.configs.map((c) => c.service)])];
      for (const service of services) {
        const configChanged = n.configs.some(
          (c) => c.service === service && obs.configs.get(`${n.node}/${c.dest}`)?.action === 'upload',
        );
        if (rollingOn(service, n.node)) continue;
        const changed = diffsOf(
          n.node,
          n.containers.filter((c) => c.service === service),
        ).filter((d) => d.action !== ContainerAction.UNCHANGED);
        if (!configChanged && !changed.length) continue;
        apply.push({
          kind: 'ensure',
          node: n.node,
          services: [service],
          containers: changed.map((d) => target(d)),
          frontendGate: true,
        });
        applied.add(service);
      }
    }
    // Left alone but not well (a crash loop, a failing health check): the step waits for their health.
    for (const n of nodes) {
      const unwell = n.containers.filter(
        (c) =>
          obs.unwell?.has(`${n.node}/${c.name}`) &&
          !apply.some((a) => a.kind === 'ensure' && a.node === n.node && a.services.includes(c.service)) &&
          !rollingOn(c.service, n.node),
      );
      const sick = [...new Set(unwell.map((c) => c.service))];
      if (sick.length) apply.push({ kind: 'health', node: n.node, services: sick, unwell: unwell.map((c) => c.name) });
    }
    if (apply.length)
      out.push({
        id: `step:${st.step}:apply`,
        kind: 'apply',
        title: `step ${st.step} (${st.title}): configs and containers on every node`,
        deployStep: st.step,
        services: [...applied],
        onFailure: 'budget',
        steps: [{ title: 'apply', actions: apply }],
      });

    // 3. roll: quorum clusters one at a time, the other rolling services together, node by node.
    const quorum = [...rolls].filter((s) => svc(s)?.cluster === 'quorum');
    const others = [...rolls].filter((s) => svc(s)?.cluster !== 'quorum');
    for (const group of [...quorum.map((s) => [s]), ...(others.length ? [others] : [])])
      out.push(
        rollPhase(
          st,
          nodes.map((n) => n.node),
          group,
          rollingOn,
        ),
      );

    // 4. run-once work whose inputs changed (on its node, in order; a failure stops the deploy).
    const work = st.runOnce.filter((w) => live(w.node) && !obs.done.has(runOnceKey(w)));
    if (work.length)
      out.push({
        id: `step:${st.step}:run-once`,
        kind: 'run-once',
        title: `step ${st.step} (${st.title}): run-once work`,
        deployStep: st.step,
        services: [],
        onFailure: 'stop',
        steps: [
          {
            title: 'run-once work, in order',
            actions: work.map((w) => ({
              kind: 'run-once',
              node: w.node,
              service: w.service,
              work: w.kind,
              name: w.name,
            })),
          },
        ],
      });
    return out;
  }

  /** The rolling restart of `services` over the step's nodes where they change. */
  function rollPhase(
    st: DeployStep,
    stepNodes: readonly string[],
    services: readonly string[],
    rollingOn: (service: string, node: string) => boolean,
  ): Phase<NodeAction> {
    const quorum = services.length === 1 && svc(services[0]!)?.cluster === 'quorum';
    const nodes = order.filter((n) => stepNodes.includes(n) && services.some((s) => rollingOn(s, n)));
    const serial = rollingSerial(
      quorum,
      nodes.map((n) => roleOf.get(n) ?? ''),
      catalog,
    );
    const check = quorum && catalog.provides.clusterChecks.has(services[0]!);
    const lb = catalog.provides.loadBalancer;
    const steps: Step<NodeAction>[] = [];
    const members = order.filter((n) => runsOn.get(services[0]!)?.has(n));
    // A quorum cluster with a member missing must not lose another: it is whole before the first restart.
    if (check)
      steps.push({
        title: `${services[0]} cluster whole before the first member restarts`,
        actions: [{ kind: 'cluster-check', service: services[0]!, nodes: members }],
      });
    for (let i = 0; i < nodes.length; i += serial) {
      const round = nodes.slice(i, i + serial);
      const actions: NodeAction[] = [];
      for (const node of round) {
        const here = services.filter((s) => rollingOn(s, node));
        const frontends =
          lb && runsOn.has(lb.service) ? here.flatMap((s) => (svc(s)?.haproxy ?? []).map((f) => f.name)) : [];
        const changed = st.nodes
          .filter((n) => n.node === node)
          .flatMap((n) => n.containers.filter((c) => here.includes(c.service)))
          .map((c) => obs.containers.get(`${node}/${c.name}`))
          .filter((d): d is ContainerDiff => d !== undefined && d.action !== ContainerAction.UNCHANGED);
        if (frontends.length) actions.push({ kind: 'drain', node, frontends });
        actions.push({
          kind: 'ensure',
          node,
          services: here,
          containers: changed.map((d) => target(d)),
          frontendGate: false,
        });
        actions.push({ kind: 'health', node, services: here });
        if (frontends.length) actions.push({ kind: 'enable', node, frontends });
      }
      steps.push({ title: `restart on ${round.join(', ')}`, actions });
      if (check)
        steps.push({
          title: `${services[0]} cluster whole again after ${round.join(', ')}`,
          actions: [{ kind: 'cluster-check', service: services[0]!, nodes: members }],
        });
    }
    const availability: Availability = 'rolling';
    return {
      id: `step:${st.step}:roll:${services.join('+')}`,
      kind: 'roll',
      title: `step ${st.step}: ${services.join(', ')} node by node${quorum ? ', one member at a time' : ''}`,
      deployStep: st.step,
      services,
      availability,
      onFailure: 'stop',
      steps,
    };
  }
}

/** What the deploy would do with each object, from the observation (the dry run's table). */
export function predictions(
  plan: DeployPlan,
  obs: Observation,
  opts: { readonly allowWorkloadStop?: boolean } = {},
): Prediction[] {
  const out: Prediction[] = [];
  for (const st of plan.steps) {
    for (const nw of st.nodes) {
      if (obs.unreachable.has(nw.node)) continue;
      for (const h of nw.host)
        out.push({
          step: st.step,
          node: nw.node,
          object: 'host',
          name: h.service,
          action: 'check',
          detail: hostSummary(h),
        });
      for (const c of nw.configs) {
        const d = obs.configs.get(`${nw.node}/${c.dest}`);
        if (d)
          out.push({
            step: st.step,
            node: nw.node,
            object: 'config',
            name: c.dest,
            action: d.action,
            detail: d.detail,
          });
      }
      for (const c of nw.containers) {
        const d = obs.containers.get(`${nw.node}/${c.name}`);
        // left running, it re-reads the files it reloads that the deploy uploads
        const reread = Object.keys(c.reloads ?? {}).filter(
          (f) => obs.configs.get(`${nw.node}/${f}`)?.action === 'upload',
        );
        if (d)
          out.push({
            step: st.step,
            node: nw.node,
            object: 'container',
            name: c.name,
            action: d.action === ContainerAction.UNCHANGED && reread.length ? 'reload' : d.action,
            detail:
              (d.changed.join(', ') ||
                (d.action === ContainerAction.UNCHANGED ? reread.join(', ') : '') ||
                obs.unwell?.get(`${nw.node}/${c.name}`) ||
                '') +
              (obs.workloads?.has(`${nw.node}/${c.name}`)
                ? `; ${opts.allowWorkloadStop ? 'allowed (--allow-workload-stop)' : 'refused'}, ${obs.workloads.get(`${nw.node}/${c.name}`)}`
                : ''),
          });
      }
    }
    for (const w of st.runOnce) {
      if (obs.unreachable.has(w.node)) continue;
      out.push({
        step: st.step,
        node: w.node,
        object: w.kind,
        name: `${w.service}/${w.name}`,
        action: obs.done.has(runOnceKey(w)) ? 'done' : 'run',
        detail: '',
      });
    }
  }
  return out;
}
