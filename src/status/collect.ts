/**
 * Collect the status: every node in parallel (at most `concurrency` at
 * once, each within `timeoutMs`), then the clustered services through the
 * containers found running. A node that cannot be reached becomes a finding;
 * it never hides the others. Read-only: nothing on a node is changed.
 */
import { StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import { mapLimit } from '../core/concurrency.js';
import type { Secret } from '../core/secret.js';
import type { ConfigWork, ContainerWork, DeployPlan } from '../orchestrator/planner.js';
import type { ContainerEngine, ExecOptions, ExecResult, RemoteCommand } from '../remote/index.js';
import type { Plan, PlanImage } from '../roles/plan.js';
import { pinnedRef } from '../roles/release.js';
import { short, type TagCheck } from '../images/pin.js';
import type { ServiceRoles } from '../roles/service-roles.js';
import { readCluster, type ClusterView } from './clusters.js';
import { checkNow, configDrift, configFindings, containerFindings, containerStatus } from './containers.js';
import { outageFinding } from './galera.js';
import { knownPosition, readMember, type MemberState } from '../recover/members.js';
import { runningState } from '../recover/format.js';
import {
  ContainerState,
  STATUS_FORMAT_VERSION,
  Severity,
  ViewState,
  type ErrorInfo,
  type ChassisRow,
  type Finding,
  type GaleraDiagnosis,
  type GaleraMember,
  type CertificatesView,
  type ImagesView,
  type NetworkAgentRow,
  type NetworkView,
  type NodeStatus,
  type OpenStackView,
  type StatusReport,
} from './model.js';
import { NOT_DEPLOYED, evaluateOpenStack, novaExpectation } from './openstack.js';
import {
  clientCaFiles,
  clientContainers,
  containerClient,
  listNetworkAgents,
  novaView,
  type OpenStackClient,
} from './openstack-client.js';
import { networkExpectation } from '../roles/network-agents.js';
import { AGENT_RECHECK_MS, evaluateNetwork, parseChassisJson, plannedAgentDown } from './network.js';
import { STATUS_EXIT, verdictOf } from './verdict.js';
import { EXPIRY_THRESHOLD_DAYS, evaluateExpiry, expiryProblem, type ReadCertificate } from '../certs/expiry.js';

/** Defaults of a status run. */
export const STATUS_DEFAULTS = {
  /** Nodes queried at once. */
  concurrency: 16,
  /** Deadline of one node's queries, and of each command in a container (a cluster check may boot a VM). */
  timeoutMs: 60_000,
} as const;

/** What status needs of a node (the `Remote` facade fits). */
export interface StatusNodeAccess {
  readonly node: string;
  exec(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
  readonly docker: ContainerEngine;
}

/** Side effects, injected (CONVENTIONS.md 8). */
export interface StatusDeps {
  /** A node's shell and Docker engine; may throw (no address): the node is then unreachable. */
  readonly connect: (node: string) => StatusNodeAccess;
  /**
   * Where the pinned images' tags point in the registry now (images/pin.ts checkTags). Absent: the
   * registry is not asked, and the images view says so.
   */
  readonly checkTags?: (images: readonly PlanImage[]) => Promise<TagCheck[]>;
  /**
   * Read the certificates the cloud serves (and its CA) where clients meet them (certs/probe.ts).
   * Absent: the report has no certificates view.
   */
  readonly readCertificates?: () => Promise<readonly ReadCertificate[]>;
  readonly now?: () => number;
  /** Pause between the two agent listings (default setTimeout). */
  readonly sleep?: (ms: number) => Promise<void>;
}

/** What to compare the nodes with. */
export interface StatusInput {
  /** The effective plan (real config hashes, as deploy compares them). */
  readonly plan: Plan;
  /** The deploy plan of the checked services: the containers and config files each node should have. */
  readonly deployPlan: DeployPlan;
  /** The services checked. */
  readonly services: readonly string[];
  /** What the service files declare: clusters to ask, agents, the client containers. */
  readonly roles: ServiceRoles;
  /** OS_* variables of the admin user (internal endpoint); undefined without a secrets file. */
  readonly credentials?: Readonly<Record<string, string | Secret>>;
  /** Fewer days left than this on a served certificate fails the status (default EXPIRY_THRESHOLD_DAYS). */
  readonly certThresholdDays?: number;
}

/** Options of a status run. */
export interface StatusOptions {
  readonly concurrency?: number;
  readonly timeoutMs?: number;
}

/** A StackctlError (or anything) as the report carries it. */
export function errorInfo(err: unknown): ErrorInfo {
  if (err instanceof StackctlError)
    return { code: err.code, message: err.message, ...(err.hint ? { hint: err.hint } : {}) };
  return { code: 'E_INTERNAL', message: messageOf(err) };
}

/** `p`, or a TimeoutError after `ms` (the work itself goes on until the pool is closed). */
async function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new TimeoutError('E_STATUS_TIMEOUT', `${what} did not answer within ${Math.round(ms / 1000)} s`, {
            hint: 'The machine may be overloaded or the network slow: try again with a longer --timeout.',
          }),
        ),
      ms,
    );
  });
  try {
    return await Promise.race([p, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Per node: every container and config file of the checked services, over all steps. */
function workByNode(dp: DeployPlan): Map<string, { containers: ContainerWork[]; configs: ConfigWork[] }> {
  const out = new Map<string, { containers: ContainerWork[]; configs: ConfigWork[] }>();
  for (const st of dp.steps) {
    for (const nw of st.nodes) {
      let w = out.get(nw.node);
      if (!w) out.set(nw.node, (w = { containers: [], configs: [] }));
      w.containers.push(...nw.containers);
      w.configs.push(...nw.configs);
    }
  }
  return out;
}

/** The end of a command's output, for a member's error. */
const tail = (s: string, n = 300): string => {
  const t = s.trim();
  return t.length > n ? '…' + t.slice(-n) : t;
};

/** A member read by `recover galera`'s reader, as the status report carries it. */
function galeraDiagnosis(s: MemberState): GaleraDiagnosis {
  const g = s.disk?.grastate;
  const p = knownPosition(s);
  return {
    running: runningState(s),
    ...(g?.uuid !== undefined ? { uuid: g.uuid } : {}),
    ...(g?.seqno !== undefined ? { seqno: g.seqno } : {}),
    ...(g?.safeToBootstrap !== undefined ? { safeToBootstrap: g.safeToBootstrap } : {}),
    ...(p ? { position: `${p.seqno} (${p.source})` } : {}),
    gvwstate: s.disk?.gvwstate ?? false,
    data: s.data,
    log: s.log.slice(-4),
  };
}

/** Collect everything; never throws for a node's failure (it is a finding). */
export async function collectStatus(
  input: StatusInput,
  deps: StatusDeps,
  opts: StatusOptions = {},
): Promise<StatusReport> {
  const now = deps.now ?? Date.now;
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const t0 = now();
  const timeoutMs = opts.timeoutMs ?? STATUS_DEFAULTS.timeoutMs;
  const concurrency = opts.concurrency ?? STATUS_DEFAULTS.concurrency;
  const work = workByNode(input.deployPlan);
  const access = new Map<string, StatusNodeAccess>();
  const accessOf = (node: string): StatusNodeAccess => {
    let a = access.get(node);
    if (!a) access.set(node, (a = deps.connect(node)));
    return a;
  };

  // 1. Every node: reachability, its containers, its config files.
  const nodes = await mapLimit(input.plan.nodes, concurrency, async (pn): Promise<NodeStatus> => {
    const started = now();
    const w = work.get(pn.name) ?? { containers: [], configs: [] };
    const address = pn.addresses.provisioning ?? Object.values(pn.addresses)[0] ?? '';
    try {
      return await withDeadline(
        (async (): Promise<NodeStatus> => {
          const a = accessOf(pn.name);
          await a.docker.version(); // reachability of SSH and dockerd, even for a node with nothing planned
          const infos = await Promise.all(w.containers.map((c) => a.docker.inspectContainer(c.name)));
          // The registry digests of the images that pinned containers run (each image looked at once).
          const digestsOf = new Map<string, Promise<readonly string[] | undefined>>();
          const imageDigests = await Promise.all(
            infos.map((info, i) => {
              if (!info?.state.running || !w.containers[i]!.image.includes('@')) return undefined;
              let p = digestsOf.get(info.imageId);
              if (!p) digestsOf.set(info.imageId, (p = a.docker.inspectImage(info.imageId).then((x) => x?.digests)));
              return p;
            }),
          );
          // Docker's health still `starting` (its first check is an interval away): run the check now
          const checked = await Promise.all(infos.map((info, i) => checkNow(a, w.containers[i]!, info)));
          let drift: NodeStatus['configFiles']['drift'] = [];
          if (w.configs.length) {
            const r = await a.exec(['sha256sum', '--', ...w.configs.map((c) => c.dest)], { timeoutMs });
            drift = configDrift(w.configs, r.stdout); // missing files only go to stderr
          }
          return {
            name: pn.name,
            role: pn.role,
            address,
            reachable: true,
            containers: w.containers.map((c, i) => containerStatus(c, infos[i], imageDigests[i], checked[i])),
            configFiles: { checked: w.configs.length, drift },
            ms: now() - started,
          };
        })(),
        timeoutMs,
        `node ${pn.name} (${address})`,
      );
    } catch (err) {
      return {
        name: pn.name,
        role: pn.role,
        address,
        reachable: false,
        error: errorInfo(err),
        containers: [],
        configFiles: { checked: w.configs.length, drift: [] },
        ms: now() - started,
      };
    }
  });
  const byName = new Map(nodes.map((n) => [n.name, n]));

  /** Run argv in a container of a node that answered, with the container running; stdout or an error text. */
  const inContainer = async (
    node: string,
    container: string,
    argv: readonly string[],
  ): Promise<{ stdout: string } | { error: string }> => {
    const n = byName.get(node);
    if (!n?.reachable) return { error: 'node unreachable' };
    const c = n.containers.find((x) => x.name === container);
    if (c && c.state !== ContainerState.RUNNING) return { error: `container ${container} ${c.state}` };
    try {
      const r = await withDeadline(
        accessOf(node).docker.exec(container, argv, { timeoutMs }),
        timeoutMs + 5000,
        `${node}: ${argv[0]} in ${container}`,
      );
      if (r.code !== 0) return { error: `${argv[0]} exited with ${r.code}: ${tail(r.stderr || r.stdout)}` };
      return { stdout: r.stdout };
    } catch (err) {
      return { error: errorInfo(err).message };
    }
  };
  const checked = new Set(input.services);
  /** Checked service -> its nodes. */
  const planned = new Map(input.plan.services.filter((s) => checked.has(s.name)).map((s) => [s.name, s.nodes]));
  const nodesOf = (service: string): readonly string[] => planned.get(service) ?? [];

  // 2. Clusters, all at once (each query bounded), as their services' files say to ask them.
  const clustered = [...input.roles.clusterChecks].filter(([service]) => nodesOf(service).length);
  const [read, openstack, network, images, certificates] = await Promise.all([
    Promise.all(
      clustered.map(([service, check]) =>
        readCluster(
          service,
          check,
          nodesOf(service),
          (node) => inContainer(node, check.container, check.command),
          concurrency,
        ),
      ),
    ),
    openStackView(),
    networkView(),
    imagesView(),
    certificatesView(),
  ]);
  const clusters = await Promise.all(read.map(explainGalera));

  /**
   * A Galera cluster of several members that is not healthy is explained by its members' disks and
   * logs (read as `recover galera` reads them), and a cloud finding names the recover command.
   */
  async function explainGalera(c: { view: ClusterView; findings: Finding[] }) {
    const v = c.view;
    const check = input.roles.clusterChecks.get(v.service);
    if (v.kind !== 'galera' || v.expected < 2 || v.state === ViewState.OK || !check) return c;
    const container = check.container;
    const members = await mapLimit(v.members as readonly GaleraMember[], concurrency, async (m) => {
      const w = work.get(m.node)?.containers.find((x) => x.name === container);
      if (!w || !byName.get(m.node)?.reachable || (m.localState === 'Synced' && m.clusterStatus === 'Primary'))
        return m;
      const s = await withDeadline(
        readMember(accessOf(m.node), w, check.command),
        timeoutMs,
        `${m.node}: Galera disk`,
      ).catch(() => undefined);
      return s && s.error === undefined ? { ...m, diagnosis: galeraDiagnosis(s) } : m;
    });
    const outage = outageFinding(v.expected, members);
    return {
      view: { ...v, members },
      findings: outage ? [...c.findings, { ...outage, subject: v.service }] : c.findings,
    };
  }

  /** The served certificates and the CA against the expiry threshold; each problem a cloud finding naming it. */
  async function certificatesView(): Promise<{ view?: CertificatesView; findings: Finding[] }> {
    if (!deps.readCertificates) return { findings: [] };
    const thresholdDays = input.certThresholdDays ?? EXPIRY_THRESHOLD_DAYS;
    const read = await deps.readCertificates();
    const certs = evaluateExpiry(read, new Date(now()), thresholdDays);
    const findings: Finding[] = [];
    for (const c of certs) {
      const message = expiryProblem(c, thresholdDays);
      if (message)
        findings.push({ severity: Severity.UNHEALTHY, node: 'cloud', subject: `certificate ${c.name}`, message });
    }
    const state = !certs.length ? ViewState.NOT_DEPLOYED : findings.length ? ViewState.PROBLEM : ViewState.OK;
    return { view: { state, thresholdDays, certificates: certs }, findings };
  }

  /** The checked services' images: pinned tags against the registry, and the images without a pin. */
  async function imagesView(): Promise<{ view: ImagesView; findings: Finding[] }> {
    const used = new Set([...work.values()].flatMap((w) => w.containers.map((c) => c.image)));
    const mine = input.plan.images.filter((i) => used.has(i.digest ? pinnedRef(i.ref, i.digest) : i.ref));
    const unpinned = mine.filter((i) => !i.digest).map((i) => i.ref);
    const pinned = mine.filter((i) => i.digest);
    if (!pinned.length) return { view: { state: ViewState.NOT_DEPLOYED, tags: [], unpinned }, findings: [] };
    if (!deps.checkTags)
      return { view: { state: ViewState.UNKNOWN, tags: [], unpinned, error: 'registry not asked' }, findings: [] };
    try {
      const tags = await withDeadline(deps.checkTags(pinned), timeoutMs, 'the registry');
      const findings = tags.flatMap((t): Finding[] =>
        t.state === 'moved'
          ? [
              {
                severity: Severity.DRIFT,
                node: 'cloud',
                subject: t.ref,
                message:
                  `tag now points to ${short(t.current!)}, not the pinned ${short(t.pinned)}: the cloud stays on the pin; ` +
                  'run stackctl images pin --refresh to move (then deploy)',
              },
            ]
          : t.state === 'gone'
            ? [
                {
                  severity: Severity.DRIFT,
                  node: 'cloud',
                  subject: t.ref,
                  message: `tag is gone from the registry (pinned ${short(t.pinned)}): push it again or pin another release`,
                },
              ]
            : [],
      );
      const state = findings.length ? ViewState.PROBLEM : ViewState.OK;
      return { view: { state, tags, unpinned }, findings };
    } catch (err) {
      const error = errorInfo(err).message;
      return {
        view: { state: ViewState.UNKNOWN, tags: [], unpinned, error },
        findings: [{ severity: Severity.UNHEALTHY, node: 'cloud', subject: 'registry', message: error }],
      };
    }
  }

  /**
   * The OpenStack client as the admin user, in the first node (plan order) that answered and runs a
   * container with the client; or why there is none.
   */
  function adminClient(): { client: OpenStackClient; at: string } | { error: string } {
    const api = input.roles.computeApi?.service;
    const containers = clientContainers(input.roles);
    if (!input.credentials) return { error: 'no admin credentials (keystone_admin_password)' };
    const identity = input.roles.identity?.service;
    const candidates = [...new Set([...(identity ? nodesOf(identity) : []), ...(api ? nodesOf(api) : [])])];
    for (const node of candidates) {
      const n = byName.get(node);
      const c = n?.reachable
        ? containers.find((name) => n.containers.some((x) => x.name === name && x.state === 'running'))
        : undefined;
      if (c) {
        const client = containerClient({
          docker: accessOf(node).docker,
          node,
          container: c,
          credentials: input.credentials,
          caFiles: clientCaFiles(input.roles),
          timeoutMs,
        });
        return { client, at: `${node}/${c}` };
      }
    }
    return { error: `no running ${containers.join(' or ')} container to ask` };
  }

  async function openStackView(): Promise<{ view: OpenStackView; findings: Finding[] }> {
    const api = input.roles.computeApi?.service;
    if (!api || !checked.has(api)) return { view: NOT_DEPLOYED, findings: [] };
    const problem = (state: ViewState, error: string, via?: string) => ({
      view: { state, ...(via ? { via } : {}), error },
      findings: [{ severity: Severity.UNHEALTHY, node: 'cloud', subject: 'openstack', message: error }],
    });
    const admin = adminClient();
    if ('error' in admin) return problem(ViewState.UNKNOWN, admin.error);
    try {
      const { computeServices, hypervisors } = await withDeadline(
        novaView(admin.client),
        timeoutMs + 5000,
        `${admin.at}: openstack`,
      );
      const findings = evaluateOpenStack(novaExpectation(planned, input.roles.agents), computeServices, hypervisors);
      const state = findings.length ? ViewState.PROBLEM : ViewState.OK;
      return { view: { state, via: admin.at, computeServices, hypervisors }, findings };
    } catch (err) {
      return problem(ViewState.PROBLEM, messageOf(err), admin.at);
    }
  }

  /**
   * The dataplane, when a checked service declares a Neutron agent: the chassis list from the first
   * member of the network control plane that answers, Neutron's agents through the admin client.
   */
  async function networkView(): Promise<{ view?: NetworkView; findings: Finding[] }> {
    const declared = new Map([...input.roles.networkAgents].filter(([svc]) => nodesOf(svc).length));
    if (!declared.size) return { findings: [] };
    const want = networkExpectation((n) => input.plan.nodes.find((x) => x.name === n)?.addresses, planned, declared);
    const errors: string[] = [];
    const problem = (subject: string, message: string): Finding => ({
      severity: Severity.UNHEALTHY,
      node: 'cloud',
      subject,
      message,
    });
    const found: Finding[] = [];
    const control = input.roles.networkControl;
    const chassisRead = async (): Promise<{ rows?: ChassisRow[]; via?: string }> => {
      if (!want.chassis.length) return {};
      if (!control || !nodesOf(control.service).length) {
        errors.push('no checked service lists the chassis (provides: network_control)');
        return {};
      }
      const tried: string[] = [];
      for (const node of nodesOf(control.service)) {
        const r = await inContainer(node, control.container, control.chassisList);
        if ('error' in r) {
          tried.push(`${node}: ${r.error}`);
          continue;
        }
        try {
          return { rows: parseChassisJson(r.stdout), via: `${node}/${control.container}` };
        } catch (err) {
          tried.push(`${node}: ${messageOf(err)}`);
        }
      }
      const message = `the chassis list could not be read: ${tried.join('; ')}`;
      errors.push(message);
      found.push(problem('chassis', message));
      return {};
    };
    const agentsRead = async (): Promise<{ agents?: NetworkAgentRow[]; via?: string; askedTwice?: boolean }> => {
      const admin = adminClient();
      if ('error' in admin) {
        errors.push(`Neutron's agents not asked: ${admin.error}`);
        found.push(problem('network agents', admin.error));
        return {};
      }
      const list = (): Promise<NetworkAgentRow[]> =>
        withDeadline(listNetworkAgents(admin.client), timeoutMs + 5000, `${admin.at}: openstack`);
      try {
        const first = await list();
        if (!plannedAgentDown(want, first)) return { agents: first, via: admin.at };
        // Neutron 21 reports every OVN agent dead in the one listing that sends its second liveness
        // ping (it skips a chassis' first nb_cfg answer, 0 -> 1): a listing AGENT_RECHECK_MS later
        // sends none and reads the chassis' answer to it. An agent down in both is down.
        await sleep(AGENT_RECHECK_MS);
        return { agents: await list(), via: admin.at, askedTwice: true };
      } catch (err) {
        errors.push(messageOf(err));
        found.push(problem('network agents', messageOf(err)));
        return { via: admin.at };
      }
    };
    const [chassis, agents] = await Promise.all([chassisRead(), agentsRead()]);
    found.push(...evaluateNetwork(want, chassis.rows, agents.agents, agents.askedTwice ? AGENT_RECHECK_MS : undefined));
    const state = !chassis.rows && !agents.agents ? ViewState.UNKNOWN : found.length ? ViewState.PROBLEM : ViewState.OK;
    return {
      view: {
        state,
        ...(chassis.via ? { chassisVia: chassis.via } : {}),
        ...(chassis.rows ? { chassis: chassis.rows } : {}),
        ...(agents.via ? { agentsVia: agents.via } : {}),
        ...(agents.agents ? { agents: agents.agents } : {}),
        ...(errors.length ? { errors } : {}),
      },
      findings: found,
    };
  }

  const findings: Finding[] = [];
  for (const n of nodes) {
    if (!n.reachable) {
      findings.push({
        severity: Severity.UNREACHABLE,
        node: n.name,
        subject: 'node',
        message: `${n.error?.code ?? 'E_INTERNAL'}: ${n.error?.message ?? 'unreachable'}`,
      });
      continue;
    }
    for (const c of n.containers) findings.push(...containerFindings(n.name, c));
    findings.push(...configFindings(n.name, n.configFiles.drift));
  }
  // Members of an unreachable node are already a finding of their own.
  const unreachable = new Set(nodes.filter((n) => !n.reachable).map((n) => n.name));
  const notAlreadySaid = (f: Finding): boolean => !unreachable.has(f.node);
  for (const c of clusters) findings.push(...c.findings.filter(notAlreadySaid));
  findings.push(...openstack.findings);
  findings.push(...network.findings.filter(notAlreadySaid));
  findings.push(...images.findings);
  findings.push(...certificates.findings);
  const verdict = verdictOf(findings);
  return {
    version: STATUS_FORMAT_VERSION,
    cloud: input.plan.cloud.name,
    time: new Date(t0).toISOString(),
    services: [...input.services],
    verdict,
    exitCode: STATUS_EXIT[verdict],
    nodes,
    clusters: clusters.map((c): ClusterView => c.view),
    openstack: openstack.view,
    ...(network.view ? { network: network.view } : {}),
    images: images.view,
    ...(certificates.view ? { certificates: certificates.view } : {}),
    findings,
    ms: now() - t0,
  };
}
