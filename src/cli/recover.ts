import type { Command } from 'commander';
import { UsageError } from '../core/errors.js';
import type { ClusterCheck } from '../roles/schema.js';
import { planDeploy } from '../orchestrator/planner.js';
import { recoverGalera, type RecoverReport } from '../recover/galera.js';
import { galeraClusters, galeraServices, recoverCommandOf } from '../recover/guard.js';
import { formatRecoverReport } from '../recover/format.js';
import { loadAll, planOf } from './context.js';
import { dryRunOption, inventoryOptions, type CommonOpts } from './options.js';
import { nodeSessions } from './node-sessions.js';
import { out, printIssues } from './output.js';
import { withRunLock } from './run-lock.js';

/** Options of `stackctl recover galera`. */
export interface RecoverOpts extends CommonOpts {
  dryRun?: boolean;
  /** Comma-separated members to leave out (lost for good, or not to be trusted). */
  without?: string;
  /** The Galera service, when the service files declare several (a `cluster_check` of kind galera). */
  service?: string;
  json?: boolean;
}

/** Side effects of the command (tests pass their own output sink). */
export interface RecoverCliDeps {
  readonly write: (text: string) => void;
}

/** Longest SSH connect + login: a node that is down must not hold the others for long. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * `stackctl recover galera`: read every member, refuse when no safe way exists, else restart the
 * cluster from its most advanced member (docs/deploy.md, Galera after an outage). Returns the report.
 */
export async function runRecoverGalera(o: RecoverOpts, deps: RecoverCliDeps = { write: out }): Promise<RecoverReport> {
  const all = loadAll(o);
  if (!o.json) printIssues(all.warnings);
  const { effective: plan } = planOf(all);
  const checks = all.catalog.provides.clusterChecks;
  const name = galeraServiceOf(checks, o.service);
  const service = plan.services.find((s) => s.name === name);
  const [cluster] = service ? galeraClusters(planDeploy(plan, all.catalog, { services: [name] }), checks) : [];
  if (!cluster) {
    throw new UsageError(
      'E_GALERA_NOT_CLUSTERED',
      `the plan of ${o.inventory} has ${service?.nodes.length ?? 0} ${name} node(s): there is no Galera cluster to recover`,
      { hint: 'A single Galera server runs without replication (wsrep_on = OFF): start its container instead.' },
    );
  }
  const members = cluster.members.map((m) => m.node);
  const without = new Set(
    (o.without ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  );
  const unknown = [...without].filter((n) => !members.includes(n));
  if (unknown.length) {
    throw new UsageError('E_GALERA_UNKNOWN_MEMBER', `--without names ${unknown.join(', ')}, not a Galera member`, {
      hint: `The members are ${members.join(', ')}.`,
    });
  }
  if (without.size >= members.length) {
    throw new UsageError('E_GALERA_UNKNOWN_MEMBER', '--without leaves out every Galera member', {
      hint: 'Leave out only the members that are lost for good.',
    });
  }

  const sessions = nodeSessions(all, { connectTimeoutMs: CONNECT_TIMEOUT_MS });
  try {
    const report = await recoverGalera(
      cluster,
      {
        connect: sessions.connect,
        now: Date.now,
        sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
        say: (line) => {
          if (!o.json) deps.write(line + '\n');
        },
      },
      {
        without,
        dryRun: Boolean(o.dryRun),
        recoverCommand: recoverCommandOf(o.inventory, name, checks),
      },
    );
    if (o.json) {
      deps.write(
        JSON.stringify(
          {
            dryRun: Boolean(o.dryRun),
            members: report.members,
            positions: Object.fromEntries(report.positions),
            decision: report.assessment.kind,
            ...(report.choice ? { choice: report.choice } : {}),
            summary: report.summary,
            changed: report.changed,
          },
          null,
          2,
        ) + '\n',
      );
    } else deps.write(formatRecoverReport(report, Boolean(o.dryRun)));
    return report;
  } finally {
    await sessions.close();
  }
}

/**
 * The Galera service to recover: `--service`, else the one service whose file's `cluster_check` is of
 * kind galera.
 */
function galeraServiceOf(checks: ReadonlyMap<string, ClusterCheck>, wanted: string | undefined): string {
  const names = galeraServices(checks).map(([s]) => s);
  if (wanted !== undefined) {
    if (names.includes(wanted)) return wanted;
    throw new UsageError('E_GALERA_UNKNOWN_SERVICE', `--service ${wanted}: not a Galera service`, {
      hint: names.length
        ? `The Galera services (a cluster_check of kind galera) are ${names.join(', ')}.`
        : 'No service file declares a cluster_check of kind galera.',
    });
  }
  if (names.length === 1) return names[0]!;
  throw new UsageError(
    'E_GALERA_UNKNOWN_SERVICE',
    names.length ? `several Galera services (${names.join(', ')}): which one?` : 'no Galera service to recover',
    {
      hint: names.length
        ? 'Name it with --service.'
        : 'No service file (roles/services/) declares a cluster_check of kind galera.',
    },
  );
}

/**
 * `stackctl recover galera -i INV [--dry-run] [--without a,b] [--service S] [--json]`; it holds the inventory's
 * run lock (not for a dry run, which only reads): a deploy must not start a member meanwhile.
 */
export function registerRecover(program: Command): void {
  const recover = program
    .command('recover')
    .description('bring a clustered service back after an outage of every member');
  const cmd = inventoryOptions(recover.command('galera')).description(
    "Galera after a full outage: read each member's position, restart the cluster from the most advanced, join the others",
  );
  dryRunOption(cmd, "print each member's state, position and the choice; change nothing")
    .option(
      '--without <nodes>',
      'members to leave out, comma separated: lost for good (a member that cannot be read is otherwise refused)',
    )
    .option('--service <name>', 'the Galera service, when the service files declare several')
    .option('--json', 'the report as one JSON document')
    .action(
      async (o: RecoverOpts) =>
        void (await (o.dryRun ? runRecoverGalera(o) : withRunLock(o.inventory, () => runRecoverGalera(o)))),
    );
}
