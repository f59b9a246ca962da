import type { Command } from 'commander';
import { UsageError, ValidationFailed, type Issue } from '../core/errors.js';
import { EXPIRY_THRESHOLD_DAYS } from '../certs/expiry.js';
import { checkOperatorTls } from '../certs/check.js';
import type { CertInputs } from '../certs/endpoints.js';
import { certsDirFor } from '../certs/files.js';
import { CERT_POLICY, generateCerts } from '../certs/generate.js';
import { TLS_ENDPOINTS, type TlsEndpoint } from '../inventory/schema.js';
import { listCerts, type CertRow } from '../certs/list.js';
import { nodeCertName } from '../certs/nodes.js';
import { loadAll, nodeCertSubjects, registryCaPem, registryHost, type Loaded } from './context.js';
import { out, printIssues, table } from './output.js';
import { numberOption } from './numbers.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { withRunLock } from './run-lock.js';

/** The service whose nodes answer on a network that has no VIP. */
const LOAD_BALANCER = 'haproxy';

/**
 * What the certificate table derives names from: per network, its VIP, else
 * the addresses of the nodes running HAProxy there (as the plan's endpoints
 * do); the registry's host without its port.
 */
export function certInputsOf(all: Loaded): CertInputs {
  const inv = all.loaded.inventory;
  const lbNodes = inv.nodes
    .filter((n) => all.catalog.roles.get(n.role)?.services.includes(LOAD_BALANCER))
    .map((n) => n.name);
  const frontends: Record<string, string[]> = {};
  for (const [net, def] of Object.entries(inv.networks)) {
    const addresses = def.vip
      ? [def.vip]
      : lbNodes.map((n) => all.allocation.addresses.get(n)?.[net]).filter((a): a is string => !!a);
    if (addresses.length) frontends[net] = addresses;
  }
  const nodes = nodeCertSubjects(all);
  return {
    cloud: inv.cloud.name,
    ...(inv.cloud.domain ? { domain: inv.cloud.domain } : {}),
    frontends,
    registryHost: registryHost(all),
    ...(nodes.length ? { nodes } : {}),
  };
}

/** The faults of the operator's TLS files named by the inventory (`inventory validate` reports them). */
export function tlsIssues(all: Loaded, now = new Date()): Issue[] {
  return checkOperatorTls({
    inventoryFile: all.inventoryFile,
    tls: all.loaded.inventory.tls,
    inputs: certInputsOf(all),
    locate: (p) => all.loaded.source.locate(p),
    now,
  });
}

/** `stackctl certs generate|renew|list`: the cloud's CA and the certificates of its TLS endpoints. */
export function registerCerts(program: Command): void {
  const certs = program.command('certs').description("the cloud's CA and TLS certificates (docs/tls.md)");
  inventoryOptions(certs.command('generate'))
    .description(
      'create the CA (key mode 0600) and the certificates the plan needs in <inventory>.certs/; ' +
        'keeps those still right, reissues those that no longer fit; never prints a key',
    )
    .action((opts: CommonOpts) => withRunLock(opts.inventory, () => generate(opts)));
  inventoryOptions(certs.command('renew'))
    .description(
      'reissue the generated certificates with fewer than --days left (and any named with --cert), ' +
        'then say how to roll them out; the CA and the operator-provided ones are never touched',
    )
    .addOption(
      numberOption(
        '--days <n>',
        'reissue those with fewer days left (default: the inventory tls.expiry_days, else 30)',
        RENEW_DAYS,
      ),
    )
    .option('--cert <name...>', `reissue these even when still right (${TLS_ENDPOINTS.join(', ')}, node-<node>)`)
    .action((opts: RenewOpts) => withRunLock(opts.inventory, () => renew(opts)));
  inventoryOptions(certs.command('list'))
    .description('every certificate: subject, SANs, issuer, expiry, days left, generated or operator')
    .option('--json', 'machine-readable result on stdout')
    .action((opts: CommonOpts & { json?: boolean }) => list(opts));
}

/** Check the operator's files, then issue what is missing or stale (under the run lock). */
async function generate(opts: CommonOpts): Promise<void> {
  const all = loadAll(opts);
  printIssues(all.warnings.filter((w) => w.code !== 'W_NO_SECRETS'));
  const faults = tlsIssues(all);
  if (faults.length) throw new ValidationFailed(opts.inventory, faults);
  const outcomes = await generateCerts({
    inventoryFile: all.inventoryFile,
    dir: certsDirFor(all.inventoryFile),
    tls: all.loaded.inventory.tls,
    inputs: certInputsOf(all),
  });
  for (const o of outcomes) {
    const action = o.action === 'operator' ? "operator's, checked" : o.action;
    out(`${o.name}: ${action} ${o.cert}${o.reason ? ` (${o.reason})` : ''}\n`);
  }
}

/** `--days` of `certs renew`: up to a generated certificate's whole life. */
const RENEW_DAYS = { min: 1, max: CERT_POLICY.leafDays } as const;

interface RenewOpts extends CommonOpts {
  days?: number;
  cert?: string[];
}

/**
 * Reissue what nears its end (or is named), under the run lock. The rollout is the deploy's: the
 * containers that read a certificate (HAProxy) get a new config hash and are recreated node by node.
 */
async function renew(opts: RenewOpts): Promise<void> {
  const all = loadAll(opts);
  printIssues(all.warnings.filter((w) => w.code !== 'W_NO_SECRETS'));
  const tls = all.loaded.inventory.tls;
  const force = new Set<string>();
  const nodeCerts = nodeCertSubjects(all).map((n) => nodeCertName(n.node));
  for (const name of opts.cert ?? []) {
    if (nodeCerts.includes(name)) {
      force.add(name);
      continue;
    }
    if (!(TLS_ENDPOINTS as readonly string[]).includes(name))
      throw new UsageError('E_CERT_NAME', `--cert ${name}: no such certificate`, {
        hint: `The certificates stackctl issues: ${[...TLS_ENDPOINTS, ...nodeCerts].join(', ')} ('certs list' shows them).`,
      });
    const endpoint = name as TlsEndpoint;
    if (tls?.endpoints?.[endpoint])
      throw new UsageError(
        'E_CERT_OPERATOR',
        `--cert ${name}: this certificate is the operator's (tls.endpoints.${name})`,
        {
          hint: "stackctl only renews what it issued: replace the operator's files named in the inventory, then deploy.",
        },
      );
    force.add(endpoint);
  }
  const faults = tlsIssues(all);
  if (faults.length) throw new ValidationFailed(opts.inventory, faults);
  const days = opts.days ?? tls?.expiry_days ?? EXPIRY_THRESHOLD_DAYS;
  const outcomes = await generateCerts({
    inventoryFile: all.inventoryFile,
    dir: certsDirFor(all.inventoryFile),
    tls,
    inputs: certInputsOf(all),
    renew: { days, force },
  });
  for (const o of outcomes) {
    const action = o.action === 'operator' ? "operator's, left alone" : o.action;
    out(`${o.name}: ${action} ${o.cert}${o.reason ? ` (${o.reason})` : ''}\n`);
  }
  const renewed = outcomes.filter((o) => o.action === 'reissued' || o.action === 'created');
  out(
    renewed.length
      ? `${renewed.length} certificate(s) issued. Roll them out: stackctl deploy -i ${opts.inventory} ` +
          '(HAProxy reloads them in place, node by node; docs/tls.md).\n'
      : `Nothing to renew: every generated certificate has ${days} or more days left.\n`,
  );
  if (renewed.some((o) => o.name === 'registry') && registryCaPem(all) !== undefined)
    out(
      `The registry's: stackctl images push -i ${opts.inventory} (restarts the registry with it; its images stay).\n`,
    );
}

function list(opts: CommonOpts & { json?: boolean }): void {
  const all = loadAll(opts);
  const rows = listCerts({
    inventoryFile: all.inventoryFile,
    dir: certsDirFor(all.inventoryFile),
    tls: all.loaded.inventory.tls,
    inputs: certInputsOf(all),
    now: new Date(),
  });
  if (opts.json) {
    out(JSON.stringify({ certificates: rows }, null, 2) + '\n');
    return;
  }
  out(
    table(
      ['NAME', 'SOURCE', 'SUBJECT', 'SANS', 'ISSUER', 'NOT AFTER', 'DAYS LEFT'],
      rows.map((r) =>
        r.present ? presentRow(r) : [r.name, r.source, r.error ? `unreadable: ${r.error}` : 'missing', '', '', '', ''],
      ),
    ),
  );
  if (rows.some((r) => !r.present && !r.error && r.source === 'generated'))
    out(`Run 'stackctl certs generate -i ${opts.inventory}' to create the missing ones.\n`);
}

function presentRow(r: CertRow): string[] {
  const sans = [...(r.sans?.dns ?? []).map((d) => `DNS:${d}`), ...(r.sans?.ip ?? []).map((a) => `IP:${a}`)];
  return [
    r.name,
    r.source,
    r.subject ?? '',
    sans.join(',') || '-',
    r.issuer ?? '',
    r.notAfter ?? '',
    String(r.daysLeft),
  ];
}
