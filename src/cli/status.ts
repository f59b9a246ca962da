import type { Command } from 'commander';
import { InputError } from '../core/errors.js';
import { planDeploy } from '../orchestrator/planner.js';
import { openPool, remoteFor, type Remote } from '../remote/index.js';
import { collectStatus, STATUS_DEFAULTS } from '../status/collect.js';
import { formatStatus } from '../status/format.js';
import type { StatusReport } from '../status/model.js';
import { checkTags } from '../images/pin.js';
import { splitAddress } from '../images/registry.js';
import {
  internalAdminEnv,
  loadAll,
  nodeCertSubjects,
  planOf,
  registryAccess,
  registryCaPem,
  registryOf,
  type Loaded,
} from './context.js';
import { EXPIRY_THRESHOLD_DAYS, type ReadCertificate } from '../certs/expiry.js';
import { certsDirFor, generatedFiles, readPem } from '../certs/files.js';
import { nodeCertName } from '../certs/nodes.js';
import { readServedCertificate } from '../certs/probe.js';
import { caFile } from '../certs/served.js';
import { readCertificate } from '../certs/x509.js';
import type { Plan } from '../roles/plan.js';
import { RANGE, numberOption, secondsOption } from './numbers.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { out, printIssues } from './output.js';

/** Options of `stackctl status`. */
export interface StatusOpts extends CommonOpts {
  json?: boolean;
  services?: string;
  concurrency?: number;
  /** Seconds. */
  timeout?: number;
  /** Fewer days left on a served certificate fail the status (default: inventory tls.expiry_days, else 30). */
  certDays?: number;
}

/**
 * What status reads of TLS: the CA from its file, each endpoint HAProxy serves over TLS at
 * every address it is served on (the first TLS frontend's port), as a client meets it, and the
 * registry's certificate when stackctl's registry serves TLS.
 */
export function certificateReader(all: Loaded, plan: Plan): (() => Promise<ReadCertificate[]>) | undefined {
  const registryTls = registryCaPem(all) !== undefined;
  // the nodes' own certificates: as each node's listener serves it (what its service loaded), else as
  // the deploy last copied it from the folder of generated ones
  const nodes = all.loaded.inventory.tls ? nodeCertSubjects(all) : [];
  const nodeFiles = nodes
    .filter((n) => !n.served)
    .map((n) => ({
      name: nodeCertName(n.node),
      file: generatedFiles(certsDirFor(all.inventoryFile), nodeCertName(n.node)).cert,
    }));
  if (!plan.tls?.length && !registryTls && !nodes.length) return undefined;
  const ca = caFile(all.inventoryFile, certsDirFor(all.inventoryFile), all.loaded.inventory.tls);
  const targets: { name: string; host: string; port: number }[] = [];
  for (const name of plan.tls ?? []) {
    const vip = name === 'public' ? plan.vips['external'] : plan.vips['internal_api'];
    const f = plan.services.flatMap((s) => s.frontends).find((x) => x.tls?.length && (!vip || x.tls.includes(vip)));
    for (const host of f?.tls ?? []) if (!vip || host === vip) targets.push({ name, host, port: f!.port });
  }
  for (const n of nodes) if (n.served) targets.push({ name: nodeCertName(n.node), ...n.served });
  if (registryTls) {
    // the registry as the nodes reach it (cloud.registry), read from this machine
    const { host, port } = splitAddress(registryOf(all));
    targets.push({ name: 'registry', host, port: Number(port) });
  }
  return async () => {
    const read: ReadCertificate[] = [];
    for (const f of [...(ca ? [{ name: 'ca', file: ca }] : []), ...nodeFiles]) {
      try {
        const info = readCertificate(readPem(f.file));
        read.push({
          name: f.name,
          where: f.file,
          subject: info.subject,
          notBefore: info.notBefore,
          notAfter: info.notAfter,
        });
      } catch (e) {
        read.push({ name: f.name, where: f.file, error: (e as Error).message });
      }
    }
    read.push(...(await Promise.all(targets.map((t) => readServedCertificate(t.name, t.host, t.port)))));
    return read;
  };
}

/** Side effects of the command (tests pass their own output sink). */
export interface StatusCliDeps {
  readonly write: (text: string) => void;
}

/** Longest SSH connect + login: an unreachable node must not hold the others' report for long. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * `stackctl status`: each node's planned containers (state, health, image,
 * config against the plan), Galera, RabbitMQ and Nova's view. Read-only.
 * Sets process.exitCode from the verdict and returns the report.
 */
export async function runStatus(o: StatusOpts, deps: StatusCliDeps = { write: out }): Promise<StatusReport> {
  const all = loadAll(o);
  if (!o.json) printIssues(all.warnings);
  if (!all.secrets) {
    throw new InputError('E_SECRETS_REQUIRED', `status needs the secrets file ${all.secretsFile}`, {
      hint: 'The config hashes a deploy compares are those of the real secrets; give --secrets FILE.',
    });
  }
  const concurrency = o.concurrency ?? STATUS_DEFAULTS.concurrency;
  const timeoutS = o.timeout ?? STATUS_DEFAULTS.timeoutMs / 1000;
  const { effective: plan } = planOf(all);
  const services = o.services
    ? o.services
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean)
    : plan.services.map((s) => s.name);
  // Throws E_UNKNOWN_SERVICE for a name the plan does not have.
  const deployPlan = planDeploy(plan, all.catalog, { services });
  const credentials = internalAdminEnv(all, plan);

  const readCertificates = certificateReader(all, plan);
  const certThresholdDays = o.certDays ?? all.loaded.inventory.tls?.expiry_days ?? EXPIRY_THRESHOLD_DAYS;
  const pool = openPool(all.inventoryFile, { connectTimeoutMs: Math.min(CONNECT_TIMEOUT_MS, timeoutS * 1000) });
  const remotes: Remote[] = [];
  try {
    const report = await collectStatus(
      {
        plan,
        deployPlan,
        services,
        roles: all.catalog.provides,
        certThresholdDays,
        ...(credentials ? { credentials } : {}),
      },
      {
        connect: (name) => {
          const addresses = all.allocation.addresses.get(name) ?? {};
          const address = addresses.provisioning ?? Object.values(addresses)[0];
          if (!address) {
            throw new InputError('E_NODE_ADDRESS', `node ${name} has no address to reach it by SSH`, {
              hint: 'Give its role the provisioning network.',
            });
          }
          const r = remoteFor(pool, { name, address });
          remotes.push(r);
          return r;
        },
        // Has a pinned tag moved in the registry since? (read-only; the pins stay as they are)
        checkTags: (images) => checkTags(images, registryAccess(all)),
        ...(readCertificates ? { readCertificates } : {}),
      },
      { concurrency, timeoutMs: timeoutS * 1000 },
    );
    deps.write(o.json ? JSON.stringify(report, null, 2) + '\n' : formatStatus(report));
    process.exitCode = report.exitCode;
    return report;
  } finally {
    for (const r of remotes) await r.close().catch(() => undefined);
    await pool.close();
  }
}

/** `stackctl status -i INV [--json] [--services a,b] [--concurrency N] [--timeout S]`. */
export function registerStatus(program: Command): void {
  inventoryOptions(program.command('status'))
    .description(
      "each node's planned containers (state, health, image tag, config against the plan), Galera, RabbitMQ and Nova; exit status 0 only when all is healthy",
    )
    .option('--json', 'the report as one JSON document (docs/cli.md gives its shape)')
    .option('--services <list>', 'only these services, comma separated (default: every service of the plan)')
    .addOption(
      numberOption('--concurrency <n>', 'nodes queried at once', RANGE.concurrency, STATUS_DEFAULTS.concurrency),
    )
    .addOption(
      secondsOption(
        '--timeout',
        "deadline of each node's queries and of each cluster command",
        { min: 5, max: 3600 },
        STATUS_DEFAULTS.timeoutMs / 1000,
      ),
    )
    .addOption(
      numberOption(
        '--cert-days <n>',
        'fail when a served certificate or the CA has fewer days left (default: inventory tls.expiry_days, else 30)',
        { min: 0, max: 3650 },
      ),
    )
    .action(async (o: StatusOpts) => void (await runStatus(o)));
}
