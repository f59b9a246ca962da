/**
 * The upgrade plan as data (CONVENTIONS.md 13: upgrades are named phases).
 * The planner (planner.ts) derives it from the service files' `upgrade`
 * sections; a runner performs it phase by phase, step by step. Nothing here
 * does I/O.
 *
 * A plan is a list of phases; a phase is a list of steps; a step is a barrier
 * whose actions may run in parallel (they touch different nodes or are one
 * run-once command).
 */
import type { HookPoint } from '../inventory/schema.js';
import type { NodeAction, Phase, Step } from '../orchestrator/model.js';

export type { MigrationStage, Pause, TargetContainer } from '../orchestrator/model.js';

/** Whether the target stays within the current OpenStack release. */
export const UpgradeKind = {
  /** Same OpenStack release, new image tags (rebuilt images): rolling. */
  UPDATE: 'update',
  /** A newer OpenStack release: database migrations, skew rules apply. */
  MAJOR: 'major',
} as const;
export type UpgradeKind = (typeof UpgradeKind)[keyof typeof UpgradeKind];

/** Where `--pause-at` stops and waits for `--continue`. */
export const PauseAt = {
  /** Before each offline migration window (APIs about to go down). */
  MIGRATION: 'migration',
  /** After each compute batch. */
  BATCH: 'batch',
  /** Never: run through (the failure budget still stops it). */
  NEVER: 'never',
} as const;
export type PauseAt = (typeof PauseAt)[keyof typeof PauseAt];

/** Kinds of phase, in the order they appear in a plan; each has a title. */
export const PHASE_KINDS = {
  /** Nothing stops: reachability, health, cluster state, images, capacity, the target's upgrade checks. */
  precheck: 'prechecks: verify the cloud and the target before anything stops',
  /** User hooks at pre-upgrade. */
  'pre-upgrade': 'pre-upgrade hooks',
  /** Every target image pulled on every node before any container stops. */
  pull: 'pre-pull every target image on every node',
  /** One service, or the services that must move together, of the control plane. */
  control: 'control plane',
  /** Nodes of batched services (nova-compute), N at a time, with evacuation hooks. */
  batches: 'computes in batches',
  /** User hooks at post-upgrade. */
  'post-upgrade': 'post-upgrade hooks',
} as const;
export type PhaseKind = keyof typeof PHASE_KINDS;

/** The engine's node actions, and what only an upgrade does: its checks and hooks. */
export type UpgradeAction =
  | NodeAction
  | { readonly kind: 'check-reachable'; readonly nodes: readonly string[] }
  | { readonly kind: 'check-healthy'; readonly service: string; readonly nodes: readonly string[] }
  | { readonly kind: 'check-images'; readonly images: readonly string[] }
  | { readonly kind: 'check-capacity'; readonly batch: readonly string[] }
  | {
      readonly kind: 'check-service';
      readonly service: string;
      readonly node: string;
      readonly image: string;
      readonly command: readonly string[];
      /** Run inside a fast-forward window, after its migrations (the service is stopped). */
      readonly inWindow?: boolean;
      /** Findings that may fail there (the service file's fast_forward_waivers): a warning, not a failure. */
      readonly waive?: readonly string[];
    }
  | {
      readonly kind: 'hook';
      readonly hook: string;
      readonly point: HookPoint;
      /** 'built-in' for stackctl's own (e.g. nova-evacuate), 'inventory' for a user hook. */
      readonly source: 'built-in' | 'inventory';
      readonly runOn: 'deploy-host' | 'nodes';
      /** Nodes of the batch (STACKCTL_BATCH_NODES); every node for pre/post-upgrade. */
      readonly nodes: readonly string[];
      readonly command?: readonly string[];
    };
export type UpgradeActionKind = UpgradeAction['kind'];

/** A barrier: its actions may run in parallel; the next step starts when all succeeded. */
export type UpgradeStep = Step<UpgradeAction>;

/** One named phase of an upgrade (its kind is one of PHASE_KINDS). */
export type UpgradePhase = Phase<UpgradeAction> & { readonly kind: PhaseKind };

/** Per service: what changes and how. */
export interface ServiceChange {
  readonly service: string;
  readonly migration: 'none' | 'online' | 'offline';
  readonly nodes: readonly string[];
  /** image key -> [current tag, target tag] of the images whose tag changes. */
  readonly images: Readonly<Record<string, readonly [string, string]>>;
  /** Id of the phase that moves it (the first batch, for batched services). */
  readonly phase: string;
}

/** Options that shape the plan. */
export interface UpgradeOptions {
  /** Nodes per compute batch; default: the role's update_serial. */
  readonly batch?: number;
  readonly pauseAt?: PauseAt;
  /** Failure budget of the compute batches, in percent of their nodes (default 0). */
  readonly maxFailPercent?: number;
  /** First batch is one node, then a pause. */
  readonly canary?: boolean;
  /**
   * Plan a target that skips releases (more than one series ahead) as a fast-forward:
   * each changed OpenStack service's API down for its window, migrated in one go, and
   * the computes that could not lag that far moved inside their control plane's window.
   * Ignored, with a warning, for an update or a target one release ahead.
   */
  readonly fastForward?: boolean;
}

/** What a fast-forward plan does differently (absent from every other plan). */
export interface FastForward {
  /** The series between the current and the target, e.g. `2023.1 antelope`. */
  readonly skipped: readonly string[];
  /** Services planned as an offline window: their API is down on every node for it. */
  readonly windows: readonly string[];
  /** Batched services moved inside another service's window instead of in batches. */
  readonly riders: readonly { readonly service: string; readonly phase: string }[];
  /** Changed services that declare neither a migration nor a skew rule: they roll as in any upgrade. */
  readonly rolling: readonly string[];
}

/** The whole upgrade, printable with --dry-run and stable as JSON. */
export interface UpgradePlan {
  readonly cloud: string;
  readonly kind: UpgradeKind;
  readonly from: {
    readonly release: string;
    readonly openstack: string;
    readonly series: string;
    readonly suite: string;
  };
  readonly to: {
    readonly release: string;
    readonly openstack: string;
    readonly series: string;
    readonly suite: string;
  };
  /** Series releases the target is ahead of the current (0 for an update). */
  readonly releasesAhead: number;
  /** Present when the plan is a fast-forward one (`--fast-forward` and a target that skips releases). */
  readonly fastForward?: FastForward;
  readonly options: {
    readonly batch: number | 'role';
    readonly pauseAt: PauseAt;
    readonly maxFailPercent: number;
    readonly canary: boolean;
    /** Whether the plan is a fast-forward one (optional: journals of older runs lack it). */
    readonly fastForward?: boolean;
  };
  readonly changes: readonly ServiceChange[];
  /** Services of the cloud whose images do not change: left running. */
  readonly unchanged: readonly string[];
  readonly phases: readonly UpgradePhase[];
  /** Things the operator should know before approving (e.g. a batch with nowhere to evacuate to). */
  readonly warnings: readonly string[];
}
