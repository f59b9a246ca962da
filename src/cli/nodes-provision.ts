/**
 * `stackctl nodes provision|undeploy`: write the host OS image to nodes
 * (manageable or available -> active) and tear deployments down (active ->
 * available), through the workflows of src/provision/workflows/. The boot
 * services run for the command; the boot server serves the ramdisk and the
 * image from `<inventory>.pxe/files/`, where the image is staged once, named
 * by its checksum. Per node: listr2 progress from the workflow's events, the
 * wall time of each phase and the bytes served, in the table and in `--json`.
 */
import type { Command } from 'commander';
import { resolve } from 'node:path';
import { AgentResults, DEPLOY_DEFAULTS } from '../provision/deploy.js';
import { introspectionFileFor, introspectionReportHandler, IntrospectionStore } from '../provision/inspect.js';
import { SSH_CHECK_TIMEOUT_MS } from '../provision/provision.js';
import { stageBootFiles } from '../provision/workflows/boot.js';
import {
  checkStartState,
  provisionDeps,
  provisionNode,
  targetOf,
  undeployNode,
  type NodeOperation,
} from '../provision/workflows/provision-node.js';
import { openPool } from '../remote/index.js';
import { requireConfirmation, type ConfirmDeps } from './confirm.js';
import { DEFAULT_HOST_IMAGE_DIR } from './images.js';
import {
  bootNetwork,
  eachLifecycle,
  openSession,
  runBootServices,
  warnStaleRamdisk,
  withBootOptions,
  type BootOpts,
} from './nodes-session.js';
import { RANGE, secondsOption } from './numbers.js';
import { hostImageOption, selectionOptions } from './options.js';
import { DEFAULT_RAMDISK_DIR } from './ramdisk.js';
import { selectNodes } from './targets.js';
import { withRunLock } from './run-lock.js';

type ProvisionOpts = BootOpts & {
  ramdisk?: string;
  hostImage?: string;
  resume?: boolean;
  /** undeploy: wipe the disks without asking. */
  yes?: boolean;
  sshCheck: boolean;
  /** Seconds. */
  sshTimeout?: number;
};

async function runProvision(action: NodeOperation, opts: ProvisionOpts, confirm: ConfirmDeps = {}): Promise<void> {
  const timeoutMs = opts.timeout * 1000;
  const sshTimeoutS = opts.sshTimeout ?? SSH_CHECK_TIMEOUT_MS / 1000;
  const s = openSession(opts, false);
  try {
    const names = selectNodes(s.all, opts);
    const resume = Boolean(opts.resume);
    for (const n of names) checkStartState(s.store.get(n).state, n, action, resume);
    if (action === 'undeploy') await confirmUndeploy(opts, names, confirm);
    const net = bootNetwork(s, opts);
    const ramdiskDir = resolve(opts.ramdisk ?? DEFAULT_RAMDISK_DIR);
    warnStaleRamdisk(ramdiskDir);
    const staged = stageBootFiles(s, { ramdiskDir, imageDir: resolve(opts.hostImage ?? DEFAULT_HOST_IMAGE_DIR) });
    const results = new AgentResults();
    const introspection = IntrospectionStore.open(introspectionFileFor(s.all.inventoryFile));
    const services = await runBootServices(s, opts, net, staged.files, (r) => {
      introspectionReportHandler(introspection)(r);
      results.handler(r);
    });
    const pool = action === 'provision' && opts.sshCheck ? openPool(s.all.inventoryFile) : undefined;
    // per node: the progress line follows the workflow's events
    const updates = new Map<string, (status: string) => void>();
    const deps = provisionDeps(s, staged, services, results, timeoutMs, updates);
    try {
      await eachLifecycle(s, opts, action, names, async (node, update, outcome) => {
        updates.set(node, update);
        const target = targetOf(s.site, node);
        if (action === 'undeploy') {
          return undeployNode(deps, target, { resume, figures: (d) => void (outcome.details = d) });
        }
        const r = await provisionNode(s, deps, target, {
          resume,
          ...(pool ? { ssh: { pool, timeoutMs: sshTimeoutS * 1000 } } : {}),
        });
        outcome.details = r.details;
        return r.summary;
      });
    } finally {
      await pool?.close().catch(() => undefined);
      await services.close();
    }
  } finally {
    await s.close();
  }
}

/**
 * An undeploy wipes the disks of the nodes: their names are shown and the
 * operator says yes (`--yes`, or "y" at the prompt) before any node is
 * touched; without a terminal, only `--yes` goes on.
 */
async function confirmUndeploy(opts: ProvisionOpts, names: readonly string[], deps: ConfirmDeps): Promise<void> {
  const selection = opts.all ? '--all' : opts.role ? `--role ${opts.role}` : names.map((n) => `--node ${n}`).join(' ');
  await requireConfirmation(
    {
      yes: opts.yes,
      action: `undeploying ${names.join(', ')} (power off, wipe every disk)`,
      question:
        `Undeploy ${names.length} node(s): ${names.join(', ')}? Each is powered off and every disk of it wiped ` +
        '(partition tables and disk ends): what it ran is lost. [y/N] ',
      again: `stackctl nodes undeploy -i ${opts.inventory} ${selection}${opts.resume ? ' --resume' : ''} --yes`,
    },
    deps,
  );
}

/** Add provision and undeploy to `stackctl nodes`. */
export function registerProvision(nodes: Command, confirm: ConfirmDeps = {}): void {
  const common = (cmd: Command): Command =>
    hostImageOption(
      withBootOptions(selectionOptions(cmd, 4), DEPLOY_DEFAULTS.timeoutMs / 1000).option(
        '--ramdisk <dir>',
        'the deploy ramdisk (stackctl images build-ramdisk)',
        DEFAULT_RAMDISK_DIR,
      ),
      'the host OS image (stackctl images build host)',
      DEFAULT_HOST_IMAGE_DIR,
    ).option('--resume', 'carry on with nodes an interrupted run left in the middle of the operation');

  common(nodes.command('provision'))
    .description(
      'write the host OS image to each node (manageable nodes are cleaned first) and boot it: -> active; ' +
        'then log in by SSH with the host key the node made and reported during the deploy',
    )
    .option('--no-ssh-check', 'do not prove SSH access after the deploy')
    .addOption(
      secondsOption(
        '--ssh-timeout',
        'disk boot to SSH answering, per node',
        RANGE.seconds,
        SSH_CHECK_TIMEOUT_MS / 1000,
      ),
    )
    .action((opts: ProvisionOpts) => withRunLock(opts.inventory, () => runProvision('provision', opts)));

  common(nodes.command('undeploy'))
    .description(
      'power the node off, wipe its disks (partition tables and disk ends) in the ramdisk: -> available; ' +
        'asks first, naming the nodes (without a terminal: refused unless --yes)',
    )
    .option('--yes', 'wipe the disks of the selected nodes without asking')
    .action((opts: ProvisionOpts) =>
      withRunLock(opts.inventory, () => runProvision('undeploy', { ...opts, sshCheck: false }, confirm)),
    );
}
