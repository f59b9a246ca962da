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
  | { readonly kind: 'vbmc.stopped'; readonly node: string };

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
};

/** Format any event. */
export function formatEvent(e: StackctlEvent): string {
  return (EVENT_FORMAT[e.kind] as (x: StackctlEvent) => string)(e);
}

/** Where events go: a JSON-lines file (append-only, one object per line with a timestamp). */
export interface EventSink {
  emit(event: StackctlEvent): void;
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
