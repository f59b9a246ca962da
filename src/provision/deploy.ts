/**
 * The deploy and undeploy workflows: write the host OS image to an available
 * node's root disk through the deploy ramdisk, boot it from disk (active);
 * and tear it down again (undeploying -> cleaning -> available).
 *
 * Like inspection (inspect.ts), each reconcile call does what is left and
 * says whether more remains (CONVENTIONS.md 6); it never waits, and every
 * side effect it takes is safe to repeat, so after a crash it is simply
 * called again (`--resume`): the BMC's power state and the agent's calls are
 * what it looks at, never a memory of what it did.
 *
 *   deploying    boot device PXE once, power off, arm the node with its deploy
 *                command, power on -> wait
 *   deploy wait  agent result ok    -> agent powers off; the host key it reported into
 *                known_hosts; boot device disk; power on -> done (active)
 *                agent result failed -> power off -> fail (deploy failed, reason recorded)
 *                the arming became suspect (boot script asked for twice, token shown
 *                from another address: BootServer.suspicion) -> power off -> fail
 *                agent silent longer than the heartbeat timeout, or the deploy
 *                timeout passed  -> power off -> fail (with what the boot services saw)
 *                token gone (boot server restarted) -> boot again with a new token
 *   undeploying  power off, boot device PXE -> done (cleaning)
 *   cleaning     arm with the clean command, power on -> wait (clean wait)
 *   clean wait   result ok -> power off -> done (available); failed/timeouts -> fail
 *
 * Host keys: the agent generates the node's SSH host key inside the deployed
 * system and reports only its public half with its result; stackctl records
 * that in known_hosts before it boots the node from its disk, and only when
 * the arming is not suspect. No private key crosses the provisioning network.
 */
import { copyFileSync, existsSync, linkSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { AuthError, IoError, RemoteError, StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import { writeFileAtomic } from '../core/fs.js';
import { parseDnsmasqLog } from '../pxe/dnsmasq.js';
import type { EventSink } from '../core/events.js';
import type { RootDevice } from '../inventory/schema.js';
import type { AgentCommand, AgentFile, AgentReport, AgentResult, BootServer } from '../pxe/http.js';
import { recordHostKey } from '../remote/known-hosts.js';
import type { InspectPower } from './inspect.js';
import type { NodeRecord, NodeStateStore } from './machine.js';
import { NodeEvent, NodeState } from './states.js';
import { dockerTrustFiles } from '../images/registry-tls.js';

/** Defaults of the workflows. */
export const DEPLOY_DEFAULTS = {
  /** Power-on to result: POST, ramdisk boot, image stream and write. A TCG VM needs ~1-2 min. */
  timeoutMs: 30 * 60_000,
  /** Once the agent called in, the longest silence tolerated (it sends a heartbeat every 5 s). */
  heartbeatTimeoutMs: 90_000,
  /** Cleaning, power-on to result. */
  cleanTimeoutMs: 15 * 60_000,
  /** After its result the agent powers the node off by itself; after this the BMC does it. */
  agentPowerOffMs: 30_000,
  /** How soon the orchestrator should call again while waiting. */
  pollMs: 2_000,
} as const;

/** The image a deploy writes: a file the boot server serves, with its recorded checksum. */
export interface DeployImage {
  /** File name in the boot server's files folder (the compressed image). */
  readonly name: string;
  /** SHA-256 of that file, from the build's record (never recomputed from the file being served). */
  readonly sha256: string;
  /** Size of the raw disk image inside: the smallest root disk it fits on. */
  readonly rawBytes: number;
  /** Size of the file itself. */
  readonly bytes: number;
}

/**
 * Put a built image into the boot server's files folder once, named by its
 * checksum (`host-<sha12>.img.lzo`, a hard link when the folders share a file
 * system, else one copy), with its `.sha256` beside it. Every node's deploy
 * then streams that one file; the checksum comes from the build's record.
 */
export function stageImage(
  filesDir: string,
  image: { readonly path: string; readonly sha256: string; readonly rawBytes: number },
): DeployImage {
  if (!/^[0-9a-f]{64}$/.test(image.sha256)) {
    throw new IoError('E_IMAGE_CHECKSUM', `image ${image.path}: recorded sha256 '${image.sha256}' is malformed`, {
      hint: 'Rebuild the image: stackctl images build host.',
    });
  }
  // the extension tells the agent how to decompress (.lzo, .gz)
  const ext = /\.img\.[a-z0-9]+$/.exec(image.path)?.[0] ?? '.img';
  const name = `host-${image.sha256.slice(0, 12)}${ext}`;
  const dest = join(filesDir, name);
  let size: number;
  try {
    size = statSync(image.path).size;
  } catch (e) {
    throw new IoError('E_IMAGE_MISSING', `image ${image.path} is missing`, {
      hint: 'Build it: stackctl images build host.',
      cause: e,
    });
  }
  if (!existsSync(dest) || statSync(dest).size !== size) {
    try {
      linkSync(image.path, dest);
    } catch {
      copyFileSync(image.path, dest);
    }
  }
  writeFileAtomic(`${dest}.sha256`, `${image.sha256}  ${name}\n`);
  return { name, sha256: image.sha256, rawBytes: image.rawBytes, bytes: size };
}

/**
 * What the boot services saw of a node, for a timeout message: dnsmasq's log
 * (DHCP and TFTP, by the node's MAC), and the boot server's boot scripts and
 * files (HTTP). "nothing" for each service that never heard of it usually
 * means a wrong MAC in the inventory or a node not booting from the network.
 */
export function bootTrailFrom(
  dnsmasqLog: string,
  boot: Pick<BootServer, 'scriptsServed' | 'bytesServed'>,
): (target: DeployTarget) => string {
  return (target) => {
    let text = '';
    try {
      text = readFileSync(dnsmasqLog, 'utf8');
    } catch {
      // no log yet: dnsmasq saw nothing
    }
    const report = parseDnsmasqLog(text).get(target.mac.toLowerCase());
    const dhcp = report?.observations.filter((o) => !o.kind.startsWith('tftp')).map((o) => o.kind) ?? [];
    const tftp = report?.observations.filter((o) => o.kind.startsWith('tftp')).map((o) => o.kind) ?? [];
    const scripts = boot.scriptsServed(target.node);
    const files = Object.entries(boot.bytesServed(target.node)).map(([f, b]) => `${f} ${b} bytes`);
    const http = [...(scripts ? [`${scripts} boot script(s)`] : []), ...files];
    return (
      `DHCP: ${dhcp.length ? [...new Set(dhcp)].join(', ') : 'nothing'}; ` +
      `TFTP: ${tftp.length ? [...new Set(tftp)].join(', ') : 'nothing'}; ` +
      `HTTP: ${http.length ? http.join(', ') : 'nothing'}`
    );
  };
}

/** What the deploy writes into one node's system. */
export interface DeployTarget {
  readonly node: string;
  /** MAC of the provisioning NIC (the network file matches it). */
  readonly mac: string;
  /** Provisioning address (IPAM) and prefix length, written as a static address. */
  readonly ip: string;
  readonly prefix: number;
  readonly gateway?: string;
  readonly dns?: readonly string[];
  /** Host name; `node` when absent. A domain makes /etc/hosts carry the FQDN too. */
  readonly hostname?: string;
  readonly domain?: string;
  /** The inventory's root device hints. */
  readonly rootDevice?: RootDevice;
  /**
   * The node's addresses on its other networks, carried by the provisioning
   * NIC: tagged when the network has a VLAN, else as further addresses on it.
   */
  readonly networks?: readonly CarriedNetwork[];
  /** Registries (host:port) the node's dockerd pulls from over plain HTTP: /etc/docker/daemon.json. */
  readonly insecureRegistries?: readonly string[];
  /** The registry (host:port) served over TLS and the CA (PEM, public) the node's dockerd trusts it with. */
  readonly registryTrust?: { readonly registry: string; readonly ca: string };
}

/** One more network of a node, on the provisioning NIC. */
export interface CarriedNetwork {
  /** The inventory's network name. */
  readonly name: string;
  readonly ip: string;
  readonly prefix: number;
  /** 802.1Q tag; untagged when absent. */
  readonly vlan?: number;
}

/** The agent's last result per node, with the time it was accepted. */
export class AgentResults {
  readonly #results = new Map<string, { readonly at: number; readonly result: AgentResult }>();
  constructor(private readonly now: () => number = Date.now) {}
  /** The boot server's `onReport` for deploy and clean results (chain it with the introspection handler). */
  readonly handler = (report: AgentReport): void => {
    if (report.endpoint === 'result') this.#results.set(report.node, { at: this.now(), result: report.body });
  };
  /** When the node's last result was accepted (ms), if any. */
  receivedAt(node: string): number | undefined {
    return this.#results.get(node)?.at;
  }
  /** The node's result accepted at or after `since`. */
  since(node: string, since: number): AgentResult | undefined {
    const r = this.#results.get(node);
    return r && r.at >= since ? r.result : undefined;
  }
}

/** Side effects of the workflows, injected (CONVENTIONS.md 8). */
export interface DeployDeps {
  readonly nodes: NodeStateStore;
  readonly boot: Pick<
    BootServer,
    'arm' | 'disarm' | 'isArmed' | 'agentContact' | 'suspicion' | 'bytesServed' | 'scriptsServed'
  >;
  readonly results: AgentResults;
  /** The node's BMC. */
  readonly power: (node: string) => InspectPower;
  readonly image: DeployImage;
  /** The operator's public key line, for root's authorized_keys. */
  readonly authorizedKey: string;
  /** stackctl's known_hosts: the host key the agent reports is recorded here before the node boots from disk. */
  readonly knownHostsFile: string;
  readonly sshPort?: number;
  /** What the boot services saw of a node (DHCP/TFTP/HTTP), quoted in timeouts. */
  readonly bootTrail?: (target: DeployTarget) => string;
  readonly events?: EventSink;
  readonly now?: () => number;
  readonly timeoutMs?: number;
  readonly heartbeatTimeoutMs?: number;
  readonly cleanTimeoutMs?: number;
  readonly agentPowerOffMs?: number;
  readonly pollMs?: number;
  readonly sleep?: (ms: number) => Promise<void>;
}

/** The outcome of one reconcile call. */
export interface DeployStep {
  readonly node: string;
  readonly state: NodeState;
  /** True while work remains: call again after `requeueAfterMs`. */
  readonly dirty: boolean;
  readonly requeueAfterMs?: number;
  /** Why the step failed, when it just did. */
  readonly error?: StackctlError;
  /** The agent's result, when one just ended the wait. */
  readonly result?: AgentResult;
}

/** When the node last entered `state` (ms), from its history. */
export function enteredAt(record: NodeRecord, state: NodeState): number | undefined {
  for (let i = record.history.length - 1; i >= 0; i--) {
    const h = record.history[i]!;
    if (h.to === state) return Date.parse(h.time);
  }
  return undefined;
}

function asStackctlError(e: unknown, code: string): StackctlError {
  return e instanceof StackctlError
    ? e
    : new StackctlError(code, messageOf(e), { hint: 'This is a bug: please report it.' });
}

/* ------------------------------------------------------------------------ */
/* What the deploy writes into the node                                      */
/* ------------------------------------------------------------------------ */

/** Root device hints in the agent's terms: the inventory's keys, minus none (the agent knows them all). */
function hintsOf(rd: RootDevice | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const [k, v] of Object.entries(rd ?? {})) if (v !== undefined) out[k] = v as string | number | boolean;
  return out;
}

/** systemd-networkd file for the provisioning NIC: static address from IPAM, matched by MAC. */
export function networkFile(t: DeployTarget): string {
  const lines = [
    '# written by stackctl at deploy: the provisioning NIC, static address from IPAM',
    '[Match]',
    `MACAddress=${t.mac.toLowerCase()}`,
    '',
    '[Network]',
    `Address=${t.ip}/${t.prefix}`,
    ...(t.gateway ? [`Gateway=${t.gateway}`] : []),
    ...(t.dns ?? []).map((d) => `DNS=${d}`),
    // the other networks: untagged ones share the segment, tagged ones get a VLAN interface
    ...(t.networks ?? []).filter((n) => n.vlan === undefined).map((n) => `Address=${n.ip}/${n.prefix}`),
    ...(t.networks ?? []).filter((n) => n.vlan !== undefined).map((n) => `VLAN=${vlanName(n.vlan!)}`),
    // no IPv6 autoconfiguration surprises on the provisioning segment
    'IPv6AcceptRA=no',
    'LinkLocalAddressing=no',
    '',
  ];
  return lines.join('\n');
}

/** Interface name of a VLAN on the provisioning NIC. */
export const vlanName = (vlan: number): string => `vlan${vlan}`;

/** systemd-networkd files of a tagged network: the VLAN device and its static address. */
function vlanFiles(n: CarriedNetwork): AgentFile[] {
  const name = vlanName(n.vlan!);
  const head = `# written by stackctl at deploy: network ${n.name}, VLAN ${n.vlan} on the provisioning NIC\n`;
  return [
    {
      path: `/etc/systemd/network/20-${name}.netdev`,
      mode: 0o644,
      content: `${head}[NetDev]\nName=${name}\nKind=vlan\n\n[VLAN]\nId=${n.vlan}\n`,
    },
    {
      path: `/etc/systemd/network/20-${name}.network`,
      mode: 0o644,
      content:
        `${head}[Match]\nName=${name}\n\n[Network]\nAddress=${n.ip}/${n.prefix}\n` +
        'IPv6AcceptRA=no\nLinkLocalAddressing=no\n',
    },
  ];
}

/**
 * dockerd's settings: the registry is stackctl's plain-HTTP one
 * (images/registry.ts), so dockerd must be told to pull from it without TLS.
 * Written at deploy, so the first dockerd start already has it: no restart
 * of a dockerd that runs containers.
 */
export function dockerDaemonJson(registries: readonly string[]): string {
  return JSON.stringify({ 'insecure-registries': [...registries] }, null, 2) + '\n';
}

/** The files the agent writes for a node: identity, network, SSH access (the host key it makes itself). */
export function nodeFiles(t: DeployTarget, authorizedKey: string): AgentFile[] {
  const host = t.hostname ?? t.node;
  const fqdn = t.domain ? `${host}.${t.domain} ` : '';
  return [
    { path: '/etc/hostname', mode: 0o644, content: `${host}\n` },
    {
      path: '/etc/hosts',
      mode: 0o644,
      content: `127.0.0.1 localhost\n${t.ip} ${fqdn}${host}\n::1 localhost ip6-localhost ip6-loopback\n`,
    },
    { path: '/etc/systemd/network/10-provisioning.network', mode: 0o644, content: networkFile(t) },
    { path: '/root/.ssh/authorized_keys', mode: 0o600, content: authorizedKey.trim() + '\n' },
    {
      path: '/etc/ssh/sshd_config.d/20-stackctl-hostkey.conf',
      mode: 0o644,
      content:
        '# the host key the deploy ramdisk generated here; stackctl recorded its public half\n' +
        'HostKey /etc/ssh/ssh_host_ed25519_key\n',
    },
    ...(t.networks ?? []).filter((n) => n.vlan !== undefined).flatMap(vlanFiles),
    ...(t.insecureRegistries?.length
      ? [{ path: '/etc/docker/daemon.json', mode: 0o644, content: dockerDaemonJson(t.insecureRegistries) }]
      : []),
    ...(t.registryTrust
      ? dockerTrustFiles([t.registryTrust.registry], t.registryTrust.ca).map((f) => ({ ...f, mode: 0o644 }))
      : []),
  ];
}

/** The deploy command for a node: no secret in it (the agent makes the host key on the node). */
export function deployCommand(deps: Pick<DeployDeps, 'image' | 'authorizedKey'>, t: DeployTarget): AgentCommand {
  return {
    kind: 'deploy',
    image: deps.image.name,
    sha256: deps.image.sha256,
    rawBytes: deps.image.rawBytes,
    bytes: deps.image.bytes,
    hints: hintsOf(t.rootDevice),
    hostKey: { type: 'ed25519', comment: `root@${t.hostname ?? t.node}` },
    files: nodeFiles(t, deps.authorizedKey),
  };
}

/**
 * Record the host key the agent reported for the node's provisioning address,
 * replacing the one of an earlier deploy. The result came with the node's
 * token from the node's address, in an arming that is not suspect.
 */
function recordReportedKey(deps: DeployDeps, t: DeployTarget, result: AgentResult): StackctlError | undefined {
  try {
    if (!result.host_key) throw new Error('the result holds no host_key');
    recordHostKey(deps.knownHostsFile, t.ip, deps.sshPort ?? 22, result.host_key);
    return undefined;
  } catch (e) {
    return new RemoteError(
      'E_AGENT_HOST_KEY',
      `node '${t.node}': the deploy agent reported no usable SSH host key (${messageOf(e)})`,
      {
        hint: 'An agent older than this stackctl does not make the host key: rebuild the ramdisk (stackctl images build-ramdisk --force), then deploy again.',
        details: { node: t.node },
      },
    );
  }
}

/** The error for an arming that became suspect (`BootServer.suspicion`). */
function suspectError(node: string, suspicion: string, what: 'deploy' | 'clean'): AuthError {
  return new AuthError(
    'E_BOOT_TOKEN_EXPOSED',
    `node '${node}': its network boot can no longer be trusted: ${suspicion}; the ${what} stopped before trusting anything the node reported`,
    {
      hint:
        "The node rebooted during its network boot, or another machine on the provisioning network asked for the node's boot script or used its token: the pxe.refused events name the client addresses. " +
        `Check the segment, then start the ${what} again: it arms the node with a new token.`,
      details: { node },
    },
  );
}

/* ------------------------------------------------------------------------ */
/* Power helpers                                                             */
/* ------------------------------------------------------------------------ */

/** Boot from the network once, power off, arm, power on. Each step may be repeated. */
async function bootRamdisk(
  deps: DeployDeps,
  node: string,
  purpose: 'deploy' | 'clean',
  command: AgentCommand,
): Promise<void> {
  const bmc = deps.power(node);
  await bmc.setBootDevice('pxe', { persistent: false });
  if ((await bmc.powerState()) === 'on') await bmc.powerOff();
  // armed while off: a node still running could fetch the script that is served once
  deps.boot.arm(node, purpose, command);
  await bmc.powerOn();
}

async function powerOffQuietly(deps: DeployDeps, node: string): Promise<void> {
  try {
    const bmc = deps.power(node);
    if ((await bmc.powerState()) === 'on') await bmc.powerOff();
  } catch {
    // the state change is what matters; the next power action reports a broken BMC
  }
}

/** Give the agent time to power off by itself (it syncs first), then make sure. */
async function awaitAgentPowerOff(deps: DeployDeps, node: string): Promise<void> {
  const now = deps.now ?? Date.now;
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const bmc = deps.power(node);
  const until = now() + (deps.agentPowerOffMs ?? DEPLOY_DEFAULTS.agentPowerOffMs);
  while (now() < until) {
    if ((await bmc.powerState()) === 'off') return;
    await sleep(250);
  }
  await bmc.powerOff();
}

/** Bytes served to a node since the server started (all files). */
export function totalBytes(deps: Pick<DeployDeps, 'boot'>, node: string): number {
  return Object.values(deps.boot.bytesServed(node)).reduce((a, b) => a + b, 0);
}

/* ------------------------------------------------------------------------ */
/* Deploy                                                                    */
/* ------------------------------------------------------------------------ */

/** The operator's event: start a deploy (available or deploy failed -> deploying; active or error -> rebuild). */
export function startDeploy(deps: Pick<DeployDeps, 'nodes'>, node: string, reason = 'operator'): NodeRecord {
  const state = deps.nodes.get(node).state;
  const event = state === NodeState.ACTIVE || state === NodeState.ERROR ? NodeEvent.REBUILD : NodeEvent.DEPLOY;
  return deps.nodes.apply(node, event, reason);
}

function fail(deps: DeployDeps, node: string, error: StackctlError, state: NodeState): DeployStep {
  deps.boot.disarm(node);
  deps.nodes.apply(node, NodeEvent.FAIL, `${error.code}: ${error.message}`);
  return { node, state, dirty: false, error };
}

/**
 * The checks every wait shares: the agent's silence and the deadline. Returns
 * the error that ends the wait, or undefined.
 */
function waitExpired(
  deps: DeployDeps,
  target: DeployTarget,
  began: number,
  what: 'deploy' | 'clean',
): StackctlError | undefined {
  const now = (deps.now ?? Date.now)();
  const node = target.node;
  const suspicion = deps.boot.suspicion(node);
  if (suspicion) return suspectError(node, suspicion, what);
  const contact = deps.boot.agentContact(node);
  const heartbeatMs = deps.heartbeatTimeoutMs ?? DEPLOY_DEFAULTS.heartbeatTimeoutMs;
  if (contact && now - contact.lastAt > heartbeatMs) {
    return new TimeoutError(
      'E_AGENT_HEARTBEAT',
      `node '${node}': the ramdisk agent stopped calling in during '${contact.step}' (${Math.round((now - contact.lastAt) / 1000)} s without a heartbeat)`,
      {
        hint: 'Look at the node console: the ramdisk may have crashed, or the node lost its link to the deploy host.',
        details: { node, step: contact.step, heartbeatTimeoutMs: heartbeatMs },
      },
    );
  }
  const timeoutMs =
    what === 'deploy'
      ? (deps.timeoutMs ?? DEPLOY_DEFAULTS.timeoutMs)
      : (deps.cleanTimeoutMs ?? DEPLOY_DEFAULTS.cleanTimeoutMs);
  if (now - began > timeoutMs) {
    const trail = deps.bootTrail?.(target) ?? '';
    return new TimeoutError(
      what === 'deploy' ? 'E_DEPLOY_TIMEOUT' : 'E_CLEAN_TIMEOUT',
      `node '${node}' (MAC ${target.mac}): no ${what} result within ${Math.round(timeoutMs / 1000)} s` +
        (contact ? `; the agent was last at '${contact.step}'` : '; the ramdisk agent never called in') +
        (trail ? `; the boot services saw: ${trail}` : ''),
      {
        hint: contact
          ? 'Look at the node console and the agent lines on it.'
          : `Check that ${target.mac} is the MAC of the node's provisioning NIC (inventory), that the node boots from the network, and the dnsmasq log.`,
        details: { node, mac: target.mac, timeoutMs, ...(trail ? { bootTrail: trail } : {}) },
      },
    );
  }
  return undefined;
}

/**
 * Do what is left of a node's deploy; see the module comment. Nodes in any
 * other state than deploying or deploy wait are left alone (not dirty).
 */
export async function reconcileDeploy(deps: DeployDeps, target: DeployTarget): Promise<DeployStep> {
  const pollMs = deps.pollMs ?? DEPLOY_DEFAULTS.pollMs;
  const node = target.node;
  const record = deps.nodes.get(node);

  if (record.state === NodeState.DEPLOYING) {
    try {
      await bootRamdisk(deps, node, 'deploy', deployCommand(deps, target));
    } catch (e) {
      await powerOffQuietly(deps, node);
      return fail(deps, node, asStackctlError(e, 'E_DEPLOY_INTERNAL'), NodeState.DEPLOY_FAILED);
    }
    deps.nodes.apply(node, NodeEvent.WAIT, 'booting the deploy ramdisk');
    return { node, state: NodeState.DEPLOY_WAIT, dirty: true, requeueAfterMs: pollMs };
  }
  if (record.state !== NodeState.DEPLOY_WAIT) return { node, state: record.state, dirty: false };

  const began = enteredAt(record, NodeState.DEPLOY_WAIT) ?? 0;
  const result = deps.results.since(node, enteredAt(record, NodeState.DEPLOYING) ?? began);
  if (result) {
    if (result.status !== 'ok') {
      deps.boot.disarm(node);
      await powerOffQuietly(deps, node);
      const error = new RemoteError(
        'E_AGENT_' + result.step.toUpperCase().replace(/-/g, '_'),
        `node '${node}': the deploy failed at '${result.step}': ${result.message ?? 'no message'}`,
        {
          hint:
            result.step === 'select-disk'
              ? 'Fix the root_device hints of the node in the inventory (the disks the agent saw are listed), then deploy again.'
              : result.step === 'verify-image'
                ? 'The image served is not the one built: rebuild it (stackctl images build host) and deploy again. The node was not allowed to boot it.'
                : result.step === 'command'
                  ? 'The boot server hands the command out once per arming (see the pxe.refused events); deploy again: it arms the node anew.'
                  : 'Look at the node console for the agent lines, then deploy again.',
          details: { node, step: result.step, ...(result.root_device ? { rootDevice: result.root_device } : {}) },
        },
      );
      deps.nodes.apply(node, NodeEvent.FAIL, `${error.code}: ${error.message}`);
      return { node, state: NodeState.DEPLOY_FAILED, dirty: false, error, result };
    }
    try {
      await awaitAgentPowerOff(deps, node);
      // NOTE: checked after the power-off wait: a node whose script someone else took first
      // asks for it meanwhile, and that refusal is what unmasks a forged result
      const suspicion = deps.boot.suspicion(node);
      deps.boot.disarm(node);
      const untrusted = suspicion ? suspectError(node, suspicion, 'deploy') : recordReportedKey(deps, target, result);
      if (untrusted) {
        await powerOffQuietly(deps, node);
        deps.nodes.apply(node, NodeEvent.FAIL, `${untrusted.code}: ${untrusted.message}`);
        return { node, state: NodeState.DEPLOY_FAILED, dirty: false, error: untrusted, result };
      }
      const bmc = deps.power(node);
      await bmc.setBootDevice('disk', { persistent: true });
      await bmc.powerOn();
    } catch (e) {
      deps.boot.disarm(node);
      const error = asStackctlError(e, 'E_DEPLOY_INTERNAL');
      await powerOffQuietly(deps, node);
      deps.nodes.apply(node, NodeEvent.FAIL, `${error.code}: ${error.message}`);
      return { node, state: NodeState.DEPLOY_FAILED, dirty: false, error, result };
    }
    deps.nodes.apply(
      node,
      NodeEvent.DONE,
      `image ${deps.image.sha256.slice(0, 12)} written to ${result.root_device ?? 'the root disk'}; booting it`,
    );
    return { node, state: NodeState.ACTIVE, dirty: false, result };
  }

  const expired = waitExpired(deps, target, began, 'deploy');
  if (expired) {
    await powerOffQuietly(deps, node);
    return fail(deps, node, expired, NodeState.DEPLOY_FAILED);
  }
  if (!deps.boot.isArmed(node)) {
    // the boot server keeps tokens in memory: after its restart the node's token is gone; boot again
    try {
      await bootRamdisk(deps, node, 'deploy', deployCommand(deps, target));
    } catch {
      // the BMC may answer next time; the deadline above bounds the retries
    }
  }
  return { node, state: NodeState.DEPLOY_WAIT, dirty: true, requeueAfterMs: pollMs };
}

/* ------------------------------------------------------------------------ */
/* Undeploy and cleaning                                                     */
/* ------------------------------------------------------------------------ */

/** The operator's event: tear a deployment down (active, deploy failed or error -> undeploying). */
export function startUndeploy(deps: Pick<DeployDeps, 'nodes'>, node: string, reason = 'operator'): NodeRecord {
  return deps.nodes.apply(node, NodeEvent.UNDEPLOY, reason);
}

/**
 * Do what is left of an undeploy and the cleaning that follows it:
 * undeploying -> cleaning -> clean wait -> available. Other states are left alone.
 */
export async function reconcileUndeploy(deps: DeployDeps, target: DeployTarget): Promise<DeployStep> {
  const pollMs = deps.pollMs ?? DEPLOY_DEFAULTS.pollMs;
  const node = target.node;
  const record = deps.nodes.get(node);

  if (record.state === NodeState.UNDEPLOYING) {
    try {
      const bmc = deps.power(node);
      if ((await bmc.powerState()) === 'on') await bmc.powerOff();
      await bmc.setBootDevice('pxe', { persistent: false });
    } catch (e) {
      return fail(deps, node, asStackctlError(e, 'E_UNDEPLOY_INTERNAL'), NodeState.ERROR);
    }
    deps.nodes.apply(node, NodeEvent.DONE, 'powered off; cleaning the disks');
    return { node, state: NodeState.CLEANING, dirty: true, requeueAfterMs: 0 };
  }

  if (record.state === NodeState.CLEANING) {
    try {
      await bootRamdisk(deps, node, 'clean', { kind: 'clean' });
    } catch (e) {
      await powerOffQuietly(deps, node);
      return fail(deps, node, asStackctlError(e, 'E_CLEAN_INTERNAL'), NodeState.CLEAN_FAILED);
    }
    deps.nodes.apply(node, NodeEvent.WAIT, 'booting the cleaning ramdisk');
    return { node, state: NodeState.CLEAN_WAIT, dirty: true, requeueAfterMs: pollMs };
  }
  if (record.state !== NodeState.CLEAN_WAIT) return { node, state: record.state, dirty: false };

  const began = enteredAt(record, NodeState.CLEAN_WAIT) ?? 0;
  const result = deps.results.since(node, enteredAt(record, NodeState.CLEANING) ?? began);
  if (result) {
    await awaitAgentPowerOff(deps, node).catch(() => powerOffQuietly(deps, node));
    // as for a deploy: a forged "cleaned" must not make the node available
    const suspicion = deps.boot.suspicion(node);
    deps.boot.disarm(node);
    if (suspicion) {
      const error = suspectError(node, suspicion, 'clean');
      deps.nodes.apply(node, NodeEvent.FAIL, `${error.code}: ${error.message}`);
      return { node, state: NodeState.CLEAN_FAILED, dirty: false, error, result };
    }
    if (result.status !== 'ok') {
      const error = new RemoteError('E_AGENT_CLEAN', `node '${node}': cleaning failed: ${result.message ?? ''}`, {
        hint: 'Look at the node console for the agent lines; then manage the node and clean it again.',
        details: { node },
      });
      deps.nodes.apply(node, NodeEvent.FAIL, `${error.code}: ${error.message}`);
      return { node, state: NodeState.CLEAN_FAILED, dirty: false, error, result };
    }
    deps.nodes.apply(node, NodeEvent.DONE, result.message ?? 'cleaned');
    return { node, state: NodeState.AVAILABLE, dirty: false, result };
  }
  const expired = waitExpired(deps, target, began, 'clean');
  if (expired) {
    await powerOffQuietly(deps, node);
    return fail(deps, node, expired, NodeState.CLEAN_FAILED);
  }
  if (!deps.boot.isArmed(node)) {
    try {
      await bootRamdisk(deps, node, 'clean', { kind: 'clean' });
    } catch {
      // bounded by the deadline above
    }
  }
  return { node, state: NodeState.CLEAN_WAIT, dirty: true, requeueAfterMs: pollMs };
}
