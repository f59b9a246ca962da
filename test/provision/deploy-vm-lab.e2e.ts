/**
 * `stackctl deploy` on a fresh VM lab, for real: one powered-off QEMU VM
 * behind its virtual BMC. The deploy enrolls, inspects and provisions it
 * (dnsmasq, the boot server, the deploy ramdisk and the host image we built),
 * then starts memcached there, pulled from the lab registry over plain HTTP;
 * memcached answers `stats` from this machine on the node's internal_api
 * address (carried by the provisioning NIC). A second deploy leaves the node
 * alone: no BMC action, no new boot, no change.
 *
 * Needs root, Docker and the Debian packages of the VM tests (qemu-system-x86,
 * qemu-utils, dnsmasq-base, iproute2, iptables, debootstrap, fdisk, e2fsprogs,
 * grub-pc-bin); fails, never skips, when they are missing. `npm run build`
 * first: the BMC process runs dist/. Ramdisk and host image are cached in
 * /tmp across runs, like the other provisioning tests.
 */
import { chmodSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import { runDeploy } from '../../src/cli/deploy.js';
import { runLabDown, runLabUp } from '../../src/cli/lab-up.js';
import { buildRamdisk } from '../../src/images/ramdisk.js';
import { pushImages } from '../../src/images/registry.js';
import { qemuPid } from '../../src/lab/vm/lab.js';
import { NodeStateStore, nodesFileFor } from '../../src/provision/machine.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { tempDir } from '../helpers/cli.js';
import { dockerOrFail, release, testImages } from '../images/fixture.js';
import { quiet, root } from '../orchestrator/lab.js';
import { TEST_HOST_IMAGE_DIR, requireHostImageTools, requireVmTools, testHostImage } from './vm-segment.js';

const NAME = 'svmdeploy';
/** 10.83.124.0/24 provisioning, 10.83.120.0/24 internal_api (both on the lab bridge): no other test uses 10.83. */
const PREFIX = '10.83';
/** IPMI BMC of ctl-0 (the VM lab test takes 7230-7389). */
const BMC_PORT = 7500 + (process.pid % 50);
/** Where this machine pushes; the node pulls from 10.83.124.254:5000. */
const REGISTRY = `127.0.0.1:${17600 + (process.pid % 100)}`;
const RAMDISK_DIR = join(tmpdir(), 'stackctl-test-ramdisk');
const bin = join(root, 'dist', 'src', 'cli', 'bin.js');

/** memcached's `stats` over TCP from this machine. */
function memcachedStats(host: string, port = 11211, timeoutMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const s = connect({ host, port, timeout: timeoutMs }, () => s.write('stats\r\n'));
    s.on('data', (d) => {
      text += d.toString();
      if (text.includes('END\r\n')) {
        s.end('quit\r\n');
        resolve(text);
      }
    });
    s.on('timeout', () => s.destroy(new Error(`no answer from ${host}:${port} within ${timeoutMs} ms`)));
    s.on('error', reject);
  });
}

describe('stackctl deploy on a VM lab: powered-off node -> provisioned -> memcached from the lab registry', () => {
  let engine: LocalEngine;
  const dir = tempDir(`stackctl-${NAME}-`);
  const inventory = join(dir, `${NAME}.yaml`);
  const labOpts = {
    kind: 'vm',
    name: NAME,
    inventory,
    topology: '1ctl-1comp',
    nodes: 1,
    prefix: PREFIX,
    bmcPort: BMC_PORT,
    registry: REGISTRY,
    registryContainer: `stackctl-${NAME}-registry`,
    timeout: 60,
  };
  const timings: string[] = [];
  const serial = (): string => {
    const f = join(dir, `${NAME}.lab`, 'vm', 'ctl-0', 'serial.log');
    return existsSync(f) ? readFileSync(f, 'utf8').split('\n').slice(-25).join('\n') : '(no console)';
  };
  const deploy = async (extra: Record<string, unknown> = {}) => {
    let text = '';
    const t0 = Date.now();
    const report = await runDeploy(
      { inventory, services: 'memcached', ramdisk: RAMDISK_DIR, hostImage: TEST_HOST_IMAGE_DIR, ...extra },
      { write: (t) => void (text += t), tty: false },
    );
    return { report, text, s: (Date.now() - t0) / 1000 };
  };

  beforeAll(async () => {
    requireVmTools();
    requireHostImageTools();
    expect(existsSync(bin), 'the virtual BMC process runs the built stackctl: npm run build first').toBe(true);
    engine = await dockerOrFail();
    // dnsmasq drops to an unprivileged user and must reach its files under the lab folder
    chmodSync(dir, 0o755);
    let t = Date.now();
    const r = await buildRamdisk({ outDir: RAMDISK_DIR });
    const h = await testHostImage();
    timings.push(
      `ramdisk ${r.cached ? 'cached' : 'built'}, host image ${h.cached ? 'cached' : 'built'}: ${((Date.now() - t) / 1000).toFixed(1)} s`,
    );
    t = Date.now();
    await testImages(engine, ['memcached', 'registry']);
    await quiet(() => runLabUp({ ...labOpts }, { engine, bin }));
    await pushImages(engine, release, REGISTRY, ['memcached'], () => undefined);
    timings.push(`lab up --kind vm --nodes 1 + push memcached: ${((Date.now() - t) / 1000).toFixed(1)} s`);
  }, 900_000);

  afterAll(async () => {
    if (existsSync(inventory)) {
      await quiet(() => runLabDown({ kind: 'vm', name: NAME, inventory, purge: true }, { engine, bin }));
    }
    rmSync(dir, { recursive: true, force: true });
    console.log(timings.join('\n'));
  }, 120_000);

  it('a dry run lists the node to provision and touches nothing', async () => {
    const { report, text } = await deploy({ dryRun: true });
    expect(report).toBeUndefined();
    expect(text).toMatch(/ctl-0\s+enroll\s+enroll, inspect, provision/);
    expect(text).toContain('1 node(s) would be provisioned first');
    expect(NodeStateStore.open(nodesFileFor(inventory)).get('ctl-0').state).toBe('enroll');
    expect(await qemuPid(join(dir, `${NAME}.lab`, 'vm', 'ctl-0'))).toBeUndefined();
  }, 60_000);

  it('deploy enrolls, inspects and provisions the VM, then memcached answers stats on it', async () => {
    const { report, text, s } = await deploy();
    timings.push(`first deploy (enroll, inspect, clean, provision, memcached): ${s.toFixed(1)} s`);
    for (const line of text.split('\n').filter((l) => /^ctl-0: |^deploy /.test(l))) timings.push(`  ${line}`);
    expect(report?.ok, `${text}\n${serial()}`).toBe(true);
    const store = NodeStateStore.open(nodesFileFor(inventory));
    expect(store.get('ctl-0').state).toBe('active');
    expect(store.get('ctl-0').history.map((h) => h.to)).toEqual([
      'verifying',
      'manageable',
      'inspecting',
      'inspect wait',
      'manageable',
      'cleaning',
      'clean wait',
      'available',
      'deploying',
      'deploy wait',
      'active',
    ]);
    const addresses = loadAll({ inventory }).allocation.addresses.get('ctl-0')!;
    expect(addresses.internal_api).toMatch(/^10\.83\.120\./);
    const stats = await memcachedStats(addresses.internal_api!);
    expect(stats).toMatch(/^STAT pid \d+\r\n/);
    expect(stats).toContain('STAT limit_maxbytes 67108864');
    expect(report!.changes).toBeGreaterThan(0);
  }, 1_200_000);

  it('a second deploy leaves the node alone: no BMC action, no boot, nothing changed', async () => {
    const runDir = join(dir, `${NAME}.lab`, 'vm', 'ctl-0');
    const pid = await qemuPid(runDir);
    expect(pid).toBeDefined();
    const history = NodeStateStore.open(nodesFileFor(inventory)).get('ctl-0').history.length;
    const eventsFile = join(dir, `${NAME}.events.jsonl`);
    const eventsBefore = readFileSync(eventsFile, 'utf8').length;
    const { report, text, s } = await deploy();
    timings.push(`second deploy: ${s.toFixed(1)} s`);
    expect(report?.ok, text).toBe(true);
    expect(report!.changes).toBe(0);
    expect(text).not.toContain('provisioning');
    // the same QEMU process: never powered off or cycled
    expect(await qemuPid(runDir)).toBe(pid);
    expect(NodeStateStore.open(nodesFileFor(inventory)).get('ctl-0').history).toHaveLength(history);
    const newEvents = readFileSync(eventsFile, 'utf8').slice(eventsBefore);
    expect(newEvents).not.toMatch(/"kind":"(node\.state|provision\.|pxe\.|bmc\.)/);
    const stats = await memcachedStats(loadAll({ inventory }).allocation.addresses.get('ctl-0')!.internal_api!);
    expect(stats).toContain('STAT limit_maxbytes 67108864');
  }, 300_000);
});
