/**
 * The identity tier on a `1ctl-1comp` container lab, deployed by `stackctl
 * deploy` as an operator would: HAProxy and keepalived (the VIPs), MariaDB,
 * memcached and Keystone; then what a re-run, a changed setting, a crash and
 * bad input do to it. Everything is real: lab nodes with their own sshd and
 * dockerd, images pulled from the lab registry, the OpenStack client.
 */
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { loadAll } from '../../src/cli/context.js';
import type { DeployOpts } from '../../src/cli/deploy.js';
import { ExitCode } from '../../src/core/errors.js';
import { defaultRolesDir } from '../../src/core/paths.js';
import { labPaths, sshBanner } from '../../src/lab/nodes/lab.js';
import { loadPins, pinsFileFor, savePins } from '../../src/images/pins.js';
import { effectKey, journalFileFor, parseJournal, type JournalRecord } from '../../src/orchestrator/journal.js';
import { LABEL } from '../../src/orchestrator/state.js';
import { generateEd25519, parsePublicKey, type ContainerInfo } from '../../src/remote/index.js';
import type { StatusReport } from '../../src/status/model.js';
import { STATUS_EXIT } from '../../src/status/verdict.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { openstackTraced } from '../helpers/openstack.js';
import { CLOUD_IMAGES, deployLab, keystoneState, root } from './lab.js';

/**
 * Passwords an operator may choose, with every character some config format treats specially:
 * quotes, `#`, `@`, `/`, `%`, `$`, `,`, `;`, `:`, `=`, backslashes and spaces (leading and trailing
 * too). The whole cloud is deployed with them: Keystone's admin, every database and service user,
 * MariaDB's root and RabbitMQ, less what Zed itself cannot take and stackctl refuses
 * (docs/inventory.md): `@` and `%` in Keystone's database password (alembic), `/` in RabbitMQ's
 * (oslo.messaging). The others keep their generated values: keepalived's VRRP password, HAProxy's
 * stats password and Galera's SST password are written where nothing quotes them.
 */
const hostile = (tag: string): string => `${tag} p@ss/w#rd 'sq' "dq" %41 $HOME $$ \\ ,;:=`;
const CHOSEN_SECRETS: Record<string, string> = {
  keystone_admin_password: hostile('admin'),
  mariadb_root_password: hostile('root'),
  rabbitmq_password: hostile('rabbit').replace(/\//g, ''),
  nova_keystone_password: `  ${hostile('nova')}  `,
  ...Object.fromEntries(
    ['glance', 'placement', 'neutron', 'nova'].map((s) => [`${s}_db_password`, hostile(`${s} db`)]),
  ),
  keystone_db_password: hostile('keystone db').replace(/[@%]/g, ''),
  ...Object.fromEntries(
    ['glance', 'placement', 'neutron'].map((s) => [`${s}_keystone_password`, hostile(`${s} user`)]),
  ),
};
const lab = deployLab('deployid', '10.88', 900, { secrets: CHOSEN_SECRETS });
const P = lab.prefix;
const SERVICES = 'haproxy,keepalived,mariadb,memcached,keystone';
const IMAGES = ['haproxy', 'keepalived', 'mariadb', 'memcached', 'keystone'];
/** The containers the identity tier puts on ctl-0: one per image, plus MariaDB's Galera health responder for HAProxy. */
const CONTAINERS = [...IMAGES, 'mariadb_clustercheck'];
const CTL_INTERNAL_API = `${P}.20.10`;
const INTERNAL_VIP = lab.internalVip;
const EXTERNAL_VIP = `${P}.10.250`;
/** memcached's tag reference; the nodes run it pinned: `…:zed-1@sha256:…` (the pin its first deploy wrote). */
const MEMCACHED_TAG = `${P}.24.1:5000/stackctl/memcached:zed-1`;
const memcachedImage = (): string => {
  const digest = loadPins(pinsFileFor(lab.inventory)).images[MEMCACHED_TAG]?.digest;
  expect(digest, `a pin of ${MEMCACHED_TAG}`).toBeDefined();
  return `${MEMCACHED_TAG}@${digest}`;
};
/** The status table's IMAGE column of a pinned zed-1 image. */
const PINNED_TAG = 'zed-1@sha256:[0-9a-f]{12}';
/** The OpenStack client (Debian's python3-openstackclient) as the images carry it: run on the deploy host. */

/** A service's answer to `stats` at host:port, from this machine over the lab network. */
function memcachedStats(host: string, port = 11211): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = createConnection({ host, port });
    let buf = '';
    sock.setTimeout(5000, () => sock.destroy(new Error('timeout')));
    sock.on('connect', () => sock.write('stats\r\nquit\r\n'));
    sock.on('data', (d: Buffer) => (buf += d.toString('latin1')));
    sock.on('close', () => resolve(buf));
    sock.on('error', reject);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const secret = (name: string): string => loadAll({ inventory: lab.inventory }).secrets!.services.get(name)!.reveal();

/**
 * The OpenStack client on this machine: source the openrc file, then run `openstack ...`. A failure
 * names the requests the client sent (openstackTraced) and what the public VIP looked like then.
 */
async function clientWithOpenrc(openrc: string, args: string): Promise<string> {
  try {
    return await openstackTraced(openrc, args, 120_000);
  } catch (e) {
    throw new Error(`${(e as Error).message}\n${await vipDiagnosis()}`, { cause: e });
  }
}

/**
 * What the public VIP looked like from this machine when a client failed: the neighbour entry and
 * route, a direct HTTP request to Keystone (5 s), the containers on ctl-0 with their state,
 * Keystone's last log lines and MariaDB's process list. CI runs saw the client hang here (2 min);
 * this tells a network fault from a stuck service.
 */
async function vipDiagnosis(): Promise<string> {
  const run = (cmd: string, args: string[]): string => {
    const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 10_000 });
    return `${cmd} ${args.join(' ')}: ${(r.stdout + r.stderr).trim() || `(exit ${r.status})`}`;
  };
  const http = await fetch(`http://${EXTERNAL_VIP}:5000/v3`, { signal: AbortSignal.timeout(5_000) }).then(
    (r) => `HTTP ${r.status}`,
    (e: Error) => `no answer: ${String((e.cause as Error | undefined)?.message ?? e.message)}`,
  );
  const containers = await lab
    .ctl()
    .docker.listContainers()
    .then(
      (l) => l.map((c) => `${c.name}=${c.state} (${c.status})`).join(', '),
      (e: Error) => `not listed: ${e.message}`,
    );
  return [
    run('ip', ['neigh', 'show', EXTERNAL_VIP]),
    run('ip', ['route', 'get', EXTERNAL_VIP]),
    `GET http://${EXTERNAL_VIP}:5000/v3: ${http}`,
    `ctl-0 containers: ${containers}`,
    await keystoneState(lab.ctl().docker, 30),
  ].join('\n');
}

/** Map entries whose value differs between two StartedAt snapshots. */
const restarted = (before: Map<string, string>, after: Map<string, string>): string[] =>
  [...after].filter(([k, v]) => before.get(k) !== v).map(([k]) => k);

/** Rows of a dry-run table that predict a change. */
const predictedChanges = (text: string): string[][] =>
  text
    .split('\n')
    .filter((l) => /^\d\s/.test(l))
    .filter((l) => !/\b(unchanged|done)\b/.test(l))
    .map((l) => l.split(/\s+/).slice(0, 5));

/** Run `f` with the inventory rewritten by `edit`, restoring it afterwards. */
async function withInventory<T>(edit: (text: string) => string, f: () => Promise<T>): Promise<T> {
  const text = readFileSync(lab.inventory, 'utf8');
  const changed = edit(text);
  expect(changed).not.toBe(text);
  writeFileSync(lab.inventory, changed);
  try {
    return await f();
  } finally {
    writeFileSync(lab.inventory, text);
    process.exitCode = undefined;
  }
}

/** Temporary folders of the tests, removed at the end. */
const temps: string[] = [];
const temp = (prefix: string): string => {
  const d = tempDir(prefix);
  temps.push(d);
  return d;
};

/** A copy of the shipped roles folder with one YAML file changed (`stackctl deploy --roles DIR`). */
function rolesWith(file: string, change: (doc: Record<string, unknown>) => void): string {
  const dir = join(temp('stackctl-roles-'), 'roles');
  cpSync(defaultRolesDir(), dir, { recursive: true });
  const path = join(dir, file);
  const doc = parseYaml(readFileSync(path, 'utf8')) as Record<string, unknown>;
  change(doc);
  writeFileSync(path, stringifyYaml(doc));
  return dir;
}

describe('stackctl deploy: the identity tier on a 1ctl-1comp lab', () => {
  const deploy = (extra: Partial<DeployOpts> = {}) => lab.deploy({ services: SERVICES, ...extra });
  const inspect = async (name = 'memcached'): Promise<ContainerInfo | undefined> =>
    lab.ctl().docker.inspectContainer(name);
  const journal = (): JournalRecord[] => lab.journal();

  beforeAll(() => lab.up(CLOUD_IMAGES), 1_800_000);
  afterAll(async () => {
    for (const d of temps) rmSync(d, { recursive: true, force: true });
    await lab.down();
  }, 180_000);

  it('steps 1-4: VIPs on ctl-0, MariaDB, memcached, the keystone database, db_sync, bootstrap, a token through the VIP', async () => {
    // the deploy works with the chosen passwords, not generated ones
    for (const [name, value] of Object.entries(CHOSEN_SECRETS)) expect(secret(name), name).toBe(value);
    const t0 = Date.now();
    const { report, text } = await deploy();
    process.stderr.write(`deploy ${SERVICES} (pulls included): ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(report?.ok, text).toBe(true);
    // the first deploy pinned every image of the plan, once, and said so; the nodes run them by digest
    const pins = loadPins(pinsFileFor(lab.inventory)).images;
    for (const i of IMAGES) {
      const ref = `${P}.24.1:5000/stackctl/${i}:zed-1`;
      expect(pins[ref], ref).toMatchObject({ digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/), by: 'deploy' });
      expect(text).toContain(`pinned ${ref} to ${pins[ref]!.digest.slice(0, 19)}`);
    }
    for (const c of CONTAINERS) expect(text).toMatch(new RegExp(`step \\d ctl-0: container ${c} created`));
    expect(text).toMatch(/database keystone\/keystone ran/);
    expect(text).toMatch(/task keystone\/db-sync ran/);
    expect(text).toMatch(/task keystone\/bootstrap ran/);

    // keepalived holds both VIPs on ctl-0.
    const addr = await lab.ctl().exec(['ip', '-o', '-4', 'addr', 'show'], { timeoutMs: 10_000 });
    expect(addr.stdout).toContain(`${INTERNAL_VIP}/32`);
    expect(addr.stdout).toContain(`${EXTERNAL_VIP}/32`);

    // memcached: labelled with its hash, answering on its internal_api address, its config file 0644.
    const mc = await inspect();
    expect(mc?.state.running).toBe(true);
    expect(mc?.image).toBe(memcachedImage());
    expect(mc?.labels[LABEL.hash]).toMatch(/^[0-9a-f]{64}$/);
    expect(mc?.labels[LABEL.service]).toBe('memcached');
    expect(mc?.labels[LABEL.cloud]).toBe('deployid');
    expect(await memcachedStats(CTL_INTERNAL_API)).toMatch(/STAT limit_maxbytes 67108864/); // 64 MB, the default
    const st = await lab.ctl().exec(['stat', '-c', '%a', '/etc/stackctl/memcached/options'], { timeoutMs: 10_000 });
    expect(st.stdout.trim()).toBe('644');

    // MariaDB: a single node (no wsrep), bound to its internal_api address, healthy through the rendered client.cnf.
    const db = await lab
      .ctl()
      .docker.exec('mariadb', [
        'mariadb',
        '--defaults-extra-file=/etc/mysql/mariadb.conf.d/stackctl/client.cnf',
        '-N',
        '-e',
        'SELECT @@bind_address, @@wsrep_on',
      ]);
    expect(db.stdout.trim().split(/\s+/)).toEqual([CTL_INTERNAL_API, '0']);

    // HAProxy marks a new backend up after two good checks (inter 2 s) once uwsgi answers: 40 tries.
    const token = await lab.issueToken('ctl-0', 40);
    expect(token.code, token.stderr).toBe(0);
    expect(token.stdout.trim()).toMatch(/^\d{4}-\d\d-\d\d/);

    // Passwords went to the nodes in files and over stdin, never into the event log.
    const events = readFileSync(lab.inventory.replace(/\.yaml$/, '.events.jsonl'), 'utf8');
    expect(events).toContain('deploy.change');
    for (const s of ['keystone_db_password', 'keystone_admin_password', 'mariadb_root_password'])
      expect(events).not.toContain(secret(s));
  }, 900_000);

  it('stackctl openrc: the file, sourced by the OpenStack client on the deploy host, gets a token through the public VIP', async () => {
    const openrc = join(temp('stackctl-openrc-'), 'admin.openrc');
    const r = await runCli('openrc', '-i', lab.inventory, '-o', openrc);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toContain(secret('keystone_admin_password'));
    expect(statSync(openrc).mode & 0o777).toBe(0o600);
    expect(readFileSync(openrc, 'utf8')).toContain(`OS_AUTH_URL='http://${EXTERNAL_VIP}:5000/v3'`);
    const out = await clientWithOpenrc(openrc, 'token issue -f value -c expires -c user_id');
    expect(out.trim()).toMatch(/^\d{4}-\d\d-\d\d\S*\n[0-9a-f]{32}$/);
    // The catalog bootstrap wrote: identity endpoints on the VIPs.
    const endpoints = await clientWithOpenrc(openrc, 'endpoint list --service identity -f value -c Interface -c URL');
    expect(endpoints).toContain(`public http://${EXTERNAL_VIP}:5000/v3`);
    expect(endpoints).toContain(`internal http://${INTERNAL_VIP}:5000/v3`);
  }, 300_000);

  it('a second deploy restarts nothing (StartedAt of every container unchanged) and says so', async () => {
    const before = await lab.startedAt();
    expect([...before.keys()]).toEqual(CONTAINERS.map((c) => `ctl-0/${c}`).sort());
    const t0 = Date.now();
    const { report, text } = await deploy();
    process.stderr.write(`no-op redeploy of ${SERVICES}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(report?.ok, text).toBe(true);
    expect(report?.changes).toBe(0);
    expect(text).not.toContain('pinned'); // pinned images: the registry is not asked again
    for (const c of CONTAINERS) expect(text).toMatch(new RegExp(`container ${c} unchanged`));
    expect(await lab.startedAt()).toEqual(before);
  }, 180_000);

  it("a Keystone request stuck on the database: uwsgi's tracebacker shows where it waits; it answers once the database does", async () => {
    const docker = lab.ctl().docker;
    const mariadb = ['mariadb', '--defaults-extra-file=/etc/mysql/mariadb.conf.d/stackctl/client.cnf'];
    // a session that holds Keystone's user tables for 20 s: every password login waits on it
    const lock = docker.exec(
      'mariadb',
      [...mariadb, '-e', 'LOCK TABLES keystone.local_user WRITE, keystone.user WRITE; SELECT SLEEP(20)'],
      { timeoutMs: 60_000 },
    );
    await sleep(2_000);
    const t0 = Date.now();
    const body = {
      auth: {
        identity: {
          methods: ['password'],
          password: { user: { name: 'admin', domain: { id: 'default' }, password: secret('keystone_admin_password') } },
        },
      },
    };
    const login = fetch(`http://${EXTERNAL_VIP}:5000/v3/auth/tokens`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    }).then(
      (r) => ({ status: r.status, s: (Date.now() - t0) / 1000 }),
      (e: Error) => ({ status: 0, s: (Date.now() - t0) / 1000, error: e.message }),
    );
    let threads = '';
    for (let i = 0; i < 20 && !/function = authenticate/.test(threads); i++) {
      await sleep(1_000);
      threads = (await keystoneState(docker, 1)).split("keystone's busy threads:\n")[1] ?? '';
    }
    // the stack names Keystone's password check waiting for MariaDB's answer
    expect(threads).toMatch(/tracebacker\d:\n(?:.*\n)*thread_id = uWSGIWorker\dCore\d .*function = authenticate/);
    expect(threads).toMatch(/pymysql\/connections\.py .*function = _read_packet/);
    const answer = await login;
    await lock;
    // it waited for the lock, then got its token
    expect(answer, JSON.stringify(answer)).toMatchObject({ status: 201 });
    expect(answer.s).toBeGreaterThan(10);
  }, 120_000);

  describe('stackctl status', () => {
    const status = async (...extra: string[]) =>
      runCli('status', '-i', lab.inventory, '--services', SERVICES, ...extra);
    const statusJson = async (): Promise<{ code: number; report: StatusReport }> => {
      const r = await status('--json');
      return { code: r.code, report: JSON.parse(r.stdout) as StatusReport };
    };

    it('all healthy: every container running, healthy where it has a check, the planned tag, config up to date; exit 0', async () => {
      // A container the bootstrap tasks restarted can still be within its healthcheck's start period.
      for (const t1 = Date.now(); Date.now() - t1 < 120_000; await sleep(2000)) {
        const { report: now } = await statusJson();
        if (!now.findings.some((f) => f.message === 'running but starting')) break;
      }
      const t0 = Date.now();
      const { code, report } = await statusJson();
      process.stderr.write(`status (healthy): ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
      expect(report.findings).toEqual([]);
      expect(code).toBe(0);
      expect(report).toMatchObject({ version: 2, cloud: 'deployid', verdict: 'healthy', exitCode: 0 });
      expect(report.services).toEqual(SERVICES.split(','));
      const [ctl, cmp] = report.nodes;
      expect(ctl).toMatchObject({ name: 'ctl-0', role: 'Controller', address: `${P}.24.10`, reachable: true });
      expect(cmp).toMatchObject({ name: 'cmp-0', role: 'Compute', reachable: true, containers: [] });
      expect(ctl!.containers.map((c) => c.name).sort()).toEqual([...CONTAINERS].sort());
      for (const c of ctl!.containers) {
        expect(c.state, c.name).toBe('running');
        expect(c.health, c.name).toBe(c.name === 'keepalived' ? 'none' : 'healthy'); // keepalived has no healthcheck
        expect(c.image).toMatchObject({
          runningTag: expect.stringMatching(new RegExp(`^${PINNED_TAG}$`)),
          matches: true,
          digest: { matches: true },
        });
        expect(c.config).toEqual({ state: 'current', changed: [] });
      }
      expect(ctl!.configFiles.drift).toEqual([]);
      // One MariaDB server: Galera replication is off by design, and that is healthy.
      expect(report.clusters).toContainEqual({
        service: 'mariadb',
        kind: 'galera',
        state: 'ok',
        expected: 1,
        members: [{ node: 'ctl-0', wsrepOn: false, clusterSize: 0, clusterStatus: 'Disconnected' }],
      });
      expect(report.openstack.state).toBe('not deployed');
      // every pinned tag asked in the registry: none moved
      expect(report.images).toMatchObject({ state: 'ok', unpinned: [] });
      expect(report.images.tags.map((t) => t.state)).toEqual(IMAGES.map(() => 'pinned'));
      const human = await status();
      expect(human.code).toBe(0);
      expect(human.stdout).toMatch(/^cloud deployid: HEALTHY \(exit status 0\)/);
      expect(human.stdout).toMatch(
        new RegExp(`^ {2}memcached\\s+running\\s+healthy\\s+${PINNED_TAG}\\s+up to date$`, 'm'),
      );
      for (const s of ['keystone_admin_password', 'mariadb_root_password'])
        expect(human.stdout + human.stderr).not.toContain(secret(s));
    }, 300_000);

    it('a changed setting: the container would be recreated and its config file rewritten; exit 9 (drift)', async () => {
      await withInventory(
        (t) => t.replace('  settings:\n', '  settings:\n    memcached_memory_mb: 40\n'),
        async () => {
          const { code, report } = await statusJson();
          expect(code).toBe(STATUS_EXIT.drift);
          const mc = report.nodes[0]!.containers.find((c) => c.name === 'memcached');
          expect(mc).toMatchObject({ state: 'running', config: { state: 'outdated' } });
          expect(mc!.config.changed).toEqual(['config /etc/stackctl/memcached/options']);
          expect((await status()).stdout).toMatch(
            new RegExp(
              `memcached\\s+running\\s+healthy\\s+${PINNED_TAG}\\s+would be recreated: config /etc/stackctl/memcached/options`,
            ),
          );
        },
      );
    }, 120_000);

    it('a stopped container: named with its node, exit 8 (unhealthy)', async () => {
      await lab.ctl().docker.stopContainer('memcached', { timeoutS: 5 });
      try {
        const r = await status();
        expect(r.code).toBe(STATUS_EXIT.unhealthy);
        expect(r.stdout).toMatch(/^cloud deployid: UNHEALTHY \(exit status 8\)/);
        expect(r.stdout).toMatch(/^ {2}unhealthy\s+ctl-0\s+memcached\s+exited \(exit code \d+\)$/m);
      } finally {
        await lab.ctl().docker.startContainer('memcached');
      }
    }, 120_000);

    it('Nova asked for but not deployed: nova_api missing, and the client, logged in as admin, finds no compute endpoint', async () => {
      const r = await runCli('status', '-i', lab.inventory, '--services', `${SERVICES},nova-api`, '--json');
      expect(r.code).toBe(STATUS_EXIT.unhealthy);
      const report = JSON.parse(r.stdout) as StatusReport;
      expect(report.findings).toContainEqual({
        severity: 'unhealthy',
        node: 'ctl-0',
        subject: 'nova_api',
        message: 'missing (a deploy would create it)',
      });
      expect(report.openstack).toMatchObject({ state: 'problem', via: 'ctl-0/keystone' });
      // a client that did not answer (seen twice in CI): what Keystone and the database were doing
      const why = /did not finish/.test(report.openstack.error ?? '') ? await vipDiagnosis() : '';
      expect(report.openstack.error, why).toMatch(/endpoint for compute service/s);
      expect(report.openstack.error).not.toMatch(/401|Unauthorized|auth-url required/);
      expect(r.stdout + r.stderr).not.toContain(secret('keystone_admin_password'));
    }, 120_000);
  });

  it("a changed memcached setting: --dry-run predicts memcached's config and container, and deploy restarts only those", async () => {
    const before = await lab.startedAt();
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace('  settings:\n', '  settings:\n    memcached_memory_mb: 32\n'));
    const dry = await deploy({ dryRun: true });
    expect(predictedChanges(dry.text)).toEqual([
      ['2', 'ctl-0', 'config', '/etc/stackctl/memcached/options', 'upload'],
      ['2', 'ctl-0', 'container', 'memcached', 'recreate'],
    ]);
    expect(dry.text).toMatch(/memcached\s+recreate\s+config \/etc\/stackctl\/memcached\/options/);
    expect(await lab.startedAt()).toEqual(before); // a dry run changes nothing

    const { report, text: out } = await deploy();
    expect(report?.ok, out).toBe(true);
    expect(out).toMatch(/container memcached recreated \(config \/etc\/stackctl\/memcached\/options\)/);
    const after = await lab.startedAt();
    expect([...after.keys()]).toEqual([...before.keys()]);
    // exactly the containers the dry run named
    const predicted = predictedChanges(dry.text)
      .filter((r) => r[2] === 'container')
      .map((r) => `${r[1]}/${r[3]}`);
    expect(restarted(before, after)).toEqual(predicted);
    expect(await memcachedStats(CTL_INTERNAL_API)).toMatch(/STAT limit_maxbytes 33554432/);
  }, 180_000);

  it('an image missing from the registry: unpinned, the deploy stops before anything; pinned, the pull fails the step', async () => {
    const before = await inspect();
    const pinsFile = pinsFileFor(lab.inventory);
    const pins = readFileSync(pinsFile, 'utf8');
    const ref = `${P}.24.1:5999/stackctl/memcached:zed-1`;
    await withInventory(
      (t) => t.replace(`registry: ${P}.24.1:5000`, `registry: ${P}.24.1:5999`),
      async () => {
        const dry = await deploy({ services: 'memcached', dryRun: true });
        expect(dry.text).toMatch(/memcached\s+recreate\s+image/);
        expect(dry.text).toContain(`not pinned yet: `); // a dry run asks no registry
        // No pin for the new reference: the deploy asks the registry for it first, and stops there.
        const err = await deploy({ services: 'memcached' }).catch((e: unknown) => e);
        expect(err).toMatchObject({ code: 'E_REGISTRY_UNREACHABLE' });
        expect((err as Error).message).toContain(`${P}.24.1:5999`);
        expect(readFileSync(pinsFile, 'utf8')).toBe(pins);
        // Pinned (to memcached's digest), the deploy asks the registry nothing: the node's pull fails the step.
        const state = loadPins(pinsFile);
        const digest = state.images[MEMCACHED_TAG]!.digest;
        savePins(pinsFile, { version: 1, images: { ...state.images, [ref]: { digest, at: 'now', by: 'pin' } } });
        try {
          const { report, text: out } = await deploy({ services: 'memcached' });
          expect(report?.ok).toBe(false);
          expect(report?.failures).toHaveLength(1);
          expect(report?.failures[0]).toMatchObject({ code: 'E_IMAGE_PULL', class: 'retryable' });
          expect(report?.failures[0]?.message).toContain(`${ref}@${digest}`);
          expect(report?.failures[0]?.message).toContain(`registry ${P}.24.1:5999`);
          expect(out).toMatch(/aborted after step 2: failure budget exceeded by Controller \(1\/1\)/);
        } finally {
          writeFileSync(pinsFile, pins);
        }
      },
    );
    const after = await inspect();
    expect([after?.id, after?.state.running, after?.state.startedAt]).toEqual([
      before?.id,
      true,
      before?.state.startedAt,
    ]);
  }, 120_000);

  it('a healthcheck that never passes fails the step with the last 50 lines of the container log', async () => {
    // A memcached that runs but never reports healthy, after printing 80 numbered lines.
    const roles = rolesWith('services/memcached.yaml', (svc) => {
      const [c] = svc.containers as Record<string, unknown>[];
      c!.command = [
        'sh',
        '-c',
        'for i in $(seq 1 80); do echo "startup line $i"; done; exec memcached -u memcache $(grep -v "^#" /etc/memcached/options)',
      ];
      c!.healthcheck = { test: ['sh', '-c', 'exit 1'], interval_s: 1, timeout_s: 1, retries: 1 };
    });
    const t0 = Date.now();
    const { report, text } = await deploy({ services: 'memcached', roles });
    process.exitCode = undefined;
    expect(report?.ok).toBe(false);
    expect(report?.failures).toHaveLength(1);
    expect(report?.failures[0]).toMatchObject({
      path: 'step 2/ctl-0/memcached/health',
      code: 'E_HEALTH_TIMEOUT',
      class: 'hard',
    });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(20_000); // the health deadline: at least 20 s
    const log = report!.failures[0]!.log!;
    expect(log.split('\n').filter(Boolean)).toHaveLength(50);
    expect(log).toMatch(/^startup line 31$/m);
    expect(log).toMatch(/^startup line 80$/m);
    expect(log).not.toMatch(/^startup line 30$/m);
    expect(text).toMatch(/last log lines:\n {4}\| startup line 31\n/);
    expect((await inspect())?.state.running).toBe(true); // left running for inspection
    // With the shipped service file again, the next deploy replaces it.
    const again = await deploy({ services: 'memcached' });
    expect(again.report?.ok, again.text).toBe(true);
    expect(again.text).toMatch(/container memcached recreated/);
  }, 180_000);

  it('a container that dies after start fails hard with the end of its log', async () => {
    const before = await lab.startedAt();
    // A value outside the setting's type never reaches the node: the deploy refuses it with its line.
    await withInventory(
      (t) => t.replace('memcached_memory_mb: 32', 'memcached_memory_mb: lots'),
      async () => {
        await expect(deploy({ services: 'memcached' })).rejects.toMatchObject({
          issues: [
            expect.objectContaining({
              code: 'E_SETTING_VALUE',
              message: expect.stringContaining('memcached_memory_mb'),
            }),
          ],
        });
      },
    );
    expect(await lab.startedAt()).toEqual(before);
    // memcached refuses a memory limit of 0 MB at start: a roles copy whose setting allows it.
    const roles = rolesWith('services/memcached.yaml', (svc) => {
      (svc.settings as Record<string, Record<string, unknown>>)['memcached_memory_mb']!.min = 0;
    });
    await withInventory(
      (t) => t.replace('memcached_memory_mb: 32', 'memcached_memory_mb: 0'),
      async () => {
        const { report, text: out } = await deploy({ services: 'memcached', roles });
        expect(report?.ok).toBe(false);
        expect(report?.failures[0]).toMatchObject({
          path: 'step 2/ctl-0/memcached/health',
          code: 'E_CONTAINER_EXITED',
          class: 'hard',
        });
        expect(report?.failures[0]?.log).toMatch(/Cannot set item size limit/);
        expect(out).toMatch(/last log lines:\n {4}\| .*Cannot set item size limit/);
        expect(out).toMatch(/failures: 1 hard/);
      },
    );
    const { report } = await deploy({ services: 'memcached' });
    expect(report?.ok).toBe(true);
    expect(await memcachedStats(CTL_INTERNAL_API)).toMatch(/STAT limit_maxbytes 33554432/);
  }, 120_000);

  it('resumes after SIGKILL at a random moment without doing any side effect twice', async () => {
    // Real work for the run: memcached and keystone gone, memcached's image gone from the node, another setting.
    for (const c of ['memcached', 'keystone']) await lab.ctl().docker.removeContainer(c, { force: true });
    const rmi = await lab.ctl().exec(['docker', 'rmi', '-f', memcachedImage()], { timeoutMs: 60_000 });
    expect(rmi.code, rmi.stderr).toBe(0);
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace('memcached_memory_mb: 32', 'memcached_memory_mb: 48'));
    /** What the run has to do, each exactly once: 6 effects, an intent and a done line each. */
    const expected = [
      `pull ctl-0 ${memcachedImage()}`,
      'upload ctl-0 /etc/stackctl/memcached/options',
      'create ctl-0 memcached',
      'start ctl-0 memcached',
      'create ctl-0 keystone',
      'start ctl-0 keystone',
    ];
    // Kill after the k-th effect line, k random in 1..11 (STACKCTL_TEST_KILL_AT=k repeats a run).
    const killAt = Number(
      process.env.STACKCTL_TEST_KILL_AT ?? 1 + Math.floor(Math.random() * (2 * expected.length - 1)),
    );
    const journalFile = journalFileFor(lab.inventory);
    const start = journal().length;

    const child = spawn(
      join(root, 'node_modules', '.bin', 'vite-node'),
      [join(import.meta.dirname, 'deploy-child.ts'), '--', '-i', lab.inventory, '--services', SERVICES],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let childOut = '';
    child.stdout.on('data', (d: Buffer) => (childOut += d.toString()));
    child.stderr.on('data', (d: Buffer) => (childOut += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    const effectLines = (): JournalRecord[] =>
      parseJournal(readFileSync(journalFile, 'utf8'))
        .slice(start)
        .filter((r) => r.type === 'effect' && (r.state === 'intent' || r.state === 'done'));
    const deadline = Date.now() + 180_000;
    while (Date.now() < deadline && effectLines().length < killAt) await sleep(10);
    expect(effectLines().length, childOut).toBeGreaterThanOrEqual(killAt);
    child.kill('SIGKILL');
    expect(await exited).toBeNull(); // died of the signal
    const killedRun = journal().slice(start);
    const last = killedRun.filter((r) => r.type === 'effect').at(-1);
    process.stderr.write(
      `killed at effect line ${killAt}: last journaled '${last?.type === 'effect' ? `${last.state} ${effectKey(last.effect)}` : ''}'\n`,
    );
    expect(killedRun.some((r) => r.type === 'run.end')).toBe(false);

    const { report, text: out } = await deploy({ resume: true });
    expect(report?.ok, out).toBe(true);
    expect(out).toMatch(/resuming run [0-9a-f]+: \d+ side effect\(s\) done/);

    const run = journal().slice(start);
    const runId = (run[0] as { run: string }).run;
    expect(run.every((r) => r.run === runId)).toBe(true); // the resume continued the same run
    const done = new Map<string, number>();
    const performed = new Map<string, number>();
    for (const r of run) {
      if (r.type !== 'effect' || r.state !== 'done') continue;
      const k = effectKey(r.effect).split(' ').slice(0, 3).join(' ');
      done.set(k, (done.get(k) ?? 0) + 1);
      if (!r.verified) performed.set(k, (performed.get(k) ?? 0) + 1);
    }
    process.stderr.write(`effects done: ${[...done].map(([k, n]) => `${k} x${n}`).join('; ')}\n`);
    // Each effect recorded done exactly once (performed, or found in place after the kill); nothing else.
    expect([...done.keys()].sort()).toEqual([...expected].sort());
    expect([...done.values()].every((n) => n === 1)).toBe(true);
    expect([...performed.values()].every((n) => n === 1)).toBe(true);
    expect((await inspect())?.state.running).toBe(true);
    expect((await inspect('keystone'))?.state.running).toBe(true);
    expect(await memcachedStats(CTL_INTERNAL_API)).toMatch(/STAT limit_maxbytes 50331648/);
    const token = await lab.issueToken('ctl-0', 40);
    expect(token.code, token.stderr).toBe(0);
  }, 300_000);

  it('an effect announced but not recorded as done is checked on the node, not repeated', async () => {
    // What a kill between an upload and its `done` line leaves: the file is in place, the journal says intent.
    const upload = lastUpload();
    const before = await lab.startedAt();
    writeFileSync(
      journalFileFor(lab.inventory),
      readFileSync(journalFileFor(lab.inventory), 'utf8') +
        JSON.stringify({
          time: '',
          run: 'cut0ff',
          type: 'run.start',
          format: 2,
          command: 'deploy',
          mode: 'new',
          target: 'zed',
        }) +
        '\n' +
        JSON.stringify({ time: '', run: 'cut0ff', type: 'effect', state: 'intent', effect: upload }) +
        '\n',
    );
    const { report, text } = await deploy({ resume: true });
    expect(text).toMatch(/resuming run cut0ff: 0 side effect\(s\) done, 1 to re-check/);
    expect(report?.changes).toBe(0);
    const after = journal().filter((r) => r.run === 'cut0ff');
    expect(after.filter((r) => r.type === 'effect' && r.state === 'done')).toEqual([
      expect.objectContaining({ effect: upload, verified: true }),
    ]);
    expect(await lab.startedAt()).toEqual(before);
  }, 120_000);

  describe('a second node in the same role', () => {
    // cmp-0 joins the Controller role with memcached only (a roles folder of
    // the operator's), so that a role has two nodes and a failure budget to spend.
    const roles = (): string => rolesWith('Controller.yaml', (role) => void (role.services = ['memcached']));
    const asControllers = <T>(f: () => Promise<T>): Promise<T> =>
      // (no node runs nova-compute nor Open vSwitch then: their settings go too)
      withInventory(
        (t) => t.replace('role: Compute', 'role: Controller').replace(/^ {4}(nova|ovs)_\w+: .*\n/gm, ''),
        f,
      );
    const power = async (action: 'on' | 'off'): Promise<void> => {
      const r = await runCli('nodes', 'power', action, '-i', lab.inventory, '--node', 'cmp-0');
      expect(r.code, r.stdout + r.stderr).toBe(0);
    };
    const cmpAddress = `${P}.24.11`;

    it('a node unreachable by SSH fails alone: the others go on within the budget and the summary lists it', async () => {
      const dir = roles();
      // The tests before recreated some of ctl-0's containers: wait until their health checks pass
      // again, so that the status below can show ctl-0 in full and healthy.
      for (const name of ['memcached', 'keystone']) {
        for (let deadline = Date.now() + 120_000; (await inspect(name))?.state.health === 'starting';) {
          if (Date.now() > deadline) break;
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
      await power('off');
      try {
        // stackctl status meanwhile: cmp-0 unreachable with the error, ctl-0 still reported in full; exit 5
        const t0 = Date.now();
        const st = await runCli('status', '-i', lab.inventory, '--services', SERVICES, '--timeout', '20');
        process.stderr.write(`status with cmp-0 off: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
        expect(st.code, st.stdout).toBe(ExitCode.REMOTE);
        expect(st.stdout).toMatch(/^cloud deployid: UNREACHABLE \(exit status 5\)/);
        expect(st.stdout).toMatch(new RegExp(`^cmp-0 \\(Compute, ${P}\\.24\\.11\\): UNREACHABLE E_\\w+: `, 'm'));
        expect(st.stdout).toMatch(
          new RegExp(`^ {2}keystone\\s+running\\s+healthy\\s+${PINNED_TAG}\\s+up to date$`, 'm'),
        );
        process.exitCode = undefined;

        await asControllers(async () => {
          const within = await lab.deploy({ services: 'memcached', roles: dir, maxFailPercent: 50 });
          expect(within.report?.ok).toBe(false);
          expect(within.report?.aborted).toBeUndefined();
          expect(within.report?.failures).toHaveLength(1);
          expect(within.report?.failures[0]).toMatchObject({ node: 'cmp-0', path: 'step 2/cmp-0/observe' });
          expect(within.report?.failures[0]?.message).toContain(cmpAddress);
          expect(within.text).toMatch(/step 2 ctl-0: container memcached unchanged/); // ctl-0 went on
          expect(within.text).toMatch(/^FAILED step 2\/cmp-0\/observe \[[\w-]+\] E_\w+: cmp-0 \(/m);
          expect(within.text).toMatch(/deploy FAILED in [\d.]+ s: 0 change\(s\), failures: 1/);

          // The same failure with no budget: the step's apply phase never starts, on any node.
          const over = await lab.deploy({ services: 'memcached', roles: dir, maxFailPercent: 0 });
          expect(over.text).toMatch(
            /aborted before step 1 \(looking at the nodes\): failure budget exceeded by Controller \(1\/2\)/,
          );
          expect(over.text).not.toMatch(/ctl-0: container memcached/);
        });
      } finally {
        await power('on');
      }
    }, 180_000);

    it('a node whose host key changed is refused, showing both fingerprints', async () => {
      const deadline = Date.now() + 60_000;
      while (!(await sshBanner(cmpAddress, 22, 1000)) && Date.now() < deadline) await sleep(200);
      const knownHosts = labPaths(lab.inventory).knownHosts;
      const saved = readFileSync(knownHosts, 'utf8');
      const real = parsePublicKey(readFileSync(join(labPaths(lab.inventory).hostKeyDir, 'cmp-0_ed25519.pub'), 'utf8'));
      const impostor = generateEd25519('impostor').publicKey;
      // cmp-0's line (all its addresses) now names another key, as after a reinstall.
      const lines = saved
        .split('\n')
        .map((l) => (l.split(' ')[0]!.split(',').includes(cmpAddress) ? l.replace(real.line, impostor.line) : l));
      expect(lines.join('\n')).not.toBe(saved);
      writeFileSync(knownHosts, lines.join('\n'));
      try {
        await asControllers(async () => {
          const { report, text } = await lab.deploy({ services: 'memcached', roles: roles(), maxFailPercent: 50 });
          expect(report?.failures).toHaveLength(1);
          const f = report!.failures[0]!;
          expect(f).toMatchObject({ node: 'cmp-0', path: 'step 2/cmp-0/observe' });
          expect(f.message).toContain(real.fingerprint);
          expect(f.message).toContain(impostor.fingerprint);
          expect(text).toContain(real.fingerprint);
          expect(text).toContain(impostor.fingerprint);
        });
      } finally {
        writeFileSync(knownHosts, saved);
      }
    }, 120_000);
  });

  describe('the whole cloud: the compute tier on top', () => {
    let openrc = '';
    // cmp-0 was powered off and on by the tests above: its cached SSH connection is dead.
    beforeAll(() => lab.reconnect());
    /** `openstack ...` on the deploy host with the admin openrc; JSON output parsed. */
    const os = async <T>(args: string): Promise<T> =>
      JSON.parse(await clientWithOpenrc(openrc, `${args} -f json`)) as T;

    it('deploys Glance, Placement, Neutron and Nova; the compute is discovered, up, and reports to Placement', async () => {
      const t0 = Date.now();
      const { report, text } = await lab.deploy();
      const s = ((Date.now() - t0) / 1000).toFixed(1);
      process.stderr.write(
        `deploy of the whole cloud on top of the identity tier: ${s} s (${report?.steps.map((x) => `step ${x.step} ${(x.ms / 1000).toFixed(1)} s`).join(', ')})\n`,
      );
      expect(report?.ok, text).toBe(true);
      // users and endpoints at the end of step 3, before the services that log in as them start
      for (const svc of ['glance', 'placement', 'neutron-server', 'nova-api'])
        expect(text).toMatch(new RegExp(`step 3 ctl-0: register ${svc}/\\w+ ran`));
      expect(text).toMatch(/step 4 cmp-0: container nova_compute created/);
      expect(text).toMatch(/step 5 ctl-0: task nova-api\/discover-hosts ran/);
      expect(text).toMatch(
        /step 5 ctl-0: resources nova-api\/flavors-images ran \(flavor m1.tiny created, image lab-tiny created, [^)\n]*network public created[^)\n]*router demo-router created[^)\n]*\)/,
      );

      openrc = join(temp('stackctl-openrc-'), 'admin.openrc');
      expect((await runCli('openrc', '-i', lab.inventory, '-o', openrc)).code).toBe(0);
      const services =
        await os<{ Binary: string; Host: string; State: string; Status: string }[]>('compute service list');
      expect(services.map((x) => `${x.Binary} ${x.Host} ${x.Status} ${x.State}`).sort()).toEqual([
        'nova-compute cmp-0 enabled up',
        'nova-conductor ctl-0 enabled up',
        'nova-scheduler ctl-0 enabled up',
      ]);
      const hypervisors =
        await os<{ 'Hypervisor Hostname': string; 'Hypervisor Type': string; State: string }[]>('hypervisor list');
      expect(hypervisors.map((h) => `${h['Hypervisor Hostname']} ${h['Hypervisor Type']} ${h.State}`)).toEqual([
        'cmp-0 fake up',
      ]);
      // the catalog: every service on both VIPs
      const endpoints = await os<{ 'Service Type': string; Interface: string; URL: string }[]>('endpoint list');
      for (const [type, port] of [
        ['image', 9292],
        ['placement', 8778],
        ['network', 9696],
        ['compute', 8774],
      ] as const) {
        expect(endpoints).toContainEqual(
          expect.objectContaining({
            'Service Type': type,
            Interface: 'public',
            URL: expect.stringContaining(`${EXTERNAL_VIP}:${port}`),
          }),
        );
        expect(endpoints).toContainEqual(
          expect.objectContaining({
            'Service Type': type,
            Interface: 'internal',
            URL: expect.stringContaining(`${INTERNAL_VIP}:${port}`),
          }),
        );
      }
    }, 1_500_000);

    it('openstack server create reaches ACTIVE on the compute node; server delete cleans it up', async () => {
      const t0 = Date.now();
      const server = await os<{ id: string; status: string; 'OS-EXT-SRV-ATTR:host': string }>(
        '--os-compute-api-version 2.37 server create --flavor m1.tiny --image lab-tiny --nic none --wait ci-server',
      );
      process.stderr.write(`server create --wait: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
      expect(server.status).toBe('ACTIVE');
      expect(server['OS-EXT-SRV-ATTR:host']).toBe('cmp-0');
      // Nova's fake driver keeps its instances in nova-compute's memory: the compute knows it by uuid
      const actions = await os<{ Action: string }[]>(`server event list ${server.id}`);
      expect(actions.map((a) => a.Action)).toContain('create');

      await clientWithOpenrc(openrc, `server delete --wait ${server.id}`);
      const left = await os<{ ID: string }[]>('server list --all-projects');
      expect(left.map((x) => x.ID)).not.toContain(server.id);
    }, 300_000);

    it('stackctl status: every container healthy and as planned, the compute up in Nova', async () => {
      // Neutron (Zed) may list a chassis registered during the deploy with its first agent type and
      // not alive until its next health round (its agent_down_time / 2): asked again for up to 2 min
      // Each unhealthy answer's findings are printed: what lags after a deploy, and for how long.
      const t0 = Date.now();
      const ask = async () => {
        const r = await runCli('status', '-i', lab.inventory, '--json');
        const report = JSON.parse(r.stdout) as StatusReport;
        const findings = report.findings.map((f) => `${f.node} ${f.subject}: ${f.message}`).join('; ');
        if (r.code !== 0)
          process.stderr.write(`status at ${((Date.now() - t0) / 1000).toFixed(1)} s: exit ${r.code}: ${findings}\n`);
        return { code: r.code, report, findings };
      };
      let a = await ask();
      for (let i = 0; a.code !== 0 && i < 12; i++) {
        await sleep(10_000);
        a = await ask();
      }
      expect(a.report.openstack?.state, a.findings).toBe('ok');
      expect(a.report.openstack?.computeServices?.find((c) => c.binary === 'nova-compute')).toMatchObject({
        host: 'cmp-0',
        state: 'up',
      });
      expect(a.code, a.findings).toBe(0);
    }, 420_000);

    it('a second deploy of the whole cloud changes nothing', async () => {
      const before = await lab.startedAt();
      const t0 = Date.now();
      const { report, text } = await lab.deploy();
      process.stderr.write(`no-op redeploy of the whole cloud: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
      expect(report?.ok, text).toBe(true);
      expect(report?.changes, text).toBe(0);
      expect(await lab.startedAt()).toEqual(before);
    }, 300_000);

    it("the libvirt driver with KVM on a compute without it: the deploy stops in cmp-0's host preparation, before step 1, and changes nothing", async () => {
      const before = await lab.startedAt();
      await withInventory(
        (t) =>
          t
            .replace('nova_compute_driver: fake.FakeDriver', 'nova_compute_driver: libvirt.LibvirtDriver')
            .replace('nova_virt_type: qemu', 'nova_virt_type: kvm'),
        async () => {
          const dry = await lab.deploy({ dryRun: true });
          expect(dry.text).toMatch(/4\s+cmp-0\s+host\s+nova-compute\s+check\s+modules kvm_intel\|kvm_amd, vhost_net/);
          const { report, text } = await lab.deploy();
          expect(report?.ok, text).toBe(false);
          process.stderr.write(`libvirt without KVM: ${text.split('\n').find((l) => l.startsWith('FAILED')) ?? '?'}\n`);
          // A lab node is a container: it shares this machine's kernel (whose KVM module may be
          // loaded) but gets no /dev/kvm; either way cmp-0 is refused for what it lacks.
          expect(report?.failures).toEqual([
            expect.objectContaining({
              node: 'cmp-0',
              path: 'step 4/cmp-0/host nova-compute',
              class: 'retryable',
              code: expect.stringMatching(/^E_HOST_(MODULE|DEVICE)$/),
              message: expect.stringMatching(
                /^cmp-0: nova-compute needs (the kernel module kvm_intel or kvm_amd|\/dev\/kvm)/,
              ),
            }),
          ]);
          expect(text).toMatch(/hint: For KVM, turn on the CPU's virtualisation \(VT-x or AMD-V\)/);
          expect(text).toMatch(
            /aborted in the host preparation, before step 1: failure budget exceeded by Compute \(1\/1\)/,
          );
          expect(report?.steps).toEqual([]);
          expect(report?.changes).toBe(0);
        },
      );
      expect(await lab.startedAt()).toEqual(before);
      const cmp = lab.remote('cmp-0');
      expect((await cmp.exec(['ls', '/etc/modules-load.d'], { timeoutMs: 10_000 })).stdout).not.toMatch(/stackctl/);
      expect(await cmp.docker.inspectContainer('nova_libvirt')).toBeUndefined();
    }, 300_000);

    it('a compute that cannot reach RabbitMQ fails step 4, naming the node and the AMQP error from its log', async () => {
      const cmp = lab.remote('cmp-0');
      const rule = ['OUTPUT', '-p', 'tcp', '--dport', '5672', '-j', 'REJECT'];
      expect((await cmp.exec(['iptables', '-I', ...rule], { timeoutMs: 10_000 })).code).toBe(0);
      try {
        await cmp.docker.removeContainer('nova_compute', { force: true });
        const { report, text } = await lab.deploy({ services: 'nova-compute' });
        expect(report?.ok, text).toBe(false);
        expect(report?.failures).toHaveLength(1);
        expect(report?.failures[0]).toMatchObject({ node: 'cmp-0', path: 'step 4/cmp-0/nova_compute/health' });
        expect(text).toMatch(/E_HEALTH_TIMEOUT: cmp-0: container nova_compute \(nova-compute\) not healthy/);
        expect(text).toMatch(/impl_rabbit .*Connection failed: .*ECONNREFUSED/);
      } finally {
        await cmp.exec(['iptables', '-D', ...rule], { timeoutMs: 10_000 });
        process.exitCode = undefined;
      }
      // The queue reachable again, a fresh compute is healthy and reports.
      await cmp.docker.removeContainer('nova_compute', { force: true });
      const again = await lab.deploy({ services: 'nova-compute,nova-api' });
      expect(again.report?.ok, again.text).toBe(true);
    }, 600_000);
  });

  /** The upload of memcached's options as the last run recorded it. */
  function lastUpload() {
    const done = journal().filter((r) => r.type === 'effect' && r.state === 'done' && r.effect.kind === 'upload');
    const last = done[done.length - 1];
    if (!last || !('effect' in last)) throw new Error('no upload in the journal');
    return last.effect;
  }
});
