/**
 * Enroll and inspect, one node at a time, on a session: the steps `stackctl
 * nodes enroll|inspect` run per node and `stackctl deploy` runs for the nodes
 * it provisions first. Each is re-entrant: called again after a crash it
 * carries on from the node's persisted state.
 */
import { StackctlError, UsageError, summarizeFailure } from '../../core/errors.js';
import { PROVISIONING } from '../../pxe/dnsmasq.js';
import type { Introspection } from '../../pxe/http.js';
import type { BootServices } from '../../pxe/services.js';
import {
  INSPECT_DEFAULTS,
  reconcileInspection,
  startInspection,
  type InspectDeps,
  type IntrospectionStore,
} from '../inspect.js';
import type { NodeRecord } from '../machine.js';
import { FAILURE, NodeEvent, NodeState } from '../states.js';
import type { NodeSession } from './session.js';

/** enroll -> verifying -> manageable: the BMC must answer with the configured credentials. */
export async function enrollNode(s: NodeSession, node: string, update: (status: string) => void): Promise<string> {
  let rec = s.store.get(node);
  if (rec.state === NodeState.ENROLL) rec = s.store.apply(node, NodeEvent.MANAGE, 'operator: enroll');
  if (rec.state !== NodeState.VERIFYING) return `already enrolled (${rec.state})`;
  update('verifying the BMC');
  const d = s.driver(node);
  try {
    d.validate();
    const id = await d.identify();
    const power = await d.powerState();
    const detail = `${d.kind} BMC answers, power ${power}${id.manufacturer ? `, ${id.manufacturer}` : ''}`;
    s.store.apply(node, NodeEvent.DONE, detail);
    s.emit({ kind: 'node.validated', node, driver: d.kind, detail });
    return `manageable (${detail})`;
  } catch (e) {
    const { code, message } = summarizeFailure(e);
    s.store.apply(node, NodeEvent.FAIL, `${code}: ${message}`);
    throw e;
  }
}

/** States an inspection can start or resume from. */
const INSPECTABLE: ReadonlySet<NodeState> = new Set([
  NodeState.MANAGEABLE,
  NodeState.INSPECT_FAILED,
  NodeState.INSPECTING,
  NodeState.INSPECT_WAIT,
]);

/** Refuse a node the inspection cannot take, with what to do instead. */
export function checkInspectable(rec: NodeRecord): void {
  if (INSPECTABLE.has(rec.state)) return;
  throw new UsageError('E_NODE_STATE', `node '${rec.name}' is in state '${rec.state}': it cannot be inspected`, {
    hint:
      rec.state === NodeState.ENROLL
        ? `Enroll it first: stackctl nodes enroll --node ${rec.name}`
        : 'Inspection starts from manageable or inspect failed; an available or active node must go back to manageable first.',
    details: { node: rec.name, state: rec.state },
  });
}

/** One line about a report: what the ramdisk found. */
export function introspectionSummary(d: Introspection): string {
  const gib = (b: number): string => `${(b / 1024 ** 3).toFixed(1)} GiB`;
  return (
    `${d.cpu.count} CPU ${d.cpu.arch}, ${d.memory_mib} MiB, ` +
    `disks ${d.disks.map((x) => `${x.name} ${gib(x.size_bytes)}${x.serial ? ` (${x.serial})` : ''}`).join(', ') || 'none'}, ` +
    `NICs ${d.interfaces.map((x) => `${x.name} ${x.mac}`).join(', ')}`
  );
}

/** The inspect workflow's dependencies on a session whose boot services run. */
export function inspectDepsOf(
  s: NodeSession,
  services: Pick<BootServices, 'server'>,
  introspection: IntrospectionStore,
  timeoutMs: number,
): InspectDeps {
  return {
    nodes: s.store,
    introspection,
    boot: services.server,
    power: (node) => s.driver(node),
    timeoutMs,
    pollMs: 1000,
  };
}

/**
 * Inspect one node (from manageable or inspect failed, or carry on with an
 * inspection in progress) until its agent reported; throws the failure with
 * what the boot services saw of the node. Resolves to a one-line summary.
 */
export async function inspectNode(
  s: NodeSession,
  deps: InspectDeps,
  services: Pick<BootServices, 'observed'>,
  node: string,
  update: (status: string) => void,
  reason: string,
): Promise<string> {
  const mac =
    s.site.inventory.nodes.find((n) => n.name === node)!.nics.find((n) => n.network === PROVISIONING)?.mac ?? '';
  const rec = s.store.get(node);
  if (rec.state === NodeState.MANAGEABLE || rec.state === NodeState.INSPECT_FAILED) {
    startInspection(deps, node, reason);
  }
  const t0 = Date.now();
  for (;;) {
    const step = await reconcileInspection(deps, node);
    if (step.error) {
      // what the boot services saw says whether the node booted at all
      const seen = services.observed(mac);
      throw new StackctlError(step.error.code, `${step.error.message} (boot services for ${mac}: ${seen})`, {
        ...(step.error.hint ? { hint: step.error.hint } : {}),
        cause: step.error,
        exitCode: step.error.exitCode,
        details: { ...step.error.details, observed: seen },
      });
    }
    if (!step.dirty) {
      const d = step.introspection?.data ?? deps.introspection.get(node)?.data;
      return d ? `${introspectionSummary(d)}` : step.state;
    }
    update(`${step.state} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
    await new Promise((r) => setTimeout(r, step.requeueAfterMs ?? INSPECT_DEFAULTS.pollMs));
  }
}

/** The reason of the node's latest failure, when it still stands (the last step failed or it sits in a failure state). */
export function lastError(rec: NodeRecord): string {
  const last = rec.history.at(-1);
  if (!last) return '';
  if (last.event === NodeEvent.FAIL) return last.reason;
  if (FAILURE.has(rec.state)) return [...rec.history].reverse().find((h) => h.event === NodeEvent.FAIL)?.reason ?? '';
  return '';
}
