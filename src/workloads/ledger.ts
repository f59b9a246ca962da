/**
 * The workload availability ledger of an evacuation (an upgrade's compute batch, a node's
 * maintenance): every instance about to be live-migrated is watched from this machine for the
 * whole evacuation, and each gets a line: answers lost, the longest time without one, boot-id
 * changes (must be 0: a live migration keeps the guest's memory) and counter regressions.
 *
 * What is watched is the guest's state page (`/cgi-bin/state`, served by the guest image stackctl
 * builds: guest-watch.ts) on the first of its addresses that answers before the migrations start:
 * a floating IP from this machine. An instance with no such page (another image) or no address
 * this machine reaches is listed as not watched, with the reason: the ledger never guesses.
 */
import { parseGuestState, watchGuest, type GuestWatch, type GuestWatchSummary } from './guest-watch.js';

/** Knobs of the ledger. */
export const LEDGER_DEFAULTS = {
  /** Poll interval of a watched guest (its counter's own period). */
  intervalMs: 100,
  /** A poll unanswered after this long is lost. */
  pollTimeoutMs: 1000,
  /** How long the first look at each address may take before the next address is tried. */
  probeTimeoutMs: 2000,
} as const;

/** An instance to watch: its ID, name and the addresses Nova lists for it. */
export interface LedgerServer {
  readonly id: string;
  readonly name: string;
  readonly addresses: readonly string[];
}

/** One instance's line of the ledger. */
export interface LedgerEntry {
  readonly server: string;
  readonly name: string;
  /** The address watched; undefined when not watched. */
  readonly address?: string;
  readonly watched: boolean;
  /** Why it was not watched. */
  readonly note?: string;
  readonly summary?: GuestWatchSummary;
}

/** A ledger being written. */
export interface Ledger {
  /** Stop every watch and return the lines, in the order of the servers given. */
  stop(): Promise<LedgerEntry[]>;
}

/** The state page's URL at `address` (an IPv4 address from Nova's listing, nothing else). */
function stateUrl(address: string): string | undefined {
  return /^\d{1,3}(\.\d{1,3}){3}$/.test(address) ? `http://${address}/cgi-bin/state` : undefined;
}

/** Does `url` answer with a state line within `timeoutMs`? */
async function answers(url: string, timeoutMs: number): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    return res.ok && parseGuestState(await res.text()) !== undefined;
  } catch {
    return false;
  }
}

/** Start watching `servers`; resolves once each has been looked at (watched or not). */
export async function startLedger(
  servers: readonly LedgerServer[],
  opts: Partial<Record<keyof typeof LEDGER_DEFAULTS, number>> = {},
): Promise<Ledger> {
  const o = { ...LEDGER_DEFAULTS, ...opts };
  const started = await Promise.all(
    servers.map(async (s): Promise<{ server: LedgerServer; address?: string; watch?: GuestWatch }> => {
      for (const address of s.addresses) {
        const url = stateUrl(address);
        if (url && (await answers(url, o.probeTimeoutMs)))
          return {
            server: s,
            address,
            watch: watchGuest(url, { intervalMs: o.intervalMs, timeoutMs: o.pollTimeoutMs }),
          };
      }
      return { server: s };
    }),
  );
  return {
    async stop() {
      return Promise.all(
        started.map(async ({ server, address, watch }): Promise<LedgerEntry> => {
          if (!watch || address === undefined)
            return {
              server: server.id,
              name: server.name,
              watched: false,
              note: server.addresses.length
                ? `no state page answered at ${server.addresses.join(', ')}`
                : 'Nova lists no address for it',
            };
          return { server: server.id, name: server.name, address, watched: true, summary: await watch.stop() };
        }),
      );
    },
  };
}

/** Why an entry counts as an interrupted workload under `maxGapMs`, or undefined when it does not. */
export function interruption(e: LedgerEntry, maxGapMs: number): string | undefined {
  const s = e.summary;
  if (!s) return undefined;
  const why = [
    ...(s.bootIdChanges ? [`its boot id changed ${s.bootIdChanges} time(s) (rebooted or restarted from disk)`] : []),
    ...(s.counterRegressions ? [`its counter went back ${s.counterRegressions} time(s) (memory lost)`] : []),
    ...(s.longestGapMs > maxGapMs
      ? [`unanswered for ${(s.longestGapMs / 1000).toFixed(1)} s, beyond the budget of ${maxGapMs / 1000} s`]
      : []),
    ...(s.answered === 0 ? ['it never answered during the evacuation'] : []),
  ];
  return why.length ? why.join('; ') : undefined;
}

/** One line per entry, for reports. */
export function formatLedgerEntry(e: LedgerEntry): string {
  const who = `${e.name || e.server}`;
  if (!e.watched || !e.summary) return `${who}: not watched (${e.note ?? 'no address'})`;
  const s = e.summary;
  return (
    `${who} at ${e.address}: longest gap ${(s.longestGapMs / 1000).toFixed(2)} s, ` +
    `${s.lost} of ${s.samples} polls lost, ${s.bootIdChanges} boot-id change(s)`
  );
}
