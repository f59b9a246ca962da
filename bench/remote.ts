/**
 * Per-call latency of stackctl's remote layer (src/remote): one node, one
 * call at a time, each operation the deploy uses repeated and timed. No
 * other tool is run: every simulated host of a comparison would talk to this
 * one machine's dockerd, so only `bench:orchestrator` (a dockerd per host)
 * compares tools.
 *
 *     npm run bench:remote                    # 200 calls per operation
 *     npm run bench:remote -- 500             # or as many as given
 *
 * The node is Debian's sshd on a loopback port (test/remote/sshd.ts) and, for
 * the Docker calls, this machine's dockerd reached through it (the SSH
 * connection's direct-streamlocal channel to /var/run/docker.sock, as on a
 * real node). Each row prints the minimum, median, 90th and 99th percentile
 * and mean wall time of one call, and this process's CPU per call (sshd's
 * and dockerd's are not in it), with the load average before and after.
 * Needs root, openssh-server, docker.io (dockerd running) and busybox-static;
 * it starts a container, so run it under the machine lock.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { localEngine, remoteEngine } from '../src/remote/docker.js';
import { recordHostKey } from '../src/remote/known-hosts.js';
import { SshPool, type SshTarget } from '../src/remote/ssh.js';
import { SftpTransfer } from '../src/remote/transfer.js';
import { hostPublicKey, startSshd, type TestSshd } from '../test/remote/sshd.js';

/** The container the Docker calls read (inspect, logs, exec). */
const CONTAINER = 'stackctl-test-bench';
/** A tiny local image (static busybox), no registry needed. */
const IMAGE = 'stackctl-test/busybox:bench';
/** Calls made before each row's timing starts (the connection, the SFTP session, the Docker agent). */
const WARM_UP = 5;
/** Deadline of each shell command. */
const TIMEOUT_MS = 30_000;
/** A config-sized file for the SFTP rows. */
const PAYLOAD = 'x'.repeat(1023) + '\n';

/** One operation of the remote layer, timed call by call. */
interface Operation {
  readonly name: string;
  /** Calls timed (default: the bench's count). */
  readonly calls?: number;
  /** No warm-up calls: the row measures the set-up itself. */
  readonly cold?: boolean;
  readonly call: (i: number) => Promise<void>;
}

/** One printed row. */
interface Row {
  readonly name: string;
  readonly samples: number[];
  /** This process's CPU per call, ms (user + system). */
  readonly cpuMs: number;
}

function buildImage(dir: string): void {
  const root = join(dir, 'root');
  mkdirSync(join(root, 'bin'), { recursive: true });
  copyFileSync('/bin/busybox', join(root, 'bin', 'busybox'));
  for (const a of ['sh', 'sleep', 'true']) symlinkSync('busybox', join(root, 'bin', a));
  execFileSync('tar', ['-C', root, '-cf', join(dir, 'busybox.tar'), '.']);
  execFileSync('docker', ['import', '--change', 'LABEL stackctl-test=1', join(dir, 'busybox.tar'), IMAGE], {
    stdio: 'pipe',
  });
}

/** The value at fraction `q` of sorted samples (nearest rank). */
function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Time `op` call by call, after its warm-up. */
async function measure(op: Operation, calls: number): Promise<Row> {
  const n = op.calls ?? calls;
  if (!op.cold) for (let i = 0; i < WARM_UP; i++) await op.call(-1 - i);
  const samples: number[] = [];
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await op.call(i);
    samples.push(performance.now() - t0);
  }
  const cpu = process.cpuUsage(cpu0);
  return { name: op.name, samples, cpuMs: (cpu.user + cpu.system) / 1000 / n };
}

function format(rows: readonly Row[]): string {
  const ms = (v: number): string => v.toFixed(2).padStart(8);
  const width = Math.max(...rows.map((r) => r.name.length));
  const head = `${'operation'.padEnd(width)}  ${'calls'.padStart(5)}  ${['min', 'p50', 'p90', 'p99', 'mean'].map((h) => h.padStart(8)).join('')}  ${'CPU/call'.padStart(8)}`;
  const lines = rows.map((r) => {
    const s = [...r.samples].sort((a, b) => a - b);
    const mean = s.reduce((a, b) => a + b, 0) / s.length;
    return (
      `${r.name.padEnd(width)}  ${String(s.length).padStart(5)}  ` +
      `${ms(s[0]!)}${ms(quantile(s, 0.5))}${ms(quantile(s, 0.9))}${ms(quantile(s, 0.99))}${ms(mean)}  ${ms(r.cpuMs)}`
    );
  });
  return [head, ...lines].join('\n');
}

const load = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

async function main(): Promise<void> {
  const calls = Number(process.argv[2] ?? 200);
  if (!Number.isInteger(calls) || calls < 1)
    throw new Error(`calls per operation: a positive integer, not ${process.argv[2]}`);
  const dir = mkdtempSync(join(tmpdir(), 'stackctl-test-bench-'));
  const local = localEngine();
  let host: TestSshd | undefined;
  let pool: SshPool | undefined;
  try {
    buildImage(dir);
    await local.removeContainer(CONTAINER, { force: true });
    await local.createContainer({
      name: CONTAINER,
      image: IMAGE,
      command: ['sh', '-c', 'echo started; exec sleep 3600'],
      labels: { 'stackctl-test': '1' },
    });
    await local.startContainer(CONTAINER);
    host = await startSshd();
    const knownHosts = join(dir, 'known_hosts');
    recordHostKey(knownHosts, '127.0.0.1', host.port, hostPublicKey(host.hostKeyFile));
    const t: SshTarget = { node: 'bench', host: '127.0.0.1', port: host.port, user: 'root' };
    const newPool = (): SshPool => new SshPool({ knownHostsFile: knownHosts, privateKeyFile: host!.clientKeyFile });
    pool = newPool();
    const files = new SftpTransfer(pool);
    const docker = remoteEngine(pool, t);
    const base = '/tmp/stackctl-bench';
    const dest = (i: number): string => `${base}/f${i < 0 ? 'w' : ''}${Math.abs(i) % 50}`;
    const check = (ok: boolean, what: string): void => {
      if (!ok) throw new Error(`${what} failed`);
    };
    const operations: Operation[] = [
      {
        name: 'ssh connect + exec true (new pool)',
        calls: Math.min(calls, 50),
        cold: true,
        call: async () => {
          const p = newPool();
          try {
            check((await p.exec(t, ['true'], { timeoutMs: TIMEOUT_MS })).code === 0, 'exec true');
          } finally {
            await p.close();
          }
        },
      },
      {
        name: 'exec true',
        call: async () => check((await pool!.exec(t, ['true'], { timeoutMs: TIMEOUT_MS })).code === 0, 'exec true'),
      },
      {
        name: 'exec with env and stdin',
        call: async () => {
          const r = await pool!.exec(t, ['sh', '-c', 'cat >/dev/null; test -n "$V"'], {
            timeoutMs: TIMEOUT_MS,
            env: { V: 'value' },
            stdin: PAYLOAD,
          });
          check(r.code === 0, 'exec with env and stdin');
        },
      },
      {
        name: 'sftp upload 1 KiB (atomic)',
        call: async (i) => void (await files.upload(t, { data: PAYLOAD }, dest(i))),
      },
      {
        name: 'sftp read 1 KiB',
        call: async (i) => check((await files.readFile(t, dest(i))).length === PAYLOAD.length, 'read'),
      },
      { name: 'docker version', call: async () => void (await docker.version()) },
      {
        name: 'docker inspect container',
        call: async () => check((await docker.inspectContainer(CONTAINER))?.state.running === true, 'inspect'),
      },
      {
        name: 'docker list (label filter)',
        call: async () => check((await docker.listContainers({ labels: { 'stackctl-test': '1' } })).length > 0, 'list'),
      },
      {
        name: 'docker logs --tail 10',
        call: async () => check((await docker.logs(CONTAINER, { tail: 10 })).stdout.includes('started'), 'logs'),
      },
      {
        name: 'docker exec true',
        call: async () => check((await docker.exec(CONTAINER, ['true'], { timeoutMs: TIMEOUT_MS })).code === 0, 'exec'),
      },
    ];
    await pool.exec(t, ['mkdir', '-p', base], { timeoutMs: TIMEOUT_MS });
    console.log(
      `stackctl remote layer, one node (Debian sshd on 127.0.0.1; this machine's dockerd through it), ` +
        `one call at a time, ${calls} calls per operation after ${WARM_UP} warm-up calls; times in ms`,
    );
    console.log(`load average before: ${load()}`);
    const rows: Row[] = [];
    for (const op of operations) rows.push(await measure(op, calls));
    console.log(format(rows));
    console.log(`load average after:  ${load()}`);
    await docker.close();
  } finally {
    await pool?.close().catch(() => undefined);
    await host?.stop();
    await local.removeContainer(CONTAINER, { force: true }).catch(() => undefined);
    spawnSync('docker', ['image', 'rm', '-f', IMAGE], { stdio: 'ignore' });
    rmSync('/tmp/stackctl-bench', { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
