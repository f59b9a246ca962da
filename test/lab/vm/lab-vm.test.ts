/**
 * The VM lab for real: `lab up --kind vm --nodes 2` makes a bridge, taps,
 * qcow2 disks and a detached virtual BMC process; `nodes enroll` checks both
 * BMCs (one IPMI, one Redfish); `nodes inspect` runs dnsmasq and the boot
 * server, powers both QEMU VMs on through their BMCs, and they PXE-boot the
 * ramdisk built from Debian's kernel and report their hardware; `nodes show`
 * prints it; `lab down` leaves no interface, iptables rule, namespace,
 * process or file of the lab behind.
 *
 * Needs root and the Debian packages qemu-system-x86, qemu-utils,
 * dnsmasq-base, iproute2, iptables, and apt access to linux-image-amd64 and
 * busybox-static (downloaded, not installed). It fails, never skips, when
 * they are missing. `npm run build` first: the BMC process runs dist/.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/core/paths.js';
import { buildRamdisk } from '../../../src/images/ramdisk.js';
import { labTag } from '../../../src/lab/vm/layout.js';
import { readVmState } from '../../../src/lab/vm/lab.js';
import { runCli, tempDir } from '../../helpers/cli.js';

const NAME = 'svmtest';
/** Controllers IPMI from here, computes Redfish from here + 100 (7230+: the VM lab's ports). */
const BMC_PORT = 7230 + (process.pid % 60);
/** Loopback port of the lab registry (deploy-vm-lab takes 17600-17699). */
const REGISTRY_PORT = 17700 + (process.pid % 100);
/** Kept across runs: a rebuild with nothing changed takes milliseconds. */
const RAMDISK_DIR = join(tmpdir(), 'stackctl-svm-ramdisk');
const TOOLS: Readonly<Record<string, string>> = {
  'qemu-system-x86_64': 'qemu-system-x86',
  'qemu-img': 'qemu-utils',
  dnsmasq: 'dnsmasq-base',
  ip: 'iproute2',
  iptables: 'iptables',
  'apt-get': 'apt',
  'dpkg-deb': 'dpkg',
};

/** Fail (never skip) when something the test drives is missing. */
function requireEverything(): void {
  const missing = Object.keys(TOOLS).filter(
    (t) => spawnSync('sh', ['-c', 'command -v "$0"', t], { encoding: 'utf8' }).status !== 0,
  );
  if (missing.length) {
    throw new Error(
      `missing ${missing.join(', ')}: run "apt-get install ${[...new Set(missing.map((t) => TOOLS[t]))].join(' ')}"`,
    );
  }
  if (process.getuid?.() !== 0) throw new Error('the VM lab creates a bridge, taps and an iptables rule: run as root');
  if (!existsSync(join(packageRoot(), 'dist', 'src', 'cli', 'bin.js'))) {
    throw new Error('the virtual BMC process runs the built CLI: run "npm run build" first');
  }
}

const sh = (argv: string[]): string => spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8' }).stdout;
const links = (): string[] =>
  (JSON.parse(sh(['ip', '-j', 'link', 'show'])) as { ifname: string }[]).map((l) => l.ifname);
const netns = (): string[] => sh(['ip', 'netns', 'list']).split('\n').filter(Boolean).sort();
const rules = (): string[] => sh(['iptables', '-S', 'DOCKER-USER']).split('\n').filter(Boolean);
/** Pids whose command line mentions `text`. */
function processesWith(text: string): number[] {
  const pids: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(text)) pids.push(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return !/\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

describe('stackctl lab up --kind vm --nodes 2, nodes enroll + inspect, lab down (real QEMU, dnsmasq, vBMC)', () => {
  const dir = tempDir('stackctl-svm-');
  const inventory = join(dir, `${NAME}.yaml`);
  const labDir = join(dir, `${NAME}.lab`);
  const tag = labTag(inventory);
  const mine = (name: string): boolean => name.startsWith(`svm${tag}`);
  const up = [
    'lab',
    'up',
    '--kind',
    'vm',
    '--nodes',
    '2',
    '--name',
    NAME,
    '-i',
    inventory,
    '--bmc-port',
    String(BMC_PORT),
    // the lab's own registry: this machine pushes on loopback, the VMs pull on the bridge address
    '--registry',
    `127.0.0.1:${REGISTRY_PORT}`,
  ];
  let netnsBefore: string[] = [];
  const timings: string[] = [];

  beforeAll(async () => {
    requireEverything();
    // dnsmasq drops to an unprivileged user and must reach its files under the lab folder
    chmodSync(dir, 0o755);
    const t0 = Date.now();
    const r = await buildRamdisk({ outDir: RAMDISK_DIR });
    console.log(`ramdisk ${r.cached ? 'from cache' : 'built'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    netnsBefore = netns();
  }, 240_000);

  afterAll(async () => {
    // a failed test must not leave the lab running
    if (existsSync(inventory)) await runCli('lab', 'down', '--kind', 'vm', '--name', NAME, '-i', inventory, '--purge');
    rmSync(dir, { recursive: true, force: true });
    console.log(timings.join('\n'));
  }, 60_000);

  it('lab up creates the bridge, taps, disks, the DOCKER-USER rule and a BMC process that outlives it', async () => {
    const t0 = Date.now();
    const r = await runCli(...up);
    timings.push(`lab up: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    expect(r.code, r.stderr).toBe(0);
    const st = readVmState(inventory);
    const bridge = `svm${tag}`;
    expect(st.bridge).toBe(bridge);
    expect(Object.keys(st.taps).sort()).toEqual(['cmp-0', 'ctl-0']);
    expect(links().filter(mine).sort()).toEqual([bridge, ...Object.values(st.taps)].sort());
    // this machine on the other lab networks too (flat subnets on the bridge): it reaches the nodes' services
    expect(st.vlans).toBeUndefined();
    // the registry answers on the bridge address, where the inventory tells the nodes to pull from
    expect(readFileSync(inventory, 'utf8')).toContain('registry: 10.97.124.254:5000');
    expect((await fetch('http://10.97.124.254:5000/v2/')).status).toBe(200);
    for (const tap of Object.values(st.taps))
      expect(sh(['ip', '-j', 'link', 'show', tap])).toContain(`"master":"${bridge}"`);
    const addrs = sh(['ip', 'addr', 'show', bridge]);
    expect(addrs).toContain('10.97.124.254/24');
    expect(addrs).toContain('fd0a:61:7c::1/64');
    for (const a of ['10.97.120.254/24', '10.97.110.254/24', '10.97.150.254/24']) expect(addrs).toContain(a);
    if (rules().length) expect(rules()).toContain(`-A DOCKER-USER -i ${bridge} -o ${bridge} -j ACCEPT`);
    for (const node of ['ctl-0', 'cmp-0']) {
      const info = JSON.parse(sh(['qemu-img', 'info', '--output=json', join(labDir, 'vm', `${node}.qcow2`)])) as {
        format: string;
        'virtual-size': number;
      };
      expect(info).toMatchObject({ format: 'qcow2', 'virtual-size': 4 * 1024 ** 3 });
    }
    expect(st.vbmcPid).toBeDefined();
    expect(alive(st.vbmcPid!)).toBe(true);
    // the inventory is ready: valid, with both BMC kinds and the lab's credentials in the secrets file
    const valid = await runCli('inventory', 'validate', '-i', inventory);
    expect(valid.code, valid.stdout + valid.stderr).toBe(0);
    const inv = readFileSync(inventory, 'utf8');
    expect(inv).toContain(`ipmi://127.0.0.1:${BMC_PORT}`);
    expect(inv).toContain(`redfish+http://127.0.0.1:${BMC_PORT + 100}/redfish/v1/Systems/cmp-0`);
    const secrets = readFileSync(join(dir, `${NAME}.secrets.yaml`), 'utf8');
    // secrets never reach the state files or the output
    const password = /password: (\S+)/.exec(secrets)![1]!;
    expect(readFileSync(join(labDir, 'vm.json'), 'utf8')).not.toContain(password);
    expect(readFileSync(join(labDir, 'machines.json'), 'utf8')).not.toContain(password);
    expect(r.stdout + r.stderr).not.toContain(password);
  }, 300_000);

  it('lab up again creates nothing, and restarts the BMC process when it died', async () => {
    const before = links().filter(mine).sort();
    const again = await runCli(...up);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('lab already up, nothing changed');
    expect(links().filter(mine).sort()).toEqual(before);
    expect(rules().filter((r) => r.includes(`svm${tag}`)).length).toBeLessThanOrEqual(1);

    const old = readVmState(inventory).vbmcPid!;
    process.kill(old, 'SIGKILL');
    while (alive(old)) await new Promise((r) => setTimeout(r, 50));
    const revived = await runCli(...up);
    expect(revived.code, revived.stderr).toBe(0);
    expect(revived.stdout).toMatch(/virtual BMCs started \(pid \d+\)/);
    const now = readVmState(inventory).vbmcPid!;
    expect(now).not.toBe(old);
    expect(alive(now)).toBe(true);
    expect(links().filter(mine).sort()).toEqual(before);
  }, 60_000);

  it('lab status shows both nodes off and in enroll', async () => {
    const r = await runCli('lab', 'status', '--kind', 'vm', '--name', NAME, '-i', inventory, '--json');
    expect(r.code, r.stderr).toBe(0);
    const st = JSON.parse(r.stdout) as { bridgeUp: boolean; nodes: { node: string; power: string; state: string }[] };
    expect(st.bridgeUp).toBe(true);
    expect(st.nodes.map((n) => [n.node, n.power, n.state])).toEqual([
      ['ctl-0', 'off', 'enroll'],
      ['cmp-0', 'off', 'enroll'],
    ]);
  });

  it('nodes enroll checks both BMCs and makes the nodes manageable', async () => {
    const r = await runCli('nodes', 'enroll', '--all', '-i', inventory, '--json');
    expect(r.code, r.stderr).toBe(0);
    const rows = JSON.parse(r.stdout) as { node: string; ok: boolean; state: string; result: string }[];
    expect(rows.map((x) => [x.node, x.ok, x.state])).toEqual([
      ['ctl-0', true, 'manageable'],
      ['cmp-0', true, 'manageable'],
    ]);
    expect(rows[0]!.result).toContain('ipmi BMC answers');
    expect(rows[1]!.result).toContain('redfish BMC answers');
    // again: nothing to do
    const again = await runCli('nodes', 'enroll', '--all', '-i', inventory);
    expect(again.stdout).toContain('already enrolled (manageable)');
  }, 30_000);

  it('nodes inspect boots both VMs from the network in parallel and stores what their agents report', async () => {
    const t0 = Date.now();
    const r = await runCli(
      'nodes',
      'inspect',
      '--all',
      '-i',
      inventory,
      '--ramdisk',
      RAMDISK_DIR,
      '--timeout',
      '150',
      '--json',
    );
    timings.push(`nodes inspect (2 in parallel): ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const serial = (node: string): string => {
      const f = join(labDir, 'vm', node, 'serial.log');
      return existsSync(f) ? readFileSync(f, 'utf8').split('\n').slice(-15).join('\n') : '(no console)';
    };
    expect(r.code, `${r.stdout}\n${r.stderr}\nctl-0:\n${serial('ctl-0')}\ncmp-0:\n${serial('cmp-0')}`).toBe(0);
    const rows = JSON.parse(r.stdout) as { node: string; ok: boolean; state: string; ms: number }[];
    for (const row of rows) timings.push(`  ${row.node}: ${(row.ms / 1000).toFixed(1)} s`);
    expect(rows.map((x) => [x.node, x.ok, x.state])).toEqual([
      ['ctl-0', true, 'manageable'],
      ['cmp-0', true, 'manageable'],
    ]);
    // the VMs powered off after their report; dnsmasq of the run is gone
    const status = JSON.parse(
      (await runCli('lab', 'status', '--kind', 'vm', '-i', inventory, '--name', NAME, '--json')).stdout,
    ) as {
      nodes: { power: string; state: string; qemuPid: number | null }[];
    };
    expect(status.nodes.map((n) => [n.power, n.state])).toEqual([
      ['off', 'manageable'],
      ['off', 'manageable'],
    ]);
    expect(processesWith(join(dir, `${NAME}.pxe`))).toEqual([]);
    const events = readFileSync(join(dir, `${NAME}.events.jsonl`), 'utf8');
    expect(events).toContain('"kind":"pxe.agent-report","node":"cmp-0"');
    expect(events).toContain(
      '"kind":"node.state","node":"ctl-0","from":"inspect wait","event":"done","to":"manageable"',
    );
  }, 200_000);

  it('nodes show prints the introspection data, history and state; nodes list the table', async () => {
    const r = await runCli('nodes', 'show', 'cmp-0', '-i', inventory);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('state:  manageable');
    expect(r.stdout).toMatch(/\/dev\/vda\s+4294967296\s+SVM[0-9A-F]{6}1/);
    expect(r.stdout).toMatch(/eth0\s+52:54:00:97:20:01\s+10\.97\.124\.11/);
    expect(r.stdout).toContain('inspect wait  manageable');
    const json = JSON.parse((await runCli('nodes', 'show', 'ctl-0', '-i', inventory, '--json')).stdout) as {
      state: string;
      introspection: { data: { cpu: { count: number }; memory_mib: number; disks: { serial: string }[] } };
      history: { to: string }[];
    };
    expect(json.state).toBe('manageable');
    expect(json.introspection.data.cpu.count).toBe(2);
    expect(json.introspection.data.memory_mib).toBeGreaterThan(900);
    expect(json.introspection.data.disks[0]!.serial).toBe(`SVM${tag.toUpperCase()}0`);
    expect(json.history.map((h) => h.to)).toEqual([
      'verifying',
      'manageable',
      'inspecting',
      'inspect wait',
      'manageable',
    ]);
    const list = await runCli('nodes', 'list', '-i', inventory);
    expect(list.stdout).toMatch(/ctl-0\s+Controller\s+manageable\s+off/);
    expect(list.stdout).toMatch(/cmp-0\s+Compute\s+manageable\s+off/);
  });

  it('lab down leaves no tap, bridge, namespace, iptables rule, process or lab file behind', async () => {
    const vbmc = readVmState(inventory).vbmcPid!;
    // a VM left running must go too
    expect((await runCli('nodes', 'power', 'on', '--node', 'ctl-0', '-i', inventory)).code).toBe(0);
    expect(processesWith(join(labDir, 'vm', 'ctl-0'))).not.toEqual([]);
    const t0 = Date.now();
    const r = await runCli('lab', 'down', '--kind', 'vm', '--name', NAME, '-i', inventory);
    timings.push(`lab down: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('1 VM(s) stopped, 3 interface(s)');
    expect(r.stdout).toContain(`registry stackctl-${NAME}-registry removed`);
    expect(links().filter(mine)).toEqual([]);
    expect(rules().filter((x) => x.includes(`svm${tag}`))).toEqual([]);
    expect(netns()).toEqual(netnsBefore);
    expect(alive(vbmc)).toBe(false);
    expect(processesWith(labDir).filter(alive)).toEqual([]);
    expect(existsSync(join(labDir, 'vm'))).toBe(false);
    expect(existsSync(join(dir, `${NAME}.nodes.json`))).toBe(false);
    expect(existsSync(join(dir, `${NAME}.nodes.journal`))).toBe(false);
    // what lab up wrote next to the inventory stays until --purge
    expect(existsSync(inventory)).toBe(true);
    const purge = await runCli('lab', 'down', '--kind', 'vm', '--name', NAME, '-i', inventory, '--purge');
    expect(purge.code, purge.stderr).toBe(0);
    expect(readdirSync(dir)).toEqual([]);
  }, 60_000);
});
