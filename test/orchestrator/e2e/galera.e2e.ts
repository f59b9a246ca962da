/**
 * Outages of the control plane on a 3ctl-2comp container lab (HAProxy, keepalived, MariaDB Galera,
 * memcached, Keystone): HAProxy killed on the VIP holder, then the Galera drills, each run
 * STACKCTL_GALERA_DRILLS times (default 3), each checking a marker row written just before its outage:
 * (a) every controller killed (SIGKILL of its node container) and started again in random order:
 *     the deploy finds the cluster back (Galera's pc.recovery) or restarts it from the most advanced
 *     member; 3 members Synced, the cluster UUID unchanged;
 * (b) two controllers come back, the third stays down: a deploy fails on them with the cluster's
 *     diagnosis and the recover command, `status` shows it, `recover galera` refuses until told to go
 *     on without the third, then the two form a primary component with the data;
 * (c) the bootstrap node's data removed while the others are down: deploy and `recover galera`
 *     refuse, nothing is founded anywhere; once the others are back, a deploy restarts the cluster
 *     from them and the wiped node joins by state transfer.
 * `npm run test:e2e:galera` (under the machine lock); it prints N/N and the time of each iteration.
 */
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../helpers/cli.js';
import { deployLab } from '../lab.js';

const NAME = 'galera';
const lab = deployLab(NAME, '10.93', 950, { topology: '3ctl-2comp', registryPort: 15091, bmcPort: 16730 });
const IMAGES = ['haproxy', 'keepalived', 'mariadb', 'memcached', 'keystone'];
const SERVICES = IMAGES.join(',');
const CONTROLLERS = ['ctl-0', 'ctl-1', 'ctl-2'];
const CLIENT_CNF = '/etc/mysql/mariadb.conf.d/stackctl/client.cnf';
const ITERATIONS = Number(process.env.STACKCTL_GALERA_DRILLS ?? '3');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const seconds = (t0: number): number => Math.round((Date.now() - t0) / 100) / 10;
const shuffle = <T>(xs: readonly T[]): T[] => {
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
};
const nodeContainer = (node: string): string => `stackctl-${NAME}-${node}`;

/** Lines printed at the end: phase timings and each drill's iterations. */
const report: string[] = [];

/** Retry an async check until it passes or `s` seconds ran out (then its last failure stands). */
async function eventually(s: number, check: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + s * 1000;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await sleep(2000);
    }
  }
}

/** SQL through a controller's own client.cnf; stdout, or the error text. */
async function sql(node: string, query: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return lab
    .remote(node)
    .docker.exec('mariadb', ['mariadb', `--defaults-extra-file=${CLIENT_CNF}`, '-N', '-e', query], {
      timeoutMs: 30_000,
    })
    .catch((e: unknown) => ({ code: -1, stdout: '', stderr: String(e) }));
}

/** wsrep status variables of a member. */
async function wsrep(node: string): Promise<Record<string, string>> {
  const r = await sql(
    node,
    "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_size', 'wsrep_local_state_comment', " +
      "'wsrep_cluster_status', 'wsrep_cluster_state_uuid')",
  );
  expect(r.code, `${node}: ${r.stderr}`).toBe(0);
  return Object.fromEntries(
    r.stdout
      .trim()
      .split('\n')
      .map((l) => l.split('\t') as [string, string]),
  );
}

/** The members Synced in one primary component of `size`, with the cluster UUID `uuid` and the marker `token`. */
async function expectCluster(members: readonly string[], size: number, uuid: string, token: string): Promise<void> {
  for (const n of members) {
    expect(await wsrep(n), n).toMatchObject({
      wsrep_cluster_size: String(size),
      wsrep_local_state_comment: 'Synced',
      wsrep_cluster_status: 'Primary',
      wsrep_cluster_state_uuid: uuid,
    });
    const r = await sql(n, 'SELECT note FROM drill.marker WHERE id = 1');
    expect(r.stdout.trim(), `${n}: the marker row written before the outage`).toBe(token);
  }
}

/** A new marker row value, written through ctl-`writer` and replicated; returns it with the cluster UUID. */
async function writeMarker(writer: string): Promise<{ token: string; uuid: string }> {
  const token = `before-${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
  const r = await sql(
    writer,
    'CREATE DATABASE IF NOT EXISTS drill; CREATE TABLE IF NOT EXISTS drill.marker (id INT PRIMARY KEY, note VARCHAR(64)); ' +
      `REPLACE INTO drill.marker VALUES (1, '${token}')`,
  );
  expect(r.code, r.stderr).toBe(0);
  const uuid = (await wsrep(writer)).wsrep_cluster_state_uuid!;
  // every member has it before the outage (Galera replicates synchronously; this is the check)
  for (const n of CONTROLLERS)
    expect((await sql(n, 'SELECT note FROM drill.marker WHERE id = 1')).stdout.trim()).toBe(token);
  return { token, uuid };
}

/** SIGKILL the node containers (a power loss of the whole control plane). */
function killNodes(nodes: readonly string[]): void {
  execFileSync('docker', ['kill', ...nodes.map(nodeContainer)], { stdio: 'ignore' });
}

/** Start node containers one after the other, a random 0-4 s apart; then wait for their dockerd. */
async function startNodes(nodes: readonly string[]): Promise<void> {
  for (const [i, n] of nodes.entries()) {
    if (i > 0) await sleep(Math.floor(Math.random() * 4000));
    execFileSync('docker', ['start', nodeContainer(n)], { stdio: 'ignore' });
  }
  await lab.reconnect();
  for (const n of nodes) {
    await eventually(120, async () => {
      await lab.remote(n).docker.version();
    });
  }
}

/** Bring every controller back to a 3-member cluster (after a drill, whatever it left). */
async function restoreAll(): Promise<void> {
  const down = CONTROLLERS.filter(
    (n) =>
      execFileSync('docker', ['inspect', '-f', '{{.State.Running}}', nodeContainer(n)])
        .toString()
        .trim() !== 'true',
  );
  if (down.length) await startNodes(down);
  const { report: r, text } = await lab.deploy({ services: 'mariadb' });
  process.exitCode = undefined;
  expect(r?.ok, text).toBe(true);
}

/** Run `drill` ITERATIONS times; each outcome and time goes to the report; all must pass. */
async function iterate(title: string, drill: (i: number) => Promise<string>): Promise<void> {
  const failures: string[] = [];
  let passed = 0;
  for (let i = 1; i <= ITERATIONS; i++) {
    const t0 = Date.now();
    try {
      const note = await drill(i);
      passed++;
      report.push(`  ${title} #${i}: ok in ${seconds(t0)} s (${note})`);
    } catch (err) {
      failures.push(`#${i}: ${err instanceof Error ? err.message : String(err)}`);
      report.push(`  ${title} #${i}: FAILED in ${seconds(t0)} s`);
      await restoreAll().catch((e: unknown) => report.push(`  restore after ${title} #${i} failed: ${String(e)}`));
    }
  }
  report.push(`  ${title}: ${passed}/${ITERATIONS}`);
  expect(failures, title).toEqual([]);
}

describe('outages on 3 controllers: HAProxy on the VIP holder, Galera after a full outage (3ctl-2comp)', () => {
  beforeAll(async () => {
    await lab.up(IMAGES);
    report.push(`  lab up ${lab.timings.labUpS} s, image push ${lab.timings.pushS} s`);
    const t0 = Date.now();
    const { report: r, text } = await lab.deploy({ services: SERVICES });
    report.push(`  deploy of ${SERVICES}: ${seconds(t0)} s`);
    expect(r?.ok, text).toBe(true);
    // The first deploy founded the cluster through the permit of its check of every member.
    const log = await lab.remote('ctl-0').docker.logs('mariadb', { tail: 2000 });
    expect((log.stdout + log.stderr).split('\n').filter((l) => l.startsWith('galera: '))).toEqual([
      'galera: waiting: no cluster state in /var/lib/mysql and no peer answers; the other members may hold the data, so this node founds no cluster unless stackctl found that none does',
      expect.stringMatching(
        /^galera: founding a new cluster: deploy run \w+: no member holds data \(ctl-0, ctl-1, ctl-2 read\)$/,
      ),
    ]);
  }, 1_800_000);
  afterAll(async () => {
    process.stderr.write(`\ntest:e2e:galera (${ITERATIONS} iteration(s) per drill)\n${report.join('\n')}\n`);
    await lab.down();
  }, 600_000);

  it('HAProxy killed on the VIP holder: the VIP moves within 5 s, a token through it; HAProxy back, the VIP stays put', async () => {
    const holder = await lab.vipHolder(CONTROLLERS);
    expect(holder, 'a controller holds the VIP').toBeDefined();
    const others = CONTROLLERS.filter((n) => n !== holder);
    const t0 = Date.now();
    const k = await lab.remote(holder!).exec(['docker', 'kill', 'haproxy'], { timeoutMs: 30_000 });
    expect(k.code, k.stderr).toBe(0);
    let moved: string | undefined;
    while (!moved && Date.now() - t0 < 15_000) {
      moved = await lab.vipHolder(others);
      if (!moved) await sleep(100);
    }
    const s = seconds(t0);
    report.push(`  docker kill haproxy on ${holder} -> VIP on ${moved ?? 'nobody'}: ${s} s`);
    expect(moved, 'the VIP on another controller').toBeDefined();
    expect(s).toBeLessThanOrEqual(5);
    expect(await lab.vipHolder([holder!]), 'the old holder gave the VIP up').toBeUndefined();
    const t1 = Date.now();
    const token = await lab.issueToken(moved!, 30);
    report.push(`  token through the VIP after the move: ${seconds(t1)} s`);
    expect(token.code, token.stderr).toBe(0);

    // HAProxy back (a redeploy starts it): the VIP does not bounce back (nopreempt), for 20 s.
    const { report: r, text } = await lab.deploy({ services: 'haproxy,keepalived' });
    expect(r?.ok, text).toBe(true);
    expect(text).toMatch(new RegExp(`step 1 ${holder}: container haproxy started`));
    const holders = new Set<string>();
    for (let i = 0; i < 40; i++) {
      holders.add((await lab.vipHolder(CONTROLLERS)) ?? 'nobody');
      await sleep(500);
    }
    expect([...holders]).toEqual([moved]);
    const ka = await lab.remote(holder!).docker.logs('keepalived', { tail: 20 });
    const lines = (ka.stdout + ka.stderr).split('\n');
    const fault = lines.findLastIndex((l) => l.includes('(VIP_internal_api) Entering FAULT STATE'));
    const backup = lines.findLastIndex((l) => l.includes('(VIP_internal_api) Entering BACKUP STATE'));
    expect(fault, lines.join('\n')).toBeGreaterThanOrEqual(0);
    expect(backup, 'back as BACKUP after HAProxy answers again').toBeGreaterThan(fault);
  }, 300_000);

  it('(a) all three controllers killed and started in random order: back with 3 members Synced and the marker row', async () => {
    await iterate('(a) all killed', async () => {
      const { token, uuid } = await writeMarker('ctl-0');
      killNodes(CONTROLLERS);
      const order = shuffle(CONTROLLERS);
      await startNodes(order);
      const t0 = Date.now();
      const { report: r, text } = await lab.deploy({ services: 'mariadb' });
      process.exitCode = undefined;
      expect(r?.ok, text).toBe(true);
      await expectCluster(CONTROLLERS, 3, uuid, token);
      const how = text.includes('cluster galera recovery') ? 'restarted by the deploy' : "Galera's pc.recovery";
      return `started ${order.join(', ')}; ${how}; deploy ${seconds(t0)} s`;
    });
  }, 7_200_000);

  it('(b) two of three come back: refused until the missing one is named, then a primary component of two with the data', async () => {
    await iterate('(b) two of three', async () => {
      const { token, uuid } = await writeMarker('ctl-0');
      killNodes(CONTROLLERS);
      const [lost, ...back] = shuffle(CONTROLLERS) as [string, string, string];
      await startNodes(shuffle(back));
      await sleep(10_000); // their servers try to restore the old primary component, which needs the third
      // A deploy that leaves their servers unchanged does not call this converged: it fails on both,
      // with every member's state and the exact command to run.
      const d = await lab.deploy({ services: 'mariadb', maxFailPercent: 34 });
      process.exitCode = undefined;
      expect(d.report?.ok, d.text).toBe(false);
      for (const n of back) {
        const f = d.report!.failures.find((x) => x.node === n);
        expect(f, d.text).toMatchObject({ code: 'E_GALERA_MEMBER_UNREACHABLE', path: `step 2/${n}/mariadb/health` });
        expect(f!.hint).toContain(`stackctl recover galera -i ${lab.inventory} --without ${lost}`);
        expect(f!.message).toMatch(new RegExp(`^ {2}${n}: .*grastate uuid ${uuid}`, 'm'));
      }
      // status explains it the same way
      const st = await runCli('status', '-i', lab.inventory, '--services', 'mariadb');
      expect(st.stdout).toContain('no member runs a primary component');
      expect(st.stdout).toMatch(new RegExp(`grastate uuid ${uuid}, seqno -1`));
      const refused = await runCli('recover', 'galera', '-i', lab.inventory);
      expect(refused.code, refused.stdout + refused.stderr).toBe(5);
      expect(refused.stderr).toMatch(new RegExp(`error E_GALERA_MEMBER_UNREACHABLE: .*${lost} could not be read`));
      expect(refused.stderr).toContain(`--without ${lost}`);
      const t0 = Date.now();
      const ok = await runCli('recover', 'galera', '-i', lab.inventory, '--without', lost);
      expect(ok.code, ok.stdout + ok.stderr).toBe(0);
      const chosen = /^decision: bootstrap (ctl-\d)/m.exec(ok.stdout)?.[1];
      expect(back).toContain(chosen);
      await expectCluster(back, 2, uuid, token);
      const s = seconds(t0);
      await restoreAll();
      await expectCluster(CONTROLLERS, 3, uuid, token);
      return `${lost} stayed down; recover --without ${lost} ${s} s, bootstrapped ${chosen}`;
    });
  }, 7_200_000);

  it("(c) the bootstrap node's data removed while the others are down: refused, nothing founded; then restarted from the others", async () => {
    await iterate('(c) wiped bootstrap node', async () => {
      const { token, uuid } = await writeMarker('ctl-1');
      killNodes(CONTROLLERS);
      await startNodes(['ctl-0']);
      const wipe = await lab
        .remote('ctl-0')
        .exec(['sh', '-c', 'docker rm -f mariadb && docker volume rm mariadb_data'], { timeoutMs: 60_000 });
      expect(wipe.code, wipe.stderr).toBe(0);
      // The deploy goes on without the two unreachable nodes (budget), recreates ctl-0's server, and refuses.
      const d = await lab.deploy({ services: 'mariadb', maxFailPercent: 67 });
      process.exitCode = undefined;
      expect(d.report?.ok, d.text).toBe(false);
      const f = d.report!.failures.find((x) => x.node === 'ctl-0');
      expect(f, d.text).toMatchObject({ code: 'E_GALERA_MEMBER_UNREACHABLE', path: 'step 2/ctl-0/mariadb/start' });
      expect(f!.message).toMatch(/ctl-1, ctl-2 could not be read.*may hold the newest data/s);
      const r1 = await runCli('recover', 'galera', '-i', lab.inventory);
      expect([r1.code, /error (E_\w+)/.exec(r1.stderr)?.[1]]).toEqual([5, 'E_GALERA_MEMBER_UNREACHABLE']);
      const r2 = await runCli('recover', 'galera', '-i', lab.inventory, '--without', 'ctl-1,ctl-2');
      expect([r2.code, /error (E_\w+)/.exec(r2.stderr)?.[1]]).toEqual([5, 'E_GALERA_NO_DATA']);
      // Nothing founded: ctl-0's start.sh waits, its server never ran, its datadir has no cluster UUID.
      const ctl0 = lab.remote('ctl-0');
      const log = await ctl0.docker.logs('mariadb', { tail: 200 });
      const galeraLines = (log.stdout + log.stderr).split('\n').filter((l) => l.startsWith('galera: '));
      expect(galeraLines[0]).toMatch(/^galera: waiting: no cluster state/);
      expect(galeraLines.filter((l) => /founding|restarting the cluster|joining/.test(l))).toEqual([]);
      const ps = await ctl0.docker.exec('mariadb', ['sh', '-c', 'pgrep -x mariadbd || echo none']);
      expect(ps.stdout.trim()).toBe('none');
      const gs = await ctl0.exec(['sh', '-c', 'cat /var/lib/docker/volumes/mariadb_data/_data/grastate.dat || true'], {
        timeoutMs: 10_000,
      });
      expect(gs.stdout).not.toMatch(/uuid:\s+[0-9a-f]{8}-(?!0000-0000-0000)/);

      // The others back: their old primary component lacks ctl-0 (wiped), so the deploy restarts the
      // cluster from the most advanced of them, and ctl-0 joins by SST.
      await startNodes(shuffle(['ctl-1', 'ctl-2']));
      const t0 = Date.now();
      const again = await lab.deploy({ services: 'mariadb' });
      process.exitCode = undefined;
      expect(again.report?.ok, again.text).toBe(true);
      expect(again.text).toMatch(/cluster galera recovery \(decision: bootstrap ctl-[12] /);
      await expectCluster(CONTROLLERS, 3, uuid, token);
      return `refused; deploy with ctl-1, ctl-2 back ${seconds(t0)} s`;
    });
  }, 7_200_000);
});
