/**
 * BMC benchmark: a `power status` sweep over many virtual IPMI BMCs by four
 * clients, side by side in one run, with the BMCs answering at once and then
 * with every answer held for a round-trip delay:
 *
 * - ipmitool: one process per BMC (`-I lanplus -C 17`), `concurrency` at a time;
 * - FreeIPMI's ipmipower: one process for every BMC (`-D LAN_2_0 -I 17`, a
 *   `host:port` list, fanout = every BMC), credentials in a configuration file;
 * - stackctl, a session per operation: open, read, close, as ipmitool does;
 * - stackctl, sessions kept open, as the provisioning loop polls power.
 *
 * Per row: wall time of the sweep, and the client's CPU per operation (this
 * process's own CPU for stackctl, the waited-for children's rusage for the
 * peers). Each round runs every client once at each delay, the order rotating;
 * the figure is the median over the rounds.
 *
 *   flock /tmp/stackctl-lab.lock npm run bench:bmc
 *   BENCH_BMCS=500 BENCH_DELAYS=0,20 BENCH_ROUNDS=3 node dist/bench/bmc.js
 *
 * Also: BENCH_FANOUT (ipmipower's, default every BMC), BENCH_CONCURRENCY (stackctl's, default the
 * fanout), BENCH_IPMITOOL_CONCURRENCY (default 16), BENCH_IPMITOOL_BMCS (ipmitool on the first N only),
 * BENCH_PORT_BASE (the BMCs' UDP ports, from 20000).
 *
 * The virtual BMCs run in a child process so that they keep answering at full
 * speed while this process spawns the peers and runs the client.
 */
import { execFile, fork, type ChildProcess } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Secret } from '../src/core/secret.js';
import { IpmiDriver } from '../src/bmc/ipmi/driver.js';
import { IpmiTransport, droppedTotal } from '../src/bmc/ipmi/transport.js';
import { InMemoryMachine } from '../src/lab/vbmc/machine.js';
import { IpmiBmcServer, type VbmcFaults } from '../src/lab/vbmc/ipmi/server.js';
import {
  childrenCpuMs,
  freeipmiCredentials,
  ipmipowerArgs,
  ownCpuMs,
  parseIpmipowerStat,
  requirePeer,
} from './bmc-peers.js';

const USER = 'admin';
const PASSWORD = 'bench-password';
const HOST = '127.0.0.1';
const SUITE = 17;

function envInt(name: string, fallback: number): number {
  const v = Number(process.env[name]);
  return Number.isInteger(v) && v > 0 ? v : fallback;
}

/** Child mode: serve `count` BMCs, report their ports over IPC, take reply delays from the parent. */
async function serve(count: number, basePort: number): Promise<void> {
  const faults: VbmcFaults = { replyDelayMs: 0 };
  const servers: IpmiBmcServer[] = [];
  const ports: number[] = [];
  for (let i = 0; i < count; i++) {
    const machine = new InMemoryMachine({ name: `bench-${i}`, power: i % 2 === 0 ? 'on' : 'off' });
    const server = new IpmiBmcServer({
      backend: machine,
      username: USER,
      password: new Secret(PASSWORD),
      faults,
    });
    ports.push((await server.listen({ host: HOST, port: basePort + i })).port);
    servers.push(server);
  }
  process.on('message', (m: { delayMs: number }) => {
    faults.replyDelayMs = m.delayMs;
    process.send?.({ delayMs: m.delayMs });
  });
  process.send?.({ ports });
  process.on('disconnect', () => {
    void Promise.all(servers.map((s) => s.close())).then(() => process.exit(0));
  });
}

/** Run `task` over `items` with at most `limit` in flight. */
async function pool<T>(items: readonly T[], limit: number, task: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await task(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** One sweep: wall time (ms), client CPU (ms) and operations done. */
interface Sweep {
  readonly wallMs: number;
  readonly cpuMs: number;
  readonly ops: number;
  /** Operations that failed (ipmipower: hosts it reported neither on nor off). */
  readonly failed?: number;
  /** Datagrams stackctl sent (1 per operation when the sessions stayed open). */
  readonly sent?: number;
}

/** Run a peer; its output whatever its exit status (ipmipower exits 1 when one host failed), unless it did not run. */
function run(execPath: string, args: readonly string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(execPath, args, { env, timeout: 120_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      err && typeof err.code !== 'number'
        ? reject(new Error(`${execPath}: ${err.message}\n${stderr}`))
        : resolve(stdout),
    );
  });
}

async function main(): Promise<void> {
  const ipmitool = requirePeer('ipmitool');
  const ipmipower = requirePeer('ipmipower');
  const count = envInt('BENCH_BMCS', 500);
  // ipmipower 64 operations at once (from 200 at once, some of its sessions time out against these BMCs on
  // 2 cores); stackctl the same; ipmitool (a process each) 16: more only queues process start-ups
  const fanout = envInt('BENCH_FANOUT', 64);
  const concurrency = envInt('BENCH_CONCURRENCY', fanout);
  const toolConcurrency = envInt('BENCH_IPMITOOL_CONCURRENCY', 16);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const toolCount = Math.min(count, envInt('BENCH_IPMITOOL_BMCS', count));
  const delays = (process.env.BENCH_DELAYS ?? '0,20').split(',').map(Number);

  const basePort = envInt('BENCH_PORT_BASE', 20000);
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--serve', String(count), String(basePort)], {
    stdio: 'inherit',
  });
  const ports = await new Promise<number[]>((resolve, reject) => {
    child.once('message', (m) => resolve((m as { ports: number[] }).ports));
    child.once('exit', (code) => reject(new Error(`BMC server process exited with ${code}`)));
  });
  const setDelay = (delayMs: number): Promise<void> =>
    new Promise((resolve) => {
      child.once('message', () => resolve());
      child.send({ delayMs });
    });
  const credentials = freeipmiCredentials(USER, PASSWORD);
  const load0 = loadavg();
  console.log(
    `${count} virtual IPMI BMCs (lanplus, suite ${SUITE}) on ${HOST} in a child process; reply delays ` +
      `${delays.join(', ')} ms; in flight: ipmitool ${toolConcurrency} processes, ipmipower fanout ${fanout}, ` +
      `stackctl ${concurrency} operations; median of ${rounds} rounds; load average ${load0.map((l) => l.toFixed(2)).join(' ')}`,
  );

  const transport = new IpmiTransport();
  const targets = ports.map((port, i) => ({
    node: `bench-${i}`,
    address: `ipmi://${HOST}:${port}`,
    username: USER,
    password: new Secret(PASSWORD),
  }));
  // kept open across rounds and delays: the sessions a provisioning run holds
  const drivers = targets.map((t) => new IpmiDriver(t, { transport }));

  const clients: Record<string, () => Promise<Sweep>> = {
    'ipmitool, a process per BMC': async () => {
      const env = { ...process.env, IPMI_PASSWORD: PASSWORD };
      const cpu0 = childrenCpuMs();
      const t0 = performance.now();
      await pool(ports.slice(0, toolCount), toolConcurrency, async (port) => {
        const out = await run(
          ipmitool,
          ['-I', 'lanplus', '-H', HOST, '-p', String(port), '-U', USER, '-E', '-C', String(SUITE), 'power', 'status'],
          env,
        );
        if (!/Chassis Power is (on|off)/.test(out)) throw new Error(`ipmitool said: ${out}`);
      });
      return { wallMs: performance.now() - t0, cpuMs: childrenCpuMs() - cpu0, ops: toolCount };
    },
    'ipmipower, one process for every BMC': async () => {
      const args = ipmipowerArgs({ configFile: credentials.file, host: HOST, ports, suite: SUITE, fanout });
      const cpu0 = childrenCpuMs();
      const t0 = performance.now();
      const sweep = parseIpmipowerStat(await run(ipmipower, args, process.env));
      const wallMs = performance.now() - t0;
      const failed = count - sweep.on - sweep.off;
      if (failed) console.log(`  ipmipower: ${failed} of ${count} failed, e.g. ${sweep.other[0] ?? '(no line)'}`);
      return { wallMs, cpuMs: childrenCpuMs() - cpu0, ops: count, failed };
    },
    'stackctl, a session per operation': async () => {
      const sent0 = transport.counters.sent;
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await pool(targets, concurrency, async (t) => {
        const d = new IpmiDriver(t, { transport });
        await d.powerState();
        await d.close();
      });
      const wallMs = performance.now() - t0;
      return { wallMs, cpuMs: ownCpuMs(cpu0), ops: count, sent: transport.counters.sent - sent0 };
    },
    'stackctl, sessions kept open': async () => {
      // not timed: the other clients' sweeps may have outlasted the sessions' idle limit (30 s); a
      // provisioning loop polling every few seconds keeps them open
      await pool(drivers, concurrency, async (d) => void (await d.powerState()));
      const sent0 = transport.counters.sent;
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await pool(drivers, concurrency, async (d) => void (await d.powerState()));
      const wallMs = performance.now() - t0;
      return { wallMs, cpuMs: ownCpuMs(cpu0), ops: count, sent: transport.counters.sent - sent0 };
    },
  };
  const names = Object.keys(clients);
  const samples = new Map<string, Sweep[]>();

  try {
    // warm-up: JIT, buffers, page cache of the peers' binaries; opens the kept sessions
    await setDelay(0);
    await pool(drivers, concurrency, async (d) => void (await d.powerState()));
    for (const name of names.slice(0, 2)) await clients[name]!();
    for (let round = 0; round < rounds; round++) {
      for (const delayMs of delays) {
        await setDelay(delayMs);
        for (let k = 0; k < names.length; k++) {
          const name = names[(k + round) % names.length]!;
          const s = await clients[name]!();
          const key = `${delayMs}\t${name}`;
          samples.set(key, [...(samples.get(key) ?? []), s]);
        }
      }
    }
  } finally {
    await pool(drivers, concurrency, (d) => d.close());
    await transport.close();
    credentials.remove();
    child.disconnect();
    await new Promise((r) => (child.exitCode === null ? child.once('exit', r) : r(undefined)));
  }

  const load1 = loadavg();
  console.log('');
  console.log(
    `${'client'.padEnd(38)} ${'delay'.padStart(6)} ${'ops'.padStart(5)} ${'sweep wall'.padStart(11)} ` +
      `${'per op'.padStart(9)} ${'CPU/op'.padStart(9)} ${'failed'.padStart(6)} ${'datagrams/op'.padStart(12)}`,
  );
  const wallPerOp = new Map<string, number>();
  for (const delayMs of delays) {
    for (const name of names) {
      const s = samples.get(`${delayMs}\t${name}`)!;
      const ops = s[0]!.ops;
      const wall = median(s.map((x) => x.wallMs));
      const cpu = median(s.map((x) => x.cpuMs));
      wallPerOp.set(`${delayMs}\t${name}`, wall / ops);
      console.log(
        `${name.padEnd(38)} ${`${delayMs} ms`.padStart(6)} ${String(ops).padStart(5)} ` +
          `${`${wall.toFixed(0)} ms`.padStart(11)} ${`${(wall / ops).toFixed(2)} ms`.padStart(9)} ` +
          `${`${(cpu / ops).toFixed(3)} ms`.padStart(9)} ` +
          `${String(s.reduce((n, x) => n + (x.failed ?? 0), 0)).padStart(6)} ` +
          `${s[0]!.sent === undefined ? '' : (median(s.map((x) => x.sent ?? 0)) / ops).toFixed(1).padStart(12)}`,
      );
    }
  }
  console.log('');
  for (const delayMs of delays) {
    const power = wallPerOp.get(`${delayMs}\t${names[1]}`)!;
    const ratio = (name: string): string => (power / wallPerOp.get(`${delayMs}\t${name}`)!).toFixed(2);
    console.log(
      `at ${delayMs} ms, wall time per BMC, ipmipower / stackctl: ${ratio(names[2]!)}x with a session per ` +
        `operation, ${ratio(names[3]!)}x with open sessions`,
    );
  }
  const c = transport.counters;
  console.log(
    `stackctl socket: sent ${c.sent}, received ${c.received}, retransmits ${c.retransmits}, ` +
      `timeouts ${c.timeouts}, dropped ${droppedTotal(c)}`,
  );
  console.log(
    `load average before ${load0.map((l) => l.toFixed(2)).join(' ')}, after ${load1.map((l) => l.toFixed(2)).join(' ')}`,
  );
}

const serveIndex = process.argv.indexOf('--serve');
if (serveIndex >= 0) {
  void serve(Number(process.argv[serveIndex + 1] ?? 1), Number(process.argv[serveIndex + 2] ?? 20000));
} else {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
