/**
 * What an upgrade adds to the engine's journal (src/orchestrator/journal.ts):
 * the journal subject of its own action kinds, and the digest of its plan, so
 * that a continued run performs the plan it started with.
 */
import { canonicalJson, sha256 } from '../core/hash.js';
import type { Subjects } from '../orchestrator/engine.js';
import { NODE_SUBJECTS } from '../orchestrator/format.js';
import type { UpgradeAction, UpgradePlan } from './model.js';

/** The subject of an action in its key: node, service on node, hook and nodes... */
export const UPGRADE_SUBJECTS: Subjects<UpgradeAction> = {
  ...NODE_SUBJECTS,
  'check-reachable': (a) => a.nodes.join(','),
  'check-healthy': (a) => `${a.service}@${a.nodes.join(',')}`,
  'check-images': (a) => `${a.images.length} image(s)`,
  'check-capacity': (a) => a.batch.join(','),
  'check-service': (a) => `${a.service}@${a.node} ${a.command.join(' ')}`,
  hook: (a) => `${a.hook}@${a.point}:${a.nodes.join(',')}`,
};

/** What an action concerns, for keys, events and the report. */
export function subjectOf(a: UpgradeAction): string {
  return (UPGRADE_SUBJECTS[a.kind] as (x: UpgradeAction) => string)(a);
}

/**
 * The digest of what a plan does: its releases and phases (canonical JSON). The failure budget
 * is left out, so a failed run may be resumed with another `--max-fail-percent`.
 */
export function planDigest(plan: UpgradePlan): string {
  return sha256(canonicalJson({ from: plan.from, to: plan.to, phases: plan.phases }));
}
