import type { Command } from 'commander';
import { RemoteError, StackctlError, type Issue } from '../core/errors.js';
import { formatPinChanges, short, shortRef, unpinnedImages } from '../images/pin.js';
import { PinSource } from '../images/pins.js';
import { ImagesMissing } from '../images/registry-api.js';
import { saveIpamState } from '../inventory/ipam.js';
import { planToJson, type Plan, type PlanResult } from '../roles/plan.js';
import { loadAll, planOf, planPinned, type Loaded } from './context.js';
import { out, printIssues, table } from './output.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { withRunLock } from './run-lock.js';

/** How long `plan` waits for each registry answer when it pins images. */
const PLAN_REGISTRY_TIMEOUT_MS = 3000;

/** `stackctl plan`: node -> role -> services -> containers, addresses, VIPs, steps. */
export function registerPlan(program: Command): void {
  inventoryOptions(program.command('plan'))
    .description('show what a deploy would put where: addresses, containers with image and config hash, VIPs, steps')
    .option('--json', 'stable JSON for tools')
    .option('--no-save', 'do not persist new IPAM allocations, and do not pin images (the registry is not asked)')
    .action(async (opts: CommonOpts & { json?: boolean; save: boolean }) => {
      let all = loadAll(opts);
      // the plan is shown, not deployed: its rendered files are not kept
      let planned = planOf(all, { keepRendered: false });
      const issues: Issue[] = [];
      if (opts.save && (all.allocation.changed || unpinnedImages(planned.plan).length)) {
        // New allocations or pins to save: under the run lock, from the state files as they are now (a run
        // that held the lock may have saved some since). Without any, plan only reads and takes no lock.
        await withRunLock(opts.inventory, async () => {
          all = loadAll(opts);
          planned = planOf(all);
          // Persist allocations only once everything above succeeded: bad input changes nothing.
          if (all.allocation.changed) saveIpamState(all.ipamFile, all.allocation.state);
          const pinned = await pinWhatIsNew(all, planned, issues);
          all = pinned.all;
          planned = pinned.planned;
        });
      }
      printIssues([...all.warnings, ...issues]);
      out(opts.json ? planToJson(planned.plan) : formatPlan(planned.plan));
    });
}

/**
 * Pin the plan's images that have none, as a deploy would (saved). A registry that does not answer or
 * lacks an image pins nothing: the plan then shows their tags, with a warning, and deploy pins them.
 */
async function pinWhatIsNew(
  all: Loaded,
  planned: PlanResult,
  issues: Issue[],
): Promise<{ all: Loaded; planned: PlanResult }> {
  try {
    // a plan is no deploy: a registry that does not answer soon is reported, not waited for
    const r = await planPinned(all, { by: PinSource.PLAN, save: true, timeoutMs: PLAN_REGISTRY_TIMEOUT_MS });
    if (r.changes.length) process.stderr.write(formatPinChanges(r.changes));
    return r;
  } catch (e) {
    if (!(e instanceof RemoteError || e instanceof ImagesMissing)) throw e;
    issues.push({
      severity: 'warning',
      code: 'W_IMAGES_UNPINNED',
      message: `${unpinnedImages(planned.plan).length} image(s) not pinned: ${(e as StackctlError).message}`,
      hint: `${(e as StackctlError).hint ?? ''} The plan shows their tags; deploy pins them (and stops if it cannot).`.trim(),
      location: { file: all.imagesFile },
    });
    return { all, planned };
  }
}

/** Human-readable plan. */
export function formatPlan(plan: Plan): string {
  const nets = [...new Set(plan.nodes.flatMap((n) => Object.keys(n.addresses)))].sort();
  let s = `Cloud ${plan.cloud.name}: release ${plan.cloud.release} (OpenStack ${plan.cloud.openstack}, ${plan.cloud.series})\n`;
  s += `Inputs: inventory ${plan.inputs.inventory.slice(0, 12)}  roles ${plan.inputs.catalog.slice(0, 12)}  release ${plan.inputs.release.slice(0, 12)}  secrets ${plan.inputs.secrets}\n`;
  s += `VIPs: ${
    Object.entries(plan.vips)
      .map(([n, ip]) => `${n} ${ip}`)
      .join(', ') || '(none)'
  }\n\n`;
  s += 'IMAGES\n';
  s += table(
    ['IMAGE', 'PINNED DIGEST'],
    plan.images.map((i) => [i.ref, i.digest ? short(i.digest) : 'not pinned (deploy pins it)']),
  );
  s += '\n';
  s += 'NODES\n';
  s += table(
    ['NODE', 'ROLE', ...nets.map((n) => n.toUpperCase()), 'SERVICES'],
    plan.nodes.map((n) => [n.name, n.role, ...nets.map((net) => n.addresses[net] ?? '-'), n.services.join(',')]),
  );
  s += '\nCONTAINERS\n';
  s += table(
    ['NODE', 'STEP', 'CONTAINER', 'IMAGE', 'HASH'],
    plan.nodes.flatMap((n) =>
      n.containers.map((c) => [n.name, String(c.step), c.name, shortRef(c.image), c.hash.slice(0, 12)]),
    ),
  );
  s += '\nCONFIG FILES\n';
  s += table(
    ['NODE', 'SERVICE', 'PATH', 'SHA256'],
    plan.nodes.flatMap((n) => n.configs.map((c) => [n.name, c.service, c.dest, c.sha256.slice(0, 12)])),
  );
  s += '\nSERVICES\n';
  s += table(
    ['SERVICE', 'STEP', 'BOOTSTRAP', 'NODES', 'FRONTENDS'],
    plan.services.map((v) => [
      v.name,
      String(v.step),
      v.bootstrap,
      String(v.nodes.length),
      v.frontends.map((f) => `${f.name}:${f.port}`).join(',') || '-',
    ]),
  );
  s += '\nSTEPS\n';
  s += table(
    ['STEP', 'TITLE', 'ACTIONS', 'DETAIL'],
    plan.steps.map((st) => {
      const kinds = new Map<string, number>();
      for (const a of st.actions) kinds.set(a.kind, (kinds.get(a.kind) ?? 0) + 1);
      return [
        String(st.step),
        st.title,
        String(st.actions.length),
        [...kinds].map(([k, n]) => `${n} ${k}`).join(', ') || '-',
      ];
    }),
  );
  return s;
}
