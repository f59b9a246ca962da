import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { IoError, RemoteError } from '../core/errors.js';
import { exists, writeFileAtomic } from '../core/fs.js';
import { adminCredentials } from '../roles/credentials.js';
import { certsDirFor } from '../certs/files.js';
import { caFile } from '../certs/served.js';
import { fetchTrusting } from '../tempest/ca-fetch.js';
import { listFlavorsAndImages, type CloudDeps } from '../tempest/cloud.js';
import { chooseResources, renderTempestConf, resolveResource } from '../tempest/config.js';
import { formatSummary, parseTrace, summarize, type RunSummary } from '../tempest/results.js';
import { EXCLUDED, excludeListFile, SMOKE_REGEX } from '../tempest/selection.js';
import { loadAll, planOf } from './context.js';
import { RANGE, numberOption } from './numbers.js';
import { inventoryOptions, osInterfaceOption, type CommonOpts, type OsInterface } from './options.js';
import { out, printIssues } from './output.js';

/** Options of `stackctl tempest config`. */
export interface TempestConfigOpts extends CommonOpts {
  output?: string;
  flavor?: string;
  image?: string;
  /** The Keystone endpoint interface Tempest uses (default public). */
  osInterface?: OsInterface;
}

/** Options of `stackctl tempest run`. */
export interface TempestRunOpts {
  workspace: string;
  regex?: string;
  concurrency?: number;
  tempest?: string;
}

/** Parallel Tempest workers by default: the lab machine has 2 cores. */
const TEMPEST_CONCURRENCY = 2;

/** The default workspace: `<inventory>.tempest/` next to the inventory. */
export function defaultWorkspace(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.tempest';
}

/**
 * `stackctl tempest config`: check that the flavour and image Tempest will
 * boot exist in the cloud (refusing before anything runs when they do not),
 * then write the workspace: `etc/tempest.conf` (0600, it holds the admin
 * password) and `etc/exclude.txt`. Returns the workspace path.
 */
export async function runTempestConfig(
  o: TempestConfigOpts,
  deps: CloudDeps & { write?: (t: string) => void } = {},
): Promise<string> {
  const write = deps.write ?? out;
  const all = loadAll(o);
  printIssues(all.warnings);
  const password = all.secrets?.services.get('keystone_admin_password');
  if (!password)
    throw new IoError('E_NO_ADMIN_PASSWORD', `the secrets file ${all.secretsFile} holds no keystone_admin_password`, {
      hint: "Run 'stackctl secrets generate' first (and deploy the cloud with it).",
    });
  const iface = o.osInterface ?? 'public';
  const { plan } = planOf(all);
  const region = all.loaded.inventory.cloud.region ?? 'RegionOne';
  const creds = adminCredentials(plan, password, { iface, region });
  // an https:// endpoint is checked against the cloud's CA (stackctl's or the operator's)
  const caPath = caFile(all.inventoryFile, certsDirFor(all.inventoryFile), all.loaded.inventory.tls);
  const caPem =
    creds?.url.startsWith('https://') && caPath && existsSync(caPath) ? readFileSync(caPath, 'utf8') : undefined;
  if (!creds)
    throw new IoError('E_NO_KEYSTONE', 'no node of this inventory runs keystone', {
      hint: 'Give a node a role with the keystone service (Controller or AllInOne).',
    });
  const choice = chooseResources(plan, o);
  const found = await listFlavorsAndImages(
    { authUrl: creds.url, password, region, iface },
    caPem && !deps.fetch ? { ...deps, fetch: fetchTrusting(caPem) } : deps,
  );
  // both checked before anything is written: a wrong name never leaves a half-made workspace
  const refs = {
    flavor: resolveResource('flavor', choice.flavor, found.flavors),
    flavorAlt: resolveResource('flavor', choice.flavorAlt, found.flavors),
    image: resolveResource('image', choice.image, found.images),
    imageAlt: resolveResource('image', choice.imageAlt, found.images),
  };
  const workspace = resolve(o.output ?? defaultWorkspace(all.inventoryFile));
  const settings = all.loaded.inventory.cloud.settings ?? {};
  const conf = renderTempestConf({
    authUrl: creds.url,
    region,
    iface,
    adminPassword: password,
    services: plan.services.map((s) => s.name),
    computeDriver: String(settings['nova_compute_driver'] ?? 'libvirt.LibvirtDriver'),
    computeNodes: plan.nodes.filter((n) => n.services.includes('nova-compute')).length,
    refs,
    workspace,
    ...(caPem ? { caFile: join(workspace, 'etc', 'ca.pem') } : {}),
  });
  for (const d of ['etc', 'logs', 'tempest_lock']) mkdirSync(join(workspace, d), { recursive: true });
  writeFileAtomic(join(workspace, 'etc', 'tempest.conf'), conf, 0o600);
  writeFileAtomic(join(workspace, 'etc', 'exclude.txt'), excludeListFile());
  if (caPem) writeFileAtomic(join(workspace, 'etc', 'ca.pem'), caPem, 0o644);
  write(
    `${workspace}: Tempest workspace for cloud ${plan.cloud.name} (${creds.url}, region ${region}); ` +
      `flavor ${choice.flavor} (${refs.flavor}), image ${choice.image} (${refs.image})\n`,
  );
  return workspace;
}

/** Runs `tempest run`; returns its exit status and what it printed (tests inject a fake). */
export type TempestRunner = (
  args: readonly string[],
  opts: { cwd: string; echo: (t: string) => void },
) => Promise<{ code: number; output: string }>;

/** The real runner: the `tempest` command, its output echoed as it comes and kept. */
export const spawnTempest =
  (command = 'tempest'): TempestRunner =>
  (args, { cwd, echo }) =>
    new Promise((res, rej) => {
      let output = '';
      const child = spawn(command, [...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
      const take = (b: Buffer) => {
        const t = b.toString('utf8');
        output += t;
        echo(t);
      };
      child.stdout.on('data', take);
      child.stderr.on('data', take);
      child.on('error', (err) =>
        rej(
          new IoError('E_TEMPEST_MISSING', `cannot run ${command}: ${err.message}`, {
            hint: 'Install Tempest: apt-get install tempest (Debian), then run again.',
            cause: err,
          }),
        ),
      );
      child.on('close', (code) => res({ code: code ?? 1, output }));
    });

/**
 * `stackctl tempest run`: the selected smoke tests (SMOKE_REGEX, less the
 * documented exclusions) in a workspace made by `tempest config`; prints the
 * counts and the skipped tests with reasons, writes `results.json`. Throws
 * E_TEMPEST_FAILED when a test failed.
 */
export async function runTempest(
  o: TempestRunOpts,
  deps: { runner?: TempestRunner; write?: (t: string) => void; echo?: (t: string) => void } = {},
): Promise<RunSummary> {
  const write = deps.write ?? out;
  const workspace = resolve(o.workspace);
  const conf = join(workspace, 'etc', 'tempest.conf');
  if (!exists(conf))
    throw new IoError('E_TEMPEST_WORKSPACE', `${conf} does not exist`, {
      hint: "Make the workspace first: 'stackctl tempest config -i INVENTORY -o " + o.workspace + "'.",
    });
  const concurrency = String(o.concurrency ?? TEMPEST_CONCURRENCY);
  const args = ['run', '--config-file', conf, '--regex', o.regex ?? SMOKE_REGEX, '--concurrency', concurrency];
  const exclude = join(workspace, 'etc', 'exclude.txt');
  if (EXCLUDED.length) args.push('--exclude-list', exclude);
  const runner = deps.runner ?? spawnTempest(o.tempest);
  const { code, output } = await runner(args, { cwd: workspace, echo: deps.echo ?? (() => undefined) });
  const summary = summarize(parseTrace(output));
  writeFileAtomic(join(workspace, 'results.json'), JSON.stringify({ exitCode: code, ...summary }, null, 2) + '\n');
  write(formatSummary(summary));
  if (summary.failed > 0 || (code !== 0 && summary.results.length === 0))
    throw new RemoteError(
      'E_TEMPEST_FAILED',
      summary.results.length
        ? `${summary.failed} Tempest test(s) failed`
        : `tempest run exited with status ${code} before any test ran`,
      {
        hint: `Read ${join(workspace, 'logs', 'tempest.log')} and the output above.`,
        details: { failures: summary.failures, exitCode: code },
      },
    );
  return summary;
}

/** `stackctl tempest config|run`. */
export function registerTempest(program: Command): void {
  const tempest = program.command('tempest').description('Tempest, the OpenStack test suite, against the cloud');
  const config = inventoryOptions(tempest.command('config'))
    .description(
      'write a Tempest workspace (etc/tempest.conf, mode 0600) for the cloud; refuses a flavour or image the cloud lacks',
    )
    .option('-o, --output <dir>', 'workspace folder (default: <inventory>.tempest next to the inventory)')
    .option(
      '--flavor <name>',
      "flavour the compute tests boot (default: the inventory's first cloud.resources flavour)",
    )
    .option('--image <name>', "image the compute tests boot (default: the inventory's first cloud.resources image)");
  osInterfaceOption(config, 'Tempest').action(async (opts: TempestConfigOpts) => {
    await runTempestConfig(opts);
  });
  tempest
    .command('run')
    .description('run the identity, compute and image smoke tests in a workspace; print counts and skips')
    .requiredOption('-w, --workspace <dir>', "workspace made by 'stackctl tempest config'")
    .option('--regex <re>', 'test selection regex instead of the smoke selection')
    .addOption(numberOption('--concurrency <n>', 'parallel test workers', RANGE.concurrency, TEMPEST_CONCURRENCY))
    .option('--tempest <command>', 'the tempest command', 'tempest')
    .action(async (opts: TempestRunOpts) => {
      await runTempest({ ...opts, workspace: opts.workspace }, { echo: (t) => process.stderr.write(t) });
    });
}
