/**
 * The node state file `<inventory>.nodes.json`: every node's state and
 * history, as `{"version": 1, "nodes": {NAME: {state, history}}}`, nodes
 * sorted by name, indented by two spaces, a newline at the end
 * (docs/provisioning.md). Since the journal (node-journal.ts) it is the
 * snapshot the journal's lines follow; its format did not change.
 */
import { InputError } from '../core/errors.js';
import type { HistoryEntry, NodeRecord } from './records.js';
import { isNodeEvent, isNodeState, type NodeState } from './states.js';

/** The persisted file. */
interface NodesFile {
  readonly version: 1;
  readonly nodes: Record<string, { state: NodeState; history: HistoryEntry[] }>;
}

/** The file's text for these records (the same bytes for the same records, whatever their order). */
export function serializeNodes(records: ReadonlyMap<string, NodeRecord>): string {
  const nodes: NodesFile['nodes'] = {};
  for (const name of [...records.keys()].sort()) {
    const r = records.get(name)!;
    nodes[name] = { state: r.state, history: [...r.history] };
  }
  const file: NodesFile = { version: 1, nodes };
  return JSON.stringify(file, null, 2) + '\n';
}

function badFile(file: string, what: string): InputError {
  return new InputError('E_NODES_STATE', `node state file ${file}: ${what}`, {
    hint: 'Restore it from a backup, or fix the entry by hand; removing the file sends every node back to enroll.',
    location: { file },
  });
}

/** A history entry read from a file or a journal line, or undefined when it is malformed. */
export function historyEntryOf(raw: unknown): HistoryEntry | undefined {
  const e = raw as Partial<Record<keyof HistoryEntry, unknown>> | null;
  if (
    typeof e !== 'object' ||
    e === null ||
    !isNodeEvent(e.event) ||
    !isNodeState(e.from) ||
    !isNodeState(e.to) ||
    typeof e.reason !== 'string' ||
    typeof e.time !== 'string'
  ) {
    return undefined;
  }
  return { event: e.event, from: e.from, to: e.to, reason: e.reason, time: e.time };
}

/** Parse and check the persisted file; every state and event must be known. */
export function parseNodesFile(file: string, text: string): NodeRecord[] {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw badFile(file, 'not valid JSON');
  }
  const obj = data as Partial<NodesFile> | null;
  if (typeof obj !== 'object' || obj === null || obj.version !== 1 || typeof obj.nodes !== 'object' || !obj.nodes) {
    throw badFile(file, 'unknown format (expected {"version": 1, "nodes": {...}})');
  }
  const out: NodeRecord[] = [];
  for (const [name, raw] of Object.entries(obj.nodes as Record<string, unknown>)) {
    const rec = raw as { state?: unknown; history?: unknown } | null;
    if (typeof rec !== 'object' || rec === null || !isNodeState(rec.state) || !Array.isArray(rec.history)) {
      throw badFile(file, `node '${name}' has no valid state`);
    }
    const history: HistoryEntry[] = [];
    for (const h of rec.history as unknown[]) {
      const entry = historyEntryOf(h);
      if (!entry) throw badFile(file, `node '${name}' has a malformed history entry`);
      history.push(entry);
    }
    out.push({ name, state: rec.state, history });
  }
  return out;
}
