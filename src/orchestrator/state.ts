/**
 * Real state versus the plan: what is on a node (containers with their
 * labels, config files by sha256) and what must change. Used by the executor
 * and, unchanged, by `deploy --dry-run`, so the dry run predicts exactly what
 * the deploy does.
 */
import type { ContainerInfo, ContainerSpec } from '../remote/index.js';
import type { ConfigWork, ContainerInputs, ContainerWork } from './planner.js';
import { PRIVILEGED_OPTIONS } from '../roles/privileged.js';

/** Labels every deployed container carries. */
export const LABEL = {
  /** The plan's container hash: equal means leave alone. */
  hash: 'org.stackctl.hash',
  /** Per-input hashes (JSON of ContainerInputs), to name what changed. */
  inputs: 'org.stackctl.inputs',
  service: 'org.stackctl.service',
  step: 'org.stackctl.step',
  cloud: 'org.stackctl.cloud',
  /** A one-off container's image and command (digest): a run resumed after a kill finds its own. */
  oneOff: 'org.stackctl.one-off',
} as const;

/** Where a node keeps the markers of completed run-once work. */
export const MARKER_DIR = '/var/lib/stackctl/done';

/** What to do with a container. */
export const ContainerAction = {
  CREATE: 'create',
  RECREATE: 'recreate',
  /** Present with the right hash but not running. */
  START: 'start',
  UNCHANGED: 'unchanged',
} as const;
export type ContainerAction = (typeof ContainerAction)[keyof typeof ContainerAction];

/** The decision for one container, with the inputs that changed. */
export interface ContainerDiff {
  readonly work: ContainerWork;
  readonly action: ContainerAction;
  /** For recreate: `image`, `options`, `config <path>`, or why the labels could not tell. */
  readonly changed: readonly string[];
  /** The labelled hash of what runs now (for the journal's remove record). */
  readonly currentHash?: string;
  /**
   * The health of what runs now (unchanged or to start), when it has a check: `starting` on an
   * unchanged container means a run started it and was stopped before its health gate.
   */
  readonly health?: string;
}

/** The decision for one config file. */
export interface ConfigDiff {
  readonly work: ConfigWork;
  readonly action: 'upload' | 'unchanged';
  /** Why: `missing` or `content changed`. */
  readonly detail: string;
}

/** Labels for a container of the plan. */
export function labelsFor(cloud: string, w: ContainerWork): Record<string, string> {
  return {
    [LABEL.hash]: w.hash,
    [LABEL.inputs]: JSON.stringify(w.inputs),
    [LABEL.service]: w.service,
    [LABEL.step]: String(w.step),
    [LABEL.cloud]: cloud,
  };
}

/** Which inputs differ between the labels of a running container and the plan. */
export function changedInputs(labels: Readonly<Record<string, string>>, want: ContainerInputs): string[] {
  const raw = labels[LABEL.inputs];
  if (raw === undefined) return [labels[LABEL.hash] ? 'inputs label missing' : 'not deployed by stackctl'];
  let have: ContainerInputs;
  try {
    have = JSON.parse(raw) as ContainerInputs;
  } catch {
    return ['inputs label unreadable'];
  }
  const out: string[] = [];
  if (have.image !== want.image) out.push('image');
  if (have.options !== want.options) out.push('options');
  const paths = [...new Set([...Object.keys(have.configs ?? {}), ...Object.keys(want.configs)])].sort();
  for (const p of paths) if (have.configs?.[p] !== want.configs[p]) out.push(`config ${p}`);
  return out;
}

/** Decide for one container from its inspect result (undefined: absent). */
export function diffContainer(w: ContainerWork, info: ContainerInfo | undefined): ContainerDiff {
  if (!info) return { work: w, action: ContainerAction.CREATE, changed: [] };
  const current = info.labels[LABEL.hash];
  if (current === w.hash) {
    return {
      work: w,
      action: info.state.running ? ContainerAction.UNCHANGED : ContainerAction.START,
      changed: [],
      currentHash: current,
      ...(info.state.health ? { health: info.state.health } : {}),
    };
  }
  const changed = changedInputs(info.labels, w.inputs);
  return {
    work: w,
    action: ContainerAction.RECREATE,
    // Same inputs but another hash: the plan's hash recipe itself changed.
    changed: changed.length ? changed : ['hash'],
    ...(current ? { currentHash: current } : {}),
  };
}

/** Decide for one config file from the sha256 found on the node (undefined: missing). */
export function diffConfig(w: ConfigWork, found: string | undefined): ConfigDiff {
  if (found === w.sha256) return { work: w, action: 'unchanged', detail: '' };
  return { work: w, action: 'upload', detail: found === undefined ? 'missing' : 'content changed' };
}

/** Parse `sha256sum` output (`<hex>  <path>` lines) into path -> hash. */
export function parseSha256sum(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = /^([0-9a-f]{64}) [ *](.+)$/.exec(line);
    if (m) out.set(m[2]!, m[1]!);
  }
  return out;
}

/** Seconds -> milliseconds, or undefined. */
const ms = (s: number | undefined): number | undefined => (s === undefined ? undefined : s * 1000);

/**
 * The Docker spec of a planned container; `privileged` maps to the options of
 * roles/privileged.ts (which the plan hashes into the container's hash).
 */
export function containerSpec(cloud: string, w: ContainerWork): ContainerSpec {
  const d = w.definition;
  const hc = d.healthcheck;
  return {
    name: w.name,
    image: w.image,
    ...(d.command ? { command: d.command } : {}),
    ...(d.environment ? { env: d.environment } : {}),
    labels: labelsFor(cloud, w),
    ...(d.volumes ? { volumes: d.volumes } : {}),
    network: d.network_mode ?? 'host',
    restart: d.restart ?? 'unless-stopped',
    ...(d.user ? { user: d.user } : {}),
    ...(d.init ? { init: true } : {}),
    ...(d.privileged
      ? {
          capAdd: [...PRIVILEGED_OPTIONS.capAdd],
          capDrop: [...PRIVILEGED_OPTIONS.capDrop],
          securityOpt: [...PRIVILEGED_OPTIONS.securityOpt],
          deviceCgroupRules: [...PRIVILEGED_OPTIONS.deviceCgroupRules],
          unmaskPaths: PRIVILEGED_OPTIONS.unmaskPaths,
        }
      : d.cap_add
        ? { capAdd: d.cap_add }
        : {}),
    ...(hc
      ? {
          healthcheck: {
            test: hc.test,
            ...(hc.interval_s !== undefined ? { intervalMs: ms(hc.interval_s)! } : {}),
            ...(hc.timeout_s !== undefined ? { timeoutMs: ms(hc.timeout_s)! } : {}),
            ...(hc.retries !== undefined ? { retries: hc.retries } : {}),
            ...(hc.start_period_s !== undefined ? { startPeriodMs: ms(hc.start_period_s)! } : {}),
          },
        }
      : {}),
  };
}

/**
 * How long to wait for a started container to become healthy: its start
 * period plus (retries + 1) check intervals and timeouts, at least 20 s.
 */
export function healthDeadlineMs(w: ContainerWork): number {
  const hc = w.definition.healthcheck;
  if (!hc) return 20_000;
  const interval = hc.interval_s ?? 10;
  const timeout = hc.timeout_s ?? 5;
  const retries = hc.retries ?? 3;
  return Math.max(20_000, ((hc.start_period_s ?? 0) + (retries + 1) * (interval + timeout)) * 1000);
}
