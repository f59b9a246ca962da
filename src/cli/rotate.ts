import { existsSync, readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { InputError } from '../core/errors.js';
import { rotateKeyRepository } from '../inventory/secrets.js';
import { EffectKind, journalFileFor, parseJournal } from '../orchestrator/journal.js';
import { secretSpecs } from '../roles/catalog.js';
import { loadAll, planOf, type Loaded } from './context.js';
import { out, printIssues } from './output.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { withRunLock } from './run-lock.js';

/**
 * What `stackctl rotate WHAT` rotates: the key repository of the secrets file, the service that
 * declares it, and the setting that bounds how many keys it keeps (docs/tls.md, "Key rotation").
 */
export const ROTATIONS = {
  'keystone-keys': {
    description: "Keystone's token keys: the staged key becomes the primary, a new staged key is made",
    repository: 'keystone_fernet_key',
    service: 'keystone',
    maxActiveSetting: 'keystone_fernet_max_active_keys',
    /** The rendered file that carries the keys to the nodes. */
    file: '/etc/stackctl/keystone/fernet-keys.list',
  },
} as const;
export type RotationName = keyof typeof ROTATIONS;

/** `stackctl rotate keystone-keys`: one rotation of a key repository in the secrets file. */
export function registerRotate(program: Command): void {
  const rotate = program.command('rotate').description('rotate keys held in the secrets file (docs/tls.md)');
  for (const [name, r] of Object.entries(ROTATIONS) as [RotationName, (typeof ROTATIONS)[RotationName]][]) {
    inventoryOptions(rotate.command(name))
      .description(
        `${r.description}; writes the secrets file once (mode 0600), prints key indices only; ` +
          "'stackctl deploy' then recreates the containers that read the keys",
      )
      .option('--force', 'rotate although the previous rotation is not deployed to every node (see docs/tls.md)')
      .action((opts: RotateOpts) => withRunLock(opts.inventory, () => rotateOne(name, opts)));
  }
}

type RotateOpts = CommonOpts & { force?: boolean };

/**
 * The nodes whose last deployed copy of `file` (the deploy journal's last upload done) is not the
 * one the secrets file renders now: a rotation is waiting for its deploy there. Nodes never
 * deployed with the file (no upload in the journal) are not counted: they get the whole set at
 * their first deploy.
 */
export function undeployedNodes(all: Loaded, file: string): string[] {
  const journal = journalFileFor(all.inventoryFile);
  if (!existsSync(journal)) return [];
  const deployed = new Map<string, string>();
  for (const r of parseJournal(readFileSync(journal, 'utf8')))
    if (r.type === 'effect' && r.state === 'done' && r.effect.kind === EffectKind.UPLOAD && r.effect.target === file)
      deployed.set(r.effect.node, r.effect.hash);
  const out: string[] = [];
  for (const n of planOf(all).effective.nodes) {
    const now = n.configs.find((c) => c.dest === file)?.sha256;
    const then = deployed.get(n.name);
    if (now !== undefined && then !== undefined && then !== now) out.push(n.name);
  }
  return out;
}

/** The value of a setting for this cloud: the inventory's, else the release's, else the service's default. */
function settingOf(all: Loaded, name: string): unknown {
  return (
    all.loaded.inventory.cloud.settings?.[name] ??
    all.release.settings?.[name] ??
    all.catalog.settings.get(name)?.default
  );
}

/** Rotate one repository (under the run lock: the secrets file is read, rotated and replaced). */
function rotateOne(name: RotationName, opts: RotateOpts): void {
  const r = ROTATIONS[name];
  const all = loadAll(opts);
  printIssues(all.warnings.filter((w) => w.code !== 'W_NO_SECRETS'));
  const used = new Set(all.loaded.inventory.nodes.flatMap((n) => all.catalog.roles.get(n.role)!.services));
  const spec = secretSpecs(all.catalog, used).find((s) => s.name === r.repository && s.key_repository);
  if (!spec) {
    throw new InputError(
      'E_ROTATE_NOT_USED',
      `this cloud runs no service with key repository ${r.repository} (service ${r.service})`,
      { hint: `Only the keys of a service the inventory's roles run can be rotated; nothing was written.` },
    );
  }
  const waiting = opts.force ? [] : undeployedNodes(all, r.file);
  if (waiting.length) {
    throw new InputError(
      'E_ROTATE_NOT_DEPLOYED',
      `the previous rotation of ${r.repository} is not deployed on ${waiting.join(', ')} (the deploy journal has an older ${r.file} there)`,
      {
        hint:
          `Run 'stackctl deploy -i ${opts.inventory}' first: rotating again now would make the primary a key those nodes do not hold yet, ` +
          'and tokens they sign or validate would fail on the others. --force rotates anyway (when no Keystone runs on them). Nothing was written.',
      },
    );
  }
  const report = rotateKeyRepository(all.secretsFile, spec, Number(settingOf(all, r.maxActiveSetting)));
  out(
    `${all.secretsFile}: ${r.repository} rotated: staged key 0 promoted to ${report.primary} (the primary), ` +
      `new staged key 0` +
      (report.removed.length ? `, removed ${report.removed.join(', ')}` : '') +
      `; keys now ${report.after.join(' ')}\n`,
  );
  out(
    `Run 'stackctl deploy -i ${opts.inventory}' to roll the new keys out (it recreates the ${r.service} containers only); ` +
      'rotate again only after that deploy has finished.\n',
  );
}
