/**
 * The inspect workflow: boot a node into the ramdisk, let its agent report
 * the hardware, keep the report, and bring the node back to manageable.
 *
 * `startInspection()` is the operator's event (manageable or inspect failed
 * -> inspecting). `reconcileInspection()` does what is left and says whether
 * more remains (CONVENTIONS.md 6): it never waits, the orchestrator calls it
 * again after `requeueAfterMs`. Every side effect it takes is safe to repeat,
 * so after a crash it is simply called again:
 *
 *   inspecting    arm a new token, boot device PXE (once), power cycle -> wait
 *   inspect wait  report stored since the inspection began -> done (manageable)
 *                 token gone without a report (the boot server restarted) -> boot again
 *                 deadline passed -> fail (inspect failed)
 *
 * The report reaches the workflow through the store: the boot server's
 * `onReport` callback writes it (`introspectionReportHandler`) before the
 * token is spent, so an accepted report is never lost.
 */
import type { BmcDriver } from '../bmc/driver.js';
import { InputError, StackctlError, TimeoutError, messageOf } from '../core/errors.js';
import { readTextFileIfExists, writeFileAtomic } from '../core/fs.js';
import type { AgentReport, BootServer, Introspection } from '../pxe/http.js';
import type { NodeRecord, NodeStateStore } from './machine.js';
import { NodeEvent, NodeState } from './states.js';

/** Defaults of the workflow. */
export const INSPECT_DEFAULTS = {
  /** Power-on to report: real servers spend minutes in POST; a TCG VM needs ~15 s. */
  timeoutMs: 10 * 60_000,
  /** How soon the orchestrator should call again while the agent has not reported. */
  pollMs: 2_000,
} as const;

/** One node's stored report. */
export interface StoredIntrospection {
  /** ISO 8601 time the boot server accepted it. */
  readonly receivedAt: string;
  readonly data: Introspection;
}

/** The file: what the agents reported, by node. Holds no secrets. */
interface IntrospectionFile {
  readonly version: 1;
  readonly nodes: Record<string, StoredIntrospection>;
}

/** Path of the introspection file that belongs to an inventory file. */
export function introspectionFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.introspection.json';
}

/** Side effects of an IntrospectionStore (tests keep the file in memory: pass `read` and `write` together). */
export interface IntrospectionStoreOptions {
  readonly write?: (file: string, text: string) => void;
  /** The file's text, or undefined when there is none. */
  readonly read?: (file: string) => string | undefined;
  readonly now?: () => Date;
}

/**
 * The hardware reports of one inventory's nodes, in
 * `<inventory>.introspection.json` (written atomically on every put).
 * NOTE: beside the node state file rather than in it: the node record holds
 * the lifecycle only, and reports are large and replaced wholesale.
 * `put()` reads the file first and, when another store wrote it since this
 * one last read or wrote it, keeps the reports found there (see
 * NodeStateStore: the same read-modify-write).
 */
export class IntrospectionStore {
  readonly #nodes = new Map<string, StoredIntrospection>();
  readonly #write: (file: string, text: string) => void;
  readonly #read: (file: string) => string | undefined;
  readonly #now: () => Date;
  /** The file's text as this store last read or wrote it (undefined: no file). */
  #seen: string | undefined;

  private constructor(
    readonly file: string,
    options: IntrospectionStoreOptions,
  ) {
    this.#write = options.write ?? ((f, t) => writeFileAtomic(f, t));
    this.#read = options.read ?? ((f) => readTextFileIfExists(f, 64 * 1024 * 1024));
    this.#now = options.now ?? (() => new Date());
  }

  /** Open the store; a missing file holds no reports. */
  static open(file: string, options: IntrospectionStoreOptions = {}): IntrospectionStore {
    const store = new IntrospectionStore(file, options);
    store.#load(store.#read(file));
    return store;
  }

  #load(text: string | undefined): void {
    let f: Partial<IntrospectionFile> | undefined;
    if (text !== undefined) {
      try {
        f = JSON.parse(text) as Partial<IntrospectionFile>;
      } catch {
        f = undefined;
      }
      if (!f || f.version !== 1 || typeof f.nodes !== 'object' || f.nodes === null) {
        throw new InputError('E_INTROSPECTION_FILE', `introspection file ${this.file}: unknown format`, {
          hint: 'Remove the file: the next inspection writes it again.',
          location: { file: this.file },
        });
      }
    }
    this.#nodes.clear();
    for (const [name, entry] of Object.entries(f?.nodes ?? {})) this.#nodes.set(name, entry);
    this.#seen = text;
  }

  /** The node's last report, if any. */
  get(node: string): StoredIntrospection | undefined {
    return this.#nodes.get(node);
  }

  /** Keep a report (replacing the node's earlier one) and write the file before returning. */
  put(node: string, data: Introspection): StoredIntrospection {
    const current = this.#read(this.file);
    if (current !== this.#seen) this.#load(current);
    const entry: StoredIntrospection = { receivedAt: this.#now().toISOString(), data };
    const next = new Map(this.#nodes).set(node, entry);
    const nodes: Record<string, StoredIntrospection> = {};
    for (const name of [...next.keys()].sort()) nodes[name] = next.get(name)!;
    const text = JSON.stringify({ version: 1, nodes } satisfies IntrospectionFile, null, 2) + '\n';
    // write first: a failed write must not leave memory ahead of the file (and makes the server answer 500)
    this.#write(this.file, text);
    this.#nodes.set(node, entry);
    this.#seen = text;
    return entry;
  }
}

/** The boot server's `onReport` for introspection reports: store them (a throw makes the agent retry). */
export function introspectionReportHandler(store: IntrospectionStore): (report: AgentReport) => void {
  return (report) => {
    if (report.endpoint === 'introspection') store.put(report.node, report.body);
  };
}

/** What the workflow needs from a node's BMC. */
export type InspectPower = Pick<BmcDriver, 'powerState' | 'powerOn' | 'powerOff' | 'setBootDevice'>;

/** Side effects of the workflow, injected (CONVENTIONS.md 8). */
export interface InspectDeps {
  readonly nodes: NodeStateStore;
  readonly introspection: IntrospectionStore;
  readonly boot: Pick<BootServer, 'arm' | 'disarm' | 'isArmed'>;
  /** The node's BMC. */
  readonly power: (node: string) => InspectPower;
  readonly now?: () => number;
  readonly timeoutMs?: number;
  readonly pollMs?: number;
}

/** The outcome of one reconcile call. */
export interface InspectStep {
  readonly node: string;
  readonly state: NodeState;
  /** True while work remains: call again after `requeueAfterMs`. */
  readonly dirty: boolean;
  readonly requeueAfterMs?: number;
  /** The report, once the inspection is done. */
  readonly introspection?: StoredIntrospection;
  /** Why the inspection failed, when it just did. */
  readonly error?: StackctlError;
}

/** The operator's event: start an inspection (from manageable or inspect failed). */
export function startInspection(deps: Pick<InspectDeps, 'nodes'>, node: string, reason = 'operator'): NodeRecord {
  return deps.nodes.apply(node, NodeEvent.INSPECT, reason);
}

/** When the node last entered `state` (ms), from its history. */
function enteredAt(record: NodeRecord, state: NodeState): number | undefined {
  for (let i = record.history.length - 1; i >= 0; i--) {
    const h = record.history[i]!;
    if (h.to === state) return Date.parse(h.time);
  }
  return undefined;
}

/** Boot from the network once, power off, arm a new token, power on. Each step may be repeated. */
async function bootRamdisk(deps: InspectDeps, node: string): Promise<void> {
  const bmc = deps.power(node);
  await bmc.setBootDevice('pxe', { persistent: false });
  // a node already on (an earlier attempt, an OS) must boot again to pick the network up
  if ((await bmc.powerState()) === 'on') await bmc.powerOff();
  // armed while off: a node still running could fetch the boot script, which is served once
  deps.boot.arm(node, 'inspect');
  await bmc.powerOn();
}

async function powerOffQuietly(deps: InspectDeps, node: string): Promise<void> {
  try {
    const bmc = deps.power(node);
    if ((await bmc.powerState()) === 'on') await bmc.powerOff();
  } catch {
    // the state change is what matters here; the next power action reports a broken BMC
  }
}

function asStackctlError(e: unknown): StackctlError {
  return e instanceof StackctlError
    ? e
    : new StackctlError('E_INSPECT_INTERNAL', messageOf(e), { hint: 'This is a bug: please report it.' });
}

/**
 * Do what is left of a node's inspection; see the module comment. Nodes in
 * any other state than inspecting or inspect wait are left alone (not dirty).
 */
export async function reconcileInspection(deps: InspectDeps, node: string): Promise<InspectStep> {
  const now = deps.now ?? Date.now;
  const pollMs = deps.pollMs ?? INSPECT_DEFAULTS.pollMs;
  const record = deps.nodes.get(node);

  if (record.state === NodeState.INSPECTING) {
    try {
      await bootRamdisk(deps, node);
    } catch (e) {
      const error = asStackctlError(e);
      deps.boot.disarm(node);
      deps.nodes.apply(node, NodeEvent.FAIL, `${error.code}: ${error.message}`);
      return { node, state: NodeState.INSPECT_FAILED, dirty: false, error };
    }
    deps.nodes.apply(node, NodeEvent.WAIT, 'booting the inspection ramdisk');
    return { node, state: NodeState.INSPECT_WAIT, dirty: true, requeueAfterMs: pollMs };
  }

  if (record.state !== NodeState.INSPECT_WAIT) return { node, state: record.state, dirty: false };

  // reports older than this inspection do not count
  const began = enteredAt(record, NodeState.INSPECTING) ?? enteredAt(record, NodeState.INSPECT_WAIT) ?? 0;
  // NOTE: token first, then the store: the server stores the report before it spends the token,
  // so "not armed and no report" really means the token was lost
  const armed = deps.boot.isArmed(node);
  const stored = deps.introspection.get(node);
  if (stored && Date.parse(stored.receivedAt) >= began) {
    deps.boot.disarm(node);
    // the agent powers off by itself; make sure the node does not sit in the ramdisk
    await powerOffQuietly(deps, node);
    const d = stored.data;
    deps.nodes.apply(
      node,
      NodeEvent.DONE,
      `inspected: ${d.cpu.count} CPU, ${d.memory_mib} MiB, ${d.disks.length} disk(s), ${d.interfaces.length} NIC(s)`,
    );
    return { node, state: NodeState.MANAGEABLE, dirty: false, introspection: stored };
  }

  const timeoutMs = deps.timeoutMs ?? INSPECT_DEFAULTS.timeoutMs;
  if (now() - began > timeoutMs) {
    const error = new TimeoutError(
      'E_INSPECT_TIMEOUT',
      `node '${node}' sent no hardware report within ${timeoutMs / 1000} s`,
      {
        hint: 'Look at the node console: did it boot from the network (MAC in the inventory, dnsmasq log), reach the boot server, get a DHCP address in the ramdisk?',
        details: { node, timeoutMs },
      },
    );
    deps.boot.disarm(node);
    await powerOffQuietly(deps, node);
    deps.nodes.apply(node, NodeEvent.FAIL, `${error.code}: ${error.message}`);
    return { node, state: NodeState.INSPECT_FAILED, dirty: false, error };
  }

  if (!armed) {
    // the boot server keeps tokens in memory: after its restart the node's token is gone; boot again
    try {
      await bootRamdisk(deps, node);
    } catch {
      // the BMC may answer next time; the deadline above bounds the retries
    }
  }
  return { node, state: NodeState.INSPECT_WAIT, dirty: true, requeueAfterMs: pollMs };
}
