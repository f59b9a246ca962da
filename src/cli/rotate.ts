import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { InputError, RemoteError, UsageError } from '../core/errors.js';
import type { Secret } from '../core/secret.js';
import {
  formatUsage,
  keyEntry,
  keyIndices,
  keyUsage,
  refuseRetiringUsed,
  retiredByNextRotation,
  type KeyUsage,
} from '../inventory/key-repository.js';
import { rotateKeyRepository, type SecretSpec } from '../inventory/secrets.js';
import { openPool, remoteFor, type Shell } from '../remote/index.js';
import { credentialKeyDigest, credentialRowsByDigest, migrateCredentials } from './rotate-credentials.js';
import { EffectKind, journalFileFor, parseJournal } from '../orchestrator/journal.js';
import { secretSpecs } from '../roles/catalog.js';
import { loadAll, planOf, settingOf, type Loaded } from './context.js';
import { out, printIssues } from './output.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { withRunLock } from './run-lock.js';
import { stackctlScript } from '../core/paths.js';
import { minRotationPeriodS, parseSpan, SYSTEM_UNIT_DIR, timerUnitName, timerUnits } from './rotate-timer.js';

/** One key repository `stackctl rotate` can rotate. */
export interface Rotation {
  readonly description: string;
  /** The repository's name in the secrets file (entries `NAME_<index>`). */
  readonly repository: string;
  /** The service that declares it, and its container that holds the keys. */
  readonly service: string;
  readonly container: string;
  /** How many keys a rotation keeps: a setting of the cloud, or the number the service fixes. */
  readonly maxActive: { readonly setting: string } | { readonly fixed: number };
  /** The rendered file that carries the keys to the nodes. */
  readonly file: string;
  /**
   * What the keys encrypt at rest, when they do (Keystone's credentials): a rotation that would
   * drop a key still in use there is refused, and `--migrate` re-encrypts it all with the primary.
   */
  readonly encrypts?: 'keystone-credentials';
  /**
   * The setting of how long what the keys sign stays valid (seconds), when they sign something
   * that lives (Keystone's tokens): it bounds how often a timer may rotate them (`--timer`).
   */
  readonly lifetime?: { readonly setting: string };
}

/**
 * What `stackctl rotate WHAT` rotates (docs/tls.md, "Keystone key rotation"). One command per
 * repository rather than a `--kind` option: each has its own procedure (credential keys need
 * `--migrate` between rotations, token keys do not), and the name says which keys change.
 */
export const ROTATIONS = {
  'keystone-keys': {
    description: "Keystone's token keys: the staged key becomes the primary, a new staged key is made",
    repository: 'keystone_fernet_key',
    service: 'keystone',
    container: 'keystone',
    maxActive: { setting: 'keystone_fernet_max_active_keys' },
    file: '/etc/stackctl/keystone/fernet-keys.list',
    lifetime: { setting: 'keystone_token_expiration_s' },
  },
  'keystone-credential-keys': {
    description:
      "Keystone's credential encryption keys: the staged key becomes the primary, a new staged key is made, " +
      'refused while a credential is still encrypted with the key it would drop',
    repository: 'keystone_credential_key',
    service: 'keystone',
    container: 'keystone',
    // keystone.credential.providers.fernet.core.MAX_ACTIVE_KEYS: not a setting of Keystone's
    maxActive: { fixed: 3 },
    file: '/etc/stackctl/keystone/credential-keys.list',
    encrypts: 'keystone-credentials',
  },
} as const satisfies Record<string, Rotation>;
export type RotationName = keyof typeof ROTATIONS;

/** Side effects of the command (tests pass their own). */
export interface RotateDeps {
  /** A shell on one node of the inventory, closed by `close`. */
  readonly connect: (all: Loaded, node: string) => { shell: Shell; close: () => Promise<void> };
  /** `systemctl ARGS` when systemd manages this machine (undefined: it does not, e.g. in a container); asked only by `--timer`. */
  readonly systemctl: () => Systemctl | undefined;
}
type Systemctl = (args: readonly string[]) => Promise<void>;

/** The deploy host's systemd, when it runs (its runtime directory exists, as sd_booted(3) checks). */
export const hostSystemctl = (): Systemctl | undefined =>
  existsSync('/run/systemd/system')
    ? async (args) => {
        const r = spawnSync('systemctl', args, { encoding: 'utf8' });
        if (r.status !== 0) {
          throw new RemoteError(
            'E_ROTATE_TIMER_SYSTEMCTL',
            `systemctl ${args.join(' ')} failed: ${(r.stderr || r.error?.message || '').trim()}`,
            {
              hint: 'The unit files are written; see journalctl -xe, then run the command again.',
            },
          );
        }
      }
    : undefined;

/** `stackctl rotate keystone-keys|keystone-credential-keys`: one rotation of a key repository in the secrets file. */
export function registerRotate(
  program: Command,
  deps: RotateDeps = { connect: connectNode, systemctl: hostSystemctl },
): void {
  const rotate = program.command('rotate').description('rotate keys held in the secrets file (docs/tls.md)');
  for (const [name, r] of Object.entries(ROTATIONS) as [RotationName, Rotation][]) {
    const cmd = inventoryOptions(rotate.command(name))
      .description(
        `${r.description}; writes the secrets file once (mode 0600), prints key indices only; ` +
          "'stackctl deploy' then recreates the containers that read the keys",
      )
      .option('--force', 'rotate although the previous rotation is not deployed to every node (see docs/tls.md)');
    if (r.lifetime) {
      cmd
        .option(
          '--timer <every>',
          `instead of rotating now: install a systemd timer that rotates and deploys ${r.service} every <every> (12h, 7d, 2w; at least what the token lifetime needs); 'off' removes it`,
        )
        .option('--unit-dir <dir>', "where the timer's units are written", SYSTEM_UNIT_DIR);
    }
    if (r.encrypts) {
      cmd.option(
        '--migrate',
        'instead of rotating: once the rotation is deployed everywhere, re-encrypt every credential with the primary key (keystone-manage credential_migrate), so that the next rotation may drop the old key',
      );
    }
    cmd.action((opts: RotateOpts) =>
      opts.timer !== undefined
        ? timerOne(name, opts, deps)
        : withRunLock(opts.inventory, () =>
            opts.migrate ? migrateOne(name, opts, deps) : rotateOne(name, opts, deps),
          ),
    );
  }
}

type RotateOpts = CommonOpts & { force?: boolean; migrate?: boolean; timer?: string; unitDir?: string };

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

/** The SSH shell of one inventory node, by its provisioning address (as `status` reaches it). */
function connectNode(all: Loaded, node: string): { shell: Shell; close: () => Promise<void> } {
  const addresses = all.allocation.addresses.get(node) ?? {};
  const address = addresses['provisioning'] ?? Object.values(addresses)[0];
  if (!address) {
    throw new InputError('E_NODE_ADDRESS', `node ${node} has no address to reach it by SSH`, {
      hint: 'Give its role the provisioning network.',
    });
  }
  const pool = openPool(all.inventoryFile, { connectTimeoutMs: 10_000 });
  const remote = remoteFor(pool, { name: node, address });
  return {
    shell: remote,
    close: async () => {
      await remote.close().catch(() => undefined);
      await pool.close();
    },
  };
}

/** The repository's spec, when a service the inventory's roles run declares it (else E_ROTATE_NOT_USED). */
function specOf(all: Loaded, r: Rotation): SecretSpec {
  const used = new Set(all.loaded.inventory.nodes.flatMap((n) => all.catalog.roles.get(n.role)!.services));
  const spec = secretSpecs(all.catalog, used).find((s) => s.name === r.repository && s.key_repository);
  if (!spec) {
    throw new InputError(
      'E_ROTATE_NOT_USED',
      `this cloud runs no service with key repository ${r.repository} (service ${r.service})`,
      { hint: `Only the keys of a service the inventory's roles run can be rotated; nothing was written.` },
    );
  }
  return spec;
}

/** E_ROTATE_NOT_DEPLOYED when a node's deployed key list is not what the secrets file renders now. */
function refuseUndeployed(all: Loaded, r: Rotation, opts: RotateOpts, then: string): void {
  const waiting = undeployedNodes(all, r.file);
  if (!waiting.length) return;
  throw new InputError(
    'E_ROTATE_NOT_DEPLOYED',
    `the previous rotation of ${r.repository} is not deployed on ${waiting.join(', ')} (the deploy journal has an older ${r.file} there)`,
    {
      hint: `Run 'stackctl deploy -i ${opts.inventory}' first: ${then}`,
    },
  );
}

/** The repository's keys in the loaded secrets file, by index (values stay in this process). */
function keysOf(all: Loaded, repository: string): Map<number, string> {
  const services = all.secrets?.services ?? new Map<string, Secret>();
  return new Map(
    keyIndices(repository, services.keys()).map((i) => [i, services.get(keyEntry(repository, i))!.reveal()]),
  );
}

/** The first node of the plan that runs the repository's container, and its shell. */
async function onKeyNode<T>(all: Loaded, r: Rotation, deps: RotateDeps, fn: (shell: Shell) => Promise<T>): Promise<T> {
  const node = planOf(all).effective.nodes.find((n) =>
    n.containers.some((c) => c.service === r.service && c.name === r.container),
  );
  if (!node) {
    throw new InputError('E_ROTATE_NOT_USED', `no node of this cloud runs the ${r.container} container`, {
      hint: 'Nothing was written.',
    });
  }
  const { shell, close } = deps.connect(all, node.name);
  try {
    return await fn(shell);
  } finally {
    await close();
  }
}

/** How many credentials each key of `keys` encrypts, read on a Keystone node. */
async function credentialUsage(shell: Shell, r: Rotation, keys: ReadonlyMap<number, string>): Promise<KeyUsage> {
  return keyUsage(keys, await credentialRowsByDigest(shell, r.container), credentialKeyDigest);
}

/** Rotate one repository (under the run lock: the secrets file is read, rotated and replaced). */
async function rotateOne(name: RotationName, opts: RotateOpts, deps: RotateDeps): Promise<void> {
  const r: Rotation = ROTATIONS[name];
  const all = loadAll(opts);
  printIssues(all.warnings.filter((w) => w.code !== 'W_NO_SECRETS'));
  const spec = specOf(all, r);
  if (!opts.force) {
    refuseUndeployed(
      all,
      r,
      opts,
      'rotating again now would make the primary a key those nodes do not hold yet, ' +
        'and tokens they sign or validate would fail on the others. --force rotates anyway (when no Keystone runs on them). Nothing was written.',
    );
  }
  const maxActive = 'fixed' in r.maxActive ? r.maxActive.fixed : Number(settingOf(all, r.maxActive.setting));
  let checked = '';
  if (r.encrypts && all.secrets) {
    // Keystone's credential_rotate refuses while a credential is not on the primary key; this
    // refuses exactly when one is encrypted with a key this rotation drops (it could never be read again).
    const keys = keysOf(all, r.repository);
    const retired = retiredByNextRotation(r.repository, keys, maxActive);
    if (retired.length) {
      const usage = await onKeyNode(all, r, deps, (shell) => credentialUsage(shell, r, keys));
      refuseRetiringUsed(
        r.repository,
        retired,
        usage,
        'credential(s)',
        `Deploy the last rotation first ('stackctl deploy -i ${opts.inventory}'): once every node holds its keys, the deploy ` +
          're-encrypts every credential with the primary key (keystone-manage credential_migrate; ' +
          `'stackctl rotate ${name} --migrate -i ${opts.inventory}' does only that); then rotate. Nothing was written.`,
      );
      checked = `; ${formatUsage(usage, 'credentials')}, none on the key dropped`;
    }
  }
  const report = rotateKeyRepository(all.secretsFile, spec, maxActive);
  out(
    `${all.secretsFile}: ${r.repository} rotated: staged key 0 promoted to ${report.primary} (the primary), ` +
      `new staged key 0` +
      (report.removed.length ? `, removed ${report.removed.join(', ')}` : '') +
      `; keys now ${report.after.join(' ')}${checked}\n`,
  );
  out(
    `Run 'stackctl deploy -i ${opts.inventory}' to roll the new keys out (it recreates the ${r.service} containers only); ` +
      (r.encrypts
        ? 'the deploy then re-encrypts every credential with the new primary (a Keystone task), so the next rotation may drop ' +
          `the oldest key; 'stackctl rotate ${name} --migrate -i ${opts.inventory}' does that step alone and checks it.\n`
        : 'rotate again only after that deploy has finished.\n'),
  );
}

/**
 * `--migrate`: once the rotated keys are deployed on every node, re-encrypt every credential with
 * the primary key (keystone-manage credential_migrate, once, on one controller: they share the
 * database), and check that none is left on another key.
 */
async function migrateOne(name: RotationName, opts: RotateOpts, deps: RotateDeps): Promise<void> {
  const r: Rotation = ROTATIONS[name];
  const all = loadAll(opts);
  printIssues(all.warnings.filter((w) => w.code !== 'W_NO_SECRETS'));
  specOf(all, r);
  refuseUndeployed(
    all,
    r,
    opts,
    'a node without the new primary key could not decrypt the credentials re-encrypted with it. Nothing was changed.',
  );
  const keys = keysOf(all, r.repository);
  const primary = Math.max(...keys.keys());
  await onKeyNode(all, r, deps, async (shell) => {
    const before = await credentialUsage(shell, r, keys);
    await migrateCredentials(shell, r.container);
    const after = await credentialUsage(shell, r, keys);
    out(
      `${shell.node}: keystone-manage credential_migrate: ${formatUsage(before, 'credentials')} before; ${formatUsage(after, 'credentials')} now\n`,
    );
    const off = [...after.byIndex].filter(([i]) => i !== primary).reduce((n, [, c]) => n + c, after.unknown);
    if (off) {
      throw new RemoteError(
        'E_CREDENTIAL_MIGRATE',
        `${off} credential(s) are still not encrypted with the primary key ${primary} after credential_migrate on ${shell.node}`,
        {
          hint: `The ${r.container} container there may hold older keys than the secrets file: run 'stackctl deploy -i ${opts.inventory}', then --migrate again.`,
        },
      );
    }
  });
}

/** A period in words: `2 d 1 h`, `7 d`. */
function inWords(seconds: number): string {
  const d = Math.floor(seconds / 86_400);
  const h = Math.ceil((seconds % 86_400) / 3600);
  return [d ? `${d} d` : '', h ? `${h} h` : ''].filter(Boolean).join(' ') || '0 h';
}

/**
 * `--timer EVERY|off`: install (or remove) the systemd timer that rotates the repository and
 * deploys its service every EVERY. Refused, with nothing written, when EVERY is shorter than
 * the keys must live (E_ROTATE_TIMER_TOO_OFTEN). Enabled at once when systemd runs here; else
 * the commands that enable it are printed.
 */
async function timerOne(name: RotationName, opts: RotateOpts, deps: RotateDeps): Promise<void> {
  const r: Rotation = ROTATIONS[name];
  const all = loadAll(opts);
  printIssues(all.warnings.filter((w) => w.code !== 'W_NO_SECRETS'));
  specOf(all, r);
  const cloud = all.loaded.inventory.cloud.name;
  const dir = opts.unitDir ?? SYSTEM_UNIT_DIR;
  const unit = timerUnitName(name, cloud);
  const files = [join(dir, `${unit}.service`), join(dir, `${unit}.timer`)];
  const systemctl = dir === SYSTEM_UNIT_DIR ? deps.systemctl() : undefined;
  if (opts.timer === 'off') {
    if (systemctl && files.some((f) => existsSync(f))) await systemctl(['disable', '--now', `${unit}.timer`]);
    for (const f of files) rmSync(f, { force: true });
    if (systemctl) await systemctl(['daemon-reload']);
    out(`${unit}.timer removed (${files.join(', ')})${systemctl ? ', systemd reloaded' : ''}\n`);
    return;
  }
  const everyS = parseSpan(opts.timer!);
  const maxActive = 'fixed' in r.maxActive ? r.maxActive.fixed : Number(settingOf(all, r.maxActive.setting));
  const lifetimeS = Number(settingOf(all, r.lifetime!.setting));
  const minS = minRotationPeriodS(lifetimeS, maxActive);
  if (everyS < minS) {
    const setting = 'setting' in r.maxActive ? r.maxActive.setting : 'max_active_keys';
    throw new UsageError(
      'E_ROTATE_TIMER_TOO_OFTEN',
      `rotating ${r.repository} every ${inWords(everyS)} would drop keys that live tokens were signed with: ` +
        (minS === Infinity
          ? `with ${setting} ${maxActive} every rotation drops the key that signed the tokens in use`
          : `with ${setting} ${maxActive}, a token lifetime of ${lifetimeS} s and Keystone's allow-expired window of 2 d, ` +
            `the period must be at least ${inWords(minS)}`),
      {
        hint:
          `Rotate less often (--timer ${Math.ceil(minS === Infinity ? 7 : minS / 86_400)}d), or keep more keys ` +
          `(cloud.settings.${setting}: each key kept allows one more rotation per token lifetime). Nothing was written.`,
      },
    );
  }
  const extra = (['secrets', 'roles', 'releases'] as const).flatMap((o) =>
    opts[o] ? [`--${o}`, resolve(opts[o])] : [],
  );
  const units = timerUnits({
    rotation: name,
    service: r.service,
    cloud,
    everyS,
    node: process.execPath,
    bin: realpathSync(stackctlScript()),
    inventory: resolve(opts.inventory),
    extra,
    user: userInfo().username,
  });
  mkdirSync(dir, { recursive: true });
  writeFileSync(files[0]!, units.service, { mode: 0o644 });
  writeFileSync(files[1]!, units.timer, { mode: 0o644 });
  out(`${files.join(', ')} written: rotate ${name} then deploy ${r.service}, every ${inWords(everyS)}\n`);
  if (systemctl) {
    await systemctl(['daemon-reload']);
    await systemctl(['enable', '--now', `${unit}.timer`]);
    out(`${unit}.timer enabled and started ('systemctl list-timers ${unit}.timer' shows the next run)\n`);
  } else {
    out(
      dir === SYSTEM_UNIT_DIR
        ? `systemd does not manage this machine: where it does, run 'systemctl daemon-reload && systemctl enable --now ${unit}.timer'\n`
        : `not enabled (units written outside ${SYSTEM_UNIT_DIR}): install them and run 'systemctl enable --now ${unit}.timer'\n`,
    );
  }
}
