/**
 * Real guests: a 1ctl-2comp container lab whose computes run Nova's libvirt driver with QEMU's
 * emulation (TCG), deployed by `stackctl deploy` with the guest image stackctl builds as its
 * starter image. A server made with `openstack server create` on the starter tenant network, with
 * a key pair from `openstack keypair create`, goes ACTIVE; a real QEMU runs it on cmp-0 with TCG's
 * translation cache capped, plugged into OVN's br-int by os-vif; its console log (Nova's, read
 * through the API) shows the guest's ready line; with a floating IP this machine reaches it by
 * ping, HTTP (its boot id and counter) and SSH with the key pair's private key. Then a real live
 * migration to cmp-1 (block migration: the disk is local), watched from outside every 100 ms by
 * HTTP (src/workloads/guest-watch.ts) and ping: the same boot, the counter continuous, the gap
 * measured. Then `nodes maintenance` drains cmp-1 back and is refused on cmp-0 with nowhere to go;
 * and a migration throttled to 8 Mbit/s (`tc` on cmp-0's interface toward cmp-1) with 64 MiB of
 * random bytes in the guest's memory is aborted at its 30 s deadline: the guest stays ACTIVE on
 * cmp-0, the same boot, and maintenance fails naming it. Last, `upgrade --to zed-update --batch 1`
 * with a guest on each compute, SIGKILLed 3 s into its first live migration and resumed: each compute
 * is emptied by real live migrations before its containers are replaced, the guests keep their boots,
 * and stackctl's workload ledger records each one's gap (the run fails beyond workload_max_gap_s); the
 * test watches them too and prints each phase's longest gap against the 2 s goal. Figures on stderr:
 * deploy, ACTIVE, boot, first ping and SSH times, QEMU's memory per guest (guest-image.e2e.ts, in
 * the same script, measures it without the cap). `npm run test:e2e:guest`; STACKCTL_KEEP_LAB=1
 * keeps a failed run's lab, =all any run's (remove it with `stackctl lab down --purge`).
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidFromName } from '../../../src/core/hash.js';
import { loadAll } from '../../../src/cli/context.js';
import { labImageRef } from '../../../src/images/catalog.js';
import {
  buildGuestImage,
  GUEST_KERNEL_PACKAGE,
  GUEST_READY_MARKER,
  GUEST_SSH_KEY_MARKER,
} from '../../../src/images/guest.js';
import { gapsBySpan, watchGuest } from '../../../src/workloads/guest-watch.js';
import { runCli, tempDir } from '../../helpers/cli.js';
import { openstack, openstackAsync, openstackJson } from '../../helpers/openstack.js';
import { release } from '../../images/fixture.js';
import { CLOUD_IMAGES, deployLab, suiteFailed } from '../lab.js';
import {
  buildTargetImages,
  containersOffTarget,
  evacuationFaults,
  events as upgradeEvents,
  killDuringMigration,
  type MigrationRecord,
  phaseTimes,
  spawnUpgrade,
} from '../../upgrade/lab-upgrade.js';

const REGISTRY_PORT = 15121;
const lab = deployLab('guest', '10.77', 900, {
  registryPort: REGISTRY_PORT,
  bmcPort: 17030,
  compute: 'libvirt',
  topology: '1ctl-2comp',
});
/** The guest image, built once and kept between runs (cached by its inputs). */
const GUEST_DIR = join(tmpdir(), 'stackctl-test-guest');
/** busybox (ping) on this machine: the lab node image carries it, run on the host network. */
const NODE_IMAGE = labImageRef(release, 'node');
/**
 * How the computes' libvirtd reach each other (nova_live_migration_transport): `tcp`, as `lab up`
 * writes it, or `tls` (STACKCTL_GUEST_MIGRATION=tls): each compute's own certificate from the
 * cloud's CA, libvirtd's TLS listener, QEMU's native TLS; with it every endpoint is HTTPS too
 * (`tls: { internal: true }`), so the guest's metadata requests reach Nova over HTTPS (the OVN
 * metadata agent's side) and the upgrade runs with TLS on.
 */
const MIGRATION = process.env['STACKCTL_GUEST_MIGRATION'] ?? 'tcp';
const SSH = '/usr/bin/ssh';

const figures: [string, string][] = [];
const figure = (name: string, value: string): void => {
  figures.push([name, value]);
  process.stderr.write(`${name}: ${value}\n`);
};
const seconds = (t0: number): string => ((Date.now() - t0) / 1000).toFixed(1);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let openrc = '';
let keyFile = '';
const os = (args: string): string => openstack(openrc, args, 300_000);
const osJson = <T>(args: string): T => openstackJson<T>(openrc, args, 300_000);

/** A shell script on a node (cmp-0 by default): its standard output (the test fails on a non-zero exit). */
async function onCompute(script: string, node = 'cmp-0'): Promise<string> {
  const r = await lab.remote(node).exec(['sh', '-c', script], { timeoutMs: 120_000 });
  expect(r.code, `${script}\n${r.stderr}`).toBe(0);
  return r.stdout;
}

/** The QEMU processes on cmp-0 (they run in nova_libvirt's container, seen from the node): pid, RSS, argv. */
async function qemuProcesses(node = 'cmp-0'): Promise<{ pid: number; rssMiB: number; args: string; uuid: string }[]> {
  const out = await onCompute(
    'for p in $(pgrep -f qemu-system-x86_64.real || true); do ' +
      'printf "%s %s " "$p" "$(awk \'/^VmRSS/ {print $2}\' /proc/$p/status)"; tr "\\0" " " < /proc/$p/cmdline; echo; done',
    node,
  );
  return out
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [pid, rss, ...rest] = l.split(' ');
      const args = rest.join(' ');
      return {
        pid: Number(pid),
        rssMiB: Math.round(Number(rss) / 1024),
        args,
        uuid: /-uuid ([0-9a-f-]{36})/.exec(args)?.[1] ?? '',
      };
    });
}

/** A command on this machine in a container of `image` on the host network. */
function onHost(image: string, args: string[], timeoutMs = 60_000): string {
  return execFileSync(
    'docker',
    ['run', '--rm', '--network', 'host', '--cap-add', 'NET_ADMIN', '--cap-add', 'NET_RAW'].concat(
      ['--entrypoint', args[0]!, image],
      args.slice(1),
    ),
    { encoding: 'utf8', timeout: timeoutMs, stdio: ['ignore', 'pipe', 'pipe'] },
  );
}

/** The guest's state page: boot id and its 100 ms counter. */
async function guestState(ip: string): Promise<{ boot: string; counter: number }> {
  const text = await (await fetch(`http://${ip}/cgi-bin/state`, { signal: AbortSignal.timeout(10_000) })).text();
  const m = /^boot_id=([0-9a-f-]{36}) counter=(\d+) uptime=[\d.]+$/m.exec(text);
  expect(m, text).not.toBeNull();
  return { boot: m![1]!, counter: Number(m![2]) };
}

/** A command on the guest over SSH, as root with the key pair's private key: its standard output. */
function ssh(ip: string, command: string): string {
  return execFileSync(
    SSH,
    [
      ...['-i', keyFile, '-o', 'BatchMode=yes', '-o', 'IdentitiesOnly=yes', '-o', 'ConnectTimeout=10'],
      ...['-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR'],
      `root@${ip}`,
      command,
    ],
    { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'pipe'] },
  ).trim();
}

/** The container that pings a guest during a migration. */
const PINGER = 'stackctl-guest-e2e-pinger';

/**
 * Ping `ip` every 100 ms from this machine (busybox in a host-network container) until the returned
 * function is called: then how many echo requests went out, how many were lost, and the longest run
 * of consecutive losses (x 100 ms: the gap ping saw).
 */
function startPinger(ip: string): () => Promise<{ sent: number; lost: number; longestRun: number }> {
  execFileSync('docker', ['rm', '-f', PINGER], { stdio: 'ignore' });
  const child = spawn(
    'docker',
    ['run', '--rm', '--name', PINGER, '--network', 'host', '--entrypoint', 'busybox', NODE_IMAGE].concat([
      'ping',
      '-i',
      '0.1',
      '-W',
      '1',
      ip,
    ]),
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((r) => child.on('exit', () => r()));
  return async () => {
    // SIGINT: busybox prints its statistics and exits
    execFileSync('docker', ['kill', '-s', 'INT', PINGER], { stdio: 'ignore' });
    await Promise.race([exited, sleep(10_000)]);
    const sent = Number(/(\d+) packets transmitted/.exec(out)?.[1] ?? NaN);
    const seqs = new Set([...out.matchAll(/seq=(\d+)/g)].map((m) => Number(m[1])));
    let longestRun = 0;
    let run = 0;
    for (let i = 0; i < sent; i++) {
      run = seqs.has(i) ? 0 : run + 1;
      longestRun = Math.max(longestRun, run);
    }
    expect(sent, out.slice(-500)).toBeGreaterThan(0);
    return { sent, lost: sent - seqs.size, longestRun };
  };
}

/** Retry until `check` passes or `s` seconds ran out; returns the seconds it took. */
async function eventually<T>(s: number, check: () => Promise<T> | T): Promise<{ s: number; value: T }> {
  const t0 = Date.now();
  for (;;) {
    try {
      const value = await check();
      return { s: Number(seconds(t0)), value };
    } catch (e) {
      if (Date.now() - t0 > s * 1000) throw e;
      await sleep(1000);
    }
  }
}

/** This machine's 1-minute load average every 2 s until stop(): `max L at +Ns; L L L …`. */
function sampleLoad(): { stop(): string } {
  const t0 = Date.now();
  const samples: [number, number][] = [];
  const take = (): void => {
    samples.push([(Date.now() - t0) / 1000, Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0])]);
  };
  take();
  const timer = setInterval(take, 2000);
  return {
    stop: () => {
      clearInterval(timer);
      const max = samples.reduce((a, b) => (b[1] > a[1] ? b : a));
      return `max ${max[1]} at +${max[0].toFixed(0)} s; ${samples.map((x) => x[1]).join(' ')}`;
    },
  };
}

/** How long a node's dockerd takes to answer through this machine's Docker, and `true` over SSH. */
async function nodePaths(node: string): Promise<string> {
  let t = Date.now();
  let direct: string;
  try {
    execFileSync('docker', ['exec', `stackctl-guest-${node}`, 'docker', 'info', '--format', '{{.ContainersRunning}}'], {
      stdio: 'pipe',
      timeout: 60_000,
    });
    direct = `${seconds(t)} s`;
  } catch (e) {
    direct = `failed after ${seconds(t)} s (${String(e).slice(0, 120)})`;
  }
  t = Date.now();
  let ssh: string;
  try {
    await lab.remote(node).exec(['true'], { timeoutMs: 60_000 });
    ssh = `${seconds(t)} s`;
  } catch (e) {
    ssh = `failed after ${seconds(t)} s (${String(e).slice(0, 120)})`;
  }
  let loadavg = '';
  try {
    loadavg = execFileSync('docker', ['exec', `stackctl-guest-${node}`, 'cat', '/proc/loadavg'], {
      encoding: 'utf8',
      timeout: 30_000,
    }).trim();
  } catch {
    loadavg = 'unread';
  }
  return `its dockerd asked directly ${direct}; true over SSH ${ssh}; loadavg ${loadavg}`;
}

/** What each compute's Nova, libvirt and OVS say, on stderr (after a failure). */
async function diagnose(): Promise<void> {
  const script = [
    'docker ps -a --format "{{.Names}} {{.Status}}"',
    // containers Docker restarted (a crash: Open vSwitch 3.1's userspace conntrack, docs/lab.md)
    'docker inspect -f "{{.Name}} restarts={{.RestartCount}} started={{.State.StartedAt}}" $(docker ps -aq)',
    'docker logs openvswitch_vswitchd 2>&1 | grep -iE "assert|abort|emer" | tail -5',
    'docker exec openvswitch_vswitchd ovs-vsctl show 2>&1 | head -40',
    'docker exec nova_libvirt virsh -c qemu:///system list --all 2>&1',
    'for c in nova_compute nova_libvirt ovn_controller; do echo "--- $c"; docker logs --tail 60 $c 2>&1; done',
  ].join('\n');
  for (const node of ['cmp-0', 'cmp-1']) {
    const r = await lab
      .remote(node)
      .exec(['sh', '-c', script], { timeoutMs: 60_000 })
      .catch((e: unknown) => ({ stdout: String(e), stderr: '' }));
    process.stderr.write(`===== ${node}\n${r.stdout}${r.stderr}\n`);
  }
}

/** Create a server and wait for ACTIVE; then wait for the guest's ready line in its console log. */
async function bootServer(
  name: string,
  options = '',
): Promise<{ id: string; activeS: number; readyS: number; guestS: number; log: string }> {
  const t0 = Date.now();
  const server = osJson<{ id: string; status: string }>(
    `--os-compute-api-version 2.37 server create --flavor m1.tiny --image lab-guest ${options} --wait ${name}`,
  );
  const activeS = Number(seconds(t0));
  expect(server.status).toBe('ACTIVE');
  let log = '';
  for (let i = 0; i < 120 && !log.includes(GUEST_READY_MARKER); i++) {
    await sleep(1000);
    log = os(`console log show ${server.id}`);
  }
  const readyS = Number(seconds(t0));
  expect(log, `the console log of ${name}`).toContain(GUEST_READY_MARKER);
  // the guest's own figure: seconds from its kernel's start to serving
  const guestS = Number(/stackctl-guest: ready boot_id=[0-9a-f-]+ after ([\d.]+) s/.exec(log)?.[1] ?? NaN);
  expect(log).toMatch(/stackctl-guest: virtio_net csum=N/);
  return { id: server.id, activeS, readyS, guestS, log };
}

describe('real guests: libvirt with QEMU TCG on a 1ctl-2comp lab', () => {
  beforeAll(async () => {
    mkdirSync(GUEST_DIR, { recursive: true });
    const t0 = Date.now();
    const guest = await buildGuestImage({ outDir: GUEST_DIR });
    figure(
      'guest image',
      `${guest.inputs.kernel.package} ${guest.inputs.kernel.version}, vmlinuz ${guest.kernel.size} B, ` +
        `initrd ${guest.initrd.size} B, ${guest.cached ? 'cached' : 'built'} in ${seconds(t0)} s`,
    );
    expect(guest.inputs.kernel.package).toBe(GUEST_KERNEL_PACKAGE);
    await lab.up(CLOUD_IMAGES);
    expect(['tcp', 'tls']).toContain(MIGRATION);
    if (MIGRATION === 'tls') {
      const text = readFileSync(lab.inventory, 'utf8');
      expect(text).toContain('nova_live_migration_transport: tcp\n');
      writeFileSync(
        lab.inventory,
        text.replace('nova_live_migration_transport: tcp\n', 'nova_live_migration_transport: tls\n'),
      );
      await lab.tlsOn('tls: { internal: true }\n');
    }
    figure('live migration transport', MIGRATION);
  }, 1_800_000);
  afterAll(async (suite) => {
    process.stderr.write(`\nFIGURES\n${figures.map(([k, v]) => `  ${k}: ${v}`).join('\n')}\n`);
    const failed = suiteFailed(suite);
    execFileSync('docker', ['rm', '-f', PINGER], { stdio: 'ignore' });
    if (failed) await diagnose().catch((e: unknown) => process.stderr.write(`diagnostics failed: ${String(e)}\n`));
    await lab.downUnlessKept(failed);
  }, 180_000);

  it('deploys the whole cloud with libvirt on cmp-0 and the guest image as its starter image', async () => {
    const t0 = Date.now();
    const { report, text } = await lab.deploy({ guestImage: GUEST_DIR });
    figure('deploy (pulls included)', `${seconds(t0)} s`);
    expect(report?.ok, text).toBe(true);
    expect(text).toMatch(/resources nova-api\/flavors-images ran \(flavor m1.tiny created, image lab-guest created, /);
    for (const c of ['nova_libvirt', 'nova_virtlogd', 'nova_compute'])
      expect((await lab.remote('cmp-0').docker.inspectContainer(c))?.state.running, c).toBe(true);
    // the node's own libvirt identity, derived from the cloud and node names
    const uuid = await onCompute(
      "docker exec nova_libvirt virsh -c qemu:///system capabilities | sed -n 's:.*<uuid>\\(.*\\)</uuid>.*:\\1:p' | head -1",
    );
    expect(uuid.trim()).toBe(uuidFromName('stackctl-node:guest/cmp-0'));
    openrc = join(lab.inventory, '..', 'guest.openrc');
    expect((await runCli('openrc', '-i', lab.inventory, '-o', openrc)).code).toBe(0);
    const hv = osJson<{ 'Hypervisor Type': string }[]>('hypervisor list --long');
    expect(hv.map((h) => h['Hypervisor Type'])).toEqual(['QEMU', 'QEMU']);
    // status: ctl-0 the gateway chassis, cmp-0 a chassis with its metadata agent, all alive in Neutron
    const network = await eventually(120, async () => {
      const st = await runCli('status', '-i', lab.inventory, '--json');
      const v = (JSON.parse(st.stdout) as { network?: { state: string; agents?: { host: string; type: string }[] } })
        .network;
      expect(v?.state, st.stdout.slice(-2000)).toBe('ok');
      return v!;
    });
    expect(network.value.agents!.map((a) => `${a.host} ${a.type}`).sort()).toEqual([
      'cmp-0 OVN Controller agent',
      'cmp-0 OVN Metadata agent',
      'cmp-1 OVN Controller agent',
      'cmp-1 OVN Metadata agent',
      'ctl-0 OVN Controller Gateway agent',
    ]);
  }, 1_800_000);

  let server = { id: '', bootedAt: 0, fip: '', boot: '', host: '' };
  it('openstack server create on the tenant network: ACTIVE, a real QEMU on cmp-0 with tb-size, plugged into br-int, the ready line in its console log', async () => {
    // the key pair's private key, as `openstack keypair create` prints it
    keyFile = join(tempDir('stackctl-guest-key-'), 'guest-key');
    writeFileSync(keyFile, os('keypair create guest-key'));
    chmodSync(keyFile, 0o600);
    os('security group create guest-sg');
    os('security group rule create --ingress --protocol icmp guest-sg');
    for (const p of [22, 80]) os(`security group rule create --ingress --protocol tcp --dst-port ${p} guest-sg`);
    const bootedAt = Date.now();
    // on cmp-0 (the admin's availability zone:host form), so that the migration below has a known source
    const s = await bootServer(
      'guest-1',
      '--network demo-net --security-group guest-sg --key-name guest-key --availability-zone nova:cmp-0',
    );
    server = { id: s.id, bootedAt, fip: '', boot: '', host: 'cmp-0' };
    figure('server create --wait -> ACTIVE', `${s.activeS} s`);
    figure('server create -> ready line in console log', `${s.readyS} s (guest: kernel start -> ready ${s.guestS} s)`);
    // the DHCP lease from OVN: the server's fixed address
    const fixed = osJson<{ addresses: Record<string, string[]> }>(`server show ${s.id}`).addresses['demo-net']?.[0];
    expect(fixed, 'the server has an address on demo-net').toBeTruthy();
    const { value: log } = await eventually(60, () => {
      const l = os(`console log show ${s.id}`);
      expect(l).toContain(`addresses eth0=${fixed}`);
      return l;
    });
    expect(log).toContain(GUEST_READY_MARKER);
    const q = (await qemuProcesses()).find((p) => p.uuid === s.id);
    expect(q, 'a qemu-system-x86_64 process with the server uuid on cmp-0').toBeDefined();
    expect(q!.args).toMatch(/-accel tcg,tb-size=64/);
    // os-vif's port on br-int, bound to the Neutron port
    // (the client's list columns are titled: ID)
    const port = osJson<{ ID: string }[]>(`port list --server ${s.id}`)[0]!;
    expect(port?.ID, 'the server has a port').toMatch(/^[0-9a-f-]{36}$/);
    const iface = await onCompute(
      `docker exec openvswitch_vswitchd ovs-vsctl --bare --columns=name find Interface external_ids:iface-id=${port.ID}`,
    );
    expect(iface.trim()).toBe(`tap${port.ID}`.slice(0, 14));
    // neutron-server told Nova the port was plugged (nova-compute waited for it: vif_plugging_timeout)
    const apiLog = await onCompute('docker logs nova_api 2>&1', 'ctl-0');
    expect(apiLog).toContain(`Creating event network-vif-plugged:${port.ID} for instance ${s.id} on cmp-0`);
    const computeConf = await onCompute('cat /etc/stackctl/nova-compute/nova.conf');
    expect(computeConf).toMatch(/^vif_plugging_is_fatal = true$/m);
    await sleep(5000);
    const settled = (await qemuProcesses()).find((p) => p.uuid === s.id)!;
    figure('QEMU RSS per guest, tb-size 64 MiB (m1.tiny, 256 MiB RAM)', `${settled.rssMiB} MiB`);
    expect(settled.rssMiB).toBeLessThan(400);
  }, 900_000);

  it('with a floating IP this machine reaches it: ping, HTTP (boot id, counter advancing), SSH with the key pair', async () => {
    expect(server.id, 'the server of the previous test').not.toBe('');
    const ip = osJson<{ floating_ip_address: string }>('floating ip create public').floating_ip_address;
    const t0 = Date.now();
    os(`server add floating ip ${server.id} ${ip}`);
    // (this machine's side of the external network has no transmit checksum offload: lab up turned
    // it off, or the HTTP and SSH below would fail while ping works; LAB-FACTS 9, trap B)
    const ping = await eventually(120, () =>
      expect(onHost(NODE_IMAGE, ['busybox', 'ping', '-c', '1', '-W', '1', ip], 10_000)).toMatch(/1 packets received/),
    );
    figure('floating IP added -> first ping answered', `${ping.s} s`);
    const state = () => guestState(ip);
    const a = (await eventually(60, state)).value;
    await sleep(2000);
    const b = await state();
    expect(b.boot).toBe(a.boot);
    expect(b.counter - a.counter).toBeGreaterThan(5);
    // SSH once the guest has its key from the metadata service (Neutron's metadata agent on cmp-0
    // forwards its requests to Nova's metadata API)
    const keyed = await eventually(300, () =>
      expect(os(`console log show ${server.id}`)).toContain(GUEST_SSH_KEY_MARKER),
    ).catch(() => undefined);
    expect(
      keyed,
      "the guest got no SSH key from http://169.254.169.254 within 5 min: is neutron-ovn-metadata-agent running on cmp-0, and Nova's metadata API (nova_metadata) on ctl-0?",
    ).toBeDefined();
    if (MIGRATION === 'tls') {
      // with internal TLS that key came from Nova's metadata API over HTTPS, checked against the CA
      const ini = await onCompute('cat /etc/stackctl/neutron-ovn-metadata-agent/neutron_ovn_metadata_agent.ini');
      expect(ini).toMatch(/^nova_metadata_protocol = https$/m);
      expect(ini).toMatch(/^auth_ca_cert = \S+ca\.pem$/m);
    }
    const first = await eventually(180, () => ssh(ip, 'cat /proc/sys/kernel/random/boot_id'));
    figure('floating IP added -> first SSH command', `${seconds(t0)} s`);
    figure('server create -> first SSH command', `${seconds(server.bootedAt)} s`);
    expect(first.value).toBe(a.boot);
    expect(ssh(ip, 'hostname')).toBe('guest-1');
    server.fip = ip;
    server.boot = a.boot;
  }, 900_000);

  it("a deploy that would recreate cmp-0's nova_libvirt under the running guest is refused: the guest runs on, same boot", async () => {
    expect(server.fip, 'the floating IP of the previous test').not.toBe('');
    const name = osJson<Record<string, string>>(`server show ${server.id}`)['OS-EXT-SRV-ATTR:instance_name']!;
    // a change only nova_libvirt reads (its QEMU wrapper's translation cache size): both computes' would be recreated
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(
      lab.inventory,
      text.replace('    nova_virt_type: qemu\n', '    nova_virt_type: qemu\n    nova_tcg_tb_cache_mib: 65\n'),
    );
    try {
      const { report, text: out } = await lab.deploy({ services: 'nova-compute', maxFailPercent: 50 });
      expect(report?.ok, out).toBe(false);
      expect(report!.failures.map((f) => [f.node, f.code])).toEqual([['cmp-0', 'E_WORKLOADS_RUNNING']]);
      expect(report!.failures[0]!.message).toMatch(
        new RegExp(`nova_libvirt would be recreated .*, stopping the 1 guests it runs: ${name}$`),
      );
      // nova-compute rolls node by node: the roll stops at cmp-0, cmp-1's is left for the next run
      expect(out).toContain('aborted after step 4: the rolling restart step:4:roll:nova-compute failed');
      expect(out).not.toMatch(/cmp-1: container nova_libvirt recreated/);
    } finally {
      writeFileSync(lab.inventory, text);
    }
    expect((await guestState(server.fip)).boot).toBe(server.boot);
    expect(ssh(server.fip, 'cat /proc/sys/kernel/random/boot_id')).toBe(server.boot);
    // back as planned: cmp-0's file rewritten, its nova_libvirt (never recreated) unchanged
    const back = await lab.deploy({ services: 'nova-compute' });
    expect(back.report?.ok, back.text).toBe(true);
    expect(back.text).toMatch(/step 4 cmp-0: container nova_libvirt unchanged/);
    expect((await guestState(server.fip)).boot).toBe(server.boot);
  }, 900_000);

  it('openstack server migrate --live-migration: the guest moves to cmp-1 with its disk, same boot, counter continuous, reachable throughout but for a short gap', async () => {
    expect(server.fip, 'the floating IP of the previous test').not.toBe('');
    const { id, fip } = server;
    // outside watchers for the whole migration: the state page every 100 ms, and ping every 100 ms
    const watch = watchGuest(`http://${fip}/cgi-bin/state`, { intervalMs: 100, timeoutMs: 1000 });
    const stopPinger = startPinger(fip);
    await sleep(3000);
    const t0 = Date.now();
    // 2.30: Nova chooses block migration (the instance's disk is local to cmp-0) or shared storage
    // (asynchronously: the watcher's polls run meanwhile)
    await openstackAsync(openrc, `--os-compute-api-version 2.30 server migrate --live-migration --wait ${id}`, 600_000);
    const migrateS = Number(seconds(t0));
    await sleep(3000);
    const seen = await watch.stop();
    const pings = await stopPinger();
    const shown = osJson<Record<string, string>>(`server show ${id}`);
    expect(shown['OS-EXT-SRV-ATTR:host']).toBe('cmp-1');
    expect(shown['status']).toBe('ACTIVE');
    // what carried it: libvirtd's only network listener on each compute is the transport's port
    for (const node of ['cmp-0', 'cmp-1']) {
      const listening = await onCompute("ss -Hltn '( sport = :16509 or sport = :16514 )' | awk '{print $4}'", node);
      expect(listening.trim().replace(/^.*:/, ''), node).toBe(MIGRATION === 'tls' ? '16514' : '16509');
    }
    const migrations = osJson<{ Status: string; 'Source Node': string; 'Dest Node': string; Type?: string }[]>(
      `--os-compute-api-version 2.30 server migration list --server ${id}`,
    );
    expect(migrations[0], JSON.stringify(migrations)).toMatchObject({
      Status: 'completed',
      'Source Node': 'cmp-0',
      'Dest Node': 'cmp-1',
    });
    // the guest's QEMU runs on cmp-1 now (tb-size kept), none on cmp-0
    const moved = (await qemuProcesses('cmp-1')).find((p) => p.uuid === id);
    expect(moved, 'a qemu-system-x86_64 process with the server uuid on cmp-1').toBeDefined();
    expect(moved!.args).toMatch(/-accel tcg,tb-size=64/);
    expect((await qemuProcesses('cmp-0')).find((p) => p.uuid === id)).toBeUndefined();
    // the same machine: one boot id throughout, its counter never went back
    expect(seen.bootIds).toEqual([server.boot]);
    expect(seen.bootIdChanges).toBe(0);
    expect(seen.counterRegressions).toBe(0);
    expect(seen.answered).toBeGreaterThan(20);
    figure('live migration cmp-0 -> cmp-1 (block, TCG, m1.tiny): migrate --wait', `${migrateS} s`);
    figure(
      'live migration: longest HTTP gap (state page every 100 ms)',
      `${(seen.longestGapMs / 1000).toFixed(2)} s, ${seen.lost} of ${seen.samples} polls lost`,
    );
    figure(
      'live migration: ping every 100 ms',
      `${pings.lost} of ${pings.sent} lost, longest run lost ${pings.longestRun}`,
    );
    // the budget here is generous (TCG, a loaded 2-core machine); the figure above is the result
    expect(seen.longestGapMs).toBeLessThan(30_000);
    // still reachable over SSH, the same boot
    expect(ssh(fip, 'cat /proc/sys/kernel/random/boot_id')).toBe(server.boot);
    const after = await guestState(fip);
    expect(after.boot).toBe(server.boot);
    expect(after.counter).toBeGreaterThanOrEqual(seen.lastCounter ?? 0);
    server.host = 'cmp-1';
  }, 900_000);

  it('nodes maintenance: on drains cmp-1 back to cmp-0 (same boot); on cmp-0 with nowhere to go it is refused, nothing disabled; off brings cmp-1 back', async () => {
    expect(server.host, 'the migrated server of the previous test').toBe('cmp-1');
    const { id, fip } = server;
    const services = (): Record<string, string> =>
      Object.fromEntries(
        osJson<{ Host: string; Status: string }[]>('compute service list --service nova-compute').map((r) => [
          r.Host,
          r.Status,
        ]),
      );
    const watch = watchGuest(`http://${fip}/cgi-bin/state`, { intervalMs: 100, timeoutMs: 1000 });
    const t0 = Date.now();
    const on = await runCli('nodes', 'maintenance', 'on', '--node', 'cmp-1', '-i', lab.inventory, '--json');
    const onS = seconds(t0);
    const seen = await watch.stop();
    expect(on.code, on.stderr).toBe(0);
    const result = JSON.parse(on.stdout.trim().split('\n').at(-1)!) as { detail: string };
    expect(result.detail).toMatch(
      /^cmp-1: nova-compute disabled, 1 instance\(s\) live-migrated in \d+ s; 1 watched, longest gap [\d.]+ s, 0 boot-id changes$/,
    );
    expect(services()).toEqual({ 'cmp-0': 'enabled', 'cmp-1': 'disabled' });
    expect(osJson<Record<string, string>>(`server show ${id}`)['OS-EXT-SRV-ATTR:host']).toBe('cmp-0');
    expect(seen.bootIds).toEqual([server.boot]);
    expect(seen.counterRegressions).toBe(0);
    figure(
      'nodes maintenance on cmp-1 (1 guest)',
      `${onS} s; longest HTTP gap ${(seen.longestGapMs / 1000).toFixed(2)} s, ${seen.lost} of ${seen.samples} polls lost`,
    );
    // the event log has the migration and the command
    const events = readFileSync(lab.inventory.replace(/\.yaml$/, '.events.jsonl'), 'utf8');
    expect(events).toMatch(/"kind":"upgrade.migration"[^\n]*"from":"cmp-1"[^\n]*"to":"cmp-0"[^\n]*"state":"completed"/);
    expect(events).toMatch(/"kind":"command.end","command":"nodes maintenance on","ok":1/);
    // the workload ledger: stackctl watched the guest at its floating IP throughout
    const ledger = events
      .split('\n')
      .filter((l) => l.includes('"kind":"workload.ledger"'))
      .map(
        (l) =>
          JSON.parse(l) as {
            server: string;
            address: string;
            watched: boolean;
            bootIdChanges: number;
            longestGapMs: number;
          },
      )
      .at(-1);
    expect(ledger).toMatchObject({ server: 'guest-1', address: fip, watched: true, bootIdChanges: 0 });
    figure(
      'workload ledger (stackctl itself, maintenance on cmp-1)',
      `longest gap ${(ledger!.longestGapMs / 1000).toFixed(2)} s`,
    );

    // cmp-0 holds the guest and cmp-1 is disabled: no room, refused with the shortfall, nothing changed
    const refused = await runCli('nodes', 'maintenance', 'on', '--node', 'cmp-0', '-i', lab.inventory);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('E_EVACUATION_CAPACITY');
    expect(refused.stderr).toMatch(/the instances of cmp-0 \(1 vCPUs, 256 MiB memory.*none enabled and up/);
    expect(refused.stderr).toContain('nodes maintenance off --node N');
    expect(services()).toEqual({ 'cmp-0': 'enabled', 'cmp-1': 'disabled' });
    expect(osJson<Record<string, string>>(`server show ${id}`)['OS-EXT-SRV-ATTR:host']).toBe('cmp-0');

    const off = await runCli('nodes', 'maintenance', 'off', '--node', 'cmp-1', '-i', lab.inventory);
    expect(off.code, off.stderr).toBe(0);
    expect(off.stdout).toMatch(
      /cmp-1: maintenance off: nova-compute enabled on cmp-1; nova-compute reports and is up on cmp-1/,
    );
    expect(services()).toEqual({ 'cmp-0': 'enabled', 'cmp-1': 'enabled' });
    expect((await guestState(fip)).boot).toBe(server.boot);
    server.host = 'cmp-0';
  }, 900_000);

  it('a live migration slowed past its deadline is aborted: the guest stays ACTIVE on its source, same boot; maintenance fails naming it, the node enabled again', async () => {
    expect(server.id, 'the server of the earlier tests').not.toBe('');
    const { id, fip } = server;
    // from where the guest is now (cmp-0 after the maintenance test) to the other compute, both enabled
    const src = osJson<Record<string, string>>(`server show ${id}`)['OS-EXT-SRV-ATTR:host']!;
    expect(['cmp-0', 'cmp-1']).toContain(src);
    const dst = src === 'cmp-0' ? 'cmp-1' : 'cmp-0';
    const computes = (): Record<string, string> =>
      Object.fromEntries(
        osJson<{ Host: string; Status: string }[]>('compute service list --service nova-compute').map((x) => [
          x.Host,
          x.Status,
        ]),
      );
    for (const [host, state] of Object.entries(computes()))
      if (state !== 'enabled') os(`compute service set --enable ${host} nova-compute`);
    // 64 MiB of random bytes in the guest's memory (its root is its initramfs), and the migration's
    // path throttled: the source's interface toward the destination's address on the migration network
    // sends at most 8 Mbit/s, so the copy of its memory alone takes over a minute, past the 30 s deadline
    ssh(fip, 'dd if=/dev/urandom of=/root/fill bs=1M count=64 2>/dev/null && ls -l /root/fill');
    const target = loadAll({ inventory: lab.inventory }).allocation.addresses.get(dst)!['internal_api']!;
    const dev = (await onCompute(`ip -o route get ${target} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'`, src)).trim();
    expect(dev).toMatch(/^[\w.@-]+$/);
    await onCompute(`tc qdisc replace dev ${dev} root tbf rate 8mbit burst 32kbit latency 2s`, src);
    const watch = watchGuest(`http://${fip}/cgi-bin/state`, { intervalMs: 100, timeoutMs: 1000 });
    const t0 = Date.now();
    let r: Awaited<ReturnType<typeof runCli>>;
    try {
      r = await runCli('nodes', 'maintenance', 'on', '--node', src, '--migration-timeout', '30', '-i', lab.inventory);
    } finally {
      await onCompute(`tc qdisc del dev ${dev} root`, src);
    }
    const wall = seconds(t0);
    const seen = await watch.stop();
    expect(r.code, r.stdout + r.stderr).not.toBe(0);
    expect(r.stderr).toContain('E_EVACUATION_FAILED');
    expect(r.stderr).toMatch(
      new RegExp(`${src} still holds guest-1 \\(.*after 30 s; migration \\S+ aborted: ACTIVE on ${src}, its source\\)`),
    );
    expect(r.stderr).toContain(`stay on ${src}, running, and nova-compute is enabled on it again`);
    // Nova: the migration cancelled, the server ACTIVE on its source, both computes enabled
    const after = osJson<Record<string, string>>(`server show ${id}`);
    expect([after['status'], after['OS-EXT-SRV-ATTR:host'], after['OS-EXT-STS:task_state'] ?? null]).toEqual([
      'ACTIVE',
      src,
      null,
    ]);
    // the newest of the server's migrations (the list holds the earlier tests' ones too)
    const migrations = osJson<{ Id: number; Status: string; 'Source Node': string; 'Dest Node': string }[]>(
      `--os-compute-api-version 2.30 server migration list --server ${id}`,
    ).sort((a, b) => b.Id - a.Id);
    // Nova records an aborted migration `cancelled`, or `failed` when libvirt's job ends on the abort's
    // error before Nova's monitor sees it cancelled (seen with the throttled link): never `completed`
    expect(migrations[0], JSON.stringify(migrations)).toMatchObject({ 'Source Node': src, 'Dest Node': dst });
    expect(['cancelled', 'failed']).toContain(migrations[0]!.Status);
    expect(computes()).toEqual({ 'cmp-0': 'enabled', 'cmp-1': 'enabled' });
    // the guest never stopped: the same boot, its counter never went back, its QEMU still on the source alone
    expect(seen.bootIds).toEqual([server.boot]);
    expect(seen.counterRegressions).toBe(0);
    expect((await qemuProcesses(src)).find((p) => p.uuid === id)).toBeDefined();
    expect((await qemuProcesses(dst)).find((p) => p.uuid === id)).toBeUndefined();
    expect(ssh(fip, 'cat /proc/sys/kernel/random/boot_id')).toBe(server.boot);
    // the event log: the migration timed out, the command failed
    const events = readFileSync(lab.inventory.replace(/\.yaml$/, '.events.jsonl'), 'utf8');
    expect(events).toMatch(new RegExp(`"kind":"upgrade.migration"[^\\n]*"from":"${src}"[^\\n]*"state":"timeout"`));
    figure(
      `aborted live migration (8 Mbit/s, 30 s deadline): maintenance on ${src} fails`,
      `${wall} s; longest HTTP gap ${(seen.longestGapMs / 1000).toFixed(2)} s, ` +
        `${seen.lost} of ${seen.samples} polls lost`,
    );
    os(`server delete --wait ${id}`);
    expect((await qemuProcesses(src)).find((p) => p.uuid === id)).toBeUndefined();
  }, 900_000);

  it('nova_virt_type kvm on computes without KVM: refused in host preparation, before step 1, naming cmp-0 and cmp-1', async () => {
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace('nova_virt_type: qemu', 'nova_virt_type: kvm'));
    try {
      const { report, text: out } = await lab.deploy({ guestImage: GUEST_DIR });
      expect(report?.ok, out).toBe(false);
      const failures = [...(report?.failures ?? [])].sort((a, b) => String(a.node).localeCompare(String(b.node)));
      expect(failures).toEqual(
        ['cmp-0', 'cmp-1'].map((node) =>
          expect.objectContaining({
            node,
            path: `step 4/${node}/host nova-compute`,
            code: expect.stringMatching(/^E_HOST_(MODULE|DEVICE)$/),
          }),
        ),
      );
      expect(report?.steps).toEqual([]);
      expect(report?.changes).toBe(0);
    } finally {
      writeFileSync(lab.inventory, text);
      process.exitCode = undefined;
    }
  }, 600_000);

  it('upgrade --to zed-update --batch 1 empties each compute by real live migrations, through a SIGKILL mid-migration: the same boots, every guest reachable, the ledger of each migration', async () => {
    const built = await buildTargetImages(REGISTRY_PORT);
    figure('zed-update images built and pushed', `${built.toFixed(1)} s`);
    expect(keyFile, 'the key pair of the earlier tests').not.toBe('');
    // one guest on each compute, each with a floating IP
    const guests: { id: string; name: string; host: string; fip: string; boot: string }[] = [];
    for (const [name, host] of [
      ['guest-2', 'cmp-0'],
      ['guest-3', 'cmp-1'],
    ] as const) {
      const s = await bootServer(
        name,
        `--network demo-net --security-group guest-sg --key-name guest-key --availability-zone nova:${host}`,
      );
      const fip = osJson<{ floating_ip_address: string }>('floating ip create public').floating_ip_address;
      os(`server add floating ip ${s.id} ${fip}`);
      const { value } = await eventually(180, () => guestState(fip));
      guests.push({ id: s.id, name, host, fip, boot: value.boot });
    }
    expect(osJson<Record<string, string>>(`server show ${guests[1]!.id}`)['OS-EXT-SRV-ATTR:host']).toBe('cmp-1');
    // watched from outside by the test itself for the whole run, beside stackctl's own ledger
    const watches = guests.map((g) =>
      watchGuest(`http://${g.fip}/cgi-bin/state`, { intervalMs: 100, timeoutMs: 1000 }),
    );
    const seenEvents = upgradeEvents(lab.inventory).length;
    const newEvents = () => upgradeEvents(lab.inventory).slice(seenEvents);
    const tUpgrade = Date.now();

    // Killed (SIGKILL) 3 s into the first live migration of the first compute batch ...
    const load = sampleLoad();
    const run1 = spawnUpgrade(lab.inventory, ['--to', 'zed-update', '--batch', '1']);
    const killed = await killDuringMigration(lab.inventory, run1, seenEvents);
    if (killed !== null) {
      // Two runs stopped in the prechecks, every node's dockerd (or sshd) unanswered for 30 s: say
      // which path was slow, this machine's load meanwhile, and each node's dockerd asked directly.
      figure('this machine load (1 min) during the upgrade', load.stop());
      for (const node of ['ctl-0', 'cmp-0', 'cmp-1']) figure(`${node} after the failure`, await nodePaths(node));
    }
    expect(killed, run1.out().slice(-3000)).toBeNull();
    const inFlight = osJson<{ Name: string; Status: string }[]>('server list --all-projects').filter(
      (r) => r.Status === 'MIGRATING',
    );
    figure(
      'upgrade killed mid-migration',
      `after ${seconds(tUpgrade)} s, live migrations under way: ${inFlight.map((r) => r.Name).join(', ') || 'none'}`,
    );
    // ... and resumed to the end
    const resumed = await runCli('upgrade', '-i', lab.inventory, '--to', 'zed-update', '--resume');
    const upgradeS = seconds(tUpgrade);
    figure('this machine load (1 min) during the upgrade', load.stop());
    const seen = await Promise.all(watches.map((w) => w.stop()));
    expect(resumed.code, (resumed.stdout + resumed.stderr).slice(-5000)).toBe(0);
    figure('upgrade --to zed-update --batch 1, one kill and resume (2 guests)', `${upgradeS} s`);

    // every OpenStack container runs its zed-update image
    await lab.reconnect();
    expect(await containersOffTarget(lab, 'guest')).toEqual([]);
    // Nova: each guest left its compute by a completed live migration before that compute's
    // nova_compute was replaced, none requested twice (the one cut by the kill was waited for)
    const migrations = osJson<MigrationRecord[]>('--os-compute-api-version 2.59 server migration list');
    expect(
      await evacuationFaults(
        lab,
        guests.map((g) => ({ ID: g.id, Name: g.name, Host: g.host })),
        migrations,
        tUpgrade,
      ),
    ).toEqual([]);
    // the guests never stopped: the same boot, counters never went back, reachable at the end; the
    // dataplane per phase of the upgrade against the 2 s goal (the plan declares no dataplane outage)
    const spans = phaseTimes(lab.inventory, tUpgrade).map((p) => ({ name: p.phase, from: p.from, to: p.to }));
    guests.forEach((g, i) => {
      expect(seen[i]!.bootIds, g.name).toEqual([g.boot]);
      expect(seen[i]!.counterRegressions, g.name).toBe(0);
      figure(
        `${g.name} (from ${g.host}) over the whole upgrade, watched by the test`,
        `longest HTTP gap ${(seen[i]!.longestGapMs / 1000).toFixed(2)} s, ${seen[i]!.lost} of ${seen[i]!.samples} polls lost`,
      );
      const byPhase = gapsBySpan(watches[i]!.samples(), spans);
      figure(
        `${g.name} per upgrade phase (longest gap, lost/polls)`,
        byPhase.map((p) => `${p.name} ${(p.longestGapMs / 1000).toFixed(2)} s ${p.lost}/${p.samples}`).join('; '),
      );
      // the goal (issue: no phase over 2 s) is a figure; the run's own budget (workload_max_gap_s) is the bound
      figure(
        `${g.name}: phases over the 2 s goal`,
        byPhase
          .filter((p) => p.longestGapMs > 2000)
          .map((p) => p.name)
          .join(', ') || 'none',
      );
    });
    for (const g of guests) {
      expect(osJson<Record<string, string>>(`server show ${g.id}`)['status'], g.name).toBe('ACTIVE');
      // answering again within a minute of the run's end: the last batch's migrations have just ended,
      // and one poll of a guest just moved on a loaded 2-core machine can miss (a run did)
      const { value: end, s: after } = await eventually(60, () => guestState(g.fip));
      expect(end.boot, g.name).toBe(g.boot);
      figure(`${g.name} answering HTTP after the run`, `${after.toFixed(1)} s`);
      expect(ssh(g.fip, 'cat /proc/sys/kernel/random/boot_id'), g.name).toBe(g.boot);
    }
    // stackctl's own ledger: every guest it migrated watched (the migration the kill cut too, while the
    // resumed run waited for it), no boot-id change; each gap against the 2 s goal
    const ledger = newEvents().filter((e) => e.kind === 'workload.ledger') as unknown as {
      server: string;
      watched: boolean;
      bootIdChanges: number;
      longestGapMs: number;
      lost: number;
      samples: number;
    }[];
    figure(
      'workload ledger (stackctl itself, the upgrade)',
      ledger
        .map((l) => `${l.server} ${(l.longestGapMs / 1000).toFixed(2)} s (${l.lost} of ${l.samples} lost)`)
        .join('; '),
    );
    expect(ledger.length, "no workload ledger in the upgrade's events").toBeGreaterThan(0);
    for (const l of ledger) expect(l, l.server).toMatchObject({ watched: true, bootIdChanges: 0 });
    figure(
      'workload ledger: migrations over the 2 s goal',
      ledger
        .filter((l) => l.longestGapMs > 2000)
        .map((l) => l.server)
        .join(', ') || 'none',
    );
    expect(new Set(ledger.map((l) => l.server))).toEqual(new Set(['guest-2', 'guest-3']));
  }, 3_600_000);
});
