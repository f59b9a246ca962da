import { appendFileSync } from 'node:fs';

/**
 * Events of long operations: a discriminated union with one formatter per
 * kind (CONVENTIONS.md 10). The mapped type makes a new kind fail to compile
 * until it can be printed. Events never carry secrets: only names, states and
 * error codes.
 */
export type StackctlEvent =
  | { readonly kind: 'command.start'; readonly command: string; readonly nodes: readonly string[] }
  | { readonly kind: 'command.end'; readonly command: string; readonly ok: number; readonly failed: number }
  | { readonly kind: 'node.power'; readonly node: string; readonly action: string; readonly state: string }
  | {
      readonly kind: 'node.bootdev';
      readonly node: string;
      readonly device: string;
      readonly persistent: boolean;
      readonly uefi: boolean;
    }
  | { readonly kind: 'node.validated'; readonly node: string; readonly driver: string; readonly detail: string }
  | {
      readonly kind: 'node.failed';
      readonly node: string;
      readonly action: string;
      readonly code: string;
      readonly message: string;
    }
  | { readonly kind: 'vbmc.started'; readonly node: string; readonly address: string }
  | { readonly kind: 'vbmc.stopped'; readonly node: string }
  | {
      readonly kind: 'deploy.change';
      readonly step: number;
      readonly node: string;
      /** container, config, image, task or database. */
      readonly object: string;
      readonly name: string;
      /** What was done: created, recreated, started, uploaded, pulled, ran, unchanged. */
      readonly action: string;
      /** Why (e.g. the changed input of a recreate); never a secret. */
      readonly detail: string;
      readonly ms: number;
    }
  | {
      /** A failed action of a deploy or upgrade run, with its class. */
      readonly kind: 'run.failure';
      readonly phase: string;
      readonly path: string;
      readonly code: string;
      readonly message: string;
      /** retryable, rolled-back, rollback-failed or hard (CONVENTIONS.md 11). */
      readonly class: string;
      /** What to do about it (the error's hint), when it has one. */
      readonly hint?: string;
    }
  | {
      readonly kind: 'node.state';
      readonly node: string;
      readonly from: string;
      readonly event: string;
      readonly to: string;
    }
  | { readonly kind: 'pxe.token-rejected'; readonly node: string; readonly endpoint: string; readonly reason: string }
  | { readonly kind: 'pxe.agent-report'; readonly node: string; readonly endpoint: string }
  | { readonly kind: 'pxe.unknown-mac'; readonly mac: string; readonly path: string }
  | { readonly kind: 'pxe.agent-command'; readonly node: string; readonly command: string }
  | {
      /** The boot server refused a node's boot script or agent call: wrong client address, or asked twice. */
      readonly kind: 'pxe.refused';
      readonly node: string;
      readonly mac: string;
      /** The address the request came from. */
      readonly client: string;
      /** `boot script` or the agent endpoint (command, heartbeat, result, introspection). */
      readonly asked: string;
      readonly reason: string;
    }
  | {
      readonly kind: 'provision.phase';
      readonly node: string;
      /** power-on-to-agent, image-transfer, write-verify, reboot-to-ssh, clean, ... */
      readonly phase: string;
      readonly ms: number;
    }
  | {
      readonly kind: 'provision.done';
      readonly node: string;
      /** deploy or undeploy */
      readonly action: string;
      readonly ok: boolean;
      /** Bytes of boot files and image served to the node. */
      readonly bytes: number;
      readonly ms: number;
      /** Why it failed (code: message); empty when ok. Never a secret. */
      readonly reason: string;
    }
  | {
      /** A phase of a deploy or upgrade run started, ended, was skipped (done by an earlier run) or paused before. */
      readonly kind: 'run.phase';
      readonly phase: string;
      readonly title: string;
      readonly state: 'start' | 'done' | 'failed' | 'skipped' | 'paused';
      readonly ms: number;
    }
  | {
      /** One action of a deploy or upgrade step: its outcome and a short detail. */
      readonly kind: 'run.action';
      readonly phase: string;
      /** The action's kind (ensure, drain, migrate, check-clusters, hook...). */
      readonly action: string;
      /** Node, service or hook it concerned. */
      readonly subject: string;
      readonly state: 'done' | 'failed' | 'skipped';
      readonly detail: string;
      readonly ms: number;
    }
  | {
      /** One instance moved (or not) by the evacuation hook. */
      readonly kind: 'upgrade.migration';
      readonly server: string;
      readonly from: string;
      /** The destination host; empty when it did not move. */
      readonly to: string;
      readonly state: 'started' | 'completed' | 'failed' | 'timeout';
      readonly ms: number;
    }
  | {
      /** One instance's line of the workload ledger of an evacuation (src/workloads/ledger.ts). */
      readonly kind: 'workload.ledger';
      readonly server: string;
      /** The address watched from this machine; empty when not watched. */
      readonly address: string;
      readonly watched: boolean;
      readonly samples: number;
      readonly lost: number;
      /** The longest time without an answer (ms). */
      readonly longestGapMs: number;
      readonly bootIdChanges: number;
      /** Why it was not watched. */
      readonly note: string;
    }
  | {
      /**
       * What an availability watcher saw over a span of a run: the API probe through the VIP
       * (source `api`), or one server of the workload ledger (source `workload`).
       */
      readonly kind: 'availability.window';
      readonly source: 'api' | 'workload';
      /** What was watched: the API (`keystone+nova via VIP`) or the server's name. */
      readonly subject: string;
      /** Start and end of the watch (ISO 8601). */
      readonly from: string;
      readonly to: string;
      readonly tries: number;
      readonly ok: number;
      readonly longestGapMs: number;
    }
  | {
      /** One outage an availability watcher saw: consecutive failed tries, or a server's lost packets. */
      readonly kind: 'availability.gap';
      readonly source: 'api' | 'workload';
      readonly subject: string;
      /** When the first failed try started (ISO 8601). */
      readonly from: string;
      readonly ms: number;
      /** Failed tries or lost packets in the gap. */
      readonly lost: number;
      /** What failed (HTTP status, timeout, boot id changed); never a secret. */
      readonly detail: string;
      /** The migration or phase the gap belongs to, when known (`server from -> to`, a phase id); else empty. */
      readonly during: string;
    }
  | {
      /** The run lock was taken over from a run that had died (src/core/lock.ts). */
      readonly kind: 'lock.taken-over';
      /** The lock file. */
      readonly lock: string;
      /** The dead holder: pid, host, command line (no secrets) and since when. */
      readonly pid: number;
      readonly host: string;
      readonly command: string;
      readonly since: string;
      /** Why it counts as dead. */
      readonly reason: string;
    };

export type EventKind = StackctlEvent['kind'];

/** One human line per event kind. */
export const EVENT_FORMAT: { readonly [K in EventKind]: (e: Extract<StackctlEvent, { kind: K }>) => string } = {
  'command.start': (e) => `${e.command}: ${e.nodes.length} node(s)`,
  'command.end': (e) => `${e.command}: ${e.ok} ok, ${e.failed} failed`,
  'node.power': (e) => `${e.node}: power ${e.action} -> ${e.state}`,
  'node.bootdev': (e) =>
    `${e.node}: boot device ${e.device} (${e.persistent ? 'persistent' : 'next boot'}, ${e.uefi ? 'UEFI' : 'legacy'})`,
  'node.validated': (e) => `${e.node}: ${e.driver} BMC reachable, credentials accepted (${e.detail})`,
  'node.failed': (e) => `${e.node}: ${e.action} failed: ${e.code}: ${e.message}`,
  'vbmc.started': (e) => `${e.node}: virtual BMC at ${e.address}`,
  'vbmc.stopped': (e) => `${e.node}: virtual BMC stopped`,
  'deploy.change': (e) =>
    `${e.step ? `step ${e.step} ` : ''}${e.node}: ${e.object} ${e.name} ${e.action}${e.detail ? ` (${e.detail})` : ''}` +
    (e.ms ? ` ${(e.ms / 1000).toFixed(1)} s` : ''),
  'run.failure': (e) => `${e.path}: ${e.class}: ${e.code}: ${e.message}`,
  'node.state': (e) => `${e.node}: ${e.from} --${e.event}--> ${e.to}`,
  'pxe.token-rejected': (e) => `${e.node}: agent call to ${e.endpoint} refused: ${e.reason}`,
  'pxe.agent-report': (e) => `${e.node}: agent reported ${e.endpoint}`,
  'pxe.unknown-mac': (e) => `boot script asked for unknown MAC ${e.mac} (${e.path})`,
  'pxe.agent-command': (e) => `${e.node}: agent called in, command ${e.command}`,
  'pxe.refused': (e) => `${e.node} (MAC ${e.mac}): refused the ${e.asked} to ${e.client}: ${e.reason}`,
  'provision.phase': (e) => `${e.node}: ${e.phase} ${(e.ms / 1000).toFixed(1)} s`,
  'provision.done': (e) =>
    `${e.node}: ${e.action} ${e.ok ? 'done' : `failed: ${e.reason}`} in ${(e.ms / 1000).toFixed(1)} s, ` +
    `${(e.bytes / 1048576).toFixed(1)} MiB served`,
  'run.phase': (e) =>
    `${e.phase} (${e.title}): ${e.state}` +
    (e.state === 'done' || e.state === 'failed' ? ` in ${(e.ms / 1000).toFixed(1)} s` : ''),
  'run.action': (e) =>
    `${e.phase} ${e.action} ${e.subject}: ${e.state}${e.detail ? ` (${e.detail})` : ''}` +
    (e.ms ? ` ${(e.ms / 1000).toFixed(1)} s` : ''),
  'lock.taken-over': (e) =>
    `took over the run lock ${e.lock} left by '${e.command}' (pid ${e.pid} on host ${e.host}, since ${e.since}): ${e.reason}`,
  'workload.ledger': (e) =>
    e.watched
      ? `server ${e.server} at ${e.address}: longest gap ${(e.longestGapMs / 1000).toFixed(2)} s, ${e.lost} of ${e.samples} polls lost, ${e.bootIdChanges} boot-id change(s)`
      : `server ${e.server}: not watched (${e.note})`,
  'availability.window': (e) =>
    `${e.source} ${e.subject}: ${e.ok}/${e.tries} tries answered, longest gap ${(e.longestGapMs / 1000).toFixed(1)} s`,
  'availability.gap': (e) =>
    `${e.source} ${e.subject}: gap of ${(e.ms / 1000).toFixed(1)} s from ${e.from} (${e.lost} lost${e.detail ? `, ${e.detail}` : ''})` +
    (e.during ? ` during ${e.during}` : ''),
  'upgrade.migration': (e) =>
    `server ${e.server} ${e.from} -> ${e.to || '?'}: ${e.state}` + (e.ms ? ` ${(e.ms / 1000).toFixed(1)} s` : ''),
};

/** Format any event. */
export function formatEvent(e: StackctlEvent): string {
  return (EVENT_FORMAT[e.kind] as (x: StackctlEvent) => string)(e);
}

/** Where events go: a JSON-lines file (append-only, one object per line with a timestamp). */
export interface EventSink {
  emit(event: StackctlEvent): void;
}

/** `site.yaml` -> `site.events.jsonl`: the event log of an inventory. */
export function eventsFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.events.jsonl';
}

/** Appends events to a JSON-lines file; each line is written whole, so a killed run leaves complete lines. */
export class JsonLinesLog implements EventSink {
  constructor(
    readonly file: string,
    private readonly now: () => Date = () => new Date(),
  ) {}
  emit(event: StackctlEvent): void {
    appendFileSync(this.file, JSON.stringify({ time: this.now().toISOString(), ...event }) + '\n', { mode: 0o600 });
  }
}

/** Discards events (tests, library use). */
export const NO_EVENTS: EventSink = { emit: () => undefined };
