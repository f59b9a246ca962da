/**
 * `stackctl nodes maintenance on|off --node N`: a compute out of service and back, outside an
 * upgrade (a disk to replace, firmware, a kernel). `on` is the upgrade's nova-evacuate hook run on
 * its own: nova-compute disabled on the node, the capacity of the other computes checked before the
 * first migration (refused with the shortfall, nothing left disabled), every running instance
 * live-migrated away (a few at a time, each within a deadline, aborted past it), the node verified
 * empty. `off` enables nova-compute again and waits until it reports to Nova and is up. Both run
 * under the run lock, write their events to the inventory's event log, and change nothing else.
 */
import type { Command } from 'commander';
import type { StackctlEvent } from '../core/events.js';
import { InputError, RemoteError, summarizeFailure, UsageError } from '../core/errors.js';
import { FailureClass } from '../orchestrator/failures.js';
import { planDeploy } from '../orchestrator/planner.js';
import { hypervisorBinary } from '../roles/service-roles.js';
import { clientCaFiles, clientContainers, cloudClient } from '../status/openstack-client.js';
import { EvacuationCapacity } from '../upgrade/prechecks.js';
import { evacuationOptions } from '../upgrade/run-hooks.js';
import {
  EVACUATION_DEFAULTS,
  EvacuationFailed,
  novaEnable,
  novaEvacuate,
  novaUp,
  type EvacuationContext,
} from '../upgrade/evacuate.js';
import { internalAdminEnv, loadAll, planOf } from './context.js';
import { eventSink, nodeSessions } from './node-sessions.js';
import { RANGE, numberOption, secondsOption } from './numbers.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { out, printIssues } from './output.js';
import { withRunLock } from './run-lock.js';

/** The two actions and what each does, for the help and the usage error. */
export const MAINTENANCE_ACTIONS = {
  on: 'disable nova-compute on the node, live-migrate its instances away (capacity checked first), verify it is empty',
  off: 'enable nova-compute on the node again and wait until it reports to Nova and is up',
} as const;
export type MaintenanceAction = keyof typeof MAINTENANCE_ACTIONS;

/** The code of the refusal before anything moved (the node is enabled again). */
const CAPACITY_REFUSED: string = EvacuationCapacity.CODE;

/** The reason `openstack compute service list --long` shows on a node in maintenance. */
export const MAINTENANCE_REASON = 'stackctl maintenance';

interface MaintenanceOpts extends CommonOpts {
  node: string;
  json?: boolean;
  migrationTimeout?: number;
  concurrency?: number;
}

/** What `nodes maintenance` returns (and prints with --json). */
export interface MaintenanceResult {
  readonly action: MaintenanceAction;
  readonly node: string;
  readonly ok: true;
  readonly detail: string;
  readonly ms: number;
}

export function registerMaintenance(nodes: Command): void {
  inventoryOptions(nodes.command('maintenance'))
    .description('take a compute out of service (on: drain it by live migration) or bring it back (off)')
    .argument('<action>', Object.keys(MAINTENANCE_ACTIONS).join('|'))
    .requiredOption('--node <name>', 'the compute node')
    .addOption(
      secondsOption(
        '--migration-timeout',
        `deadline of one live migration, past which it is aborted and the instance stays (default: the inventory's upgrade.evacuation.timeout_s, else ${EVACUATION_DEFAULTS.timeoutMs / 1000})`,
        RANGE.seconds,
      ),
    )
    .addOption(
      numberOption(
        '--concurrency <n>',
        `live migrations in flight at once (default: upgrade.evacuation.concurrency, else ${EVACUATION_DEFAULTS.concurrency})`,
        RANGE.concurrency,
      ),
    )
    .option('--json', 'print the result as JSON')
    .action(async (action: string, opts: MaintenanceOpts) => {
      if (!(action in MAINTENANCE_ACTIONS)) {
        throw new UsageError('E_USAGE', `unknown maintenance action '${action}'`, {
          hint: `Use one of: ${Object.keys(MAINTENANCE_ACTIONS).join(', ')}.`,
        });
      }
      await withRunLock(opts.inventory, () => runMaintenance(action as MaintenanceAction, opts));
    });
}

/** One maintenance action on one node; throws (nothing changed, or the node enabled again) when it cannot. */
export async function runMaintenance(action: MaintenanceAction, o: MaintenanceOpts): Promise<MaintenanceResult> {
  const all = loadAll(o);
  if (!o.json) printIssues(all.warnings);
  const { effective } = planOf(all);
  const binary = hypervisorBinary(all.catalog.provides);
  const node = effective.nodes.find((n) => n.name === o.node);
  if (!node) {
    throw new InputError('E_UNKNOWN_NODE', `node '${o.node}' is not in ${all.inventoryFile}`, {
      hint: `Nodes: ${effective.nodes.map((n) => n.name).join(', ')}.`,
    });
  }
  // the service whose agent is the hypervisor (nova-compute)
  const agent = [...all.catalog.provides.agents].find(([, a]) => a.hypervisor)?.[0] ?? binary;
  if (!node.services.includes(agent)) {
    throw new InputError('E_NOT_A_COMPUTE', `node '${o.node}' runs no ${binary}: there is nothing to drain or enable`, {
      hint: `Maintenance applies to the nodes running ${agent}: ${
        effective.nodes
          .filter((n) => n.services.includes(agent))
          .map((n) => n.name)
          .join(', ') || '(none)'
      }.`,
    });
  }
  if (!all.secrets) {
    throw new InputError('E_SECRETS_REQUIRED', `nodes maintenance needs the secrets file ${all.secretsFile}`, {
      hint: "The cloud's admin password is in it: give --secrets FILE.",
    });
  }
  const credentials = internalAdminEnv(all, effective);
  if (!credentials) {
    throw new InputError('E_SECRETS_REQUIRED', `the secrets file ${all.secretsFile} has no admin password`, {
      hint: `Run 'stackctl secrets generate -i ${o.inventory}' (it completes the file) and deploy.`,
    });
  }
  const sessions = nodeSessions(all);
  const emit = eventSink(all.inventoryFile, { json: o.json, visible: false, write: (t) => process.stderr.write(t) });
  const stop = new AbortController();
  const onSigint = (): void => stop.abort();
  process.once('SIGINT', onSigint);
  const t0 = Date.now();
  try {
    const ctx: EvacuationContext = {
      cloud: cloudClient({
        connect: sessions.connect,
        plan: planDeploy(effective, all.catalog),
        credentials,
        containers: clientContainers(all.catalog.provides),
        caFiles: clientCaFiles(all.catalog.provides),
      }),
      services: all.catalog.provides,
      emit,
      now: Date.now,
      sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
      signal: stop.signal,
    };
    const knobs = {
      ...evacuationOptions(all.loaded.inventory.upgrade?.evacuation),
      disableReason: MAINTENANCE_REASON,
      ...(o.migrationTimeout !== undefined ? { timeoutMs: o.migrationTimeout * 1000 } : {}),
      ...(o.concurrency !== undefined ? { concurrency: o.concurrency } : {}),
    };
    const detail = await recordedMaintenance(action, o.node, { emit, now: Date.now }, async () =>
      action === 'on'
        ? novaEvacuate([o.node], ctx, knobs).catch((err: unknown) => {
            // the upgrade's hint speaks of batches: say what helps a maintenance
            if (err instanceof EvacuationCapacity)
              throw new InputError(err.code, err.message, {
                hint:
                  'Nothing was migrated and nova-compute is enabled on the node again. Free room on the other ' +
                  "computes (delete or shrink instances), or bring one back ('stackctl nodes maintenance off --node N').",
                details: err.details,
              });
            if (err instanceof EvacuationFailed)
              throw new RemoteError(err.code, err.message, {
                hint:
                  `The instances named stay on ${o.node}, running, and nova-compute is enabled on it again. ` +
                  `'openstack server migration list --server ID' says why each did not move; a migration that ` +
                  'was only slow (memory written faster than it is copied) may pass with a larger --migration-timeout. ' +
                  'Then run maintenance on again.',
                details: err.details,
              });
            throw err;
          })
        : `${await novaEnable([o.node], ctx, knobs)}; ${await novaUp([o.node], ctx, knobs)}`,
    );
    const result: MaintenanceResult = { action, node: o.node, ok: true, detail, ms: Date.now() - t0 };
    out(o.json ? JSON.stringify(result) : `${o.node}: maintenance ${action}: ${detail}`);
    return result;
  } finally {
    process.off('SIGINT', onSigint);
    await sessions.close();
  }
}

/**
 * A maintenance's work between the events that make it a run of the event log, which `stackctl
 * report` draws without a journal (src/report/model.ts REPORTED_COMMANDS): `command.start`, one
 * `run.phase` for the whole command, a `run.failure` with the error's code and hint when it fails,
 * `command.end`. What the work emits itself (migrations, the workload ledger) falls between them.
 */
export async function recordedMaintenance(
  action: MaintenanceAction,
  node: string,
  at: { readonly emit: (e: StackctlEvent) => void; readonly now: () => number },
  work: () => Promise<string>,
): Promise<string> {
  const { emit, now } = at;
  const t0 = now();
  const command = `nodes maintenance ${action}`;
  const phase = { phase: `maintenance:${node}`, title: `${node}: maintenance ${action}` };
  emit({ kind: 'command.start', command, nodes: [node] });
  emit({ kind: 'run.phase', ...phase, state: 'start', ms: 0 });
  try {
    const detail = await work();
    emit({ kind: 'run.phase', ...phase, state: 'done', ms: now() - t0 });
    emit({ kind: 'command.end', command, ok: 1, failed: 0 });
    return detail;
  } catch (err) {
    const f = summarizeFailure(err);
    emit({ kind: 'run.phase', ...phase, state: 'failed', ms: now() - t0 });
    emit({
      kind: 'run.failure',
      phase: phase.phase,
      path: `${phase.phase}/${action}`,
      code: f.code,
      message: f.message,
      // refused for want of room: the node was enabled again before anything moved; otherwise what
      // migrated stays where it went and the node stays as the error says
      class: f.code === CAPACITY_REFUSED ? FailureClass.ROLLED_BACK : FailureClass.HARD,
      ...(f.hint ? { hint: f.hint } : {}),
    });
    emit({ kind: 'command.end', command, ok: 0, failed: 1 });
    throw err;
  }
}
