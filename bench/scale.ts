/**
 * Provisioning at scale, simulated: N nodes from `enroll` to `active` through
 * the real per-node workflows `stackctl nodes enroll|inspect|provision` run
 * (src/provision/workflows: enrollNode, inspectNode, provisionNode with the
 * deps provisionDeps builds), the real node state store, IPMI and Redfish
 * drivers (one session per node, one UDP transport), the real boot server
 * and its agent API, and dnsmasq's configuration rendered for the N MACs.
 *
 * Simulated, in a child process: N virtual BMCs (half IPMI on UDP, half
 * Redfish over HTTP, each answer held `BENCH_BMC_DELAY_MS`, 20 ms by default:
 * a BMC's firmware latency) in front of machines whose network boot runs a
 * simulated ramdisk agent (bench/scale-agent.ts) after `BENCH_BOOT_MS` of
 * firmware and PXE. Not run: dnsmasq itself (its configuration is written,
 * not served) and any real boot.
 *
 *   flock /tmp/stackctl-lab.lock npm run bench:scale
 *   BENCH_SCALE_NODES=10,100,1000 BENCH_BOOT_MS=1000 BENCH_BMC_DELAY_MS=20 node dist/bench/scale.js
 *
 * Ports: BMC i on UDP or TCP 20000+i (BENCH_PORT_BASE), the boot server on TCP 21999 of the
 * loopback provisioning network 127.20.0.0/16.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BmcTarget } from '../src/bmc/driver.js';
import { mapLimit } from '../src/core/concurrency.js';
import { defaultRolesDir } from '../src/core/paths.js';
import { Secret } from '../src/core/secret.js';
import { JsonLinesLog, eventsFileFor, type StackctlEvent } from '../src/core/events.js';
import { allocate, EMPTY_IPAM } from '../src/inventory/ipam.js';
import { parseInventory } from '../src/inventory/load.js';
import { IpmiBmcServer } from '../src/lab/vbmc/ipmi/server.js';
import { VirtualRedfishBmc } from '../src/lab/vbmc/redfish/server.js';
import { AgentResults, stageImage } from '../src/provision/deploy.js';
import { introspectionFileFor, introspectionReportHandler, IntrospectionStore } from '../src/provision/inspect.js';
import { NodeState } from '../src/provision/states.js';
import { enrollNode, inspectDepsOf, inspectNode } from '../src/provision/workflows/lifecycle.js';
import { provisionDeps, provisionNode, targetOf } from '../src/provision/workflows/provision-node.js';
import { openNodeSession, pxeDirOf, type Site } from '../src/provision/workflows/session.js';
import { DnsmasqService, dnsmasqPaths, dnsmasqSettingsFromInventory, renderDnsmasq } from '../src/pxe/dnsmasq.js';
import { BootServer } from '../src/pxe/http.js';
import type { BootServices } from '../src/pxe/services.js';
import { loadCatalog } from '../src/roles/catalog.js';
import { BASE_PORT, GATEWAY, scaleInventory, SimulatedNode, type SimCounters } from './scale-agent.js';

const USER = 'admin';
const PASSWORD = 'bench-password';
const BOOT_PORT = 21999;

function envInt(name: string, fallback: number): number {
  const v = Number(process.env[name]);
  return Number.isInteger(v) && v >= 0 && process.env[name] !== '' && process.env[name] !== undefined ? v : fallback;
}

/** One simulated node as the child serves it. */
interface SimSpec {
  readonly name: string;
  readonly mac: string;
  readonly ip: string;
  readonly port: number;
  readonly kind: 'ipmi' | 'redfish';
}

/* ------------------------------------------------------------------------ */
/* Child: the BMCs and the machines with their simulated agents             */
/* ------------------------------------------------------------------------ */

async function serve(specFile: string): Promise<void> {
  const { nodes, bootUrl, bootMs, delayMs } = JSON.parse((await import('node:fs')).readFileSync(specFile, 'utf8')) as {
    nodes: SimSpec[];
    bootUrl: string;
    bootMs: number;
    delayMs: number;
  };
  const counters: SimCounters = { boots: 0, diskBoots: 0, calls: 0, failures: 0, bytes: 0 };
  const closers: (() => Promise<void>)[] = [];
  for (const n of nodes) {
    const machine = new SimulatedNode(n, bootUrl, { bootMs, waitMs: 1000 }, counters);
    if (n.kind === 'ipmi') {
      const s = new IpmiBmcServer({
        backend: machine,
        username: USER,
        password: new Secret(PASSWORD),
        faults: { replyDelayMs: delayMs },
      });
      await s.listen({ host: '127.0.0.1', port: n.port });
      closers.push(() => s.close());
    } else {
      const s = new VirtualRedfishBmc({
        machine,
        username: USER,
        password: new Secret(PASSWORD),
        ...(delayMs ? { responseDelayMs: delayMs } : {}),
      });
      await s.listen({ host: '127.0.0.1', port: n.port });
      closers.push(() => s.close());
    }
  }
  process.send?.({ ready: true });
  process.on('message', (m: { report?: boolean }) => {
    if (m.report) {
      const cpu = process.cpuUsage();
      process.send?.({ counters, cpuMs: (cpu.user + cpu.system) / 1000, rss: process.memoryUsage().rss });
    }
  });
  process.on('disconnect', () => {
    void Promise.all(closers.map((c) => c())).then(() => process.exit(0));
  });
}

/* ------------------------------------------------------------------------ */
/* Parent: the deploy host                                                   */
/* ------------------------------------------------------------------------ */

interface ScaleResult {
  readonly nodes: number;
  readonly wallMs: number;
  readonly active: number;
  readonly failed: readonly string[];
  readonly cpuMs: number;
  readonly rssPeak: number;
  readonly rssBase: number;
  readonly heapPeak: number;
  readonly heapBase: number;
  readonly events: number;
  readonly dnsmasqMs: number;
  /** Sum (ms) and number of nodes of each phase the workflows reported. */
  readonly phases: Record<string, { ms: number; nodes: number }>;
  readonly sim: { counters: SimCounters; cpuMs: number; rss: number };
  readonly load: readonly number[];
}

async function runScale(
  count: number,
  o: { bootMs: number; delayMs: number; concurrency: number; basePort: number },
): Promise<ScaleResult> {
  const dir = mkdtempSync(join(tmpdir(), 'stackctl-bench-scale-'));
  try {
    // the site: the generator's inventory, checked and allocated as `stackctl` does
    const inventoryFile = join(dir, 'scale.yaml');
    const text = scaleInventory(count, o.basePort);
    writeFileSync(inventoryFile, text);
    const catalog = loadCatalog(defaultRolesDir());
    const loaded = parseInventory(inventoryFile, text, { roles: catalog.roleInfo });
    const alloc = allocate(loaded.inventory, loaded.networks, catalog.roleInfo, EMPTY_IPAM, (p) =>
      loaded.source.locate(p),
    );
    const site: Site = {
      inventoryFile,
      inventory: loaded.inventory,
      addresses: alloc.addresses,
      registry: '127.0.0.1:5000',
    };
    const names = loaded.inventory.nodes.map((n) => n.name);
    const targets: BmcTarget[] = loaded.inventory.nodes.map((n) => ({
      node: n.name,
      address: n.bmc.address,
      username: USER,
      password: new Secret(PASSWORD),
    }));

    // dnsmasq's configuration for every MAC, by the real generator (dnsmasq itself is not started)
    const runDir = pxeDirOf(site);
    const files = join(runDir, 'files');
    mkdirSync(files, { recursive: true });
    const tD = performance.now();
    const settings = dnsmasqSettingsFromInventory(site.inventory, site.addresses, {
      interface: 'lo',
      runDir,
      tftpRoot: join(runDir, 'tftp'),
      httpPort: BOOT_PORT,
      serverAddress: GATEWAY,
    });
    const config = renderDnsmasq(settings);
    const paths = dnsmasqPaths(runDir);
    writeFileSync(paths.conf, config.conf);
    writeFileSync(paths.hosts, config.hosts);
    const dnsmasqMs = performance.now() - tD;
    if (settings.leases.length !== count) throw new Error(`dnsmasq hosts: ${settings.leases.length} of ${count}`);

    // the boot files: a small ramdisk and a small image with its recorded checksum
    writeFileSync(join(files, 'vmlinuz'), randomBytes(64 * 1024));
    writeFileSync(join(files, 'initrd.img'), randomBytes(256 * 1024));
    const imagePath = join(dir, 'host.img.gz');
    const imageBytes = randomBytes(1024 * 1024);
    writeFileSync(imagePath, imageBytes);
    const image = stageImage(files, {
      path: imagePath,
      sha256: createHash('sha256').update(imageBytes).digest('hex'),
      rawBytes: 4 * 1024 ** 3,
    });
    const staged = { files: { dir: files, kernel: 'vmlinuz', initrd: 'initrd.img' }, image };

    // the simulated machines
    const specs: SimSpec[] = settings.leases.map((l) => {
      const i = names.indexOf(l.node);
      return { name: l.node, mac: l.mac, ip: l.ip, port: o.basePort + i, kind: i % 2 === 0 ? 'ipmi' : 'redfish' };
    });
    const specFile = join(dir, 'sim.json');
    writeFileSync(
      specFile,
      JSON.stringify({ nodes: specs, bootUrl: `http://${GATEWAY}:${BOOT_PORT}`, bootMs: o.bootMs, delayMs: o.delayMs }),
    );
    const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--serve', specFile], { stdio: 'inherit' });
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) => reject(new Error(`simulation process exited with ${code}`)));
    });

    // the deploy host: session, boot server, workflows
    let events = 0;
    const log = new JsonLinesLog(eventsFileFor(inventoryFile));
    const emit = (e: StackctlEvent): void => {
      events += 1;
      log.emit(e);
    };
    const s = openNodeSession(site, { emit, targets: () => targets });
    const introspection = IntrospectionStore.open(introspectionFileFor(inventoryFile));
    const results = new AgentResults();
    const server = await BootServer.start({
      host: GATEWAY,
      port: BOOT_PORT,
      filesDir: files,
      kernel: 'vmlinuz',
      initrd: 'initrd.img',
      nodes: settings.leases.map((l) => ({ name: l.node, mac: l.mac, ip: l.ip })),
      onReport: (r) => {
        introspectionReportHandler(introspection)(r);
        results.handler(r);
      },
      events: s.events,
    });
    // SEAM: the services `startBootServices` returns, with dnsmasq constructed on the same settings but not started
    const services: BootServices = {
      server,
      dnsmasq: new DnsmasqService(settings),
      observed: () => 'DHCP not run (simulation); TFTP not run (simulation)',
      close: () => server.close(),
    };
    const timeoutMs = 600_000;
    const inspectDeps = inspectDepsOf(s, services, introspection, timeoutMs);
    const deps = provisionDeps(s, staged, services, results, timeoutMs, new Map());
    const noUpdate = (): void => undefined;

    let rssPeak = 0;
    let heapPeak = 0;
    const sample = (): void => {
      const m = process.memoryUsage();
      rssPeak = Math.max(rssPeak, m.rss);
      heapPeak = Math.max(heapPeak, m.heapUsed);
    };
    global.gc?.();
    const base = process.memoryUsage();
    const sampler = setInterval(sample, 100);
    const phases: Record<string, { ms: number; nodes: number }> = {};
    const add = (k: string, ms: number): void => {
      const p = (phases[k] ??= { ms: 0, nodes: 0 });
      p.ms += ms;
      p.nodes += 1;
    };
    const failed: string[] = [];
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    try {
      await mapLimit(names, o.concurrency, async (node) => {
        try {
          await enrollNode(s, node, noUpdate);
          const tI = performance.now();
          await inspectNode(s, inspectDeps, services, node, noUpdate, 'bench');
          add('inspect', performance.now() - tI);
          const r = await provisionNode(s, deps, targetOf(site, node), { resume: false });
          for (const [k, v] of Object.entries((r.details.phases ?? {}) as Record<string, number>)) {
            add(k, v);
          }
        } catch (e) {
          const code = (e as { code?: unknown }).code;
          failed.push(
            `${typeof code === 'string' ? code : 'error'} ${node}: ${e instanceof Error ? e.message : String(e)}`,
          );
        }
      });
    } finally {
      clearInterval(sampler);
    }
    const wallMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    sample();
    const active = names.filter((n) => s.store.get(n).state === NodeState.ACTIVE).length;
    const sim = await new Promise<{ counters: SimCounters; cpuMs: number; rss: number }>((resolve) => {
      child.once('message', (m) => resolve(m as { counters: SimCounters; cpuMs: number; rss: number }));
      child.send({ report: true });
    });
    await s.close();
    await services.close();
    child.disconnect();
    await new Promise((r) => (child.exitCode === null ? child.once('exit', r) : r(undefined)));
    return {
      nodes: count,
      wallMs,
      active,
      failed,
      cpuMs: (cpu.user + cpu.system) / 1000,
      rssPeak,
      rssBase: base.rss,
      heapPeak,
      heapBase: base.heapUsed,
      events,
      dnsmasqMs,
      phases,
      sim,
      load: loadavg(),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const MIB = 1024 * 1024;

async function main(): Promise<void> {
  const sizes = (process.env.BENCH_SCALE_NODES ?? '1,10,100,1000').split(',').map(Number);
  const bootMs = envInt('BENCH_BOOT_MS', 1000);
  const delayMs = envInt('BENCH_BMC_DELAY_MS', 20);
  console.log(
    `provisioning simulation: enroll, inspect, clean, deploy to active; firmware+PXE ${bootMs} ms per boot, ` +
      `BMC answers held ${delayMs} ms; load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
  );
  const rows: ScaleResult[] = [];
  for (const n of sizes) {
    const r = await runScale(n, {
      bootMs,
      delayMs,
      concurrency: envInt('BENCH_SCALE_CONCURRENCY', n) || n,
      basePort: envInt('BENCH_PORT_BASE', BASE_PORT),
    });
    rows.push(r);
    const per = (x: number): string => (x / n).toFixed(1);
    console.log(
      `${String(n).padStart(5)} nodes: ${r.active}/${n} active in ${(r.wallMs / 1000).toFixed(1)} s; ` +
        `deploy host CPU ${(r.cpuMs / 1000).toFixed(1)} s (${per(r.cpuMs)} ms/node), ` +
        `RSS +${((r.rssPeak - r.rssBase) / MIB).toFixed(1)} MiB (${((r.rssPeak - r.rssBase) / 1024 / n).toFixed(0)} KiB/node, peak ${(r.rssPeak / MIB).toFixed(0)} MiB), ` +
        `heap +${((r.heapPeak - r.heapBase) / MIB).toFixed(1)} MiB (${((r.heapPeak - r.heapBase) / 1024 / n).toFixed(0)} KiB/node); ` +
        `${r.events} events (${((r.events / r.wallMs) * 1000).toFixed(0)}/s); dnsmasq config ${r.dnsmasqMs.toFixed(1)} ms; ` +
        `simulation CPU ${(r.sim.cpuMs / 1000).toFixed(1)} s, ${r.sim.counters.calls} agent calls, ` +
        `${r.sim.counters.boots} boots; load ${r.load.map((l) => l.toFixed(2)).join(' ')}`,
    );
    const phaseLine = Object.entries(r.phases)
      .map(([k, v]) => `${k} ${(v.ms / v.nodes / 1000).toFixed(2)} s${v.nodes < n ? ` (${v.nodes} nodes)` : ''}`)
      .join(', ');
    console.log(`       mean per node: ${phaseLine}`);
    const codes = new Map<string, number>();
    for (const f of r.failed) codes.set(f.split(' ')[0]!, (codes.get(f.split(' ')[0]!) ?? 0) + 1);
    if (codes.size) console.log(`       failed by code: ${[...codes].map(([c, k]) => `${c} ${k}`).join(', ')}`);
    for (const f of r.failed.slice(0, 5)) console.log(`       failed: ${f}`);
  }
}

const serveIndex = process.argv.indexOf('--serve');
if (process.argv[1] !== fileURLToPath(import.meta.url)) {
  // imported, not run
} else if (serveIndex >= 0) {
  void serve(process.argv[serveIndex + 1]!);
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
