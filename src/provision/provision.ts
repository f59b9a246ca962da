/**
 * Provision and undeploy many nodes: the orchestrator part of the deploy
 * workflows (deploy.ts). Each node is driven by calling its reconcile
 * function until it is no longer dirty, at most `concurrency` nodes at once;
 * one node's failure never stops the others. Per node it records the wall
 * time of each phase and the bytes the boot server sent it, emits JSON-lines
 * events, and, when given an SSH pool, proves the deployed system answers
 * SSH with the host key its deploy agent made on it and reported.
 *
 * Re-entrant: with `resume`, nodes already in a deploy (or undeploy/clean)
 * state carry on from what their BMC and agent say; nodes already at the
 * goal are reported as done without touching them.
 */
import { StackctlError, TimeoutError, summarizeFailure, type FailureSummary } from '../core/errors.js';
import { mapLimit } from '../core/concurrency.js';
import { type EventSink, NO_EVENTS } from '../core/events.js';
import type { AgentContact } from '../pxe/http.js';
import type { SshPool } from '../remote/ssh.js';
import {
  reconcileDeploy,
  reconcileUndeploy,
  startDeploy,
  startUndeploy,
  totalBytes,
  type DeployDeps,
  type DeployStep,
  type DeployTarget,
} from './deploy.js';
import { NodeState } from './states.js';

/** Wall time of each phase of one node's deploy, in ms (absent when the node never got there). */
export interface DeployPhases {
  /** Power-on until the ramdisk agent's first call (firmware, PXE, kernel, DHCP). */
  'power-on-to-agent'?: number;
  /** Compressed image downloaded into the ramdisk's RAM (agent clock). */
  'image-transfer'?: number;
  /** Its SHA-256 computed and compared with the recorded one (agent clock). */
  'image-verify'?: number;
  /** Decompressed onto the root disk and synced (agent clock). */
  'image-write'?: number;
  /** Instead of the three above when the image does not fit in RAM: streamed, checked and written in one pass. */
  'image-stream'?: number;
  /** Hostname, network, keys written into the deployed file system (agent clock). */
  configure?: number;
  /** Agent result until the node was powered on from its disk. */
  'result-to-disk-boot'?: number;
  /** Powered on from disk until SSH answered with the recorded host key. */
  'reboot-to-ssh'?: number;
  /** Cleaning (undeploy): power-on until the disks were wiped. */
  clean?: number;
  /** The whole operation. */
  total?: number;
}

/** One node's outcome. */
export interface ProvisionResult {
  readonly node: string;
  readonly ok: boolean;
  readonly state: NodeState;
  readonly error?: FailureSummary;
  readonly phases: DeployPhases;
  /** Bytes the boot server sent this node during the operation (kernel, initramfs, image). */
  readonly bytesServed: number;
  /** `uname -a` of the deployed node, when SSH was checked. */
  readonly uname?: string;
}

/** Options of `provisionNodes` and `undeployNodes`. */
export interface ProvisionOptions {
  readonly targets: readonly DeployTarget[];
  readonly deps: DeployDeps;
  /** Nodes handled at once (default 4). */
  readonly concurrency?: number;
  /** Carry on with nodes already in the middle of the operation instead of refusing them. */
  readonly resume?: boolean;
  /** Check the deployed node by SSH (host key verified against known_hosts): deploy only. */
  readonly ssh?: { readonly pool: SshPool; readonly user?: string; readonly timeoutMs?: number };
  readonly events?: EventSink;
}

/** States from which `provisionNodes` starts a deploy, and those it resumes. */
const DEPLOY_START: ReadonlySet<NodeState> = new Set([NodeState.AVAILABLE, NodeState.DEPLOY_FAILED, NodeState.ERROR]);
const DEPLOY_RESUME: ReadonlySet<NodeState> = new Set([NodeState.DEPLOYING, NodeState.DEPLOY_WAIT]);
const UNDEPLOY_START: ReadonlySet<NodeState> = new Set([NodeState.ACTIVE, NodeState.DEPLOY_FAILED, NodeState.ERROR]);
const UNDEPLOY_RESUME: ReadonlySet<NodeState> = new Set([
  NodeState.UNDEPLOYING,
  NodeState.CLEANING,
  NodeState.CLEAN_WAIT,
]);

/** The agent's timing names and the phases they become. */
const AGENT_PHASES: readonly (readonly [string, keyof DeployPhases])[] = [
  ['image-transfer', 'image-transfer'],
  ['verify-image', 'image-verify'],
  ['write-image', 'image-write'],
  ['stream-image', 'image-stream'],
  ['configure', 'configure'],
];

/** Default SSH check deadline: a TCG VM answers 20-40 s after power-on from disk. */
export const SSH_CHECK_TIMEOUT_MS = 180_000;

const sleepDefault = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Deploy the host image to each target, from available (or deploy failed)
 * to active. Nodes already active are reported ok untouched.
 */
export async function provisionNodes(opts: ProvisionOptions): Promise<ProvisionResult[]> {
  return mapLimit(opts.targets, opts.concurrency ?? 4, (t) => provisionOne(opts, t));
}

/** Undeploy each target: active (or deploy failed, error) -> undeploying -> cleaning -> available. */
export async function undeployNodes(opts: ProvisionOptions): Promise<ProvisionResult[]> {
  return mapLimit(opts.targets, opts.concurrency ?? 4, (t) => undeployOne(opts, t));
}

interface Driven {
  readonly step: DeployStep;
  readonly contact: AgentContact | undefined;
}

/** Call reconcile until the node is no longer dirty, remembering the agent's contact (lost at disarm). */
async function drive(
  deps: DeployDeps,
  target: DeployTarget,
  reconcile: (d: DeployDeps, t: DeployTarget) => Promise<DeployStep>,
): Promise<Driven> {
  const sleep = deps.sleep ?? sleepDefault;
  let contact: AgentContact | undefined;
  for (;;) {
    contact = deps.boot.agentContact(target.node) ?? contact;
    const step = await reconcile(deps, target);
    if (!step.dirty) return { step, contact };
    await sleep(step.requeueAfterMs ?? 1000);
  }
}

function refused(node: string, state: NodeState, what: string): ProvisionResult {
  const error = new StackctlError(
    'E_PROVISION_STATE',
    `node '${node}' is in state '${state}': it cannot be ${what} from there`,
    {
      hint:
        what === 'deployed'
          ? 'Inspect and provide the node first (it must be available), or use --resume for a deploy in progress.'
          : 'Only active, deploy failed and error nodes can be undeployed; use --resume for an undeploy in progress.',
      details: { node, state },
    },
  );
  return { node, ok: false, state, error: summarizeFailure(error), phases: {}, bytesServed: 0 };
}

async function provisionOne(opts: ProvisionOptions, t: DeployTarget): Promise<ProvisionResult> {
  const deps = opts.deps;
  const events = opts.events ?? deps.events ?? NO_EVENTS;
  const now = deps.now ?? Date.now;
  const node = t.node;
  const state = deps.nodes.get(node).state;
  if (state === NodeState.ACTIVE && !opts.resume) return refused(node, state, 'deployed');
  if (state === NodeState.ACTIVE) return { node, ok: true, state, phases: {}, bytesServed: 0 };
  if (!DEPLOY_START.has(state) && !(opts.resume && DEPLOY_RESUME.has(state))) return refused(node, state, 'deployed');

  // validate cheaply before acting: a BMC that does not answer leaves the node where it is
  const unreachable = await bmcCheck(deps, node, state);
  if (unreachable) return unreachable;
  const t0 = now();
  const bytes0 = totalBytes(deps, node);
  const phases: DeployPhases = {};
  const phase = (name: keyof DeployPhases, ms: number | undefined): void => {
    if (ms === undefined || !Number.isFinite(ms)) return;
    phases[name] = Math.round(ms);
    events.emit({ kind: 'provision.phase', node, phase: name, ms: Math.round(ms) });
  };
  const finish = (r: Omit<ProvisionResult, 'phases' | 'bytesServed' | 'node'>): ProvisionResult => {
    phase('total', now() - t0);
    const bytesServed = totalBytes(deps, node) - bytes0;
    events.emit({
      kind: 'provision.done',
      node,
      action: 'deploy',
      ok: r.ok,
      bytes: bytesServed,
      ms: now() - t0,
      reason: r.error ? `${r.error.code}: ${r.error.message}` : '',
    });
    return { node, ...r, phases, bytesServed };
  };

  try {
    if (DEPLOY_START.has(state)) startDeploy(deps, node, 'provision');
    const poweredOn = now();
    const { step, contact } = await drive(deps, t, reconcileDeploy);
    const resultAt = deps.results.receivedAt(node) ?? now();
    if (contact) phase('power-on-to-agent', contact.firstAt - poweredOn);
    const timings = step.result?.timings ?? {};
    for (const [step, name] of AGENT_PHASES) {
      if (timings[step] !== undefined) phase(name, timings[step] * 1000);
    }
    if (step.state !== NodeState.ACTIVE) {
      return finish({ ok: false, state: step.state, ...(step.error ? { error: summarizeFailure(step.error) } : {}) });
    }
    // the last reconcile call waited for the agent's power-off and powered on from disk
    phase('result-to-disk-boot', Math.max(0, now() - resultAt));
    if (!opts.ssh) return finish({ ok: true, state: step.state });
    const booted = now();
    const uname = await sshCheck(opts, t);
    phase('reboot-to-ssh', now() - booted);
    return finish({ ok: true, state: step.state, uname });
  } catch (e) {
    return finish({ ok: false, state: deps.nodes.get(node).state, error: summarizeFailure(e) });
  }
}

/** A failed result when the node's BMC does not answer a power query (the node is not touched), else undefined. */
async function bmcCheck(deps: DeployDeps, node: string, state: NodeState): Promise<ProvisionResult | undefined> {
  try {
    await deps.power(node).powerState();
    return undefined;
  } catch (e) {
    const cause = summarizeFailure(e);
    const error = new StackctlError(
      'E_PROVISION_BMC',
      `node '${node}' stays in '${state}': its BMC did not answer (${cause.code}: ${cause.message})`,
      {
        hint:
          cause.hint ?? 'Check the BMC address and credentials (stackctl nodes validate), then run the command again.',
        exitCode: cause.exit,
        details: { node, state },
      },
    );
    return { node, ok: false, state, error: summarizeFailure(error), phases: {}, bytesServed: 0 };
  }
}

/** Log in with stackctl's key, the host key checked against known_hosts; retried until the deadline. */
async function sshCheck(opts: ProvisionOptions, t: DeployTarget): Promise<string> {
  const ssh = opts.ssh!;
  const deps = opts.deps;
  const now = deps.now ?? Date.now;
  const sleep = deps.sleep ?? sleepDefault;
  const timeoutMs = ssh.timeoutMs ?? SSH_CHECK_TIMEOUT_MS;
  const target = { node: t.node, host: t.ip, port: deps.sshPort ?? 22, user: ssh.user ?? 'root' };
  const until = now() + timeoutMs;
  let last: unknown;
  while (now() < until) {
    try {
      const r = await ssh.pool.exec(target, ['uname', '-a'], { timeoutMs: 15_000 });
      if (r.code === 0) return r.stdout.trim();
      last = new Error(`uname exited ${r.code}: ${r.stderr.trim()}`);
    } catch (e) {
      // a wrong host key is an answer, not a slow boot: stop at once
      if (e instanceof StackctlError && e.code.startsWith('E_HOST_KEY')) throw e;
      last = e;
      await ssh.pool.close(target).catch(() => undefined);
    }
    await sleep(2000);
  }
  throw new TimeoutError(
    'E_DEPLOY_SSH',
    `node '${t.node}' (${t.ip}) booted its disk but did not answer SSH within ${Math.round(timeoutMs / 1000)} s: ${last instanceof Error ? last.message : String(last)}`,
    {
      hint: 'Look at the node console: did it boot from disk, bring up the provisioning NIC with its static address, start sshd?',
      details: { node: t.node, address: t.ip },
    },
  );
}

async function undeployOne(opts: ProvisionOptions, t: DeployTarget): Promise<ProvisionResult> {
  const deps = opts.deps;
  const events = opts.events ?? deps.events ?? NO_EVENTS;
  const now = deps.now ?? Date.now;
  const node = t.node;
  const state = deps.nodes.get(node).state;
  if (state === NodeState.AVAILABLE && opts.resume) return { node, ok: true, state, phases: {}, bytesServed: 0 };
  if (!UNDEPLOY_START.has(state) && !(opts.resume && UNDEPLOY_RESUME.has(state))) {
    return refused(node, state, 'undeployed');
  }
  const unreachable = await bmcCheck(deps, node, state);
  if (unreachable) return unreachable;
  const t0 = now();
  const bytes0 = totalBytes(deps, node);
  const phases: DeployPhases = {};
  let result: Omit<ProvisionResult, 'phases' | 'bytesServed' | 'node'>;
  try {
    if (UNDEPLOY_START.has(state)) startUndeploy(deps, node, 'undeploy');
    const { step } = await drive(deps, t, reconcileUndeploy);
    const clean = step.result?.timings?.clean;
    if (clean !== undefined) phases.clean = Math.round(clean * 1000);
    result = {
      ok: step.state === NodeState.AVAILABLE,
      state: step.state,
      ...(step.error ? { error: summarizeFailure(step.error) } : {}),
    };
  } catch (e) {
    result = { ok: false, state: deps.nodes.get(node).state, error: summarizeFailure(e) };
  }
  phases.total = now() - t0;
  const bytesServed = totalBytes(deps, node) - bytes0;
  events.emit({
    kind: 'provision.done',
    node,
    action: 'undeploy',
    ok: result.ok,
    bytes: bytesServed,
    ms: phases.total,
    reason: result.error ? `${result.error.code}: ${result.error.message}` : '',
  });
  return { node, ...result, phases, bytesServed };
}
