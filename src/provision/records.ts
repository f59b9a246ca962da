/**
 * A node's lifecycle record: its state and the history of the events applied
 * to it. The shape shared by the engine (machine.ts), the state file
 * (nodes-file.ts) and its journal (node-journal.ts).
 */
import { NodeState, type NodeEvent } from './states.js';

/** One applied event, as kept in a node's history. */
export interface HistoryEntry {
  readonly event: NodeEvent;
  readonly from: NodeState;
  readonly to: NodeState;
  /** Why, in words: an error code and message, an operator's note. Never a secret. */
  readonly reason: string;
  /** ISO 8601 time. */
  readonly time: string;
}

/** What stackctl knows about one node's lifecycle. */
export interface NodeRecord {
  readonly name: string;
  readonly state: NodeState;
  /** Oldest first; capped at MAX_HISTORY entries. */
  readonly history: readonly HistoryEntry[];
}

/** History entries kept per node: enough for every step of many deploys, bounded so the file stays small. */
export const MAX_HISTORY = 200;

/** A fresh record: every node starts in enroll. */
export function newRecord(name: string): NodeRecord {
  return { name, state: NodeState.ENROLL, history: [] };
}

/** The record after `entry`: its state is the entry's `to`, the oldest entries beyond MAX_HISTORY dropped. */
export function withEntry(record: NodeRecord, entry: HistoryEntry): NodeRecord {
  const history = [...record.history, entry].slice(-MAX_HISTORY);
  return { name: record.name, state: entry.to, history };
}
