/**
 * The built-in hooks of a compute batch (docs/upgrade-hooks.md):
 * `nova-evacuate` disables nova-compute on the batch's hosts, refuses before
 * the first migration when the other hosts cannot hold the instances,
 * live-migrates them (a few at a time, each within a deadline) and verifies
 * the hosts are empty; `nova-enable` re-enables nova-compute afterwards.
 * Everything goes through the OpenStack client of the upgrade context.
 *
 * The destination is left to the scheduler (no `--host`): it skips the
 * disabled hosts of the batch, honours server groups (anti-affinity) and
 * claims resources in placement, which a forced host would bypass.
 */
import { hypervisorBinary } from '../roles/service-roles.js';
import { mapLimit } from '../core/concurrency.js';
import { RemoteError, StackctlError, messageOf } from '../core/errors.js';
import type { UpgradeContext } from './context.js';
import {
  CAPACITY_DEFAULTS,
  EvacuationCapacity,
  demandsOf,
  evacuationCapacity,
  instancesOn,
  receivingHosts,
  type Resources,
} from './prechecks.js';
import type { ComputeService } from '../status/model.js';
import { interruption, startLedger, type Ledger, type LedgerEntry, type LedgerServer } from '../workloads/ledger.js';
import {
  OPENSTACK_COMMANDS,
  listComputeServices,
  parseMigrations,
  parseServerShow,
  type ServerRow,
} from '../status/openstack-client.js';

/**
 * What the evacuation uses of a run's context: the cloud's admin client, which binary is the
 * hypervisor agent, the event sink, the clock and the operator's stop. An upgrade hands its whole
 * context; `nodes maintenance` one of its own.
 */
export type EvacuationContext = Pick<UpgradeContext, 'cloud' | 'services' | 'emit' | 'now' | 'sleep' | 'signal'>;

/** The knobs of the evacuation. */
export interface EvacuationSettings {
  readonly concurrency: number;
  readonly timeoutMs: number;
  readonly pollMs: number;
  readonly disableReason: string;
  readonly binary: string;
  readonly liveMigrationMicroversion: string;
  /** How long an aborted live migration may take to roll back before the instance counts as lost in flight. */
  readonly abortGraceMs: number;
  readonly movableStates: readonly string[];
  readonly allocationRatio: Resources;
  readonly reportTimeoutMs: number;
  /** Watch the instances from this machine while they migrate (src/workloads/ledger.ts). */
  readonly watchWorkloads: boolean;
  /** The longest a watched instance may go unanswered; beyond it, or a changed boot id, the evacuation fails. */
  readonly workloadMaxGapMs: number;
}

/** Every knob of the evacuation, with its default. */
export const EVACUATION_DEFAULTS: Omit<EvacuationSettings, 'binary'> = {
  /** Live migrations in flight at once (each copies an instance's memory over the network). */
  concurrency: 2,
  /** Deadline of one instance's live migration, from the request to ACTIVE on another host. */
  timeoutMs: 300_000,
  /** Interval between two `server show` of a migrating instance. */
  pollMs: 5_000,
  /** The reason `compute service list --long` shows on the disabled hosts. */
  disableReason: 'stackctl upgrade',
  /** 2.25+ lets Nova choose block or shared-storage migration (block_migration=auto); 2.30 is the brief's floor. */
  liveMigrationMicroversion: '2.30',
  /** A timed-out live migration is aborted (2.65: queued and preparing ones too); then it has this long to roll back. */
  abortGraceMs: 120_000,
  /** Instance states that are live-migrated; the others stay on their host. */
  movableStates: CAPACITY_DEFAULTS.movableStates,
  /** Allocation ratios of the capacity check. */
  allocationRatio: CAPACITY_DEFAULTS.allocationRatio,
  /** How long a new nova-compute has to report to Nova (its report_interval is 10 s). */
  reportTimeoutMs: 180_000,
  /** The workload ledger is written for every evacuation. */
  watchWorkloads: true,
  /** A live migration's pause is well under a second on a fast network; TCG on a loaded lab takes longer. */
  workloadMaxGapMs: 30_000,
};

/** Overrides of EVACUATION_DEFAULTS. */
export type EvacuationOptions = Partial<EvacuationSettings>;

/** Statuses of a migration record that is still under way (Nova's names). */
const MIGRATION_UNDER_WAY = ['queued', 'accepted', 'pre-migrating', 'preparing', 'running', 'post-migrating'];

/**
 * Statuses in which Nova (2.65) takes an abort. Before them (accepted, pre-migrating) the
 * conductor is still checking the hosts and Nova refuses; after them the migration is ending.
 */
const MIGRATION_ABORTABLE = ['queued', 'preparing', 'running'];

/**
 * Abort a live migration that ran past its deadline, so the instance stays on its
 * source, and wait (abortGraceMs) for Nova to roll it back. A migration that is not
 * abortable yet is asked again at each poll, within the same grace. Returns where it stands.
 */
async function abortMigration(
  server: ServerRow,
  ctx: EvacuationContext,
  o: Omit<EvacuationSettings, 'binary'>,
): Promise<{ readonly moved?: string; readonly note: string }> {
  const t0 = ctx.now();
  const grace = `${Math.round(o.abortGraceMs / 1000)} s`;
  let id: string | undefined;
  let aborted = false;
  let why = '';
  for (;;) {
    try {
      const open = parseMigrations(await ctx.cloud.openstack(OPENSTACK_COMMANDS.migrations(server.id)))
        .filter((r) => r.id && MIGRATION_UNDER_WAY.includes(r.status))
        .at(-1);
      // none under way: it ended on its own meanwhile; where the instance is tells how
      if (!open) break;
      id = open.id;
      if (MIGRATION_ABORTABLE.includes(open.status)) {
        await ctx.cloud.openstack(OPENSTACK_COMMANDS.abortMigration(server.id, id));
        aborted = true;
        break;
      }
      why = `migration ${id} still ${open.status}, which Nova does not abort`;
    } catch (err) {
      // NOTE: the status may change between the list and the abort; Nova then refuses, and the next look decides.
      why = `abort of migration ${id ?? '?'} refused: ${messageOf(err)}`;
    }
    if (ctx.now() - t0 >= o.abortGraceMs) return { note: `${why} for ${grace}` };
    await ctx.sleep(o.pollMs);
  }
  const what = aborted ? `migration ${id} aborted` : 'no migration under way to abort';
  let last = 'no answer yet';
  for (;;) {
    try {
      const s = parseServerShow(await ctx.cloud.openstack(OPENSTACK_COMMANDS.serverShow(server.id)));
      last = `${s.status}${s.taskState ? `/${s.taskState}` : ''} on ${s.host || '?'}`;
      if (!s.taskState && s.status !== 'MIGRATING') {
        if (s.host && s.host !== server.host)
          return { moved: s.host, note: `migration ${id ?? '?'} ended before the abort` };
        return { note: `${what}: ${last}, its source` };
      }
    } catch (err) {
      last = `server show failed: ${messageOf(err)}`;
    }
    if (ctx.now() - t0 >= o.abortGraceMs) return { note: `${what}, but still ${last} after ${grace}` };
    await ctx.sleep(o.pollMs);
  }
}

/** A server as `server show` gives it while it migrates. */

/** Statuses of an instance whose live migration is under way (one a killed run requested). */
const IN_FLIGHT: readonly string[] = ['MIGRATING'];

/**
 * Wait, up to the migration deadline, until no instance on the hosts is
 * migrating: a run killed mid-batch leaves Nova finishing the live
 * migrations it had requested, and a host is neither counted nor emptied
 * while one is under way. `found` gets those of the first look (to watch
 * them). Returns how many were waited for.
 */
async function settleInFlight(
  ctx: EvacuationContext,
  hosts: readonly string[],
  o: EvacuationSettings,
  found: (moving: ServerRow[]) => Promise<void>,
): Promise<number> {
  const t0 = ctx.now();
  let seen = 0;
  for (let first = true; ; first = false) {
    const { staying } = await instancesOn(ctx.cloud, hosts, o.movableStates);
    const moving = staying.filter((s) => IN_FLIGHT.includes(s.status));
    if (first) await found(moving);
    seen = Math.max(seen, moving.length);
    if (!moving.length || ctx.now() - t0 >= o.timeoutMs || ctx.signal?.aborted) return seen;
    await ctx.sleep(o.pollMs);
  }
}

/** What the workload ledger needs of an instance. */
const ledgerServer = (s: ServerRow): LedgerServer => ({ id: s.id, name: s.name, addresses: s.addresses ?? [] });

/** What happened to one instance. */
export interface MigrationOutcome {
  readonly server: ServerRow;
  readonly state: 'completed' | 'failed' | 'timeout';
  readonly to?: string;
  readonly reason?: string;
}

/** One instance: request the live migration, poll until ACTIVE elsewhere, failed, or past the deadline. */
export async function migrateServer(
  server: ServerRow,
  ctx: EvacuationContext,
  o: Omit<EvacuationSettings, 'binary'> = EVACUATION_DEFAULTS,
): Promise<MigrationOutcome> {
  const t0 = ctx.now();
  const label = server.name || server.id;
  const emit = (state: 'started' | 'completed' | 'failed' | 'timeout', to = ''): void =>
    ctx.emit({ kind: 'upgrade.migration', server: label, from: server.host, to, state, ms: ctx.now() - t0 });
  if (ctx.signal?.aborted) return { server, state: 'failed', reason: 'interrupted before its migration was requested' };
  emit('started');
  try {
    await ctx.cloud.openstack(OPENSTACK_COMMANDS.liveMigrate(server.id, o.liveMigrationMicroversion));
  } catch (err) {
    emit('failed');
    return { server, state: 'failed', reason: `live migration refused: ${messageOf(err)}` };
  }
  let last = 'no answer yet';
  for (;;) {
    if (ctx.signal?.aborted) {
      emit('failed');
      return { server, state: 'failed', reason: `interrupted while migrating (${last})` };
    }
    await ctx.sleep(o.pollMs);
    try {
      const s = parseServerShow(await ctx.cloud.openstack(OPENSTACK_COMMANDS.serverShow(server.id)));
      last = `${s.status}${s.taskState ? `/${s.taskState}` : ''} on ${s.host || '?'}`;
      if (s.status === 'ERROR') {
        emit('failed');
        return { server, state: 'failed', reason: `instance went to ERROR on ${s.host || '?'}` };
      }
      if (!s.taskState && s.status !== 'MIGRATING') {
        if (s.host && s.host !== server.host) {
          emit('completed', s.host);
          return { server, state: 'completed', to: s.host };
        }
        // Nova rolls a failed live migration back: the instance is ACTIVE on its source again.
        emit('failed');
        return {
          server,
          state: 'failed',
          reason: `live migration did not move it (${last}; see openstack server migration list --server ${server.id})`,
        };
      }
    } catch (err) {
      // NOTE: a controller restarting during the batch may refuse one poll; the deadline decides.
      last = `server show failed: ${messageOf(err)}`;
    }
    if (ctx.now() - t0 >= o.timeoutMs) {
      const late = `still ${last} after ${Math.round(o.timeoutMs / 1000)} s`;
      const abort = await abortMigration(server, ctx, o);
      if (abort.moved) {
        emit('completed', abort.moved);
        return { server, state: 'completed', to: abort.moved };
      }
      emit('timeout');
      return { server, state: 'timeout', reason: `${late}; ${abort.note}` };
    }
  }
}

async function setEnabled(
  ctx: EvacuationContext,
  hosts: readonly string[],
  o: EvacuationSettings,
): Promise<{ host: string; error: string }[]> {
  const failed: { host: string; error: string }[] = [];
  for (const host of hosts) {
    try {
      await ctx.cloud.openstack(OPENSTACK_COMMANDS.enableService(host, o.binary));
    } catch (err) {
      failed.push({ host, error: messageOf(err) });
    }
  }
  return failed;
}

/** A host that could not be emptied: it must not be upgraded. */
export interface HostNotEmpty {
  readonly host: string;
  /** Instances still on it (name or ID). */
  readonly instances: readonly string[];
  /** Why each of them stayed. */
  readonly reasons: readonly string[];
}

/**
 * Thrown when some hosts still hold running instances after the migrations:
 * `details.hosts` lists them (the runner leaves them out of the batch),
 * `details.emptied` the hosts that may go on. The hosts not emptied have
 * nova-compute enabled again: they keep serving on the current release.
 */
export class EvacuationFailed extends RemoteError {
  readonly hosts: readonly HostNotEmpty[];
  readonly emptied: readonly string[];
  constructor(hosts: readonly HostNotEmpty[], emptied: readonly string[], reenableFailed: readonly string[]) {
    super(
      'E_EVACUATION_FAILED',
      `could not empty ${hosts.map((h) => h.host).join(', ')}: ` +
        hosts.map((h) => `${h.host} still holds ${h.instances.join(', ')} (${h.reasons.join('; ')})`).join('; '),
      {
        hint:
          'These hosts are left on the current release and nova-compute is enabled on them again' +
          (reenableFailed.length ? ` (except ${reenableFailed.join(', ')}: enable it by hand)` : '') +
          '. See openstack server migration list for the reason, fix it, then run the upgrade again.',
        details: { hosts, emptied, reenableFailed },
      },
    );
    this.hosts = hosts;
    this.emptied = emptied;
  }
}

/**
 * The `nova-evacuate` hook for a batch's hosts. Re-entrant: a host already
 * disabled and empty is disabled again and has nothing to move.
 */
export async function novaEvacuate(
  hosts: readonly string[],
  ctx: EvacuationContext,
  opts: EvacuationOptions = {},
): Promise<string> {
  const o: EvacuationSettings = { ...EVACUATION_DEFAULTS, binary: hypervisorBinary(ctx.services), ...opts };
  const t0 = ctx.now();
  const disabled: string[] = [];
  let movable: ServerRow[];
  let staying: ServerRow[];
  let adopted = 0;
  // Migrations a killed run left under way are waited for, and watched like those requested here.
  let inFlight: { servers: ServerRow[]; ledger?: Ledger } = { servers: [] };
  try {
    for (const host of hosts) {
      await ctx.cloud.openstack(OPENSTACK_COMMANDS.disableService(host, o.disableReason, o.binary));
      disabled.push(host);
    }
    adopted = await settleInFlight(ctx, hosts, o, async (moving) => {
      if (o.watchWorkloads && moving.length)
        inFlight = { servers: moving, ledger: await startLedger(moving.map(ledgerServer)) };
    });
    ({ movable, staying } = await instancesOn(ctx.cloud, hosts, o.movableStates));
    if (movable.length) {
      const demands = await demandsOf(ctx.cloud, movable);
      const receivers = await receivingHosts(ctx.cloud, hosts, o.binary, o.allocationRatio);
      const verdict = evacuationCapacity(demands, receivers);
      if (!verdict.fits) throw new EvacuationCapacity(hosts, verdict, receivers);
    }
  } catch (err) {
    await inFlight.ledger?.stop();
    // Refused before the first migration: leave the hosts as they were.
    const failed = await setEnabled(ctx, disabled, o);
    if (failed.length && err instanceof StackctlError) {
      throw new StackctlError(err.code, err.message, {
        hint: `${err.hint ?? ''} nova-compute could not be enabled again on ${failed.map((f) => f.host).join(', ')}: enable it by hand.`.trim(),
        cause: err,
        exitCode: err.exitCode,
        details: { ...err.details, reenableFailed: failed },
      });
    }
    throw err;
  }

  const adoptedEntries = inFlight.ledger ? await inFlight.ledger.stop() : [];
  const ledger = o.watchWorkloads && movable.length ? await startLedger(movable.map(ledgerServer)) : undefined;
  const outcomes = await mapLimit(movable, o.concurrency, (s) => migrateServer(s, ctx, o));
  const entries = [...adoptedEntries, ...(ledger ? await ledger.stop() : [])];
  for (const e of entries) {
    const s = e.summary;
    if (s) {
      // the same watch as availability records, which the run report (stackctl report) draws
      const subject = e.name || e.server;
      const moved = outcomes.find((x) => x.server.id === e.server);
      const waitedFor = inFlight.servers.find((x) => x.id === e.server);
      ctx.emit({
        kind: 'availability.window',
        source: 'workload',
        subject,
        from: new Date(s.from).toISOString(),
        to: new Date(s.to).toISOString(),
        tries: s.samples,
        ok: s.answered,
        longestGapMs: s.longestGapMs,
      });
      if (s.longestGapFrom !== undefined && s.longestGapMs > 0)
        ctx.emit({
          kind: 'availability.gap',
          source: 'workload',
          subject,
          from: new Date(s.longestGapFrom).toISOString(),
          ms: s.longestGapMs,
          lost: s.lost,
          detail: s.bootIdChanges ? `boot id changed ${s.bootIdChanges} time(s)` : 'longest time without an answer',
          during: moved
            ? `${subject} ${moved.server.host} -> ${moved.to ?? '?'}`
            : waitedFor
              ? `${subject} ${waitedFor.host} -> ? (under way before this run)`
              : '',
        });
    }
    ctx.emit({
      kind: 'workload.ledger',
      server: e.name || e.server,
      address: e.address ?? '',
      watched: e.watched,
      samples: s?.samples ?? 0,
      lost: s?.lost ?? 0,
      longestGapMs: s?.longestGapMs ?? 0,
      bootIdChanges: s?.bootIdChanges ?? 0,
      note: e.note ?? '',
    });
  }
  // Left behind: instances still running there, or still migrating (past the deadline).
  const after = await instancesOn(ctx.cloud, hosts, o.movableStates);
  const left = [...after.movable, ...after.staying.filter((s) => IN_FLIGHT.includes(s.status))];
  const notEmpty: HostNotEmpty[] = [];
  for (const host of hosts) {
    const still = left.filter((s) => s.host === host);
    const failures = outcomes.filter((x) => x.server.host === host && x.state !== 'completed');
    if (!still.length && !failures.length) continue;
    const names = [...new Set([...still, ...failures.map((f) => f.server)].map((s) => s.name || s.id))];
    const reasons = failures.map((f) => `${f.server.name || f.server.id}: ${f.state}: ${f.reason ?? ''}`);
    if (!failures.length) reasons.push('still listed on the host after the migrations');
    notEmpty.push({ host, instances: names, reasons });
  }
  if (notEmpty.length) {
    const failed = await setEnabled(
      ctx,
      notEmpty.map((h) => h.host),
      o,
    );
    const bad = new Set(notEmpty.map((h) => h.host));
    throw new EvacuationFailed(
      notEmpty,
      hosts.filter((h) => !bad.has(h)),
      failed.map((f) => f.host),
    );
  }
  const interrupted = entries
    .map((e) => ({ e, why: interruption(e, o.workloadMaxGapMs) }))
    .filter((x): x is { e: LedgerEntry; why: string } => x.why !== undefined);
  if (interrupted.length) {
    throw new RemoteError(
      'E_WORKLOAD_INTERRUPTED',
      `${hosts.join(', ')} emptied, but ${interrupted.length} instance(s) were interrupted while they migrated: ` +
        interrupted.map(({ e, why }) => `${e.name || e.server}: ${why}`).join('; '),
      {
        hint:
          'The hosts stay disabled (they are empty). Look at the instances (openstack console log show), and at ' +
          'the migrations (openstack server migration list --server ID); raise upgrade.evacuation.workload_max_gap_s ' +
          'if the gap is what this network allows.',
        details: { hosts, ledger: entries },
      },
    );
  }
  const watched = entries.filter((e) => e.watched && e.summary);
  const ledgerText = watched.length
    ? `; ${watched.length} watched, longest gap ${(Math.max(...watched.map((e) => e.summary!.longestGapMs)) / 1000).toFixed(2)} s, 0 boot-id changes`
    : '';
  const secs = ((ctx.now() - t0) / 1000).toFixed(0);
  const stays = staying.length ? `; ${staying.length} instance(s) not running stay in place` : '';
  const waited = adopted ? `; ${adopted} live migration(s) already under way waited for` : '';
  return `${hosts.join(', ')}: nova-compute disabled, ${outcomes.length} instance(s) live-migrated in ${secs} s${ledgerText}${waited}${stays}`;
}

/**
 * The `nova-up` hook: the health gate of a compute as Nova sees it. Each host's nova-compute must
 * report again (its `Updated At` moves past the value read when the hook started: the new
 * process's heartbeat, whatever the clocks of this machine and of the database) and be `up`. A
 * container that is running but crash-looping, or never reaches the conductor, fails here.
 */
export async function novaUp(
  hosts: readonly string[],
  ctx: EvacuationContext,
  opts: EvacuationOptions = {},
): Promise<string> {
  const o: EvacuationSettings = { ...EVACUATION_DEFAULTS, binary: hypervisorBinary(ctx.services), ...opts };
  const rows = async (): Promise<Map<string, ComputeService>> =>
    new Map((await listComputeServices(ctx.cloud, o.binary)).map((r) => [r.host, r]));
  const first = await rows();
  const waiting = new Set(hosts);
  const deadline = ctx.now() + o.reportTimeoutMs;
  let last = first;
  for (;;) {
    for (const h of [...waiting]) {
      const r = last.get(h);
      if (r && r.state === 'up' && r.updatedAt && r.updatedAt !== first.get(h)?.updatedAt) waiting.delete(h);
    }
    if (!waiting.size) return `${o.binary} reports and is up on ${hosts.join(', ')}`;
    if (ctx.now() >= deadline || ctx.signal?.aborted) break;
    await ctx.sleep(o.pollMs);
    last = await rows();
  }
  const state = [...waiting].map((h) => {
    const r = last.get(h);
    return r ? `${h}: ${r.state}, last report ${r.updatedAt ?? 'never'}` : `${h}: no ${o.binary} record`;
  });
  throw new RemoteError(
    'E_NOVA_NOT_REPORTING',
    `${o.binary} did not report within ${Math.round(o.reportTimeoutMs / 1000)} s on ${[...waiting].join(', ')} (${state.join('; ')})`,
    {
      hint: `Read 'docker logs ${o.binary.replace('-', '_')}' on the host: the container runs, but the service does not reach Nova's conductor or stops at start.`,
      details: { nodes: [...waiting] },
    },
  );
}

/** The `nova-enable` hook: nova-compute enabled again on the batch's hosts. */
export async function novaEnable(
  hosts: readonly string[],
  ctx: EvacuationContext,
  opts: EvacuationOptions = {},
): Promise<string> {
  const o: EvacuationSettings = { ...EVACUATION_DEFAULTS, binary: hypervisorBinary(ctx.services), ...opts };
  const failed = await setEnabled(ctx, hosts, o);
  if (failed.length) {
    throw new RemoteError(
      'E_NOVA_ENABLE',
      `could not enable ${o.binary} on ${failed.map((f) => `${f.host} (${f.error})`).join('; ')}`,
      {
        hint: `Enable it by hand: openstack compute service set --enable HOST ${o.binary}. The host receives no new instance until then.`,
        details: { hosts: failed.map((f) => f.host) },
      },
    );
  }
  return `${o.binary} enabled on ${hosts.join(', ')}`;
}
