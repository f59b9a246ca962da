/**
 * A rolling update on a 1ctl-2comp container lab with TLS on (the cloud's CA, HTTPS on the public
 * VIP): the whole cloud deployed with the zed images, four servers booted, then `stackctl upgrade
 * --to zed-update --batch 1` while a probe asks for a Keystone token and Nova's server list through
 * the public VIP over https:// (verified against the CA) every 100 ms. The upgrade is killed
 * (SIGKILL) twice and resumed: in the middle of the first DB-migration window, while its
 * migration runs (after a first run whose migration failed in that window), and in the middle
 * of the first compute batch, while a live migration is under way. Between the two kills, one
 * resumed run gives the first batch's live migrations a deadline shorter than they last (the
 * lab's slow fake driver): Nova must abort them, the servers stay ACTIVE on their source, that
 * compute is not upgraded and the report says so. The update must
 * leave every OpenStack container on its new tag, the servers ACTIVE, the inventory naming
 * zed-update, no action, batch or migration done twice, and no failed probe outside the declared
 * windows. `npm run test:e2e:upgrade`.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import { runUpgrade } from '../../src/cli/upgrade.js';
import { defaultReleasesDir } from '../../src/core/paths.js';
import { catalog } from '../helpers/plan.js';
import { LABEL } from '../../src/orchestrator/state.js';
import { journalFileFor, parseJournal } from '../../src/orchestrator/journal.js';
import type { UpgradeAction } from '../../src/upgrade/model.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { openstack, openstackJson } from '../helpers/openstack.js';
import { CLOUD_IMAGES, deployLab, dueRows } from '../orchestrator/lab.js';
import {
  buildTargetImages,
  containersOffTarget,
  evacuationFaults,
  events as inventoryEvents,
  killDuringMigration,
  type MigrationRecord,
  phaseTimes,
  probeFigures,
  spawnUpgrade,
  startProbe,
  upgradePlan,
} from './lab-upgrade.js';

const REGISTRY_PORT = 15041;
const lab = deployLab('upgrade', '10.87', 40, { topology: '1ctl-2comp', registryPort: REGISTRY_PORT, bmcPort: 16330 });
const os = openstackJson;
const events = (): ReturnType<typeof inventoryEvents> => inventoryEvents(lab.inventory);
/** The public VIP, where HAProxy serves TLS; the probe goes through it. */
const PUBLIC_VIP = `${lab.prefix}.10.250`;
const PROBE = 'stackctl-upgrade-probe';
/** The cloud's CA, as `certs generate` writes it beside the inventory (known once the lab is up). */
const caFile = (): string => lab.inventory.replace(/\.yaml$/, '.certs/ca.pem');
const SERVERS = ['srv-0', 'srv-1', 'srv-2', 'srv-3'];
const temps: string[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** How long a live migration lasts with the lab's slow fake driver (stackctl_lab.SlowLiveMigrateDriver). */
const MIGRATION_S = 30;

/** One statement in the lab's MariaDB as its administrator; the rows, tab-separated, one per line. */
async function keystoneSql(statement: string): Promise<string> {
  const { container, client } = catalog.provides.database!;
  const r = await lab.remote('ctl-0').docker.exec(container, [...client, '-N', '-e', statement]);
  if (r.code !== 0) throw new Error(`${statement}: ${r.stderr}`);
  return r.stdout.trim();
}

/** Rewrite the lab's inventory: `edit` gets its text and returns the new one, which must differ. */
function editInventory(edit: (text: string) => string): void {
  const text = readFileSync(lab.inventory, 'utf8');
  const next = edit(text);
  if (next === text) throw new Error(`editInventory: nothing changed in ${lab.inventory}`);
  writeFileSync(lab.inventory, next);
}

describe('stackctl upgrade --to zed-update on a 1ctl-2comp lab, under a probe', () => {
  let openrc = '';

  beforeAll(async () => {
    await lab.up(CLOUD_IMAGES);
    // Live migrations that last, so that one can outlive its deadline and be aborted.
    editInventory((t) =>
      t.replace(
        '    nova_virt_type: qemu\n',
        '    nova_virt_type: qemu\n' +
          '    nova_fake_driver_class: stackctl_lab.SlowLiveMigrateDriver\n' +
          `    nova_fake_migration_s: ${MIGRATION_S}\n`,
      ),
    );
    // TLS on from the first deploy: the cloud's CA and certificates, HTTPS on the public VIP
    await lab.tlsOn('tls: {}\n');
    const s = await buildTargetImages(REGISTRY_PORT);
    process.stderr.write(`zed-update images built and pushed in ${s.toFixed(1)} s\n`);
  }, 3_600_000);
  afterAll(async () => {
    execFileSync('docker', ['rm', '-f', PROBE], { stdio: 'ignore' });
    for (const d of temps) rmSync(d, { recursive: true, force: true });
    await lab.down();
  }, 300_000);

  it('deploys the whole zed cloud and boots four servers', async () => {
    const { report, text } = await lab.deploy();
    expect(report?.ok, text).toBe(true);
    const dir = tempDir('stackctl-openrc-');
    temps.push(dir);
    openrc = join(dir, 'admin.openrc');
    expect((await runCli('openrc', '-i', lab.inventory, '-o', openrc)).code).toBe(0);
    expect(readFileSync(openrc, 'utf8')).toMatch(/^export OS_AUTH_URL='https:\/\//m);
    expect(readFileSync(openrc, 'utf8')).toContain(`export OS_CACERT='${caFile()}'`);
    for (const name of SERVERS) {
      const s = os<{ status: string }>(
        openrc,
        `--os-compute-api-version 2.37 server create --flavor m1.tiny --image lab-tiny --nic none --wait ${name}`,
      );
      expect(s.status).toBe('ACTIVE');
    }
  }, 2_400_000);

  it('refuses and changes nothing: an image not built (before the run), no room to evacuate a batch (the prechecks)', async () => {
    const docker = (node: string) => lab.remote(node).docker;
    /** Every container of the cloud: its ID and when it started (a restart or a swap changes them). */
    const containers = async (): Promise<string[]> => {
      const out: string[] = [];
      for (const node of lab.nodes())
        for (const c of await docker(node).listContainers({ labels: { [LABEL.cloud]: 'upgrade' } })) {
          const i = await docker(node).inspectContainer(c.name);
          out.push(`${node}/${c.name} ${i?.id} ${i?.state.startedAt}`);
        }
      return out.sort();
    };
    type Svc = { Binary: string; Host: string; Status: string };
    const computes = () =>
      os<Svc[]>(openrc, 'compute service list')
        .filter((r) => r.Binary === 'nova-compute')
        .map((r) => `${r.Host} ${r.Status}`)
        .sort();
    await lab.reconnect();
    const before = await containers();
    const enabled = computes();
    expect(enabled.every((c) => c.endsWith(' enabled'))).toBe(true);

    // A manifest naming an image that was never built: refused when its tags are pinned, before a
    // run is opened or a precheck runs (an input error, exit 3); the prechecks' image check catches
    // a pinned digest that is gone.
    const releases = tempDir('stackctl-releases-');
    temps.push(releases);
    for (const f of readdirSync(defaultReleasesDir())) copyFileSync(join(defaultReleasesDir(), f), join(releases, f));
    writeFileSync(
      join(releases, 'zed-unbuilt.yaml'),
      readFileSync(join(releases, 'zed-update.yaml'), 'utf8')
        .replace('name: zed-update', 'name: zed-unbuilt')
        .replace('keystone: { tag: zed-2', 'keystone: { tag: zed-9'),
    );
    const unbuilt = await runCli('upgrade', '-i', lab.inventory, '--releases', releases, '--to', 'zed-unbuilt');
    const out1 = unbuilt.stdout + unbuilt.stderr;
    expect(unbuilt.code, out1).toBe(3);
    expect(out1).toMatch(/E_IMAGE_NOT_IN_REGISTRY/);
    expect(out1).toMatch(/keystone:zed-9/);
    expect(out1).toMatch(/Nothing was stopped/);

    // Two servers of 700,000 MiB, one on each compute (the fake driver has 800,000 at a ratio of 1.5):
    // neither compute can take the other's, so no batch can be evacuated.
    // (the admin project's default RAM quota, 50 GiB, would refuse them first)
    openstack(openrc, 'quota set --ram -1 admin');
    os(openrc, 'flavor create --ram 700000 --vcpus 1 --disk 0 m1.huge');
    const big = ['big-0', 'big-1'].map((name) =>
      os<{ status: string; 'OS-EXT-SRV-ATTR:host': string }>(
        openrc,
        `--os-compute-api-version 2.37 server create --flavor m1.huge --image lab-tiny --nic none --wait ${name}`,
      ),
    );
    expect(big.map((b) => b.status)).toEqual(['ACTIVE', 'ACTIVE']);
    expect(new Set(big.map((b) => b['OS-EXT-SRV-ATTR:host'])).size, 'the scheduler put both on one compute').toBe(2);
    const noRoom = await runCli('upgrade', '-i', lab.inventory, '--to', 'zed-update', '--batch', '1');
    const out2 = noRoom.stdout + noRoom.stderr;
    expect(noRoom.code, out2).toBe(5);
    expect(out2).toMatch(/E_EVACUATION_CAPACITY/);
    expect(out2).toMatch(/MiB memory/);
    expect(out2).toMatch(/REFUSED by the prechecks, nothing was changed/);
    process.stderr.write(
      `refusals:\n${[out1, out2]
        .map((o) =>
          o
            .split('\n')
            .filter((l) => /E_[A-Z_]+/.test(l))
            .join('\n'),
        )
        .join('\n')}\n`,
    );

    // Nothing stopped, restarted or disabled; no live migration was requested.
    await lab.reconnect();
    expect(await containers()).toEqual(before);
    expect(computes()).toEqual(enabled);
    expect(
      os<{ Type: string }[]>(openrc, '--os-compute-api-version 2.59 server migration list').filter(
        (m) => m.Type === 'live-migration',
      ),
    ).toEqual([]);
    openstack(openrc, 'server delete --wait big-0 big-1');
    openstack(openrc, 'flavor delete m1.huge');
  }, 1_800_000);

  it('updates every OpenStack container through two kills and a timed-out migration, keeps the servers ACTIVE and the APIs answering', async () => {
    // The phases in which the plan itself declares an API down (offline migration windows, a service on one node).
    const plan = await upgradePlan(lab.inventory, ['--to', 'zed-update', '--batch', '1']);
    const declared = plan.declared;
    process.stderr.write(`phases with a declared API outage: ${declared.join(', ') || 'none'}\n`);
    // the first DB-migration window, and the one-off container its migration runs in
    const window = plan.phases.find((p) => p.availability === 'window');
    const dbMigration = window?.steps
      .flatMap((s) => s.actions)
      .find((a): a is Extract<UpgradeAction, { kind: 'migrate' }> => a.kind === 'migrate');
    expect(dbMigration, 'the plan has no offline migration window to kill the upgrade in').toBeDefined();
    const oneOff = `stackctl-upgrade-${dbMigration!.service}-${dbMigration!.stage}`;
    // where each server is before anything moves
    type Row = { ID: string; Name: string; Status: string; Host: string };
    const before = os<Row[]>(openrc, 'server list --all-projects --long');
    expect(before.map((r) => r.Status)).toEqual(SERVERS.map(() => 'ACTIVE'));
    const journalFile = journalFileFor(lab.inventory);
    const probe = startProbe(lab.inventory, PUBLIC_VIP, PROBE, temps, caFile());
    await sleep(3000); // a few probes before anything moves
    const t0 = Date.now();

    // A migration that fails: Keystone's schema names a revision Keystone does not know (its
    // alembic_version rows altered; Keystone's APIs never read them), so the window's
    // `keystone-manage db_sync` fails. The run must stop in that window with Keystone's containers
    // stopped and its backup taken and named; once the rows are back, --resume runs it again.
    expect(dbMigration!.service).toBe('keystone');
    const heads = (await keystoneSql('SELECT version_num FROM keystone.alembic_version ORDER BY 1')).split('\n');
    expect(heads.length, 'keystone has no alembic heads').toBeGreaterThan(0);
    await keystoneSql("UPDATE keystone.alembic_version SET version_num = CONCAT('gone', version_num)");
    const failing = spawnUpgrade(lab.inventory, ['--to', 'zed-update', '--batch', '1']);
    const failingCode = await failing.exited;
    const failedOut = failing.out();
    expect(failingCode, failedOut).toBe(5);
    expect(failedOut).toMatch(new RegExp(`FAILED ${window!.id} .*E_MIGRATION_FAILED`));
    expect(failedOut).toMatch(/locate revision/); // alembic's own words, from the migration's log
    const inWindow = /keystone containers: ([^\n]*)/.exec(failedOut)?.[1] ?? '';
    // stopped and removed for the window: the report names the release each one ran and the target's
    expect(inWindow, failedOut).toMatch(
      /\/keystone absent \(current release \S+\/keystone:zed-1(@sha256:[0-9a-f]{64})?, target \S+\/keystone:zed-2(@sha256:[0-9a-f]{64})?\)/,
    );
    expect(inWindow).not.toMatch(/running/);
    const saved = /The backup taken before it is (\S+?):(\S+)\. /.exec(failedOut);
    expect(saved, failedOut).not.toBeNull();
    const gz = await lab.remote(saved![1]!).exec(['gzip', '-t', saved![2]!], { timeoutMs: 60_000 });
    expect(gz.code, `the backup ${saved![0]} is not a whole gzip file: ${gz.stderr}`).toBe(0);
    process.stderr.write(
      `failed migration after ${((Date.now() - t0) / 1000).toFixed(1)} s:\n${failedOut
        .split('\n')
        .filter((l) => /E_MIGRATION_FAILED|hint: The backup/.test(l))
        .join('\n')}\n`,
    );
    await keystoneSql('UPDATE keystone.alembic_version SET version_num = SUBSTRING(version_num, 5)');
    expect((await keystoneSql('SELECT version_num FROM keystone.alembic_version ORDER BY 1')).split('\n')).toEqual(
      heads,
    );

    // Kill 1: in the DB-migration window, while the migration's container runs if it can be caught.
    const run1 = spawnUpgrade(lab.inventory, ['--to', 'zed-update', '--resume']);
    let caught = false;
    const migrationDone = (): boolean =>
      parseJournal(readFileSync(journalFile, 'utf8')).some(
        (r) =>
          r.type === 'action' && r.state === 'done' && r.key.startsWith(`${window!.id}#`) && / migrate /.test(r.key),
      );
    for (let deadline = Date.now() + 1_800_000; Date.now() < deadline; await sleep(100)) {
      const info = await lab
        .remote(dbMigration!.node)
        .docker.inspectContainer(oneOff)
        .catch(() => undefined);
      if (info?.state.running) {
        caught = true;
        break;
      }
      if (existsSync(journalFile) && migrationDone()) break;
      if ((await Promise.race([run1.exited.then(() => true), sleep(0).then(() => false)])) === true) break;
    }
    run1.child.kill('SIGKILL');
    expect(await run1.exited, run1.out()).toBeNull(); // died of the signal, not of an error
    process.stderr.write(
      `kill 1 in ${window!.id} after ${((Date.now() - t0) / 1000).toFixed(1)} s: ` +
        `${caught ? `while ${oneOff} ran` : 'after its migration ended'}\n`,
    );

    // A live migration that times out: the first batch's migrations get a 3 s deadline and last 30 s.
    // Nova must abort them: the servers stay ACTIVE on their source, that compute keeps its old
    // nova_compute, and the run fails saying so.
    editInventory((t) =>
      t.replace(
        '  pull: { concurrency: 1 }\n',
        '  pull: { concurrency: 1 }\n  evacuation: { timeout_s: 3, poll_s: 1 }\n',
      ),
    );
    const tTimed = Date.now();
    const timed = spawnUpgrade(lab.inventory, ['--to', 'zed-update', '--resume']);
    const timedCode = await timed.exited;
    const timedOut = timed.out();
    expect(timedCode, timedOut).toBe(5);
    const firstBatch = plan.phases.find((p) => p.kind === 'batches')!;
    const batchHosts = [
      ...new Set(firstBatch.steps.flatMap((st) => st.actions.flatMap((a) => (a.kind === 'ensure' ? [a.node] : [])))),
    ];
    expect(batchHosts.length, 'the first batch upgrades one compute').toBe(1);
    const [held] = batchHosts;
    expect(timedOut).toMatch(/E_EVACUATION_FAILED/);
    expect(timedOut).toMatch(new RegExp(`not upgraded: ${held}\\b`));
    expect(timedOut).toMatch(/timeout: still MIGRATING/);
    expect(timedOut).toMatch(/aborted: ACTIVE on [^,]+, its source/);
    process.stderr.write(
      `timed-out run in ${((Date.now() - tTimed) / 1000).toFixed(1)} s:\n${timedOut
        .split('\n')
        .filter((l) => /E_EVACUATION_FAILED|not upgraded|failure budget/.test(l))
        .join('\n')}\n`,
    );
    // Nova cancelled what it had started; the servers are ACTIVE where they were; the compute runs
    // its old nova_compute and is enabled again.
    await lab.reconnect();
    const cancelled = os<MigrationRecord[]>(openrc, '--os-compute-api-version 2.59 server migration list').filter(
      (m) => m.Type === 'live-migration' && Date.parse(m['Created At'].replace(' ', 'T') + 'Z') >= tTimed - 2000,
    );
    expect(cancelled.length, 'no live migration was requested').toBeGreaterThan(0);
    expect(cancelled.map((m) => `${m['Source Compute']} ${m.Status}`)).toEqual(
      cancelled.map(() => `${held} cancelled`),
    );
    const afterTimed = os<Row[]>(openrc, 'server list --all-projects --long');
    expect(afterTimed.map((r) => `${r.Name} ${r.Status} ${r.Host}`).sort()).toEqual(
      before.map((r) => `${r.Name} ACTIVE ${r.Host}`).sort(),
    );
    const heldCompute = await lab.remote(held!).docker.inspectContainer('nova_compute');
    expect(heldCompute?.image, `${held}'s nova_compute was replaced`).toMatch(
      /\/nova-compute:zed-1(@sha256:[0-9a-f]{64})?$/,
    );
    const heldService = os<{ Binary: string; Host: string; Status: string }[]>(openrc, 'compute service list').find(
      (r) => r.Binary === 'nova-compute' && r.Host === held,
    );
    expect(heldService?.Status).toBe('enabled');
    editInventory((t) => t.replace('  evacuation: { timeout_s: 3, poll_s: 1 }\n', ''));
    const tRetry = Date.now();

    // Kill 2: in the first compute batch, a few seconds after a live migration was requested.
    const seen = events().length;
    const run2 = spawnUpgrade(lab.inventory, ['--to', 'zed-update', '--resume']);
    expect(await killDuringMigration(lab.inventory, run2, seen), run2.out()).toBeNull();
    const inFlight = os<{ Name: string; Status: string }[]>(openrc, 'server list --all-projects').filter(
      (r) => r.Status === 'MIGRATING',
    );
    process.stderr.write(
      `kill 2 after ${((Date.now() - t0) / 1000).toFixed(1)} s, live migrations under way: ` +
        `${inFlight.map((r) => r.Name).join(', ') || 'none'}\n`,
    );

    // The last run, in this process, goes on to the end.
    let text = '';
    const report = await runUpgrade(
      { inventory: lab.inventory, to: 'zed-update', resume: true },
      { write: (t) => void (text += t), tty: false },
    );
    const upgradeS = (Date.now() - t0) / 1000;
    await sleep(3000);
    const probes = probe.stop();
    expect(report?.outcome, text).toBe('done');

    // the inventory names the new release; every OpenStack container runs its zed-2 tag
    expect(loadAll({ inventory: lab.inventory }).loaded.inventory.cloud.release).toBe('zed-update');
    // the SSH connections cached since lab up may have died meanwhile: ask over fresh ones
    await lab.reconnect();
    expect(await containersOffTarget(lab, 'upgrade')).toEqual([]);
    const servers = os<{ Name: string; Status: string }[]>(openrc, 'server list --all-projects');
    expect(servers.map((s) => `${s.Name} ${s.Status}`).sort()).toEqual(SERVERS.map((s) => `${s} ACTIVE`));

    // One run, started once and resumed twice; every action done exactly once, the cut migration waited for.
    const records = parseJournal(readFileSync(journalFile, 'utf8'));
    // the run refused at the prechecks was closed; this one was started once and resumed twice
    const mainRun = records
      .filter((r) => r.type === 'run.start' && r.command === 'upgrade' && r.mode === 'new')
      .at(-1)!.run;
    // (the journal is the deploy's too: the lab's first deploy is a run of its own, ended well)
    const upgradeRuns = new Set(
      records.filter((r) => r.type === 'run.start' && r.command === 'upgrade').map((r) => r.run),
    );
    const earlier = new Set(records.filter((r) => r.run !== mainRun && upgradeRuns.has(r.run)).map((r) => r.run));
    const refusedRuns = records.filter((r) => r.type === 'run.end' && !r.ok).map((r) => r.run);
    expect([...earlier].sort()).toEqual([...refusedRuns].sort());
    const journal = records.filter((r) => r.run === mainRun);
    const starts = journal.filter((r) => r.type === 'run.start');
    expect(starts.map((r) => r.type === 'run.start' && r.mode)).toEqual([
      'new',
      'resume',
      'resume',
      'resume',
      'resume',
    ]);
    expect(journal.filter((r) => r.type === 'run.end').map((r) => r.type === 'run.end' && r.ok)).toEqual([true]);
    const doneCount = new Map<string, number>();
    for (const r of journal)
      if (r.type === 'action' && r.state === 'done') doneCount.set(r.key, (doneCount.get(r.key) ?? 0) + 1);
    expect([...doneCount].filter(([, n]) => n !== 1)).toEqual([]);
    expect([...doneCount.keys()].filter((k) => / (swap|migrate) /.test(k)).length).toBeGreaterThan(0);
    const cut = journal.find(
      (r) => r.type === 'action' && r.state === 'done' && r.key.startsWith(`${window!.id}#`) && / migrate /.test(r.key),
    );
    // caught running, it was either waited for or found ended well by the resumed run: never run twice
    process.stderr.write(`the cut migration: ${cut?.type === 'action' ? cut.detail : '?'}\n`);
    if (caught) expect(cut?.type === 'action' && cut.detail).toMatch(/started before the kill.*not run again/);

    // every server left its compute (a completed live migration) before that compute's container was replaced,
    // and no live migration was requested twice
    const migrations = os<MigrationRecord[]>(openrc, '--os-compute-api-version 2.59 server migration list');
    const live = migrations.filter((m) => m.Type === 'live-migration');
    process.stderr.write(
      `Nova's live migrations: ${live.map((m) => `${m['Server UUID'].slice(0, 8)} ${m['Source Compute']} ${m.Status}`).join('; ')}\n`,
    );
    expect(live.length).toBeGreaterThan(0);
    // (the timed-out run's migrations were cancelled, as checked above: only those after it count)
    expect(await evacuationFaults(lab, before, migrations, tRetry)).toEqual([]);

    // probes: none failed outside the declared windows (offline migrations: the API is down by design)
    const figures = probeFigures(probes, phaseTimes(lab.inventory, t0), declared);
    process.stderr.write(`upgrade ${upgradeS.toFixed(1)} s (two kills and resumes); ${figures.text}`);
    expect(probes.length).toBeGreaterThan(20);
    expect(figures.failedOutside.map((p) => new Date(p.at).toISOString())).toEqual([]);
  }, 3_600_000);

  it('still serves the public endpoints over TLS with the same certificate, verified against the CA', () => {
    const served = execFileSync(
      'sh',
      [
        '-c',
        `openssl s_client -connect ${PUBLIC_VIP}:5000 -verify_return_error -CAfile ${caFile()} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256`,
      ],
      { encoding: 'utf8' },
    ).trim();
    const file = execFileSync(
      'openssl',
      ['x509', '-noout', '-fingerprint', '-sha256', '-in', caFile().replace(/ca\.pem$/, 'public.pem')],
      {
        encoding: 'utf8',
      },
    ).trim();
    expect(served).toBe(file);
    const publicUrls = os<{ URL: string }[]>(openrc, 'endpoint list --interface public').map((e) => e.URL);
    expect(publicUrls.length).toBeGreaterThan(4);
    expect(publicUrls.filter((u) => !u.startsWith(`https://${PUBLIC_VIP}:`))).toEqual([]);
  });

  it("leaves nothing for a deploy to do: the upgrade ran the deploy's tasks with the new images", async () => {
    const dry = await runCli('deploy', '-i', lab.inventory, '--dry-run');
    expect(dry.code, dry.stderr).toBe(0);
    expect(dueRows(dry.stdout)).toEqual([]);
    expect(dry.stdout).toMatch(/dry run: 0 change\(s\) predicted/);
  }, 600_000);
});
