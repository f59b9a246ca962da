/**
 * `stackctl status` against a real `1ctl-1comp` container lab with the
 * identity tier deployed: everything healthy, then a drifted setting, a
 * stopped container and a node powered off, each seen as an operator would.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import { ExitCode } from '../../src/core/errors.js';
import type { StatusReport } from '../../src/status/model.js';
import { STATUS_EXIT } from '../../src/status/verdict.js';
import { deployLab } from '../orchestrator/lab.js';
import { runCli } from '../helpers/cli.js';

const lab = deployLab('statuslab', '10.86', 700);
const SERVICES = 'haproxy,keepalived,mariadb,memcached,keystone';
const IMAGES = ['haproxy', 'keepalived', 'mariadb', 'memcached', 'keystone'];
/** The containers the identity tier puts on ctl-0. */
const CONTAINERS = ['haproxy', 'keepalived', 'mariadb', 'mariadb_clustercheck', 'memcached', 'keystone'];
const TAG = 'zed-1';

const status = async (...extra: string[]) => runCli('status', '-i', lab.inventory, '--services', SERVICES, ...extra);
const statusJson = async (): Promise<{ code: number; report: StatusReport }> => {
  const r = await status('--json');
  return { code: r.code, report: JSON.parse(r.stdout) as StatusReport };
};
const secret = (name: string): string => loadAll({ inventory: lab.inventory }).secrets!.services.get(name)!.reveal();

describe('stackctl status on a 1ctl-1comp lab with the identity tier', () => {
  beforeAll(async () => {
    await lab.up(IMAGES);
    const t0 = Date.now();
    const { report, text } = await lab.deploy({ services: SERVICES });
    process.stderr.write(`deploy ${SERVICES}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(report?.ok, text).toBe(true);
    process.exitCode = undefined;
    // A container the bootstrap tasks restarted can still be within its healthcheck's start period.
    const t1 = Date.now();
    for (; Date.now() - t1 < 120_000; await new Promise((r) => setTimeout(r, 2000))) {
      const { report: now } = await statusJson();
      if (!now.findings.some((f) => f.message === 'running but starting')) break;
    }
    process.stderr.write(`healthy ${((Date.now() - t1) / 1000).toFixed(1)} s after the deploy\n`);
  }, 1_200_000);
  afterAll(() => lab.down(), 180_000);

  it('all healthy: every container running, healthy where it has a check, the planned tag, config up to date; exit 0', async () => {
    const t0 = Date.now();
    const { code, report } = await statusJson();
    process.stderr.write(`status (healthy): ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(report.findings).toEqual([]);
    expect(code).toBe(0);
    expect(report).toMatchObject({ version: 1, cloud: 'statuslab', verdict: 'healthy', exitCode: 0 });
    expect(report.services).toEqual(SERVICES.split(','));
    const [ctl, cmp] = report.nodes;
    expect(ctl).toMatchObject({ name: 'ctl-0', role: 'Controller', address: '10.86.24.10', reachable: true });
    expect(cmp).toMatchObject({ name: 'cmp-0', role: 'Compute', reachable: true, containers: [] });
    expect(ctl!.containers.map((c) => c.name).sort()).toEqual([...CONTAINERS].sort());
    for (const c of ctl!.containers) {
      expect(c.state, c.name).toBe('running');
      expect(c.health, c.name).toBe(c.name === 'keepalived' ? 'none' : 'healthy'); // keepalived has no healthcheck
      expect(c.image).toMatchObject({ runningTag: TAG, wantedTag: TAG, matches: true });
      expect(c.image.running).toBe(
        `10.86.24.1:5000/stackctl/${c.name === 'mariadb_clustercheck' ? 'mariadb' : c.name}:${TAG}`,
      );
      expect(c.config).toEqual({ state: 'current', changed: [] });
    }
    expect(ctl!.configFiles.checked).toBeGreaterThan(5);
    expect(ctl!.configFiles.drift).toEqual([]);
    // One MariaDB server: Galera replication is off by design, and that is healthy.
    expect(report.galera).toEqual({
      state: 'ok',
      expected: 1,
      members: [{ node: 'ctl-0', wsrepOn: false, clusterSize: 0, clusterStatus: 'Disconnected' }],
    });
    expect(report.rabbitmq.state).toBe('not deployed');
    expect(report.openstack.state).toBe('not deployed');

    const human = await status();
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^cloud statuslab: HEALTHY \(exit status 0\)/);
    expect(human.stdout).toMatch(/^ctl-0 \(Controller, 10\.86\.24\.10\): reachable/m);
    expect(human.stdout).toMatch(/^ {2}memcached\s+running\s+healthy\s+zed-1\s+up to date$/m);
    expect(human.stdout).toMatch(/^galera: ok \(plan: 1 member\(s\)\)\n {2}ctl-0: standalone \(wsrep off\)$/m);
    for (const s of ['keystone_admin_password', 'mariadb_root_password']) {
      expect(human.stdout + human.stderr).not.toContain(secret(s));
    }
  }, 120_000);

  it('a changed setting: the container would be recreated and its config file rewritten; exit 9 (drift)', async () => {
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace('  settings:\n', '  settings:\n    memcached_memory_mb: 32\n'));
    try {
      const { code, report } = await statusJson();
      expect(code).toBe(STATUS_EXIT.drift);
      expect(report.verdict).toBe('drift');
      const mc = report.nodes[0]!.containers.find((c) => c.name === 'memcached');
      expect(mc).toMatchObject({ state: 'running', config: { state: 'outdated' } });
      expect(mc!.config.changed).toEqual(['config /etc/stackctl/memcached/options']);
      expect(report.nodes[0]!.configFiles.drift).toEqual([
        { path: '/etc/stackctl/memcached/options', detail: 'content changed' },
      ]);
      const human = await status();
      expect(human.stdout).toMatch(
        /memcached\s+running\s+healthy\s+zed-1\s+would be recreated: config \/etc\/stackctl\/memcached\/options/,
      );
    } finally {
      writeFileSync(lab.inventory, text);
    }
  }, 120_000);

  it('a stopped container: named with its node, exit 8 (unhealthy)', async () => {
    await lab.ctl().docker.stopContainer('memcached', { timeoutS: 5 });
    try {
      const r = await status();
      expect(r.code).toBe(STATUS_EXIT.unhealthy);
      expect(r.stdout).toMatch(/^cloud statuslab: UNHEALTHY \(exit status 8\)/);
      expect(r.stdout).toMatch(/^ {2}memcached\s+exited\(\d+\)\s+none\s+zed-1\s+up to date$/m);
      expect(r.stdout).toMatch(/^ {2}unhealthy\s+ctl-0\s+memcached\s+exited \(exit code \d+\)$/m);
      const { report } = await statusJson();
      expect(report.findings).toEqual([
        { severity: 'unhealthy', node: 'ctl-0', subject: 'memcached', message: expect.stringMatching(/^exited/) },
      ]);
    } finally {
      await lab.ctl().docker.startContainer('memcached');
    }
  }, 120_000);

  it('Nova asked for but not deployed: nova_api missing, and the client in keystone, logged in as admin, finds no compute endpoint', async () => {
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
    // The password went in the exec's environment: Keystone accepted it, the catalog has no compute service.
    expect(report.openstack.error).toMatch(
      /^compute service list: openstack exited with 1: .*endpoint for compute service/s,
    );
    expect(report.openstack.error).not.toMatch(/401|Unauthorized|auth-url required/);
    expect(r.stdout + r.stderr).not.toContain(secret('keystone_admin_password'));
  }, 120_000);

  it('a node powered off: reported unreachable with the error, the other node still reported; exit 5', async () => {
    await lab.stopNode('cmp-0');
    const t0 = Date.now();
    const r = await status('--timeout', '20');
    const took = (Date.now() - t0) / 1000;
    process.stderr.write(`status with cmp-0 down: ${took.toFixed(1)} s\n`);
    expect(r.code).toBe(ExitCode.REMOTE);
    expect(r.stdout).toMatch(/^cloud statuslab: UNREACHABLE \(exit status 5\)/);
    expect(r.stdout).toMatch(/^cmp-0 \(Compute, 10\.86\.24\.11\): UNREACHABLE E_\w+: /m);
    expect(r.stdout).toMatch(/^ctl-0 \(Controller, 10\.86\.24\.10\): reachable/m);
    expect(r.stdout).toMatch(/^ {2}keystone\s+running\s+healthy\s+zed-1\s+up to date$/m);
    expect(took).toBeLessThan(40);
    const { code, report } = await statusJson();
    expect(code).toBe(ExitCode.REMOTE);
    const cmp = report.nodes.find((n) => n.name === 'cmp-0')!;
    expect(cmp.reachable).toBe(false);
    expect(cmp.error?.code).toMatch(/^E_/);
    expect(cmp.error?.message).toContain('10.86.24.11');
    expect(report.nodes.find((n) => n.name === 'ctl-0')?.containers).toHaveLength(CONTAINERS.length);
    expect(report.findings.filter((f) => f.severity === 'unreachable').map((f) => f.node)).toEqual(['cmp-0']);
  }, 120_000);
});
