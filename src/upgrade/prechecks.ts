/**
 * The prechecks of an upgrade (docs/upgrade-hooks.md): every node reachable,
 * every service healthy (the clusters' own check is the engine's cluster-check action), the target images in
 * the registry, room for the largest compute batch's instances elsewhere,
 * and each changing service's upgrade checks with the target image. Nothing
 * is ever stopped or changed here. Health comes from src/status (one
 * collection per upgrade context, shared by the checks); Nova's view and
 * the capacity from the OpenStack client of the context.
 */
import { hypervisorBinary } from '../roles/service-roles.js';
import { mapLimit } from '../core/concurrency.js';
import { InputError, RemoteError, StackctlError, messageOf } from '../core/errors.js';
import type { ContainerWork, DeployPlan } from '../orchestrator/planner.js';
import type { Plan, PlanNode, PlanService } from '../roles/plan.js';
import { collectStatus } from '../status/collect.js';
import { Severity, type Finding, type StatusReport } from '../status/model.js';
import { evaluateOpenStack, novaExpectation } from '../status/openstack.js';
import {
  OPENSTACK_COMMANDS,
  jsonRows,
  listComputeServices,
  novaView,
  num,
  parseServers,
  str,
  type ServerRow,
} from '../status/openstack-client.js';
import type { ActionHandlers, CloudClient, UpgradeContext } from './context.js';
import { checkImagesPresent } from './images.js';
import type { UpgradeAction } from './model.js';

/** What an instance needs, or what a host has free. */
export interface Resources {
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly diskGiB: number;
}

/** The resources, in the order messages name them, with their unit. */
export const RESOURCE_UNITS: Readonly<Record<keyof Resources, string>> = {
  vcpus: 'vCPUs',
  memoryMiB: 'MiB memory',
  diskGiB: 'GiB disk',
};

/** One instance that must move. */
export interface InstanceDemand {
  readonly id: string;
  readonly name: string;
  readonly host: string;
  readonly need: Resources;
}

/** One host that may receive instances. */
export interface HostCapacity {
  readonly host: string;
  readonly free: Resources;
}

/** The verdict of evacuationCapacity. */
export interface CapacityVerdict {
  readonly fits: boolean;
  /** Sum of what the instances need. */
  readonly need: Resources;
  /** Sum of what the receiving hosts have free. */
  readonly free: Resources;
  /** Per resource, what is missing in total (only resources that fall short). */
  readonly shortfall: Partial<Resources>;
  /** Instances no single host can take once the larger ones are placed (first fit, largest first). */
  readonly unplaceable: readonly string[];
}

const KEYS = Object.keys(RESOURCE_UNITS) as (keyof Resources)[];
const ZERO: Resources = { vcpus: 0, memoryMiB: 0, diskGiB: 0 };
const add = (a: Resources, b: Resources): Resources => ({
  vcpus: a.vcpus + b.vcpus,
  memoryMiB: a.memoryMiB + b.memoryMiB,
  diskGiB: a.diskGiB + b.diskGiB,
});

/**
 * Whether `hosts` can hold `instances`: in total per resource, and instance by
 * instance (first fit, largest memory first) so that free space split into
 * pieces too small for one instance is not counted as room. Pure.
 */
export function evacuationCapacity(
  instances: readonly InstanceDemand[],
  hosts: readonly HostCapacity[],
): CapacityVerdict {
  const need = instances.reduce((s, i) => add(s, i.need), ZERO);
  const free = hosts.reduce((s, h) => add(s, h.free), ZERO);
  const shortfall: { -readonly [K in keyof Resources]?: number } = {};
  for (const k of KEYS) if (need[k] > free[k]) shortfall[k] = need[k] - free[k];
  const left = hosts.map((h) => ({ ...h.free }));
  const unplaceable: string[] = [];
  const largestFirst = [...instances].sort(
    (a, b) => b.need.memoryMiB - a.need.memoryMiB || b.need.vcpus - a.need.vcpus || b.need.diskGiB - a.need.diskGiB,
  );
  for (const i of largestFirst) {
    const h = left.find((r) => KEYS.every((k) => r[k] >= i.need[k]));
    if (!h) unplaceable.push(i.name || i.id);
    else for (const k of KEYS) h[k] -= i.need[k];
  }
  return {
    fits: Object.keys(shortfall).length === 0 && unplaceable.length === 0,
    need,
    free,
    shortfall,
    unplaceable,
  };
}

/** `4 vCPUs, 2048 MiB memory` from a partial record. */
export function describeResources(r: Partial<Resources>): string {
  return KEYS.filter((k) => r[k] !== undefined)
    .map((k) => `${r[k] === Infinity ? '?' : r[k]} ${RESOURCE_UNITS[k]}`)
    .join(', ');
}

/** Knobs of the capacity arithmetic. */
export const CAPACITY_DEFAULTS = {
  /**
   * Nova's initial allocation ratios (nova.conf initial_*_allocation_ratio since
   * Stein): hypervisor statistics report physical totals, the scheduler allows
   * total × ratio. A site with other ratios passes its own.
   */
  allocationRatio: { vcpus: 16, memoryMiB: 1.5, diskGiB: 1 } as Resources,
  /** Instances in these states are live-migrated; others (SHUTOFF, ERROR…) stay where they are. */
  movableStates: ['ACTIVE', 'PAUSED'] as readonly string[],
} as const;

/** Parse `openstack flavor list --long -f json` into ID and name -> what an instance of it needs. */
export function parseFlavors(text: string): Map<string, Resources> {
  const out = new Map<string, Resources>();
  for (const r of jsonRows(text, 'flavor list')) {
    // Nova counts swap (MiB) with the root and ephemeral disks against the host's local disk.
    const need: Resources = {
      vcpus: num(r.VCPUs),
      memoryMiB: num(r.RAM),
      diskGiB: num(r.Disk) + num(r.Ephemeral) + Math.ceil(num(r.Swap) / 1024),
    };
    out.set(str(r.ID), need);
    if (!out.has(str(r.Name))) out.set(str(r.Name), need);
  }
  return out;
}

/**
 * Free resources of one row of `hypervisor list --long -f json` (microversion ≤ 2.87) under the
 * allocation ratios. The Zed client's list has no local disk columns: disk is then not reported
 * (Infinity, never a shortfall) and the messages say so.
 */
export function parseHypervisorRow(
  r: Readonly<Record<string, unknown>>,
  ratio: Resources = CAPACITY_DEFAULTS.allocationRatio,
): Resources {
  const free = (total: unknown, used: unknown, k: keyof Resources): number =>
    Math.max(0, Math.floor(num(total) * ratio[k] - num(used)));
  const hasDisk = r['Local GB'] !== undefined && r['Local GB'] !== null;
  return {
    vcpus: free(r['vCPUs'], r['vCPUs Used'], 'vcpus'),
    memoryMiB: free(r['Memory MB'], r['Memory MB Used'], 'memoryMiB'),
    diskGiB: hasDisk ? free(r['Local GB'], r['Local GB Used'], 'diskGiB') : Infinity,
  };
}

/** A hypervisor belongs to a host when its hostname is the host's name or its FQDN. */
const hypervisorOf = (host: string, hostname: string): boolean => hostname === host || hostname.startsWith(`${host}.`);

/** The instances on `hosts`, split into those that will be live-migrated and those that stay. */
export async function instancesOn(
  cloud: CloudClient,
  hosts: readonly string[],
  movableStates: readonly string[] = CAPACITY_DEFAULTS.movableStates,
): Promise<{ movable: ServerRow[]; staying: ServerRow[] }> {
  const movable: ServerRow[] = [];
  const staying: ServerRow[] = [];
  for (const host of hosts) {
    // NOTE: --host filters on the compute host; the row's Host is empty for a non-admin, never here.
    for (const s of parseServers(await cloud.openstack(OPENSTACK_COMMANDS.serversOn(host))))
      (movableStates.includes(s.status) ? movable : staying).push({ ...s, host: s.host || host });
  }
  return { movable, staying };
}

/** What each server needs, from its flavour; an unknown flavour is refused (its size cannot be counted). */
export async function demandsOf(cloud: CloudClient, servers: readonly ServerRow[]): Promise<InstanceDemand[]> {
  if (!servers.length) return [];
  const flavors = parseFlavors(await cloud.openstack(OPENSTACK_COMMANDS.flavors));
  return servers.map((s) => {
    const need = flavors.get(s.flavorId) ?? flavors.get(s.flavorName);
    if (!need) {
      throw new InputError(
        'E_FLAVOR_UNKNOWN',
        `instance ${s.name} (${s.id}) on ${s.host} has flavour ${s.flavorName || s.flavorId || '?'}, which flavor list does not show`,
        {
          hint: 'Its size cannot be counted: resize it to an existing flavour, or move it away by hand before the upgrade.',
          details: { server: s.id, host: s.host, flavor: s.flavorId || s.flavorName },
        },
      );
    }
    return { id: s.id, name: s.name, host: s.host, need };
  });
}

/** Free resources of every enabled, up host of the hypervisor agent (`binary`) outside `exclude`. */
export async function receivingHosts(
  cloud: CloudClient,
  exclude: readonly string[],
  binary: string,
  ratio: Resources = CAPACITY_DEFAULTS.allocationRatio,
): Promise<HostCapacity[]> {
  const services = await listComputeServices(cloud, binary);
  const open = services
    .filter((s) => s.binary === binary && s.status === 'enabled' && s.state === 'up')
    .map((s) => s.host)
    .filter((h) => !exclude.includes(h));
  const hypervisors = jsonRows(await cloud.openstack(OPENSTACK_COMMANDS.hypervisorStats), 'hypervisor list');
  const out: HostCapacity[] = [];
  for (const host of open) {
    const h = hypervisors.find((x) => hypervisorOf(host, str(x['Hypervisor Hostname'])));
    if (!h) continue; // a compute service without a hypervisor offers nothing
    out.push({
      host,
      free: parseHypervisorRow(h, ratio),
    });
  }
  return out;
}

/** The instances of `batch` must fit on the others: refused with E_EVACUATION_CAPACITY otherwise. */
export class EvacuationCapacity extends InputError {
  static readonly CODE = 'E_EVACUATION_CAPACITY';
  readonly verdict: CapacityVerdict;
  constructor(batch: readonly string[], verdict: CapacityVerdict, receivers: readonly HostCapacity[]) {
    const why = [
      ...(Object.keys(verdict.shortfall).length ? [`short of ${describeResources(verdict.shortfall)}`] : []),
      ...(verdict.unplaceable.length ? [`no single host can take ${verdict.unplaceable.join(', ')}`] : []),
    ].join('; ');
    super(
      EvacuationCapacity.CODE,
      `the instances of ${batch.join(', ')} (${describeResources(verdict.need)}) do not fit on the other compute hosts ` +
        `(${receivers.map((h) => h.host).join(', ') || 'none enabled and up'}: ${describeResources(verdict.free)} free): ${why}`,
      {
        hint:
          'Free room (delete or shrink instances, add a compute host) or upgrade in smaller batches (--batch 1). ' +
          'Nothing was migrated.',
        details: {
          batch,
          need: verdict.need,
          free: verdict.free,
          shortfall: verdict.shortfall,
          unplaceable: verdict.unplaceable,
          receivers: receivers.map((h) => h.host),
        },
      },
    );
    this.verdict = verdict;
  }
}

/** Knobs of the prechecks. */
export const PRECHECK_DEFAULTS = {
  /** Nodes asked at once (reachability). */
  concurrency: 16,
  /** Deadline of `true` over SSH and of the Docker engine's answer, per node. */
  reachTimeoutMs: 30_000,
  /** Deadline of each node's status queries (as `stackctl status --timeout`). */
  statusTimeoutMs: 60_000,
  /** Pause before the status is read again because a node could not be read the first time. */
  rereadAfterMs: 15_000,
  /** Deadline of one upgrade check in its one-off container. */
  serviceCheckTimeoutMs: 600_000,
  /** Characters of a failed check's log quoted in the error. */
  logTail: 1500,
} as const;

/**
 * Exit codes of the `*-status upgrade check` commands (oslo.upgradecheck,
 * used by nova-status and placement-status): a warning passes, with the
 * warning in the detail; a failure or an error refuses the upgrade.
 */
export const UPGRADE_CHECK_EXIT: Readonly<Record<number, { readonly meaning: string; readonly pass: boolean }>> = {
  0: { meaning: 'success', pass: true },
  1: { meaning: 'warning', pass: true },
  2: { meaning: 'failure', pass: false },
  255: { meaning: 'unexpected error', pass: false },
};

const tailOf = (s: string, n: number = PRECHECK_DEFAULTS.logTail): string => {
  const t = s.trim();
  return t.length > n ? '…' + t.slice(-n) : t;
};

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not answer within ${Math.round(ms / 1000)} s`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Every container of a deploy plan, optionally of one service and one node. */
export function containersOf(dp: DeployPlan, service?: string, node?: string): ContainerWork[] {
  return dp.steps.flatMap((st) =>
    st.nodes
      .filter((nw) => node === undefined || nw.node === node)
      .flatMap((nw) => nw.containers.filter((c) => service === undefined || c.service === service)),
  );
}

/**
 * The part of a roles Plan that collectStatus reads (nodes, services and their
 * nodes, the cloud's name), derived from a deploy plan: the upgrade context
 * carries deploy plans, not the roles plan they came from.
 */
export function statusPlanOf(dp: DeployPlan, ctx: Pick<UpgradeContext, 'current' | 'inventory'>): Plan {
  const nodes = new Map<string, PlanNode>();
  const services = new Map<string, { step: PlanService['step']; nodes: string[] }>();
  for (const st of dp.steps)
    for (const nw of st.nodes) {
      if (!nodes.has(nw.node))
        nodes.set(nw.node, {
          name: nw.node,
          role: nw.role,
          bmc: '',
          addresses: {},
          services: [],
          containers: [],
          configs: [],
        });
      for (const c of nw.containers) {
        let s = services.get(c.service);
        if (!s) services.set(c.service, (s = { step: c.step, nodes: [] }));
        if (!s.nodes.includes(nw.node)) s.nodes.push(nw.node);
      }
    }
  return {
    cloud: {
      name: dp.cloud,
      release: ctx.current.name,
      openstack: ctx.current.openstack,
      series: ctx.current.series,
      region: ctx.inventory.cloud.region ?? 'RegionOne',
    },
    inputs: { inventory: '', catalog: '', release: ctx.current.name, secrets: 'present' },
    vips: {},
    images: [],
    nodes: [...nodes.values()],
    services: [...services].map(([name, s]) => ({
      name,
      step: s.step,
      nodes: s.nodes,
      bootstrap: s.nodes[0] ?? '',
      endpoints: [],
      frontends: [],
    })),
    steps: [],
  };
}

const STATUS = new WeakMap<UpgradeContext, Promise<StatusReport>>();
const NOVA = new WeakMap<UpgradeContext, Promise<Finding[]>>();

/**
 * The status of the running cloud (ctx.currentDeploy), collected once per
 * context and shared by the check-healthy actions. A node that could not be
 * read (SSH, or its Docker engine silent past its deadline: an overloaded
 * machine) is a reason to look again, not yet to refuse: the whole status is
 * read a second time, PRECHECK_DEFAULTS.rereadAfterMs later, and that reading
 * stands. A container found stopped or unhealthy is not read again.
 * Nova's view is left out here (it needs the admin credentials, which only
 * the context's client holds): see novaFindings.
 */
export function statusOf(ctx: UpgradeContext): Promise<StatusReport> {
  let p = STATUS.get(ctx);
  if (!p) {
    const plan = statusPlanOf(ctx.currentDeploy, ctx);
    const api = ctx.services.computeApi?.service;
    const services = plan.services.map((s) => s.name).filter((s) => s !== api);
    const read = (): Promise<StatusReport> =>
      collectStatus(
        { plan, deployPlan: ctx.currentDeploy, services, roles: ctx.services },
        { connect: (node) => ctx.connect(node), now: ctx.now },
        { concurrency: PRECHECK_DEFAULTS.concurrency, timeoutMs: PRECHECK_DEFAULTS.statusTimeoutMs },
      );
    p = (async () => {
      const first = await read();
      if (!first.findings.some((f) => f.severity === Severity.UNREACHABLE)) return first;
      await ctx.sleep(PRECHECK_DEFAULTS.rereadAfterMs);
      return read();
    })();
    STATUS.set(ctx, p);
  }
  return p;
}

/** Nova's own view (agents registered and up, hypervisors up) against the current plan, once per context. */
export function novaFindings(ctx: UpgradeContext): Promise<Finding[]> {
  let p = NOVA.get(ctx);
  if (!p) {
    p = (async (): Promise<Finding[]> => {
      const plan = statusPlanOf(ctx.currentDeploy, ctx);
      const api = ctx.services.computeApi?.service;
      if (!api || !plan.services.some((s) => s.name === api)) return [];
      try {
        const { computeServices, hypervisors } = await novaView(ctx.cloud);
        const planned = new Map(plan.services.map((s) => [s.name, s.nodes]));
        return evaluateOpenStack(novaExpectation(planned, ctx.services.agents), computeServices, hypervisors);
      } catch (err) {
        return [{ severity: Severity.UNHEALTHY, node: 'cloud', subject: 'openstack', message: messageOf(err) }];
      }
    })();
    NOVA.set(ctx, p);
  }
  return p;
}

/** The findings that make `service` unhealthy on `nodes` (drift is not a health problem). */
export async function serviceProblems(
  ctx: UpgradeContext,
  service: string,
  nodes: readonly string[],
): Promise<Finding[]> {
  const report = await statusOf(ctx);
  const serious = (f: Finding): boolean => f.severity !== Severity.DRIFT;
  const containers = (node: string): Set<string> =>
    new Set(containersOf(ctx.currentDeploy, service, node).map((c) => c.name));
  const out = report.findings.filter(
    (f) =>
      serious(f) &&
      nodes.includes(f.node) &&
      !ctx.services.clusterChecks.has(f.subject) &&
      (f.subject === 'node' || containers(f.node).has(f.subject)),
  );
  const agent = ctx.services.agents.get(service);
  if (agent || service === ctx.services.computeApi?.service) {
    for (const f of await novaFindings(ctx)) {
      if (!serious(f)) continue;
      if (f.node === 'cloud') out.push(f);
      else if (
        nodes.includes(f.node) &&
        (f.subject === agent?.binary || (agent?.hypervisor === true && f.subject === 'hypervisor'))
      )
        out.push(f);
    }
  }
  return out;
}

const findingText = (f: Finding): string => `${f.node} ${f.subject}: ${f.message}`;

type Handler<K extends UpgradeAction['kind']> = ActionHandlers[K];

const checkReachable: Handler<'check-reachable'> = async (action, ctx) => {
  const results = await mapLimit(action.nodes, PRECHECK_DEFAULTS.concurrency, async (node) => {
    try {
      const a = ctx.connect(node);
      const r = await within(
        a.exec(['true'], { timeoutMs: PRECHECK_DEFAULTS.reachTimeoutMs }),
        PRECHECK_DEFAULTS.reachTimeoutMs + 5000,
        `${node}: SSH`,
      );
      if (r.code !== 0) return { node, error: `SSH: true exited with ${r.code}` };
      const v = await within(a.docker.version(), PRECHECK_DEFAULTS.reachTimeoutMs, `${node}: Docker`);
      return { node, docker: v.version };
    } catch (err) {
      return { node, error: `${err instanceof StackctlError ? err.code + ': ' : ''}${messageOf(err)}` };
    }
  });
  const bad = results.filter((r) => r.error !== undefined);
  if (bad.length) {
    throw new RemoteError(
      'E_PRECHECK_UNREACHABLE',
      `${bad.length} node(s) do not answer: ${bad.map((r) => `${r.node}: ${r.error}`).join('; ')}`,
      {
        hint: 'Every node must answer over SSH and run Docker before an upgrade (stackctl status). Nothing was stopped.',
        details: { nodes: bad.map((r) => r.node) },
      },
    );
  }
  const versions = [...new Set(results.map((r) => r.docker))].join(', ');
  return `${results.length} node(s) answer over SSH, Docker ${versions}`;
};

const checkHealthy: Handler<'check-healthy'> = async (action, ctx) => {
  const problems = await serviceProblems(ctx, action.service, action.nodes);
  if (problems.length) {
    throw new RemoteError(
      'E_PRECHECK_UNHEALTHY',
      `service ${action.service} is not healthy: ${problems.map(findingText).join('; ')}`,
      {
        hint: `stackctl status -i ${ctx.inventoryFile} shows the details; repair it (stackctl deploy) before upgrading. Nothing was stopped.`,
        details: { service: action.service, findings: problems },
      },
    );
  }
  return `${action.service} healthy on ${action.nodes.join(', ')}`;
};

const checkImages: Handler<'check-images'> = async (action, ctx) => {
  // NOTE: the references carry the registry the nodes pull from (cloud.registry or the manifest's).
  const r = await checkImagesPresent(action.images, { ...ctx.registry, release: ctx.target.name });
  return `${r.present.length} target image(s) present in the registry ${r.registry}`;
};

const checkCapacity: Handler<'check-capacity'> = async (action, ctx) => {
  const { movable, staying } = await instancesOn(ctx.cloud, action.batch);
  const stays = staying.length ? `; ${staying.length} instance(s) not running stay where they are` : '';
  if (!movable.length) return `${action.batch.join(', ')}: no running instance to move${stays}`;
  const demands = await demandsOf(ctx.cloud, movable);
  const receivers = await receivingHosts(ctx.cloud, action.batch, hypervisorBinary(ctx.services));
  const v = evacuationCapacity(demands, receivers);
  if (!v.fits) throw new EvacuationCapacity(action.batch, v, receivers);
  return (
    `${demands.length} instance(s) (${describeResources(v.need)}) fit on ${receivers.map((h) => h.host).join(', ')} ` +
    `(${describeResources(v.free)} free)${stays}`
  );
};

/**
 * The names of the findings an upgrade check (oslo.upgradecheck's table) reports as failed:
 * each `| Check: <name> |` row followed, within its box, by `| Result: Failure |`.
 */
export function failedFindings(output: string): string[] {
  const failed: string[] = [];
  let name: string | undefined;
  for (const line of output.split('\n')) {
    const check = /^\|\s*Check:\s*(.*?)\s*\|\s*$/.exec(line);
    if (check) name = check[1];
    else if (name !== undefined && /^\|\s*Result:\s*Failure\s*\|\s*$/.test(line)) failed.push(name);
  }
  return failed;
}

const checkService: Handler<'check-service'> = async (action, ctx) => {
  const first = containersOf(ctx.targetDeploy, action.service, action.node)[0];
  const work = first ? ctx.targetWork(action.node, first.name) : undefined;
  if (!work) {
    throw new InputError(
      'E_PRECHECK_NO_CONTAINER',
      `service ${action.service} has no container on ${action.node} in the target plan to borrow for '${action.command.join(' ')}'`,
      { hint: 'The check runs on the service bootstrap node: is the service placed there?', details: { ...action } },
    );
  }
  const r = await ctx.oneOff(action.node, work, action.image, action.command, {
    timeoutMs: PRECHECK_DEFAULTS.serviceCheckTimeoutMs,
  });
  const exit = UPGRADE_CHECK_EXIT[r.code];
  const shown = action.command.slice(-3).join(' ');
  if (r.code === 0) return `${action.service}: ${shown} passed`;
  if (exit?.pass)
    return `${action.service}: ${shown} passed with a ${exit.meaning}: ${tailOf(r.log, 300).replace(/\s+/g, ' ')}`;
  const failed = failedFindings(r.log);
  if (
    r.code === 2 &&
    action.inWindow &&
    action.waive?.length &&
    failed.length &&
    failed.every((f) => action.waive!.includes(f))
  ) {
    return `${action.service}: ${shown} failed only on what this window replaces (waived: ${failed.join(', ')})`;
  }
  throw new RemoteError(
    'E_UPGRADE_CHECK',
    `service ${action.service}: '${action.command.join(' ')}' with ${action.image} on ${action.node} exited with ${r.code}` +
      ` (${exit?.meaning ?? 'failure'}): ${tailOf(r.log)}`,
    {
      hint: action.inWindow
        ? `The check ran inside ${action.service}'s window: its containers are stopped and its migrations done. ` +
          "Fix what the check names, then 'stackctl upgrade --resume' runs it again."
        : 'The target release refuses this cloud as it is: fix what the check names, then run the upgrade again. Nothing was stopped.',
      details: { service: action.service, node: action.node, image: action.image, exitCode: r.code },
    },
  );
};

/** One handler per precheck kind; each resolves with a short detail or rejects naming what is wrong. */
export const PRECHECK_HANDLERS: Pick<
  ActionHandlers,
  'check-reachable' | 'check-healthy' | 'check-images' | 'check-capacity' | 'check-service'
> = {
  'check-reachable': checkReachable,
  'check-healthy': checkHealthy,
  'check-images': checkImages,
  'check-capacity': checkCapacity,
  'check-service': checkService,
};
