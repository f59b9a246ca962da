/**
 * The node lifecycle, after Ironic's state machine: a node is enrolled,
 * verified (its BMC answers), inspected (hardware facts reported by the
 * ramdisk agent), cleaned, deployed (the OS image written) and undeployed.
 *
 * States and events are constants with their meaning written down, and the
 * transitions are one table of `[from, event, to]` rows: the engine
 * (machine.ts) reads the table, the tests walk it.
 */

/** Every state a node can be in. */
export const NodeState = {
  /** Known to stackctl from the inventory; nothing was checked yet. */
  ENROLL: 'enroll',
  /** Checking that the BMC answers with the configured credentials. */
  VERIFYING: 'verifying',
  /** The BMC answers; the node can be inspected, cleaned or made available. */
  MANAGEABLE: 'manageable',
  /** Powering the node on into the inspection ramdisk. */
  INSPECTING: 'inspecting',
  /** Waiting for the ramdisk agent to report the hardware it found. */
  INSPECT_WAIT: 'inspect wait',
  /** Inspection failed or timed out; inspect again or go back to manageable. */
  INSPECT_FAILED: 'inspect failed',
  /** Erasing the node's disks and resetting its settings before it can be deployed. */
  CLEANING: 'cleaning',
  /** Waiting for the ramdisk agent to finish cleaning. */
  CLEAN_WAIT: 'clean wait',
  /** Cleaning failed; the node goes back to manageable once the operator looked at it. */
  CLEAN_FAILED: 'clean failed',
  /** Clean and ready to receive an OS image. */
  AVAILABLE: 'available',
  /** Booting the deploy ramdisk and preparing the image. */
  DEPLOYING: 'deploying',
  /** Waiting for the ramdisk agent to write the image and call back. */
  DEPLOY_WAIT: 'deploy wait',
  /** The image could not be written or the node did not call back; redeploy or undeploy. */
  DEPLOY_FAILED: 'deploy failed',
  /** The OS image is on the disk and the node runs it. */
  ACTIVE: 'active',
  /** Tearing a deployment down (power off, boot device reset) before cleaning. */
  UNDEPLOYING: 'undeploying',
  /** Undeploying failed: the node's state is unknown; undeploy again or rebuild. */
  ERROR: 'error',
} as const;
export type NodeState = (typeof NodeState)[keyof typeof NodeState];

/** Everything that moves a node from one state to another. */
export const NodeEvent = {
  /** Operator: check the BMC (from enroll) or take the node back under management. */
  MANAGE: 'manage',
  /** Operator: boot the inspection ramdisk and collect the hardware facts. */
  INSPECT: 'inspect',
  /** Operator: clean the node and make it available for deployment. */
  PROVIDE: 'provide',
  /** Operator: write the OS image. */
  DEPLOY: 'deploy',
  /** Operator: write the OS image again on an active (or broken) node. */
  REBUILD: 'rebuild',
  /** Operator: tear the deployment down. */
  UNDEPLOY: 'undeploy',
  /** Operator: give up waiting for the agent (the node stays powered as it is). */
  ABORT: 'abort',
  /** Workflow: the node was booted; now the agent must call back. */
  WAIT: 'wait',
  /** Workflow or agent: the step finished successfully. */
  DONE: 'done',
  /** Workflow or agent: the step failed (the reason goes into the history). */
  FAIL: 'fail',
} as const;
export type NodeEvent = (typeof NodeEvent)[keyof typeof NodeEvent];

const S = NodeState;
const E = NodeEvent;

/** One row of the transition table. */
export type Transition = readonly [from: NodeState, event: NodeEvent, to: NodeState];

/**
 * The transition table. A `(from, event)` pair appears at most once (a test
 * checks it), so applying an event is a lookup, never a decision.
 */
export const TRANSITIONS: readonly Transition[] = [
  // enrollment: prove the BMC answers before anything else touches the node
  [S.ENROLL, E.MANAGE, S.VERIFYING],
  [S.VERIFYING, E.DONE, S.MANAGEABLE],
  // NOTE: Ironic sends a node whose BMC check failed back to enroll, not to a failure state
  [S.VERIFYING, E.FAIL, S.ENROLL],

  // inspection
  [S.MANAGEABLE, E.INSPECT, S.INSPECTING],
  [S.INSPECTING, E.WAIT, S.INSPECT_WAIT],
  [S.INSPECTING, E.DONE, S.MANAGEABLE],
  [S.INSPECTING, E.FAIL, S.INSPECT_FAILED],
  [S.INSPECT_WAIT, E.DONE, S.MANAGEABLE],
  [S.INSPECT_WAIT, E.FAIL, S.INSPECT_FAILED],
  [S.INSPECT_WAIT, E.ABORT, S.INSPECT_FAILED],
  [S.INSPECT_FAILED, E.INSPECT, S.INSPECTING],
  [S.INSPECT_FAILED, E.MANAGE, S.MANAGEABLE],

  // cleaning, on the way to available and after every undeploy
  [S.MANAGEABLE, E.PROVIDE, S.CLEANING],
  [S.CLEANING, E.WAIT, S.CLEAN_WAIT],
  [S.CLEANING, E.DONE, S.AVAILABLE],
  [S.CLEANING, E.FAIL, S.CLEAN_FAILED],
  [S.CLEAN_WAIT, E.DONE, S.AVAILABLE],
  [S.CLEAN_WAIT, E.FAIL, S.CLEAN_FAILED],
  [S.CLEAN_WAIT, E.ABORT, S.CLEAN_FAILED],
  [S.CLEAN_FAILED, E.MANAGE, S.MANAGEABLE],
  [S.AVAILABLE, E.MANAGE, S.MANAGEABLE],

  // deployment
  [S.AVAILABLE, E.DEPLOY, S.DEPLOYING],
  [S.DEPLOYING, E.WAIT, S.DEPLOY_WAIT],
  [S.DEPLOYING, E.DONE, S.ACTIVE],
  [S.DEPLOYING, E.FAIL, S.DEPLOY_FAILED],
  [S.DEPLOY_WAIT, E.DONE, S.ACTIVE],
  [S.DEPLOY_WAIT, E.FAIL, S.DEPLOY_FAILED],
  [S.DEPLOY_WAIT, E.ABORT, S.DEPLOY_FAILED],
  [S.DEPLOY_FAILED, E.DEPLOY, S.DEPLOYING],
  [S.DEPLOY_FAILED, E.UNDEPLOY, S.UNDEPLOYING],
  [S.ACTIVE, E.REBUILD, S.DEPLOYING],

  // undeployment always ends in cleaning: the next tenant must not see old disks
  [S.ACTIVE, E.UNDEPLOY, S.UNDEPLOYING],
  [S.UNDEPLOYING, E.DONE, S.CLEANING],
  [S.UNDEPLOYING, E.FAIL, S.ERROR],
  [S.ERROR, E.UNDEPLOY, S.UNDEPLOYING],
  [S.ERROR, E.REBUILD, S.DEPLOYING],
];

/** States where nothing is in progress and only the operator moves the node on. */
export const STABLE: ReadonlySet<NodeState> = new Set([S.ENROLL, S.MANAGEABLE, S.AVAILABLE, S.ACTIVE]);

/** States that record a failed step; each has an operator event that leads out (a test checks it). */
export const FAILURE: ReadonlySet<NodeState> = new Set([S.INSPECT_FAILED, S.CLEAN_FAILED, S.DEPLOY_FAILED, S.ERROR]);

/** States that wait for the ramdisk agent to call back; a timeout or `abort` ends the wait. */
export const WAITING: ReadonlySet<NodeState> = new Set([S.INSPECT_WAIT, S.CLEAN_WAIT, S.DEPLOY_WAIT]);

/** States where a workflow is acting on the node right now (a crash here is resumed by the workflow). */
export const BUSY: ReadonlySet<NodeState> = new Set([
  S.VERIFYING,
  S.INSPECTING,
  S.CLEANING,
  S.DEPLOYING,
  S.UNDEPLOYING,
]);

/** Events only an operator sends (the others come from workflows and the agent). */
export const OPERATOR_EVENTS: ReadonlySet<NodeEvent> = new Set([
  E.MANAGE,
  E.INSPECT,
  E.PROVIDE,
  E.DEPLOY,
  E.REBUILD,
  E.UNDEPLOY,
  E.ABORT,
]);

/** Every state, in declaration order. */
export const ALL_STATES: readonly NodeState[] = Object.values(NodeState);

/** Every event, in declaration order. */
export const ALL_EVENTS: readonly NodeEvent[] = Object.values(NodeEvent);

/** True when `value` names a state (used when reading the persisted file). */
export function isNodeState(value: unknown): value is NodeState {
  return typeof value === 'string' && (ALL_STATES as readonly string[]).includes(value);
}

/** True when `value` names an event. */
export function isNodeEvent(value: unknown): value is NodeEvent {
  return typeof value === 'string' && (ALL_EVENTS as readonly string[]).includes(value);
}
