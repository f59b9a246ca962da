/**
 * A major upgrade that skips four releases, on a 1ctl-1comp container lab: the whole zed cloud
 * (Debian bookworm) deployed, a server booted and a token issued, then
 * `stackctl upgrade --to epoxy --fast-forward` (OpenStack 2025.1 from Debian trixie). The run is
 * killed (SIGKILL) inside the first migration window, while its migration runs if it can be
 * caught, and resumed. The upgrade must leave every container on its epoxy tag, the Keystone,
 * Glance, Placement, Neutron and Nova databases migrated (their schema versions moved), the token
 * issued before it still valid (the fernet keys are carried over), the server ACTIVE, a new server
 * bootable, and no action done twice. Each window's duration is printed.
 * `npm run test:e2e:major`.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import { runUpgrade } from '../../src/cli/upgrade.js';
import { defaultReleasesDir } from '../../src/core/paths.js';
import { loadRelease } from '../../src/roles/release.js';
import { journalFileFor, parseJournal } from '../../src/orchestrator/journal.js';
import type { UpgradeAction } from '../../src/upgrade/model.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { openstack, openstackJson } from '../helpers/openstack.js';
import { CLOUD_IMAGES, deployLab } from '../orchestrator/lab.js';
import {
  buildTargetImages,
  containersOffTarget,
  phaseTimes,
  probeFigures,
  spawnUpgrade,
  startProbe,
  upgradePlan,
} from './lab-upgrade.js';

const EPOXY = loadRelease(defaultReleasesDir(), 'epoxy');
const REGISTRY_PORT = 15061;
const lab = deployLab('major', '10.98', 60, { topology: '1ctl-1comp', registryPort: REGISTRY_PORT, bmcPort: 16430 });
const os = openstackJson;
const VIP = `${lab.prefix}.20.250`;
const PROBE = 'stackctl-major-probe';
const temps: string[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The databases whose schema the upgrade must move. */
const DATABASES = ['keystone', 'glance', 'placement', 'neutron', 'nova_api', 'nova', 'nova_cell0'];

/** Each database's schema version (alembic heads, or sqlalchemy-migrate's number), read in the mariadb container. */
async function schemaVersions(): Promise<Record<string, string>> {
  const client = '--defaults-extra-file=/etc/mysql/mariadb.conf.d/stackctl/client.cnf';
  const script = DATABASES.map(
    (db) =>
      `v=$(mariadb ${client} -N -e "SELECT GROUP_CONCAT(version_num ORDER BY version_num) FROM ${db}.alembic_version" 2>/dev/null) || ` +
      `v=$(mariadb ${client} -N -e "SELECT CONCAT('migrate ', version) FROM ${db}.migrate_version" 2>/dev/null) || v=none; ` +
      `echo "${db} $v"`,
  ).join('\n');
  const r = await lab.remote('ctl-0').docker.exec('mariadb', ['sh', '-c', script]);
  expect(r.code, r.stderr).toBe(0);
  return Object.fromEntries(
    r.stdout
      .trim()
      .split('\n')
      .map((l) => [l.slice(0, l.indexOf(' ')), l.slice(l.indexOf(' ') + 1)]),
  );
}

/** Keystone's answer to a token check through the VIP: the status of GET /v3/auth/tokens. */
async function tokenStatus(openrc: string, subject: string): Promise<number> {
  const admin = openstack(openrc, 'token issue -f value -c id').trim();
  const r = await fetch(`http://${VIP}:5000/v3/auth/tokens`, {
    headers: { 'X-Auth-Token': admin, 'X-Subject-Token': subject },
  });
  return r.status;
}

describe('stackctl upgrade --to epoxy --fast-forward on a 1ctl-1comp lab (zed on bookworm -> 2025.1 on trixie)', () => {
  let openrc = '';
  let token = '';
  let versionsBefore: Record<string, string> = {};

  beforeAll(async () => {
    await lab.up(CLOUD_IMAGES);
    const s = await buildTargetImages(REGISTRY_PORT, EPOXY);
    process.stderr.write(`epoxy images built and pushed in ${s.toFixed(1)} s\n`);
  }, 3_600_000);
  afterAll(async () => {
    execFileSync('docker', ['rm', '-f', PROBE], { stdio: 'ignore' });
    for (const d of temps) rmSync(d, { recursive: true, force: true });
    await lab.down();
  }, 300_000);

  it('deploys the whole zed cloud, boots a server and issues a token', async () => {
    const { report, text } = await lab.deploy();
    expect(report?.ok, text).toBe(true);
    const dir = tempDir('stackctl-openrc-');
    temps.push(dir);
    openrc = join(dir, 'admin.openrc');
    expect((await runCli('openrc', '-i', lab.inventory, '-o', openrc)).code).toBe(0);
    const s = os<{ status: string }>(
      openrc,
      '--os-compute-api-version 2.37 server create --flavor m1.tiny --image lab-tiny --nic none --wait srv-zed',
    );
    expect(s.status).toBe('ACTIVE');
    token = openstack(openrc, 'token issue -f value -c id').trim();
    expect(await tokenStatus(openrc, token)).toBe(200);
    versionsBefore = await schemaVersions();
    process.stderr.write(`schema versions on zed: ${JSON.stringify(versionsBefore)}\n`);
    for (const db of DATABASES) expect(versionsBefore[db], db).not.toBe('none');
  }, 2_400_000);

  it('moves every service to epoxy through a kill in a migration window, keeping the token and the server', async () => {
    const plan = await upgradePlan(lab.inventory, ['--to', 'epoxy', '--fast-forward']);
    process.stderr.write(`phases with a declared API outage: ${plan.declared.join(', ')}\n`);
    const windows = plan.phases.filter((p) => p.availability === 'window');
    expect(windows.map((p) => p.id)).toEqual([
      'control:keystone',
      'control:glance',
      'control:neutron-server',
      'control:placement',
      'control:nova-api+nova-conductor+nova-scheduler',
    ]);
    expect(plan.phases.some((p) => p.kind === 'batches')).toBe(false);
    const first = windows[0]!;
    const migration = first.steps
      .flatMap((s) => s.actions)
      .find((a): a is Extract<UpgradeAction, { kind: 'migrate' }> => a.kind === 'migrate')!;
    const oneOff = `stackctl-upgrade-${migration.service}-${migration.stage}`;
    const journalFile = journalFileFor(lab.inventory);
    const probe = startProbe(lab.inventory, VIP, PROBE, temps);
    await sleep(3000);
    const t0 = Date.now();

    // The kill: in the first window, while its migration's one-off container runs if it can be caught.
    const run1 = spawnUpgrade(lab.inventory, ['--to', 'epoxy', '--fast-forward']);
    let caught = false;
    const migrationDone = (): boolean => {
      try {
        return parseJournal(readFileSync(journalFile, 'utf8')).some(
          (r) =>
            r.type === 'action' && r.state === 'done' && r.key.startsWith(`${first.id}#`) && / migrate /.test(r.key),
        );
      } catch {
        return false;
      }
    };
    for (let deadline = Date.now() + 1_800_000; Date.now() < deadline; await sleep(100)) {
      const info = await lab
        .remote(migration.node)
        .docker.inspectContainer(oneOff)
        .catch(() => undefined);
      if (info?.state.running) {
        caught = true;
        break;
      }
      if (migrationDone()) break;
      if ((await Promise.race([run1.exited.then(() => true), sleep(0).then(() => false)])) === true) break;
    }
    run1.child.kill('SIGKILL');
    expect(await run1.exited, run1.out()).toBeNull(); // died of the signal, not of an error
    process.stderr.write(
      `kill in ${first.id} after ${((Date.now() - t0) / 1000).toFixed(1)} s: ` +
        `${caught ? `while ${oneOff} ran` : 'after its migration ended'}\n`,
    );

    // The resumed run (the flag comes from the open run) goes on to the end.
    let text = '';
    const report = await runUpgrade(
      { inventory: lab.inventory, to: 'epoxy', resume: true },
      { write: (t) => void (text += t), tty: false },
    );
    const upgradeS = (Date.now() - t0) / 1000;
    await sleep(3000);
    const probes = probe.stop();
    expect(report?.outcome, text).toBe('done');
    process.stderr.write(text.split('\n').slice(-40).join('\n') + '\n');

    expect(loadAll({ inventory: lab.inventory }).loaded.inventory.cloud.release).toBe('epoxy');
    await lab.reconnect();
    expect(await containersOffTarget(lab, 'major', EPOXY)).toEqual([]);

    // every database migrated for real: its schema version moved
    const versionsAfter = await schemaVersions();
    process.stderr.write(`schema versions on epoxy: ${JSON.stringify(versionsAfter)}\n`);
    for (const db of DATABASES) {
      if (db === 'nova_cell0') continue; // same schema as nova: moved by the same command, checked below
      expect(versionsAfter[db], db).not.toBe(versionsBefore[db]);
    }
    expect(versionsAfter['nova_cell0']).toBe(versionsAfter['nova']);

    // the token issued on zed still validates (the fernet keys were carried over)
    expect(await tokenStatus(openrc, token)).toBe(200);
    // the server booted on zed is ACTIVE; the compute service reports; a new server boots
    const servers = os<{ Name: string; Status: string }[]>(openrc, 'server list --all-projects');
    expect(servers.map((s) => `${s.Name} ${s.Status}`)).toEqual(['srv-zed ACTIVE']);
    const computes = os<{ Binary: string; State: string; Status: string }[]>(openrc, 'compute service list').filter(
      (r) => r.Binary === 'nova-compute',
    );
    expect(computes.map((c) => `${c.State} ${c.Status}`)).toEqual(['up enabled']);
    const fresh = os<{ status: string }>(
      openrc,
      '--os-compute-api-version 2.37 server create --flavor m1.tiny --image lab-tiny --nic none --wait srv-epoxy',
    );
    expect(fresh.status).toBe('ACTIVE');
    openstack(openrc, 'server delete --wait srv-epoxy');

    // one run, started once and resumed once; every action done exactly once
    const records = parseJournal(readFileSync(journalFile, 'utf8'));
    const run = records
      .filter((r) => r.type === 'run.start' && r.command === 'upgrade' && r.mode === 'new')
      .at(-1)!.run;
    const journal = records.filter((r) => r.run === run);
    expect(journal.filter((r) => r.type === 'run.start').map((r) => r.type === 'run.start' && r.mode)).toEqual([
      'new',
      'resume',
    ]);
    const doneCount = new Map<string, number>();
    for (const r of journal)
      if (r.type === 'action' && r.state === 'done') doneCount.set(r.key, (doneCount.get(r.key) ?? 0) + 1);
    expect([...doneCount].filter(([, n]) => n !== 1)).toEqual([]);
    const cut = journal.find(
      (r) => r.type === 'action' && r.state === 'done' && r.key.startsWith(`${first.id}#`) && / migrate /.test(r.key),
    );
    process.stderr.write(`the cut migration: ${cut?.type === 'action' ? cut.detail : '?'}\n`);

    // the pauses: how long each window kept its APIs down, and what the probe saw
    const figures = probeFigures(probes, phaseTimes(lab.inventory, t0), plan.declared);
    process.stderr.write(`major upgrade ${upgradeS.toFixed(1)} s (one kill and resume); ${figures.text}`);
  }, 3_600_000);
});
