import { createConnection } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll, planOf } from '../../../src/cli/context.js';
import { executeDeploy, plainRunner } from '../../../src/orchestrator/executor.js';
import { MemoryJournal } from '../../../src/orchestrator/journal.js';
import { planDeploy } from '../../../src/orchestrator/planner.js';
import { openPool, remoteFor } from '../../../src/remote/index.js';
import { deployLab } from '../lab.js';

const lab = deployLab('deploydb', '10.92', 300);
const DB_ADDRESS = `${lab.prefix}.20.10`;

/** True when a TCP connection to host:port succeeds. */
const tcpOpen = (host: string, port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = createConnection({ host, port });
    s.setTimeout(3000, () => (s.destroy(), resolve(false)));
    s.on('connect', () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
  });

describe('stackctl deploy: MariaDB single node on lab container nodes', () => {
  beforeAll(() => lab.up(['memcached', 'mariadb']), 900_000);
  afterAll(() => lab.down(), 120_000);

  it('starts MariaDB and memcached at step 2, healthy through the rendered client.cnf', async () => {
    const t0 = Date.now();
    const { report, text } = await lab.deploy({ services: 'mariadb,memcached' });
    process.stderr.write(`deploy mariadb + memcached: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(report?.ok, text).toBe(true);
    expect(text).toMatch(/container mariadb created/);
    expect(await tcpOpen(DB_ADDRESS, 3306)).toBe(true);
    const r = await lab
      .ctl()
      .docker.exec('mariadb', [
        'mariadb',
        '--defaults-extra-file=/etc/mysql/mariadb.conf.d/stackctl/client.cnf',
        '-N',
        '-e',
        'SELECT @@bind_address, @@wsrep_on',
      ]);
    expect(r.stdout.trim().split(/\s+/)).toEqual([DB_ADDRESS, '0']);
    const again = await lab.deploy({ services: 'mariadb,memcached' });
    expect(again.report?.changes, again.text).toBe(0);
  });

  it("creates a service's database and user at step 3 on the bootstrap node, once", async () => {
    // The keystone database without Keystone's own tasks: the database action alone.
    const all = loadAll({ inventory: lab.inventory });
    const { effective: plan, rendered } = planOf(all);
    const full = planDeploy(plan, all.catalog, { services: ['keystone'], steps: [3] });
    const dbOnly = {
      ...full,
      steps: full.steps.map((s) => ({ ...s, nodes: [], runOnce: s.runOnce.filter((w) => w.kind === 'database') })),
    };
    expect(dbOnly.steps.flatMap((s) => s.runOnce).map((w) => w.name)).toEqual(['keystone']);
    const pool = openPool(lab.inventory);
    const connect = (name: string) =>
      remoteFor(pool, { name, address: all.allocation.addresses.get(name)!.provisioning! });
    const secret = (n: string) => all.secrets!.services.get(n);
    try {
      const journal = new MemoryJournal();
      const events: string[] = [];
      const deps = {
        connect,
        rendered,
        journal,
        emit: (e: { kind: string }) => void events.push(JSON.stringify(e)),
        secret,
        runner: plainRunner,
      };
      const first = await executeDeploy(dbOnly, deps);
      expect(first.ok, JSON.stringify(first.failures)).toBe(true);
      expect(first.changes).toBe(1);
      const second = await executeDeploy(dbOnly, deps);
      expect(second.changes).toBe(0); // the marker on the node says it is done
      // The user logs in with its password (passed through the environment, never argv).
      const r = await connect('ctl-0').exec(
        [
          'docker',
          'exec',
          '-e',
          'MYSQL_PWD',
          'mariadb',
          'mariadb',
          '-ukeystone',
          `-h${DB_ADDRESS}`,
          '-N',
          '-e',
          'SHOW DATABASES LIKE "keystone"',
        ],
        { timeoutMs: 30_000, env: { MYSQL_PWD: secret('keystone_db_password')! } },
      );
      expect(r.stdout.trim(), r.stderr).toBe('keystone');
      expect(events.join('\n')).not.toContain(secret('keystone_db_password')!.reveal());
    } finally {
      await pool.close();
    }
  });
});

describe('stackctl deploy: HAProxy + keepalived, MariaDB, memcached, Keystone on lab container nodes', () => {
  const cp = deployLab('deploycp', '10.91', 600);
  const SERVICES = 'haproxy,keepalived,mariadb,memcached,keystone';
  const VIP = `${cp.prefix}.20.250`;
  beforeAll(() => cp.up(['haproxy', 'keepalived', 'mariadb', 'memcached', 'keystone']), 900_000);
  afterAll(() => cp.down(), 120_000);

  it('steps 1-4: the VIP on ctl-0, the keystone database, db_sync and bootstrap, and a token through the VIP', async () => {
    const t0 = Date.now();
    const { report, text } = await cp.deploy({ services: SERVICES });
    process.stderr.write(`deploy ${SERVICES}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n${text}`);
    expect(report?.ok, text).toBe(true);
    expect(text).toMatch(/database keystone\/keystone ran/);
    expect(text).toMatch(/task keystone\/db-sync ran/);
    expect(text).toMatch(/task keystone\/bootstrap ran/);
    const addr = await cp.ctl().exec(['ip', '-o', '-4', 'addr', 'show'], { timeoutMs: 10_000 });
    expect(addr.stdout).toContain(`${VIP}/32`);
    expect(await tcpOpen(VIP, 5000)).toBe(true);
    const all = loadAll({ inventory: cp.inventory });
    const issue = () =>
      cp
        .ctl()
        .exec(
          [
            'docker',
            'exec',
            '-e',
            'OS_PASSWORD',
            'keystone',
            'openstack',
            `--os-auth-url=http://${VIP}:5000/v3`,
            '--os-username=admin',
            '--os-project-name=admin',
            '--os-user-domain-name=Default',
            '--os-project-domain-name=Default',
            '--os-identity-api-version=3',
            'token',
            'issue',
            '-f',
            'value',
            '-c',
            'expires',
          ],
          { timeoutMs: 60_000, env: { OS_PASSWORD: all.secrets!.services.get('keystone_admin_password')! } },
        );
    // HAProxy marks the backend up after two good checks (inter 2 s) once uwsgi answers.
    let token = await issue();
    for (let n = 0; n < 30 && token.code !== 0; n++) {
      await new Promise((r) => setTimeout(r, 1000));
      token = await issue();
    }
    expect(token.code, token.stderr).toBe(0);
    expect(token.stdout.trim()).toMatch(/^\d{4}-\d\d-\d\d/);

    const t1 = Date.now();
    const again = await cp.deploy({ services: SERVICES });
    process.stderr.write(`no-op redeploy of ${SERVICES}: ${((Date.now() - t1) / 1000).toFixed(1)} s\n`);
    expect(again.report?.changes, again.text).toBe(0);
  });
});
