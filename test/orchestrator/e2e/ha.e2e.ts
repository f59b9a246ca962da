/**
 * The HA control plane on a 3ctl-2comp container lab: Galera across the three controllers, a
 * RabbitMQ cluster of three, HAProxy + keepalived holding the VIPs, Keystone behind them; then the
 * keepalived master's node goes down and the cloud keeps issuing tokens. Before the failover, the
 * compute tier with four servers and a live migration, then a rolling update to zed-update (OVN's
 * chassis, then its RAFT members one by one) under a probe of the APIs through the VIP and one of
 * the dataplane (a port on a compute behind a floating IP), and TLS turned on, a certificate renewal and a Fernet key
 * rotation under an HTTPS probe of the public VIP. `npm run test:e2e:ha`.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll, planOf } from '../../../src/cli/context.js';
import { planDeploy } from '../../../src/orchestrator/planner.js';
import type { Remote } from '../../../src/remote/index.js';
import { runUpgrade } from '../../../src/cli/upgrade.js';
import { runCli } from '../../helpers/cli.js';
import { openstack, openstackJson } from '../../helpers/openstack.js';
import {
  buildTargetImages,
  containersOffTarget,
  phaseTimes,
  probeCoverage,
  probeFigures,
  startProbe,
  upgradePlan,
  evacuationFaults,
  type MigrationRecord,
} from '../../upgrade/lab-upgrade.js';
import { plugProbePort, type ProbePort } from '../../upgrade/dataplane.js';
import { gapsBySpan, watchGuest } from '../../../src/workloads/guest-watch.js';
import { CLOUD_IMAGES, deployLab } from '../lab.js';

const REGISTRY_PORT = 15001;
const lab = deployLab('ha', '10.94', 900, { topology: '3ctl-2comp', registryPort: REGISTRY_PORT, bmcPort: 16830 });
const SERVICES = 'haproxy,keepalived,mariadb,rabbitmq,memcached,keystone';
const CONTROLLERS = ['ctl-0', 'ctl-1', 'ctl-2'];
const VIP = lab.internalVip;
const CLIENT_CNF = '/etc/mysql/mariadb.conf.d/stackctl/client.cnf';

/** Phase -> seconds, printed at the end. */
const timings: [string, number][] = [];
const seconds = (t0: number): number => Math.round((Date.now() - t0) / 100) / 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Retry an async assertion until it passes or `seconds` ran out (then its last failure stands). */
async function eventually(seconds: number, check: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await sleep(1000);
    }
  }
}

/** A diagnostics section on stderr: its title, then the last 40 lines of `text`. */
function say(title: string, text: string): void {
  process.stderr.write(`--- ${title}\n${text.trim().split('\n').slice(-40).join('\n')}\n`);
}

/** A shell script on a lab node for a diagnostic: its stdout and stderr, or the error that stopped it. */
async function nodeShell(node: string, script: string): Promise<string> {
  const r = await lab
    .remote(node)
    .exec(['sh', '-c', script], { timeoutMs: 60_000 })
    .catch((e: unknown) => ({ stdout: String(e), stderr: '' }));
  return r.stdout + r.stderr;
}

/**
 * When a server could not be made: what Nova, Placement and the computes say (the fault, the
 * hypervisors and resource providers, the cells' host mappings, the computes', conductors' and
 * schedulers' warnings), on stderr.
 */
async function novaDiagnostics(openrc: string): Promise<void> {
  const tryOs = (args: string): string => {
    try {
      return openstack(openrc, args);
    } catch (err) {
      return String(err);
    }
  };
  say('servers', tryOs('server list --all-projects --long -c Name -c Status -c Host'));
  say('fault of ha-0', tryOs('server show ha-0 -c fault -f value'));
  say('hypervisors', tryOs('hypervisor list'));
  say('resource providers', tryOs('resource provider list'));
  say('compute services', tryOs('compute service list'));
  const logs = async (node: string, container: string): Promise<void> =>
    say(
      `${node} ${container}`,
      await nodeShell(node, `docker logs ${container} 2>&1 | grep -E 'WARNING|ERROR|Traceback' | tail -n 25`),
    );
  for (const node of ['cmp-0', 'cmp-1']) await logs(node, 'nova_compute');
  for (const node of CONTROLLERS) {
    await logs(node, 'nova_conductor');
    await logs(node, 'nova_scheduler');
  }
  const hosts = await lab
    .remote('ctl-0')
    .docker.exec('nova_api', ['sh', '-c', 'nova-manage cell_v2 list_hosts 2>&1'])
    .catch((e: unknown) => ({ stdout: String(e) }));
  say('cell host mappings', hosts.stdout);
}

/** Galera status variables of one node, through its own client.cnf. */
async function galera(node: Remote): Promise<Record<string, string>> {
  const r = await node.docker.exec('mariadb', [
    'mariadb',
    `--defaults-extra-file=${CLIENT_CNF}`,
    '-N',
    '-e',
    "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_size', 'wsrep_local_state_comment', " +
      "'wsrep_cluster_status', 'wsrep_cluster_state_uuid', 'wsrep_ready')",
  ]);
  expect(r.code, r.stderr).toBe(0);
  return Object.fromEntries(
    r.stdout
      .trim()
      .split('\n')
      .map((l) => l.split('\t') as [string, string]),
  );
}

/** `rabbitmqctl cluster_status` of one node, as JSON. */
async function rabbitStatus(
  node: Remote,
): Promise<{ running_nodes: string[]; disk_nodes: string[]; cluster_name: string }> {
  const r = await node.docker.exec('rabbitmq', ['rabbitmqctl', 'cluster_status', '--formatter', 'json'], {
    timeoutMs: 60_000,
  });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as { running_nodes: string[]; disk_nodes: string[]; cluster_name: string };
}

/**
 * When a deploy failed: who holds the VIP, whether each controller reaches Keystone through it
 * and directly, its neighbour entry for the VIP, and keepalived's and HAProxy's last lines, on stderr.
 */
async function vipDiagnostics(): Promise<void> {
  for (const n of CONTROLLERS) {
    const sh = (script: string): Promise<string> => nodeShell(n, script);
    say(`${n} addresses`, await sh('ip -o -4 addr show | grep -v " lo "'));
    say(
      `${n} Keystone through the VIP and directly`,
      await sh(
        `curl -s -o /dev/null -m 5 -w 'vip %{http_code} connect %{time_connect}s\n' http://${VIP}:5000/v3; ` +
          `ip -4 neigh show ${VIP}; ` +
          `for a in $(ip -o -4 addr show | awk '{print $4}' | cut -d/ -f1 | grep '^${lab.prefix}.20.'); do ` +
          `curl -s -o /dev/null -m 5 -w "$a %{http_code}\n" http://$a:5000/v3; done`,
      ),
    );
    say(`${n} keepalived`, await sh('docker logs --tail 15 keepalived 2>&1'));
    say(`${n} haproxy`, await sh('docker logs --tail 15 haproxy 2>&1'));
  }
}

/** HAProxy's view of one proxy's servers on `node`: server name -> status (UP, DOWN, ...). */
async function haproxyServers(node: string, proxy: string): Promise<Record<string, string>> {
  const r = await lab
    .remote(node)
    .docker.exec('haproxy', ['sh', '-c', 'echo "show stat" | socat stdio unix-connect:/run/haproxy/admin.sock']);
  expect(r.code, r.stderr).toBe(0);
  const out: Record<string, string> = {};
  for (const line of r.stdout.split('\n')) {
    const f = line.split(',');
    if (f[0] === proxy && f[1] !== 'FRONTEND' && f[1] !== 'BACKEND') out[f[1]!] = f[17]!;
  }
  return out;
}

/** The dataplane probe's port (plugged by the rolling update's test, watched again in the failover's). */
let dpProbe: ProbePort | undefined;

/** The controller whose member of an OVN database leads its RAFT cluster (`cluster/status`), if one does. */
async function ovnLeader(db: 'nb' | 'sb', nodes: readonly string[]): Promise<string | undefined> {
  const name = db === 'nb' ? 'OVN_Northbound' : 'OVN_Southbound';
  for (const n of nodes) {
    const st = await nodeShell(
      n,
      `docker exec ovn_nb_db ovs-appctl -t /run/ovn/ovn${db}_db.ctl cluster/status ${name}`,
    );
    if (/^Role: leader$/m.test(st)) return n;
  }
  return undefined;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
/** The time of an HAProxy log line (`[23/Nov/2026:08:09:09.196]`, UTC in the container), NaN without one. */
function haproxyLogTime(line: string): number {
  const m = /\[(\d+)\/(\w+)\/(\d+):(\d+):(\d+):(\d+)\.(\d+)\]/.exec(line);
  return m ? Date.UTC(+m[3]!, MONTHS.indexOf(m[2]!), +m[1]!, +m[4]!, +m[5]!, +m[6]!, +m[7]!) : NaN;
}

describe('stackctl deploy: HA control plane on 3 controllers (3ctl-2comp)', () => {
  beforeAll(async () => {
    await lab.up(CLOUD_IMAGES);
    timings.push(
      ['lab up (3ctl-2comp)', lab.timings.labUpS],
      [`image push (${CLOUD_IMAGES.length} images)`, lab.timings.pushS],
    );
  }, 3_600_000); // on a new machine every image is built first
  afterAll(async () => {
    // The timings first: a slow teardown on a busy machine must not hide them.
    const table = (rows: [string, number][]) => rows.map(([k, v]) => `  ${k.padEnd(58)} ${v.toFixed(1)} s`).join('\n');
    process.stderr.write('\ntest:e2e:ha timings\n' + table(timings) + '\n');
    const t0 = Date.now();
    await lab.down();
    process.stderr.write(table([['lab down --purge', seconds(t0)]]) + '\n');
  }, 600_000);

  it('deploys Galera x3 (one bootstrap, two joiners by SST), RabbitMQ x3 and Keystone behind the VIP', async () => {
    const t0 = Date.now();
    const { report, text } = await lab.deploy({ services: SERVICES });
    timings.push(['deploy (total)', seconds(t0)]);
    for (const s of report?.steps ?? []) timings.push([`  deploy step ${s.step}`, s.ms / 1000]);
    process.stderr.write(text);
    expect(report?.ok, text).toBe(true);
    // The joiners waited for the bootstrap node's server and broker.
    for (const n of ['ctl-1', 'ctl-2']) {
      expect(text).toMatch(new RegExp(`step 2 ${n}: container mariadb waited \\(for ctl-0\\)`));
      expect(text).toMatch(new RegExp(`step 2 ${n}: container rabbitmq waited \\(for ctl-0\\)`));
    }

    // Galera: one cluster of three, every member Synced; only ctl-0 founded it.
    const uuids = new Set<string>();
    for (const n of CONTROLLERS) {
      const g = await galera(lab.remote(n));
      expect(g, n).toMatchObject({
        wsrep_cluster_size: '3',
        wsrep_local_state_comment: 'Synced',
        wsrep_cluster_status: 'Primary',
        wsrep_ready: 'ON',
      });
      uuids.add(g.wsrep_cluster_state_uuid!);
      const log = await lab.remote(n).docker.logs('mariadb', { tail: 2000 });
      const decisions = (log.stdout + log.stderr).split('\n').filter((l) => l.startsWith('galera: '));
      expect(decisions, n).toEqual(
        n === 'ctl-0'
          ? [
              expect.stringMatching(/^galera: waiting: no cluster state in \/var\/lib\/mysql and no peer answers/),
              expect.stringMatching(/^galera: founding a new cluster: deploy run \w+: no member holds data/),
            ]
          : [`galera: MariaDB answers on ${lab.prefix}.20.10: joining its cluster`],
      );
    }
    expect(uuids.size).toBe(1);

    // RabbitMQ: one cluster named after the cloud, three running nodes, seen alike from each.
    for (const n of CONTROLLERS) {
      const st = await rabbitStatus(lab.remote(n));
      expect(st.cluster_name).toBe('ha');
      expect([...st.running_nodes].sort()).toEqual(['rabbit@ctl-0', 'rabbit@ctl-1', 'rabbit@ctl-2']);
    }

    // HAProxy: Galera behind the DB VIP, one writer and two backups; every Keystone backend up.
    const cfg = await lab.remote('ctl-1').exec(['cat', '/etc/stackctl/haproxy/haproxy.cfg'], { timeoutMs: 10_000 });
    const mariadbListen = cfg.stdout.split('\nlisten ').find((b) => b.startsWith('mariadb'))!;
    expect(mariadbListen).toContain(`bind ${VIP}:3306`);
    expect(mariadbListen.match(/^ {2}server ctl-\d \S+:3306 check.*$/gm)).toEqual([
      `  server ctl-0 ${lab.prefix}.20.10:3306 check port 9200 inter 2000 rise 2 fall 5`,
      `  server ctl-1 ${lab.prefix}.20.11:3306 check port 9200 inter 2000 rise 2 fall 5 backup`,
      `  server ctl-2 ${lab.prefix}.20.12:3306 check port 9200 inter 2000 rise 2 fall 5 backup`,
    ]);
    // HAProxy's check of a Galera member: clustercheck on port 9200 says whether it is Synced.
    for (const [i, n] of CONTROLLERS.entries()) {
      const r = await lab
        .remote('ctl-0')
        .docker.exec('haproxy', ['curl', '-s', '-w', ' %{http_code}', `http://${lab.prefix}.20.1${i}:9200/`]);
      expect(r.stdout.trim(), n).toBe('galera: Synced\n 200');
    }
    // Keystone reaches the database through the VIP, never a single controller.
    for (const n of CONTROLLERS) {
      const r = await lab
        .remote(n)
        .exec(
          [
            'grep',
            '-c',
            `^connection = mysql+pymysql://keystone:.*@${VIP}/keystone$`,
            '/etc/stackctl/keystone/keystone.conf',
          ],
          {
            timeoutMs: 10_000,
          },
        );
      expect(r.stdout.trim(), n).toBe('1');
    }
    // Services that use oslo.messaging list every RabbitMQ node in transport_url (nova here).
    const all = loadAll({ inventory: lab.inventory });
    const nova = planOf(all).rendered.get('ctl-0')!.get('/etc/stackctl/nova-api/nova.conf')!;
    const url = /^transport_url = (.*)$/m.exec(nova)![1]!;
    expect(url.match(/@[\d.]+:5672/g)).toEqual(CONTROLLERS.map((_, i) => `@${lab.prefix}.20.1${i}:5672`));

    const t1 = Date.now();
    const token = await lab.issueToken('ctl-0', 30);
    timings.push(['first token through the VIP (incl. HAProxy checks)', seconds(t1)]);
    expect(token.code, token.stderr).toBe(0);
    expect(token.stdout.trim()).toMatch(/^\d{4}-\d\d-\d\d/);
    // (rise 2 x inter 2 s after the last backend came up)
    await eventually(20, async () => {
      for (const n of CONTROLLERS) {
        expect(await haproxyServers(n, 'keystone'), n).toEqual({ 'ctl-0': 'UP', 'ctl-1': 'UP', 'ctl-2': 'UP' });
        expect(await haproxyServers(n, 'mariadb'), n).toEqual({ 'ctl-0': 'UP', 'ctl-1': 'UP', 'ctl-2': 'UP' });
      }
    });
  });

  it('a re-deploy changes nothing, and a wiped bootstrap node joins the cluster instead of founding a second one', async () => {
    const t0 = Date.now();
    const again = await lab.deploy({ services: SERVICES });
    timings.push(['no-op re-deploy', seconds(t0)]);
    expect(again.report?.changes, again.text).toBe(0);

    const before = (await galera(lab.remote('ctl-1'))).wsrep_cluster_state_uuid;
    // ctl-0 loses its MariaDB container and data: the next deploy recreates it on an empty volume.
    const wipe = await lab
      .remote('ctl-0')
      .exec(['sh', '-c', 'docker rm -f mariadb && docker volume rm mariadb_data'], { timeoutMs: 60_000 });
    expect(wipe.code, wipe.stderr).toBe(0);
    const t1 = Date.now();
    const redo = await lab.deploy({ services: 'mariadb' });
    timings.push(['re-deploy of a wiped bootstrap node (SST)', seconds(t1)]);
    expect(redo.report?.ok, redo.text).toBe(true);
    expect(redo.text).toMatch(/step 2 ctl-0: container mariadb created/);
    const log = await lab.remote('ctl-0').docker.logs('mariadb', { tail: 2000 });
    expect((log.stdout + log.stderr).split('\n').filter((l) => l.startsWith('galera: '))).toEqual([
      `galera: MariaDB answers on ${lab.prefix}.20.11: joining its cluster`,
    ]);
    for (const n of CONTROLLERS) {
      expect(await galera(lab.remote(n)), n).toMatchObject({
        wsrep_cluster_size: '3',
        wsrep_local_state_comment: 'Synced',
        wsrep_cluster_state_uuid: before,
      });
    }
  });

  it('the compute tier on top: four servers spread over both computes; a live migration moves one', async () => {
    const t0 = Date.now();
    const { report, text } = await lab.deploy();
    timings.push(['deploy of the compute tier on top', seconds(t0)]);
    if (!report?.ok) await vipDiagnostics();
    expect(report?.ok, text).toBe(true);
    // Memory per node: the sum of its service containers' usage, as its own Docker reports it.
    for (const node of lab.nodes()) {
      const r = await lab
        .remote(node)
        .exec(['docker', 'stats', '--no-stream', '--format', '{{.Name}} {{.MemUsage}}'], { timeoutMs: 60_000 });
      const rows = r.stdout.trim().split('\n').filter(Boolean);
      const mib = rows
        .map((l) => /^(\S+) ([\d.]+)(KiB|MiB|GiB)/.exec(l))
        .reduce((sum, m) => sum + (m ? Number(m[2]) * { KiB: 1 / 1024, MiB: 1, GiB: 1024 }[m[3] as 'MiB'] : 0), 0);
      process.stderr.write(`memory ${node}: ${mib.toFixed(0)} MiB in ${rows.length} containers\n`);
    }
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-ha-openrc-'));
    try {
      const openrc = join(dir, 'admin.openrc');
      expect((await runCli('openrc', '-i', lab.inventory, '-o', openrc)).code).toBe(0);
      const os = <T>(args: string): T => openstackJson<T>(openrc, args);
      type Server = { id: string; status: string; 'OS-EXT-SRV-ATTR:host': string };
      const computes = os<{ Host: string; State: string }[]>('compute service list --service nova-compute');
      expect(computes.map((c) => `${c.Host} ${c.State}`).sort()).toEqual(['cmp-0 up', 'cmp-1 up']);

      // Glance's file store is node-local: one active backend, so the image uploaded at step 5 is read
      // back through the VIP every time (round robin over three stores would miss it 2 times in 3).
      const image = os<{ size: number; checksum: string }>('image show lab-tiny');
      for (let i = 0; i < 4; i++) {
        const got = openstack(openrc, 'image save lab-tiny --file /tmp/i && md5sum /tmp/i && wc -c < /tmp/i');
        expect(got, `download ${i + 1} of lab-tiny`).toContain(image.checksum);
        expect(got.trim().split('\n').pop(), `download ${i + 1} of lab-tiny`).toBe(String(image.size));
      }
      const cfg = await lab.remote('ctl-0').exec(['cat', '/etc/stackctl/haproxy/haproxy.cfg'], { timeoutMs: 10_000 });
      const glanceListen = cfg.stdout.split('\nlisten ').find((b) => b.startsWith('glance_api'))!;
      expect(glanceListen.match(/^ {2}server ctl-\d .*$/gm)?.map((l) => l.endsWith(' backup'))).toEqual([
        false,
        true,
        true,
      ]);

      const t1 = Date.now();
      const servers: Server[] = [];
      try {
        for (let i = 0; i < 4; i++)
          servers.push(
            os<Server>(
              `--os-compute-api-version 2.37 server create --flavor m1.tiny --image lab-tiny --nic none --wait ha-${i}`,
            ),
          );
      } catch (err) {
        await novaDiagnostics(openrc);
        throw err;
      }
      timings.push(['4 servers created, ACTIVE (one after the other)', seconds(t1)]);
      expect(servers.map((x) => x.status)).toEqual(['ACTIVE', 'ACTIVE', 'ACTIVE', 'ACTIVE']);
      const hosts = servers.map((x) => x['OS-EXT-SRV-ATTR:host']);
      process.stderr.write(`servers on: ${hosts.join(', ')}\n`);
      expect(new Set(hosts)).toEqual(new Set(['cmp-0', 'cmp-1']));

      const victim = servers[0]!;
      const from = victim['OS-EXT-SRV-ATTR:host'];
      const to = from === 'cmp-0' ? 'cmp-1' : 'cmp-0';
      const t2 = Date.now();
      openstack(
        openrc,
        `--os-compute-api-version 2.30 server migrate --live-migration --host ${to} --wait ${victim.id}`,
      );
      timings.push([`live migration ${from} -> ${to} (fake driver)`, seconds(t2)]);
      const moved = os<Server>(`server show ${victim.id}`);
      expect(moved.status).toBe('ACTIVE');
      expect(moved['OS-EXT-SRV-ATTR:host']).toBe(to);
      // the client's column for the migration type is 'Type'
      const migrations = os<{ Type: string; Status: string; 'Source Node': string; 'Dest Node': string }[]>(
        `--os-compute-api-version 2.59 server migration list --server ${victim.id}`,
      );
      expect(migrations).toContainEqual(
        expect.objectContaining({
          Type: 'live-migration',
          Status: 'completed',
          'Source Node': from,
          'Dest Node': to,
        }),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 1_800_000);

  it('a rolling update under probes (zed -> zed-update, batch 1, OVN included): the APIs answer outside the declared windows, a port behind a floating IP is never silent over 2 s', async () => {
    const built = await buildTargetImages(REGISTRY_PORT);
    timings.push(['zed-update images built and pushed', Math.round(built * 10) / 10]);
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-ha-upgrade-'));
    const temps = [dir];
    let watch: ReturnType<typeof watchGuest> | undefined;
    try {
      const openrc = join(dir, 'admin.openrc');
      expect((await runCli('openrc', '-i', lab.inventory, '-o', openrc)).code).toBe(0);
      const plan = await upgradePlan(lab.inventory, ['--to', 'zed-update', '--batch', '1']);
      process.stderr.write(`phases with a declared API outage: ${plan.declared.join(', ') || 'none'}\n`);
      // three controllers: only offline migration windows may take an API down, nothing for lack of nodes
      expect(
        plan.phases
          .filter((p) => p.availability === 'single-node' || p.availability === 'all-at-once')
          .map((p) => p.id),
      ).toEqual([]);
      type Row = { ID: string; Name: string; Status: string; Host: string };
      const before = openstackJson<Row[]>(openrc, 'server list --all-projects --long');
      expect(before.length).toBeGreaterThan(0);
      // The dataplane beside the APIs: a port in a namespace on cmp-0 with a floating IP, its state
      // page read from this machine every 100 ms through a gateway chassis, the router and Geneve
      const t0 = Date.now();
      const port = await plugProbePort(lab, openrc, { node: 'cmp-0', name: 'dp-probe' });
      dpProbe = port;
      timings.push(['dataplane probe port plugged, answering at its floating IP', seconds(t0)]);
      // what keeps the flows through an ovn-controller restart (docs/networking.md): br-int in secure
      // fail mode (nothing flushed while no controller is connected), the wait before clearing
      for (const node of [...CONTROLLERS, 'cmp-0', 'cmp-1']) {
        const ovs = await nodeShell(
          node,
          'docker exec openvswitch_vswitchd sh -c "ovs-vsctl get-fail-mode br-int; ovs-vsctl get Open_vSwitch . external_ids:ovn-ofctrl-wait-before-clear"',
        );
        expect(ovs.replace(/"/g, '').trim().split('\n'), node).toEqual(['secure', '10000']);
      }
      watch = watchGuest(port.url, { intervalMs: 100, timeoutMs: 1000 });
      const probe = startProbe(lab.inventory, VIP, 'stackctl-ha-probe', temps);
      await sleep(3000);
      const t1 = Date.now();
      let text = '';
      const report = await runUpgrade(
        { inventory: lab.inventory, to: 'zed-update', batch: 1 },
        { write: (t) => void (text += t), tty: false },
      );
      timings.push(['upgrade --to zed-update --batch 1 (3 controllers, 2 computes)', seconds(t1)]);
      await sleep(3000);
      const probes = probe.stop();
      const dataplane = await watch.stop();
      expect(report?.outcome, text).toBe('done');
      await lab.reconnect();
      expect(await containersOffTarget(lab, 'ha')).toEqual([]);
      const after = openstackJson<Row[]>(openrc, 'server list --all-projects --long');
      expect(after.map((r) => `${r.Name} ${r.Status}`).sort()).toEqual(before.map((r) => `${r.Name} ACTIVE`).sort());
      // every server left its compute (a completed live migration) before that compute's nova_compute changed
      const migrations = openstackJson<MigrationRecord[]>(
        openrc,
        '--os-compute-api-version 2.59 server migration list',
      );
      process.stderr.write(
        `HA update, Nova's live migrations: ${migrations
          .filter((m) => m.Type === 'live-migration')
          .map((m) => `${m['Server UUID'].slice(0, 8)} ${m['Source Compute']} ${m.Status}`)
          .join('; ')}\n`,
      );
      const figures = probeFigures(probes, phaseTimes(lab.inventory, t1), plan.declared);
      process.stderr.write(`HA update: ${figures.text}`);
      if (figures.failedOutside.length > 0) {
        // HAProxy logs only what went wrong: which backend answered, or that none was up
        const nearFailure = (t: number): boolean => figures.failedOutside.some((p) => Math.abs(t - p.at) < 10_000);
        for (const n of CONTROLLERS) {
          const since = new Date(t1).toISOString();
          const logs = await lab.remote(n).exec(['docker', 'logs', '--since', since, 'haproxy'], { timeoutMs: 30_000 });
          // the lines within 10 s of a failed try, and every backend going down
          const lines = (logs.stdout + logs.stderr)
            .split('\n')
            .filter((l) => nearFailure(haproxyLogTime(l)) || l.includes(' is DOWN'));
          process.stderr.write(
            `HAProxy on ${n}, abnormal requests near the failed tries and backends going down:\n${lines.slice(-60).join('\n')}\n`,
          );
          // and what the APIs behind it logged then (a 503 page from nova-api: keystonemiddleware's?)
          for (const c of ['nova_api', 'keystone']) {
            const api = await lab
              .remote(n)
              .exec(['docker', 'logs', '--timestamps', '--since', since, c], { timeoutMs: 30_000 });
            const warnings = (api.stdout + api.stderr)
              .split('\n')
              .filter((l) => nearFailure(Date.parse(l.split(' ')[0]!)))
              .filter((l) => /WARNING|ERROR|CRITICAL|Traceback|unavailable|timed out/i.test(l));
            process.stderr.write(`${c} on ${n}, warnings near the failed tries:\n${warnings.slice(-30).join('\n')}\n`);
          }
        }
      }
      // the dataplane per phase: OVN moved (every ovn-controller, then the RAFT members one by one)
      const spans = phaseTimes(lab.inventory, t1).map((p) => ({ name: p.phase, from: p.from, to: p.to }));
      const byPhase = gapsBySpan(watch.samples(), spans);
      process.stderr.write(
        `HA update, dataplane (port on cmp-0 at ${port.floatingIp}, polled every 100 ms): longest gap ` +
          `${(dataplane.longestGapMs / 1000).toFixed(2)} s, ${dataplane.lost} of ${dataplane.samples} polls lost; per phase:\n` +
          byPhase
            .map(
              (p) =>
                `  ${p.name.padEnd(48)} gap ${(p.longestGapMs / 1000).toFixed(2)} s, lost ${p.lost}/${p.samples}\n`,
            )
            .join(''),
      );
      // the probe's figures are printed before either assertion, so one failing does not hide the other
      expect(await evacuationFaults(lab, before, migrations, t1)).toEqual([]);
      expect(probes.length).toBeGreaterThan(20);
      expect(figures.failedOutside.map((p) => new Date(p.at).toISOString())).toEqual([]);
      // the port never went away (its page's boot id and counter) and, as no phase of the plan
      // declares a dataplane outage, no phase saw it silent for more than 2 s
      expect(dataplane.bootIds).toEqual([port.bootId]);
      expect(dataplane.counterRegressions).toBe(0);
      expect(dataplane.samples).toBeGreaterThan(100);
      expect(byPhase.filter((p) => p.longestGapMs > 2000).map((p) => p.name)).toEqual([]);
    } finally {
      await watch?.stop();
      execFileSync('docker', ['rm', '-f', 'stackctl-ha-probe'], { stdio: 'ignore' });
      for (const d of temps) rmSync(d, { recursive: true, force: true });
    }
  }, 3_600_000);

  // After the update: the lab's Nova runs the fake virt driver, which keeps its servers in
  // nova-compute's memory; the reconfigure restarts nova-compute with servers on it, and the fake
  // driver forgets them (power state 'pending'), which a live migration then refuses. A real
  // hypervisor keeps its guests across that restart.
  it('a routine reconfigure of Galera, Keystone and Nova rolls node by node under a probe: no failed try', async () => {
    const inventory = lab.inventory;
    /** node/container -> the plan's hash, for the inventory as it is now. */
    const hashes = (): Map<string, string> => {
      const all = loadAll({ inventory });
      const d = planDeploy(planOf(all).effective, all.catalog);
      return new Map(
        d.steps.flatMap((st) => st.nodes.flatMap((n) => n.containers.map((c) => [`${c.node}/${c.name}`, c.hash]))),
      );
    };
    const h0 = hashes();
    const text = readFileSync(inventory, 'utf8');
    const changed = text.replace(
      '    nova_compute_driver: fake.FakeDriver\n',
      '    nova_compute_driver: fake.FakeDriver\n' +
        '    mariadb_buffer_pool_mb: 160\n    keystone_token_expiration_s: 7200\n    nova_cpu_allocation_ratio: 8.0\n',
    );
    expect(changed).not.toBe(text);
    writeFileSync(inventory, changed);
    const h1 = hashes();
    const expected = [...h1].filter(([k, h]) => h0.get(k) !== h).map(([k]) => k);
    process.stderr.write(`reconfigure changes the containers ${expected.join(', ')}\n`);
    for (const s of ['mariadb', 'keystone', 'nova_api', 'nova_conductor', 'nova_compute'])
      expect(
        expected.some((k) => k.endsWith(`/${s}`)),
        s,
      ).toBe(true);
    const temps: string[] = [];
    try {
      // The dry run says in which order and that no API goes down for it.
      const dry = await lab.deploy({ dryRun: true });
      process.stderr.write(`reconfigure, dry run order:\n${dry.text.slice(dry.text.indexOf('ORDER'))}`);
      expect(dry.text).toContain('step:2:roll:mariadb');
      expect(dry.text).toContain('step:3:roll:keystone');
      expect(dry.text).toMatch(/step:4:roll:[a-z+-]*nova-api/);
      expect(dry.text).not.toContain('outage:');
      const before = await lab.startedAt();
      const probe = startProbe(inventory, VIP, 'stackctl-ha-reconfigure-probe', temps);
      await sleep(3000);
      const t0 = Date.now();
      const { report, text: out } = await lab.deploy();
      const wall = seconds(t0);
      timings.push(['rolling reconfigure (mariadb, keystone, nova settings)', wall]);
      await sleep(3000);
      const probes = probe.stop();
      const failed = probes.filter((p) => !p.ok);
      process.stderr.write(
        `rolling reconfigure: ${wall} s, probe ${probes.length} tries, ${failed.length} failed` +
          `${failed.length ? `: ${failed.map((p) => `${new Date(p.at).toISOString()} ${p.why}`).join('; ')}` : ''}\n`,
      );
      expect(report?.ok, out).toBe(true);
      expect(report?.outages).toEqual([]);
      const after = await lab.startedAt();
      const restarted = [...after].filter(([k, v]) => before.get(k) !== v).map(([k]) => k);
      expect(restarted.sort()).toEqual(expected.sort());
      // each exactly once: one recreate event per container in this run
      const recreated = new Map<string, number>();
      for (const line of out.split('\n')) {
        const m = /^step \d+ ([\w-]+): container ([\w-]+) recreated/.exec(line);
        if (m) recreated.set(`${m[1]}/${m[2]}`, (recreated.get(`${m[1]}/${m[2]}`) ?? 0) + 1);
      }
      expect([...recreated.keys()].sort()).toEqual(expected.sort());
      expect([...recreated.values()].every((n) => n === 1)).toBe(true);
      for (const node of CONTROLLERS) {
        const g = await galera(lab.remote(node));
        expect(g, node).toMatchObject({ wsrep_cluster_size: '3', wsrep_local_state_comment: 'Synced' });
      }
      expect(probes.length).toBeGreaterThan(20);
      expect(failed.map((p) => `${new Date(p.at).toISOString()} ${p.why}`)).toEqual([]);
    } finally {
      execFileSync('docker', ['rm', '-f', 'stackctl-ha-reconfigure-probe'], { stdio: 'ignore' });
      for (const d of temps) rmSync(d, { recursive: true, force: true });
    }
  }, 3_600_000);

  it('TLS on the public VIP, then a certificate renewal and a Fernet key rotation, each deployed under an HTTPS probe: no failed try, HAProxy reloaded not restarted, an earlier token still valid', async () => {
    const inventory = lab.inventory;
    const certsDir = inventory.replace(/\.yaml$/, '.certs');
    const publicVip = `${lab.prefix}.10.250`;
    const temps: string[] = [];
    const PROBE = 'stackctl-ha-tls-probe';
    const failedTries = (probes: { ok: boolean; at: number; why?: string }[]): string[] =>
      probes.filter((p) => !p.ok).map((p) => `${new Date(p.at).toISOString()} ${p.why}`);
    /** A deploy under a probe (through `vip`, over https:// with the cloud's CA when `https`): the report, text and tries. */
    const deployUnderProbe = async (what: string, vip: string, https: boolean) => {
      const probe = startProbe(inventory, vip, PROBE, temps, https ? `${certsDir}/ca.pem` : undefined);
      const started = Date.now();
      await sleep(3000);
      const t0 = Date.now();
      const { report, text } = await lab.deploy();
      const t1 = Date.now();
      const wall = seconds(t0);
      // a quick deploy (a reload: seconds) still gets a probe window of 25 s around it (a try takes ~1 s here)
      await sleep(Math.max(3000, 25_000 - (Date.now() - started)));
      const probes = probe.stop();
      const failed = failedTries(probes);
      const during = probes.filter((p) => p.end >= t0 && p.at <= t1).length;
      timings.push([what, wall]);
      process.stderr.write(
        `${what}: ${wall} s, probe (${https ? 'https' : 'http'}://${vip}) ${probes.length} tries ` +
          `(${during} overlapping the deploy), ${failed.length} failed${failed.length ? `: ${failed.join('; ')}` : ''}\n`,
      );
      if (!report?.ok) say(`${what}: deploy output`, text);
      expect(report?.ok).toBe(true);
      // the probe asked all through the deploy (however slow its tries were under the lab's load)
      const coverage = probeCoverage(probes, t0, t1);
      expect(coverage.covered, `the probe did not watch the whole deploy of ${what}`).toBe(true);
      expect(coverage.longestHoleMs).toBeLessThan(2000);
      return { text, failed };
    };
    /** node/container -> verb of the deploy's progress lines (`step 1 ctl-0: container haproxy reloaded ...`), unchanged left out. */
    const containerChanges = (text: string): string[] =>
      text
        .split('\n')
        .map((l) => /^step \d+ ([\w-]+): container ([\w-]+) (\w+)/.exec(l))
        .filter((m): m is RegExpExecArray => m !== null && m[3] !== 'unchanged')
        .map((m) => `${m[1]}/${m[2]} ${m[3]}`)
        .sort();
    /** The fingerprint of the certificate served on the public VIP's Keystone port, verified against the CA. */
    const served = (): string => {
      const out = execFileSync(
        'sh',
        [
          '-c',
          `openssl s_client -connect ${publicVip}:5000 -verify_return_error -CAfile ${certsDir}/ca.pem </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256`,
        ],
        { encoding: 'utf8', timeout: 30_000 },
      );
      return out.trim().split('=').pop()!;
    };
    const fileFingerprint = (): string =>
      execFileSync('openssl', ['x509', '-noout', '-fingerprint', '-sha256', '-in', `${certsDir}/public.pem`], {
        encoding: 'utf8',
      })
        .trim()
        .split('=')
        .pop()!;
    const password = loadAll({ inventory }).secrets!.services.get('keystone_admin_password')!;
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-ha-tls-'));
    temps.push(dir);
    const authFile = join(dir, 'auth.json');
    writeFileSync(
      authFile,
      JSON.stringify({
        auth: {
          identity: {
            methods: ['password'],
            password: { user: { name: 'admin', domain: { name: 'Default' }, password: password.reveal() } },
          },
          scope: { project: { name: 'admin', domain: { name: 'Default' } } },
        },
      }),
      { mode: 0o600 },
    );
    const curl = (args: string[]): string =>
      execFileSync('curl', ['-sS', '-m', '30', '--cacert', `${certsDir}/ca.pem`, ...args], {
        encoding: 'utf8',
        timeout: 60_000,
      });
    /** A new token through the public VIP over https:// (the password from a 0600 file, never in argv). */
    const newToken = (): string => {
      const headers = curl([
        '-o',
        '/dev/null',
        '-D',
        '-',
        '-H',
        'Content-Type: application/json',
        '-d',
        `@${authFile}`,
        `https://${publicVip}:5000/v3/auth/tokens`,
      ]);
      const id = /^x-subject-token:\s*(\S+)/im.exec(headers)?.[1];
      expect(id, headers).toBeDefined();
      return id!;
    };
    /** Keystone's answer to validating `subject`, authorised by a fresh token (headers from a 0600 file). */
    const validate = (subject: string): string => {
      const headers = join(dir, 'validate-headers');
      writeFileSync(headers, `X-Auth-Token: ${newToken()}\nX-Subject-Token: ${subject}\n`, { mode: 0o600 });
      return curl([
        '-o',
        '/dev/null',
        '-w',
        '%{http_code}',
        '-H',
        `@${headers}`,
        `https://${publicVip}:5000/v3/auth/tokens`,
      ]);
    };
    try {
      // TLS on: the CA and the public certificate, then a deploy (HAProxy reloads its new files;
      // Keystone and the catalog follow), under the internal VIP's probe, which stays plain HTTP
      writeFileSync(inventory, `${readFileSync(inventory, 'utf8')}tls: {}\n`);
      const g = await runCli('certs', 'generate', '-i', inventory);
      expect(g.code, g.stderr).toBe(0);
      const on = await deployUnderProbe('TLS turned on (deploy)', VIP, false);
      process.stderr.write(`TLS turned on, containers: ${containerChanges(on.text).join(', ')}\n`);
      expect(served()).toBe(fileFingerprint());

      // a renewal: a new public certificate, deployed under the HTTPS probe of the public VIP
      const before = fileFingerprint();
      const renew = await runCli('certs', 'renew', '-i', inventory, '--cert', 'public');
      expect(renew.code, renew.stderr).toBe(0);
      expect(fileFingerprint()).not.toBe(before);
      const startedBefore = await lab.startedAt();
      const renewal = await deployUnderProbe('certificate renewal (deploy)', publicVip, true);
      const restarted = [...(await lab.startedAt())].filter(([k, v]) => startedBefore.get(k) !== v).map(([k]) => k);
      expect(restarted).toEqual([]);
      expect(containerChanges(renewal.text)).toEqual(CONTROLLERS.map((n) => `${n}/haproxy reloaded`));
      expect(served()).toBe(fileFingerprint());
      expect(renewal.failed).toEqual([]);

      // a Fernet key rotation: keys to every controller, Keystone rolled node by node; a token from before stays valid
      const earlier = newToken();
      const rotate = await runCli('rotate', 'keystone-keys', '-i', inventory);
      expect(rotate.code, rotate.stderr).toBe(0);
      const startedRotation = await lab.startedAt();
      const rotation = await deployUnderProbe('Fernet key rotation (deploy)', publicVip, true);
      const rolled = [...(await lab.startedAt())].filter(([k, v]) => startedRotation.get(k) !== v).map(([k]) => k);
      expect(rolled.sort()).toEqual(CONTROLLERS.map((n) => `${n}/keystone`));
      expect(rotation.failed).toEqual([]);
      expect(validate(earlier)).toBe('200');
    } finally {
      execFileSync('docker', ['rm', '-f', PROBE], { stdio: 'ignore' });
      for (const d of temps) rmSync(d, { recursive: true, force: true });
    }
  }, 3_600_000);

  it("the keepalived master's node, made the OVN Northbound leader's too, goes down: the VIP moves, Galera keeps quorum with 2 of 3, tokens are still issued, Neutron stays writable, the port behind its floating IP answers", async () => {
    const master = await lab.vipHolder(CONTROLLERS);
    expect(master, 'some controller holds the VIP').toBeDefined();
    const survivors = CONTROLLERS.filter((n) => n !== master);
    // The Northbound leader onto the master's node: restart the leading member elsewhere, and the
    // cluster elects another (one of the two others each time)
    for (let i = 0; i < 8; i++) {
      const leader = await ovnLeader('nb', CONTROLLERS);
      if (leader === master) break;
      if (leader) await nodeShell(leader, 'docker restart -t 10 ovn_nb_db');
      await sleep(5000);
    }
    const nbLeader = await ovnLeader('nb', CONTROLLERS);
    const sbLeader = await ovnLeader('sb', CONTROLLERS);
    process.stderr.write(
      `keepalived master: ${master}; OVN leaders: Northbound ${nbLeader}, Southbound ${sbLeader}; stopping ${master}'s node\n`,
    );
    expect(nbLeader, 'the Northbound leader moved onto the VIP holder').toBe(master);
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-ha-failover-'));
    const openrc = join(dir, 'admin.openrc');
    expect((await runCli('openrc', '-i', lab.inventory, '-o', openrc)).code).toBe(0);
    const watch = dpProbe && watchGuest(dpProbe.url, { intervalMs: 100, timeoutMs: 1000 });

    const t0 = Date.now();
    await lab.stopNode(master!);
    timings.push([`docker stop of ${master}'s node`, seconds(t0)]);
    let holder: string | undefined;
    for (let i = 0; i < 120 && !holder; i++) {
      holder = await lab.vipHolder(survivors);
      if (!holder) await sleep(250);
    }
    timings.push([`VIP moved to ${holder ?? 'nobody'} (from the stop)`, seconds(t0)]);
    expect(holder, 'the VIP on a surviving controller').toBeDefined();

    const t1 = Date.now();
    const token = await lab.issueToken(survivors[0]!, 60);
    timings.push(['token through the VIP after failover (from the move)', seconds(t1)]);
    timings.push(['failover: node stop -> token issued', seconds(t0)]);
    expect(token.code, token.stderr).toBe(0);
    expect(token.stdout.trim()).toMatch(/^\d{4}-\d\d-\d\d/);

    // Galera evicts the silent member after its suspect/inactive timeouts (5-15 s); the two left are the majority.
    const t3 = Date.now();
    await eventually(60, async () => {
      for (const n of survivors) {
        expect(await galera(lab.remote(n)), n).toMatchObject({
          wsrep_cluster_size: '2',
          wsrep_cluster_status: 'Primary',
          wsrep_local_state_comment: 'Synced',
        });
      }
    });
    timings.push(['Galera down to 2 members, Primary (from the token)', seconds(t3)]);
    // RabbitMQ: the two survivors (the majority under pause_minority) keep running as one cluster;
    // the lost node leaves running_nodes only after Erlang's net_ticktime.
    for (const n of survivors) {
      const st = await rabbitStatus(lab.remote(n));
      expect(st.running_nodes, n).toEqual(expect.arrayContaining(survivors.map((x) => `rabbit@${x}`)));
    }
    // A second token, now that HAProxy has marked the dead backends down.
    const t2 = Date.now();
    expect((await lab.issueToken(survivors[1]!, 10)).code).toBe(0);
    timings.push(['a second token after failover', seconds(t2)]);

    // OVN: both clusters lead from a survivor, and Neutron writes through them (a network made and removed)
    const t4 = Date.now();
    await eventually(60, async () => {
      expect(await ovnLeader('nb', survivors), 'a Northbound leader among the survivors').toBeDefined();
      expect(await ovnLeader('sb', survivors), 'a Southbound leader among the survivors').toBeDefined();
    });
    timings.push(['OVN Northbound and Southbound led from a survivor (from the token checks)', seconds(t4)]);
    const t5 = Date.now();
    try {
      const net = openstackJson<{ id: string; status: string }>(openrc, 'network create ha-after-failover');
      expect(net.status).toBe('ACTIVE');
      // the logical switch is in the Northbound database (written through its new leader)
      const ls = await nodeShell(
        survivors[0]!,
        `docker exec ovn_nb_db ovn-nbctl --db=unix:/run/ovn/ovnnb_db.sock --no-leader-only --bare --columns=name find Logical_Switch name=neutron-${net.id}`,
      );
      expect(ls.trim()).toBe(`neutron-${net.id}`);
      openstack(openrc, `network delete ${net.id}`);
      timings.push(['Neutron network created (in the Northbound DB) and deleted after failover', seconds(t5)]);
      // the port behind its floating IP: answering again (through a surviving gateway chassis if the
      // stopped node was the active one), the same boot
      if (watch && dpProbe) {
        await eventually(60, async () => {
          const body = await fetch(dpProbe!.url, { signal: AbortSignal.timeout(2000) }).then((r) => r.text());
          expect(body).toContain(`boot_id=${dpProbe!.bootId} `);
        });
        const seen = await watch.stop();
        process.stderr.write(
          `failover, dataplane (port on cmp-0 at ${dpProbe.floatingIp}): longest gap ${(seen.longestGapMs / 1000).toFixed(2)} s, ` +
            `${seen.lost} of ${seen.samples} polls lost\n`,
        );
        timings.push(['dataplane: longest gap through the failover', seen.longestGapMs / 1000]);
        expect(seen.bootIds).toEqual([dpProbe.bootId]);
      }
    } finally {
      await watch?.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
