/**
 * Container lab nodes (DESIGN.md 5): one container per inventory node, with
 * sshd and its own dockerd, on Docker bridge networks that have exactly the
 * inventory's subnets, each container at its IPAM addresses. `labUp` is
 * re-entrant: it creates only what is missing. `labDown` removes what carries
 * the lab's label, and nothing else.
 */
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { InputError, RemoteError, TimeoutError } from '../../core/errors.js';
import { writeFileAtomic } from '../../core/fs.js';
import { formatIpv4, hostRange, parseIpv4 } from '../../core/ipv4.js';
import type { ParsedNetwork } from '../../inventory/semantic.js';
import { labImageRef } from '../../images/catalog.js';
import type { ContainerSpec, LocalEngine } from '../../remote/docker-local.js';
import { REGISTRY_CONTAINER } from '../../images/registry.js';
import { dockerTrustFiles } from '../../images/registry-tls.js';
import type { Release } from '../../roles/schema.js';
import { ensureKeyPair, sshKeygen, writeKnownHosts, type KeyGen } from './keys.js';
import { writeLabMachines } from './machines.js';
import { checksumOffloadOff, hostNetContainer } from './offload.js';
import { tarFiles, type TarFile } from '../../core/tar.js';

/** Labels on everything a container lab creates. */
export const LAB_LABEL = {
  /** The lab (cloud) name. */
  lab: 'org.stackctl.lab',
  /** The inventory node a container stands for. */
  node: 'org.stackctl.node',
} as const;

/** The network alias of the registry on the provisioning network. */
export const REGISTRY_ALIAS = 'lab-registry';

/**
 * Docker options of a node container: the "privileged-equivalent" set. A
 * plain --privileged fails with Docker 20.10 on hosts whose capability
 * bounding set lacks CAP_SYS_RESOURCE, so every capability but that one is
 * added, and the confinement a nested dockerd trips over is lifted.
 */
export const NODE_CONTAINER_OPTIONS = {
  capAdd: ['ALL'],
  capDrop: ['SYS_RESOURCE'],
  securityOpt: ['seccomp=unconfined', 'apparmor=unconfined'],
  /** `--security-opt systempaths=unconfined`, which the API spells as empty path lists. */
  unmaskPaths: true,
  deviceCgroupRules: ['a *:* rwm'],
  /** /dev/net/tun: libvirt's guests get their NICs as tap devices (the node's kernel makes no such node). */
  devices: ['/dev/fuse', '/dev/net/tun'],
  /** overlay2 of the nested dockerd needs a non-overlay filesystem: an anonymous volume. */
  volumes: ['/var/lib/docker'],
} as const;

/** What the lab module needs of a loaded inventory (the CLI builds it). */
export interface LabInput {
  readonly inventoryFile: string;
  /** cloud.name: names and labels every Docker object of the lab. */
  readonly name: string;
  /** cloud.registry (host:port), or the release's. */
  readonly registry: string;
  /** cloud.registry_insecure: the nodes' dockerd pulls from the registry over plain HTTP. */
  readonly registryInsecure: boolean;
  /** The CA the nodes' dockerd trusts the registry with when it serves TLS (/etc/docker/certs.d). */
  readonly registryCa?: string;
  readonly release: Release;
  readonly networks: ReadonlyMap<string, ParsedNetwork>;
  /** The inventory network Neutron's floating IPs are on (cloud.resources.external_network), if any. */
  readonly floatingNetwork?: string;
  readonly nodes: readonly {
    readonly name: string;
    readonly role: string;
    readonly addresses: Record<string, string>;
  }[];
}

/** Files of a lab next to its inventory. */
export interface LabPaths {
  readonly labDir: string;
  readonly sshDir: string;
  readonly operatorKey: string;
  readonly knownHosts: string;
  readonly hostKeyDir: string;
  readonly stateFile: string;
}

/** Paths of a lab: `<inventory>.lab/`, `<inventory>.ssh/id_ed25519`, `<inventory>.known_hosts`. */
export function labPaths(inventoryFile: string): LabPaths {
  const base = inventoryFile.replace(/\.ya?ml$/, '');
  const labDir = `${base}.lab`;
  return {
    labDir,
    sshDir: `${base}.ssh`,
    operatorKey: join(`${base}.ssh`, 'id_ed25519'),
    knownHosts: `${base}.known_hosts`,
    hostKeyDir: join(labDir, 'hostkeys'),
    stateFile: join(labDir, 'lab.json'),
  };
}

/** A Docker network of the lab. */
export interface LabNetwork {
  /** Inventory network name. */
  readonly network: string;
  /** Docker network name. */
  readonly docker: string;
  readonly subnet: string;
  /** This machine's address on it: the inventory gateway, else the last host address. */
  readonly gateway: string;
}

/** A node container of the lab. */
export interface LabNode {
  readonly node: string;
  readonly role: string;
  readonly container: string;
  /** Inventory network -> address, provisioning first. */
  readonly addresses: Readonly<Record<string, string>>;
  /** The address SSH and the BMC status use. */
  readonly sshAddress: string;
}

/** The whole lab, derived from the inventory; pure. */
export interface LabPlan {
  readonly name: string;
  readonly networks: readonly LabNetwork[];
  readonly nodes: readonly LabNode[];
  readonly registry: { readonly network: string; readonly ip: string; readonly port: string } | undefined;
}

const dockerName = (lab: string, what: string): string => `stackctl-${lab}-${what}`;

/** Derive the lab's Docker objects from the inventory. Errors name what does not fit. */
export function planLab(input: LabInput): LabPlan {
  const used = new Set(input.nodes.flatMap((n) => Object.keys(n.addresses)));
  const networks: LabNetwork[] = [];
  for (const [name, net] of input.networks) {
    if (!used.has(name)) continue;
    const [, last] = hostRange(net.cidr);
    const gateway = net.gateway ?? last;
    if (gateway === net.vip) {
      throw new InputError('E_LAB_GATEWAY', `network ${name}: the VIP ${formatIpv4(gateway)} is the last address`, {
        hint: 'Give the network a gateway, or move the VIP: this machine takes the last address of a lab network.',
      });
    }
    networks.push({
      network: name,
      docker: dockerName(input.name, name),
      subnet: net.cidr.text,
      gateway: formatIpv4(gateway),
    });
  }
  const order = (a: string, b: string): number =>
    a === 'provisioning' ? -1 : b === 'provisioning' ? 1 : a.localeCompare(b);
  const nodes = input.nodes.map((n) => {
    const addresses = Object.fromEntries(Object.entries(n.addresses).sort(([a], [b]) => order(a, b)));
    for (const [net, ip] of Object.entries(addresses)) {
      if (ip === networks.find((x) => x.network === net)?.gateway) {
        throw new InputError('E_LAB_ADDRESS', `node ${n.name}: ${ip} on ${net} is this machine's address in the lab`, {
          hint: 'Change the allocation range or the gateway of that network.',
        });
      }
    }
    return {
      node: n.name,
      role: n.role,
      container: dockerName(input.name, n.name),
      addresses,
      sshAddress: addresses.provisioning ?? Object.values(addresses)[0]!,
    };
  });
  // The registry joins the provisioning network at the inventory's registry address, if that lies in it.
  const [host, port = '5000'] = input.registry.split(':');
  const ip = parseIpv4(host ?? '');
  const prov = input.networks.get('provisioning');
  const registry =
    ip !== undefined && prov && ip >= prov.cidr.first && ip <= prov.cidr.last
      ? { network: dockerName(input.name, 'provisioning'), ip: host!, port }
      : undefined;
  return { name: input.name, networks, nodes, registry };
}

/** What lab up records, to undo exactly that. */
interface LabState {
  readonly version: 1;
  /** The registry container, when this lab started it (then lab down removes it). */
  readonly registryStarted?: string;
  /** Files lab up created next to the inventory (removed by `lab down --purge`). */
  readonly created: readonly string[];
}

function readLabState(paths: LabPaths): LabState {
  if (!existsSync(paths.stateFile)) return { version: 1, created: [] };
  return JSON.parse(readFileSync(paths.stateFile, 'utf8')) as LabState;
}

function writeLabState(paths: LabPaths, st: LabState): void {
  mkdirSync(paths.labDir, { recursive: true });
  writeFileAtomic(paths.stateFile, JSON.stringify(st, null, 2) + '\n');
}

/** Record files created outside `<inventory>.lab/` (kept across runs, removed by --purge). */
export function recordCreated(inventoryFile: string, files: readonly string[]): void {
  const paths = labPaths(inventoryFile);
  const st = readLabState(paths);
  writeLabState(paths, { ...st, created: [...new Set([...st.created, ...files])] });
}

/** Files `lab up` recorded as created next to the inventory (what `lab down --purge` removes). */
export function recordedCreated(inventoryFile: string): readonly string[] {
  return readLabState(labPaths(inventoryFile)).created;
}

/** Side effects of the lab functions, injectable (CONVENTIONS.md 8). */
export interface LabDeps {
  readonly engine: LocalEngine;
  readonly log: (line: string) => void;
  readonly keygen?: KeyGen;
  /** Make sure the registry runs (the images module's ensureRegistry); `created` when this call started it. */
  readonly ensureRegistry: () => Promise<{ container: string; created: boolean; reconfigured?: boolean }>;
  /** Start / stop the virtual BMC process of the inventory (src/cli/lab.ts). */
  readonly startBmcs: () => Promise<void>;
  readonly stopBmcs: () => Promise<void>;
}

/** Options of labUp. */
export interface LabUpOptions {
  /** Seconds to wait for every node's sshd. */
  readonly readyTimeoutS?: number;
}

/** What changed in a labUp run (empty lists: nothing to do). */
export interface LabUpReport {
  readonly createdNetworks: string[];
  readonly createdContainers: string[];
  readonly startedContainers: string[];
  /** What was brought in line without being created: `registry`, `<node> dockerd`. */
  readonly reconfigured: string[];
  readonly plan: LabPlan;
}

/** How a node's dockerd reaches the lab registry under its names (host:port). */
export interface NodeRegistry {
  readonly names: readonly string[];
  /** Plain HTTP: the names go to insecure-registries. */
  readonly insecure: boolean;
  /** TLS: the CA each name is trusted with (certs.d/<name>/ca.crt). */
  readonly ca?: string;
}

/** The nested dockerd's daemon.json: the registry names under insecure-registries only when plain HTTP. */
export function nodeDaemonJson(r: NodeRegistry): string {
  return JSON.stringify({ 'storage-driver': 'overlay2', 'insecure-registries': r.insecure ? r.names : [] }) + '\n';
}

/** daemon.json and, for a registry over TLS, the CA under each of its names. */
export function nodeRegistryFiles(r: NodeRegistry): TarFile[] {
  return [
    { path: 'etc/docker/daemon.json', data: nodeDaemonJson(r), mode: 0o644 },
    ...(r.ca && !r.insecure
      ? dockerTrustFiles(r.names, r.ca).map((f) => ({ path: f.path.slice(1), data: f.content, mode: 0o644 }))
      : []),
  ];
}

/** Files injected into a node before its first start. */
function nodeFiles(hostKey: string, hostPub: string, operatorPub: string, registry: NodeRegistry): Buffer {
  return tarFiles([
    { path: 'etc/ssh/ssh_host_ed25519_key', data: hostKey, mode: 0o600 },
    { path: 'etc/ssh/ssh_host_ed25519_key.pub', data: hostPub + '\n', mode: 0o644 },
    { path: 'root/.ssh/authorized_keys', data: operatorPub + '\n', mode: 0o600 },
    ...nodeRegistryFiles(registry),
  ]);
}

/** Whether two JSON texts hold the same value, key order included (a deploy's host preparation rewrites it indented). */
function sameJson(a: string, b: string): boolean {
  try {
    return JSON.stringify(JSON.parse(a)) === JSON.stringify(JSON.parse(b));
  } catch {
    return false;
  }
}

/**
 * An existing node's registry files brought in line with the inventory (registry_insecure turned
 * off, a new CA): written again, and dockerd told to reload its daemon.json (SIGHUP: insecure-registries
 * is one of the settings it reloads; certs.d is read at each pull). True when daemon.json changed.
 */
async function refreshNodeRegistry(engine: LocalEngine, container: string, registry: NodeRegistry): Promise<boolean> {
  const before = await engine.exec(container, ['cat', '/etc/docker/daemon.json']);
  await engine.putArchive(container, '/', tarFiles(nodeRegistryFiles(registry)));
  if (before.exitCode === 0 && sameJson(before.output, nodeDaemonJson(registry))) return false;
  await engine.exec(container, ['pkill', '-HUP', '-x', 'dockerd']);
  return true;
}

/** Bring the lab up; re-entrant (CONVENTIONS.md 6): a second run finds everything and changes nothing. */
export async function labUp(input: LabInput, deps: LabDeps, opts: LabUpOptions = {}): Promise<LabUpReport> {
  const { engine, log } = deps;
  const plan = planLab(input);
  const paths = labPaths(input.inventoryFile);
  const report: LabUpReport = {
    createdNetworks: [],
    createdContainers: [],
    startedContainers: [],
    reconfigured: [],
    plan,
  };
  await engine.ping();
  const image = labImageRef(input.release, 'node');
  if (!(await engine.image(image))) {
    throw new RemoteError('E_NODE_IMAGE', `the node image ${image} is not built`, {
      hint: 'Run `stackctl images build --only node registry`.',
    });
  }
  const labels = { [LAB_LABEL.lab]: plan.name };

  // Docker's own refusal ("Pool overlaps with other one") names neither network
  const others = (await engine.networks({})).filter((o) => !plan.networks.some((n) => n.docker === o.name));
  for (const n of plan.networks) {
    const clash = others.find((o) => o.subnet === n.subnet);
    if (clash) {
      const owner = clash.labels[LAB_LABEL.lab];
      throw new InputError(
        'E_LAB_SUBNET_TAKEN',
        `lab '${plan.name}': subnet ${n.subnet} is already used by Docker network ${clash.name}` +
          (owner !== undefined ? ` (lab '${owner}')` : ''),
        {
          hint:
            owner !== undefined
              ? `Take lab '${owner}' down (\`stackctl lab down -i <its inventory>\`, or \`docker network rm ${clash.name}\` once its nodes are gone), or give this lab another --prefix.`
              : 'Give this lab another --prefix, or remove that Docker network.',
          details: { lab: plan.name, subnet: n.subnet, network: clash.name },
        },
      );
    }
  }
  for (const n of plan.networks) {
    const have = await engine.network(n.docker);
    if (have) {
      if (have.subnet !== n.subnet) {
        throw new InputError('E_LAB_NETWORK', `Docker network ${n.docker} has subnet ${have.subnet}, not ${n.subnet}`, {
          hint: 'Run `stackctl lab down` for this lab first, or pick another lab name.',
        });
      }
      continue;
    }
    await engine.createNetwork({ name: n.docker, subnet: n.subnet, gateway: n.gateway, labels });
    report.createdNetworks.push(n.docker);
    log(`network ${n.docker} ${n.subnet} created`);
  }

  if (plan.registry) {
    const reg = await deps.ensureRegistry();
    if (reg.created) writeLabState(paths, { ...readLabState(paths), registryStarted: reg.container });
    if (reg.reconfigured) report.reconfigured.push('registry');
    const c = await engine.container(reg.container);
    if (c && c.addresses[plan.registry.network] === undefined) {
      await engine.connect(plan.registry.network, reg.container, plan.registry.ip, [REGISTRY_ALIAS]);
      log(`registry ${reg.container} attached at ${plan.registry.ip}:${plan.registry.port} (${REGISTRY_ALIAS})`);
    }
  }

  mkdirSync(paths.labDir, { recursive: true });
  const keygen = deps.keygen ?? sshKeygen;
  const operator = await ensureKeyPair(paths.operatorKey, `stackctl-${plan.name}-operator`, keygen);
  recordCreated(input.inventoryFile, [paths.sshDir, paths.knownHosts]);
  const hostKeys = new Map<string, { key: string; pub: string }>();
  for (const n of plan.nodes) {
    const k = await ensureKeyPair(join(paths.hostKeyDir, `${n.node}_ed25519`), `root@${n.node}`, keygen);
    hostKeys.set(n.node, { key: readFileSync(k.privateFile, 'utf8'), pub: k.publicKey });
  }
  writeKnownHosts(
    paths.knownHosts,
    plan.nodes.map((n) => ({ addresses: Object.values(n.addresses), publicKey: hostKeys.get(n.node)!.pub })),
  );

  // Plain HTTP only because the inventory says so (cloud.registry_insecure); else TLS with the cloud's CA.
  const registry: NodeRegistry = {
    names: plan.registry
      ? [`${plan.registry.ip}:${plan.registry.port}`, `${REGISTRY_ALIAS}:${plan.registry.port}`]
      : [],
    insecure: input.registryInsecure,
    ...(input.registryCa ? { ca: input.registryCa } : {}),
  };
  for (const n of plan.nodes) {
    let c = await engine.container(n.container);
    if (!c) {
      const spec: ContainerSpec = {
        name: n.container,
        image,
        hostname: n.node,
        labels: { ...labels, [LAB_LABEL.node]: n.node },
        ...NODE_CONTAINER_OPTIONS,
        networks: Object.entries(n.addresses).map(([net, ip]) => ({
          name: plan.networks.find((x) => x.network === net)!.docker,
          ip,
          aliases: [n.node],
        })),
      };
      await engine.createContainer(spec);
      const hk = hostKeys.get(n.node)!;
      await engine.putArchive(n.container, '/', nodeFiles(hk.key, hk.pub, operator.publicKey, registry));
      report.createdContainers.push(n.container);
      log(`node ${n.node}: container ${n.container} created at ${Object.values(n.addresses).join(', ')}`);
      c = await engine.container(n.container);
    } else if (c.running && (await refreshNodeRegistry(engine, n.container, registry))) {
      report.reconfigured.push(`${n.node} dockerd`);
      log(`node ${n.node}: dockerd reloaded its registry settings (${registry.insecure ? 'plain HTTP' : 'TLS'})`);
    } else if (!c.running) {
      await engine.putArchive(n.container, '/', tarFiles(nodeRegistryFiles(registry)));
    }
    if (!c?.running) {
      await engine.start(n.container);
      report.startedContainers.push(n.container);
      log(`node ${n.node}: started`);
    }
  }

  // This machine reaches floating IPs through the external network's bridge: no checksum offload there
  const floating = plan.networks.find((n) => n.network === input.floatingNetwork);
  if (floating) {
    const o = await checksumOffloadOff(engine, { lab: plan.name, image, labels, gateway: floating.gateway });
    if (o.created) report.createdContainers.push(hostNetContainer(plan.name));
    log(`network ${floating.docker}: transmit checksum offload off on ${o.bridge} and its ${o.ports} port(s)`);
  }

  writeLabMachines(
    paths.labDir,
    Object.fromEntries(plan.nodes.map((n) => [n.node, { kind: 'container' as const, container: n.container }])),
  );
  await deps.startBmcs();

  const deadline = Date.now() + (opts.readyTimeoutS ?? 60) * 1000;
  for (const n of plan.nodes) {
    for (;;) {
      if (await sshBanner(n.sshAddress, 22, 1000)) break;
      if (Date.now() > deadline) {
        throw new TimeoutError('E_NODE_SSH', `node ${n.node}: sshd does not answer at ${n.sshAddress}:22`, {
          hint: `See \`docker logs ${n.container}\` and /var/log/sshd.log inside it.`,
        });
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return report;
}

/** What labDown removed. */
export interface LabDownReport {
  readonly containers: string[];
  readonly networks: string[];
  registryRemoved: boolean;
  readonly files: string[];
}

/**
 * Remove the lab: its BMC process, containers and networks carrying its
 * label, the registry if this lab started it (else only its attachment), the
 * `<inventory>.lab/` folder and known_hosts; with `purge`, also the files lab
 * up wrote next to the inventory (inventory, secrets, IPAM, operator key).
 */
export async function labDown(
  input: Pick<LabInput, 'inventoryFile' | 'name'>,
  deps: Pick<LabDeps, 'engine' | 'log' | 'stopBmcs'>,
  opts: { readonly purge?: boolean } = {},
): Promise<LabDownReport> {
  const { engine, log } = deps;
  const paths = labPaths(input.inventoryFile);
  const st = readLabState(paths);
  const report: LabDownReport = { containers: [], networks: [], registryRemoved: false, files: [] };
  await deps.stopBmcs();
  await engine.ping();
  const labels = { [LAB_LABEL.lab]: input.name };
  for (const c of await engine.containers(labels)) {
    await engine.removeContainer(c.name);
    report.containers.push(c.name);
    log(`container ${c.name} removed`);
  }
  const nets = await engine.networks(labels);
  const registry = st.registryStarted ?? REGISTRY_CONTAINER;
  if (st.registryStarted) {
    if (!report.containers.includes(st.registryStarted)) await engine.removeContainer(st.registryStarted);
    report.registryRemoved = true;
    log(`registry ${st.registryStarted} removed (this lab started it)`);
  } else {
    // A shared registry this lab attached (or meant to: a failed `lab up` may not have got that far).
    const c = await engine.container(registry);
    for (const n of nets) if (c && c.addresses[n.name] !== undefined) await engine.disconnect(n.name, registry);
  }
  for (const n of nets) {
    await engine.removeNetwork(n.name);
    report.networks.push(n.name);
    log(`network ${n.name} removed`);
  }
  const files = [paths.labDir, paths.knownHosts, ...(opts.purge ? st.created : [])];
  for (const f of files) {
    if (!existsSync(f)) continue;
    rmSync(f, { recursive: true, force: true });
    report.files.push(f);
  }
  return report;
}

/** One row of `lab status`. */
export interface NodeStatus {
  readonly node: string;
  readonly container: string;
  /** Docker's state word, or 'missing'. */
  readonly state: string;
  readonly address: string;
  readonly ssh: boolean;
}

/** Container state and SSH reachability of each node (power through the BMC is the CLI's part). */
export async function labStatus(input: LabInput, engine: LocalEngine): Promise<NodeStatus[]> {
  const plan = planLab(input);
  const out: NodeStatus[] = [];
  for (const n of plan.nodes) {
    const c = await engine.container(n.container);
    out.push({
      node: n.node,
      container: n.container,
      state: c?.status ?? 'missing',
      address: n.sshAddress,
      ssh: c?.running ? await sshBanner(n.sshAddress, 22, 1000) : false,
    });
  }
  return out;
}

/** True when an SSH server greets at host:port within the timeout ("SSH-2.0-..."). */
export function sshBanner(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ host, port });
    let buf = '';
    const done = (ok: boolean): void => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.on('data', (d: Buffer) => {
      buf += d.toString('latin1');
      if (buf.includes('\n')) done(buf.startsWith('SSH-'));
    });
    sock.on('error', () => done(false));
    sock.on('close', () => done(false));
  });
}
