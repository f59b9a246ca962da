/**
 * BMC benchmark: `power status` on many virtual IPMI BMCs, through stackctl's
 * IPMI client (one UDP socket, bounded concurrency) and through one ipmitool
 * process per BMC at the same concurrency. Prints wall times, the ratio and
 * per-operation p50/p99.
 *
 *   node dist/bench/bmc.js
 *   BENCH_BMCS=500 BENCH_CONCURRENCY=16 BENCH_IPMITOOL_BMCS=500 node dist/bench/bmc.js
 *
 * The default concurrency, 16, is the one where per-operation latency stays
 * low on a 2-core machine: throughput is CPU-bound (about 1,000 full session
 * handshakes a second), so a deeper queue only adds waiting to each operation.
 *
 * The virtual BMCs run in a child process so that they keep answering at full
 * speed while this process spawns ipmitool and runs the client.
 */
import { execFile, fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Secret } from '../src/core/secret.js';
import { IpmiDriver } from '../src/bmc/ipmi/driver.js';
import { IpmiTransport, droppedTotal } from '../src/bmc/ipmi/transport.js';
import { InMemoryMachine } from '../src/lab/vbmc/machine.js';
import { IpmiBmcServer } from '../src/lab/vbmc/ipmi/server.js';

const USER = 'admin';
const PASSWORD = 'bench-password';

function envInt(name: string, fallback: number): number {
  const v = Number(process.env[name]);
  return Number.isInteger(v) && v > 0 ? v : fallback;
}

/** Child mode: serve `count` BMCs and report their ports over IPC. */
async function serve(count: number): Promise<void> {
  const servers: IpmiBmcServer[] = [];
  const ports: number[] = [];
  for (let i = 0; i < count; i++) {
    const machine = new InMemoryMachine({ name: `bench-${i}`, power: i % 2 === 0 ? 'on' : 'off' });
    const server = new IpmiBmcServer({ backend: machine, username: USER, password: new Secret(PASSWORD) });
    ports.push((await server.listen({ host: '127.0.0.1', port: 0 })).port);
    servers.push(server);
  }
  process.send?.({ ports });
  process.on('disconnect', () => {
    void Promise.all(servers.map((s) => s.close())).then(() => process.exit(0));
  });
}

/** Run `task` over `items` with at most `limit` in flight; returns per-item durations (ms). */
async function pool<T>(items: readonly T[], limit: number, task: (item: T) => Promise<void>): Promise<number[]> {
  const durations: number[] = new Array<number>(items.length).fill(0);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      const started = performance.now();
      await task(items[i] as T);
      durations[i] = performance.now() - started;
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return durations;
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] ?? 0;
}

interface Result {
  readonly label: string;
  readonly count: number;
  readonly wallMs: number;
  readonly durations: readonly number[];
}

function report(r: Result): void {
  const rate = (r.count / r.wallMs) * 1000;
  console.log(
    `${r.label.padEnd(44)} ${String(r.count).padStart(4)} ops  wall ${r.wallMs.toFixed(0).padStart(6)} ms  ` +
      `${rate.toFixed(0).padStart(6)} ops/s  p50 ${percentile(r.durations, 50).toFixed(1).padStart(6)} ms  ` +
      `p99 ${percentile(r.durations, 99).toFixed(1).padStart(6)} ms`,
  );
}

function ipmitoolStatus(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(
      'ipmitool',
      ['-I', 'lanplus', '-H', '127.0.0.1', '-p', String(port), '-U', USER, '-E', '-C', '17', 'power', 'status'],
      { env: { ...process.env, IPMI_PASSWORD: PASSWORD }, timeout: 30_000 },
      (err, stdout) => {
        if (err || !/Chassis Power is (on|off)/.test(stdout)) reject(err ?? new Error(`ipmitool said: ${stdout}`));
        else resolve();
      },
    );
  });
}

async function main(): Promise<void> {
  const count = envInt('BENCH_BMCS', 500);
  const concurrency = envInt('BENCH_CONCURRENCY', 16);
  const toolCount = Math.min(count, envInt('BENCH_IPMITOOL_BMCS', count));

  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--serve', String(count)], { stdio: 'inherit' });
  const ports = await new Promise<number[]>((resolve, reject) => {
    child.once('message', (m) => resolve((m as { ports: number[] }).ports));
    child.once('exit', (code) => reject(new Error(`BMC server process exited with ${code}`)));
  });
  console.log(
    `${count} virtual IPMI BMCs (lanplus, suites 17 and 3) on 127.0.0.1 in a child process; concurrency ${concurrency}`,
  );

  try {
    // stackctl, cold: every operation opens a session (discovery, RAKP 1-4), reads the status and closes it,
    // the same work one ipmitool run does.
    const transport = new IpmiTransport();
    const targets = ports.map((port, i) => ({
      node: `bench-${i}`,
      address: `ipmi://127.0.0.1:${port}`,
      username: USER,
      password: new Secret(PASSWORD),
    }));
    const coldOp = async (t: (typeof targets)[number]): Promise<void> => {
      const d = new IpmiDriver(t, { transport });
      await d.powerState();
      await d.close();
    };
    // Warm-up (JIT, buffers) on a slice of the BMCs; each operation closes its session, so nothing carries over.
    await pool(targets.slice(0, Math.min(100, count)), concurrency, coldOp);
    let started = performance.now();
    const cold = await pool(targets, concurrency, coldOp);
    const coldResult = {
      label: 'stackctl power status (session per op)',
      count,
      wallMs: performance.now() - started,
      durations: cold,
    };
    report(coldResult);

    // stackctl, warm: sessions kept open, as the provisioning loop uses them while polling power state.
    const drivers = targets.map((t) => new IpmiDriver(t, { transport }));
    await pool(drivers, concurrency, async (d) => void (await d.powerState()));
    started = performance.now();
    const warm = await pool(drivers, concurrency, async (d) => void (await d.powerState()));
    const warmResult = {
      label: 'stackctl power status (open sessions)',
      count,
      wallMs: performance.now() - started,
      durations: warm,
    };
    report(warmResult);
    await pool(drivers, concurrency, (d) => d.close());
    const c = transport.counters;
    console.log(
      `  client socket: sent ${c.sent}, received ${c.received}, retransmits ${c.retransmits}, ` +
        `timeouts ${c.timeouts}, dropped ${droppedTotal(c)}`,
    );
    await transport.close();

    // ipmitool: one process per BMC, the same concurrency.
    started = performance.now();
    const tool = await pool(ports.slice(0, toolCount), concurrency, ipmitoolStatus);
    const toolResult = {
      label: 'ipmitool -I lanplus -C 17 power status',
      count: toolCount,
      wallMs: performance.now() - started,
      durations: tool,
    };
    report(toolResult);

    const perOpTool = toolResult.wallMs / toolCount;
    const note = toolCount < count ? ` (ipmitool ran on ${toolCount} of ${count} BMCs)` : '';
    console.log(
      `ratio, wall time per BMC, ipmitool / stackctl: ${(perOpTool / (coldResult.wallMs / count)).toFixed(1)}x ` +
        `with a session per operation, ${(perOpTool / (warmResult.wallMs / count)).toFixed(1)}x with open sessions${note}`,
    );
  } finally {
    child.disconnect();
    await new Promise((r) => (child.exitCode === null ? child.once('exit', r) : r(undefined)));
  }
}

const serveIndex = process.argv.indexOf('--serve');
if (serveIndex >= 0) {
  void serve(Number(process.argv[serveIndex + 1] ?? 1));
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
