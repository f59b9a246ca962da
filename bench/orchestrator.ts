/**
 * Orchestration benchmark: stackctl's remote layer (the SSH pool, SFTP and
 * Docker over SSH that the deploy executor drives) against ansible-playbook,
 * doing the same trivial tasks on the same simulated hosts, in one run.
 *
 * Each simulated host is a lab node container (the image `stackctl lab up`
 * uses): its own address on a bridge network (10.93.0.0/16), Debian's sshd,
 * python3, and its own dockerd running one small container. A task is: write
 * a file, read it back and compare, read that container's state from the
 * host's Docker engine and check that it runs.
 *
 * A task writes only when the file differs (Ansible's `copy` compares checksums
 * first; stackctl reads the file and compares), so every round makes two passes:
 * the first changes every file, the second (nothing changed) none.
 *
 *     npm run bench:orchestrator -- [--hosts 20] [--tasks 10] [--forks 8,16,50] [--rounds 3]
 *         [--max-load 1.5] [--per-host 1] [--skip-ansible] [--skip-mitogen] [--prefix 10.93]
 *
 * Plain Ansible runs once per `--forks` value (the best is kept); Ansible with
 * Mitogen (Debian's ansible-mitogen, strategy mitogen_free) at the largest.
 * Rounds alternate which tool goes first; each figure is the median of the
 * rounds. CPU: the controller's whole process tree (stackctl: this process;
 * Ansible: a cpuacct cgroup holding ansible-playbook, its workers and its ssh
 * ControlPersist masters) and the simulated hosts' (their containers' cpuacct
 * cgroups). Refuses to start when the 1-minute load average is above
 * --max-load: on a busy machine the figures measure the others.
 *
 * Needs root, Docker (dockerd running), busybox-static, cgroup v1 cpuacct;
 * installs Debian's ansible-core when ansible-playbook is missing. Both tools
 * use the same client key and the same known_hosts, with strict host-key
 * checking. Everything it creates is named stackctl-bench-* and removed at
 * the end.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { mapLimit } from '../src/core/concurrency.js';
import { defaultReleasesDir } from '../src/core/paths.js';
import { buildImages } from '../src/images/build.js';
import { labImageRef } from '../src/images/catalog.js';
import { NODE_CONTAINER_OPTIONS, sshBanner } from '../src/lab/nodes/lab.js';
import { tarFiles } from '../src/core/tar.js';
import { localEngine, type LocalEngine } from '../src/remote/docker-local.js';
import { remoteEngine } from '../src/remote/docker.js';
import { ensureClientKey, generateEd25519 } from '../src/remote/keys.js';
import { recordHostKey } from '../src/remote/known-hosts.js';
import { SshPool, type SshTarget } from '../src/remote/ssh.js';
import { SftpTransfer } from '../src/remote/transfer.js';
import { loadRelease } from '../src/roles/release.js';

/** Names and addresses of everything the benchmark creates, under a /16 (10.93 unless --prefix). */
function names(prefix: string) {
  return {
    network: `stackctl-bench-${prefix}`,
    subnet: `${prefix}.0.0/16`,
    gateway: `${prefix}.0.1`,
    /** Host n (from 0) is <prefix>.<1 + n / 250>.<1 + n % 250>. */
    address: (n: number): string => `${prefix}.${1 + Math.floor(n / 250)}.${1 + (n % 250)}`,
    container: (n: number): string => `stackctl-bench-${String(n).padStart(3, '0')}`,
    label: 'org.stackctl.bench',
    /** The container inside each host whose state every task reads. */
    probe: 'stackctl-bench-probe',
    probeImage: 'stackctl-bench/probe:1',
  } as const;
}
let BENCH = names('10.93');

interface Options {
  readonly hosts: number;
  readonly tasks: number;
  /** ansible forks: plain Ansible runs once for each. */
  readonly forks: readonly number[];
  readonly rounds: number;
  readonly maxLoad: number;
  readonly skipMitogen: boolean;
  /**
   * stackctl tasks in flight per host. 1 by default: the simulated hosts share
   * this machine's cores, and their dockerd answers concurrent inspects more
   * slowly than the same number in a row (docs/bench.md).
   */
  readonly perHost: number;
  readonly skipAnsible: boolean;
}

function options(): Options {
  const { values } = parseArgs({
    options: {
      hosts: { type: 'string', default: '20' },
      tasks: { type: 'string', default: '10' },
      forks: { type: 'string', default: '8,16,50' },
      rounds: { type: 'string', default: '3' },
      'max-load': { type: 'string', default: '1.5' },
      'skip-mitogen': { type: 'boolean', default: false },
      'per-host': { type: 'string', default: '1' },
      'skip-ansible': { type: 'boolean', default: false },
      prefix: { type: 'string', default: '10.93' },
    },
  });
  const int = (v: string | undefined, name: string, max: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1 || n > max) throw new Error(`--${name} must be a whole number from 1 to ${max}`);
    return n;
  };
  const hosts = int(values.hosts, 'hosts', 1000);
  if (!/^10\.\d{1,3}$/.test(values.prefix)) throw new Error('--prefix must be the first two octets of a 10.x.0.0/16');
  BENCH = names(values.prefix);
  return {
    hosts,
    tasks: int(values.tasks, 'tasks', 100_000),
    forks: values.forks.split(',').map((f) => int(f, 'forks', 1000)),
    rounds: int(values.rounds, 'rounds', 99),
    maxLoad: Number(values['max-load']),
    perHost: int(values['per-host'], 'per-host', 9),
    skipAnsible: values['skip-ansible'],
    skipMitogen: values['skip-mitogen'],
  };
}

/** ansible-playbook while it runs: an interrupt ends it (and its workers) before the cleanup. */
const running = new Set<ChildProcess>();

const log = (line: string): void => void process.stderr.write(`bench: ${line}\n`);
const seconds = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;

/** ansible-playbook, installed from Debian (ansible-core) when missing. */
function ensureAnsible(): void {
  if (spawnSync('ansible-playbook', ['--version'], { stdio: 'ignore' }).status === 0) return;
  log('installing ansible-core (apt)');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'ansible-core'], {
    stdio: 'inherit',
    env,
  });
}

/** A root filesystem tar with a static busybox: the probe image of each host's dockerd. */
function probeTar(dir: string): string {
  const root = join(dir, 'probe-root');
  mkdirSync(join(root, 'bin'), { recursive: true });
  copyFileSync('/bin/busybox', join(root, 'bin', 'busybox'));
  for (const a of ['sh', 'sleep']) symlinkSync('busybox', join(root, 'bin', a));
  const tar = join(dir, 'probe.tar');
  execFileSync('tar', ['-C', root, '-cf', tar, '.']);
  return tar;
}

/** Remove what an earlier (maybe killed) run left. */
async function cleanup(engine: LocalEngine): Promise<void> {
  // One at a time: concurrent forced removals have left Docker 20.10 with a stale
  // endpoint that blocks the network's removal until dockerd restarts.
  const left = await engine.containers({ [BENCH.label]: '1' });
  await mapLimit(left, 1, (c) => engine.removeContainer(c.name).catch(() => undefined));
  // dockerd releases a removed container's endpoint a moment after the remove returns
  for (let attempt = 1; await engine.network(BENCH.network); attempt++) {
    try {
      await engine.removeNetwork(BENCH.network);
    } catch (err) {
      if (attempt >= 20) throw err;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

/** Start the simulated hosts; returns their SSH targets. */
async function startHosts(engine: LocalEngine, o: Options, dir: string, knownHosts: string): Promise<SshTarget[]> {
  const release = loadRelease(defaultReleasesDir(), 'zed');
  await buildImages(engine, { release, only: ['node'], onEvent: () => undefined });
  const image = labImageRef(release, 'node');
  await engine.createNetwork({
    name: BENCH.network,
    subnet: BENCH.subnet,
    gateway: BENCH.gateway,
    labels: { [BENCH.label]: '1' },
  });
  const client = ensureClientKey(join(dir, 'ssh', 'id_ed25519'));
  const daemon = JSON.stringify({ 'storage-driver': 'overlay2', bridge: 'none', iptables: false }) + '\n';
  const targets: SshTarget[] = [];
  await mapLimit(
    Array.from({ length: o.hosts }, (_, n) => n),
    4,
    async (n) => {
      const name = BENCH.container(n);
      const hostKey = generateEd25519(`root@${name}`);
      await engine.createContainer({
        name,
        image,
        hostname: name,
        labels: { [BENCH.label]: '1' },
        ...NODE_CONTAINER_OPTIONS,
        networks: [{ name: BENCH.network, ip: BENCH.address(n), aliases: [name] }],
      });
      await engine.putArchive(
        name,
        '/',
        tarFiles([
          { path: 'etc/ssh/ssh_host_ed25519_key', data: hostKey.privateKey, mode: 0o600 },
          { path: 'etc/ssh/ssh_host_ed25519_key.pub', data: hostKey.publicKey.line + '\n', mode: 0o644 },
          { path: 'root/.ssh/authorized_keys', data: client.publicKey.line + '\n', mode: 0o600 },
          { path: 'etc/docker/daemon.json', data: daemon, mode: 0o644 },
        ]),
      );
      await engine.start(name);
      // synchronous read-modify-write: safe between these async tasks
      recordHostKey(knownHosts, BENCH.address(n), 22, hostKey.publicKey.line);
    },
  );
  for (let n = 0; n < o.hosts; n++) {
    const deadline = Date.now() + 60_000;
    while (!(await sshBanner(BENCH.address(n), 22, 1000))) {
      if (Date.now() > deadline) throw new Error(`${BENCH.container(n)}: sshd does not answer`);
      await new Promise((r) => setTimeout(r, 200));
    }
    targets.push({ node: BENCH.container(n), host: BENCH.address(n), port: 22, user: 'root' });
  }
  return targets;
}

/** Load the probe image into every host's dockerd and start the probe container (not timed). */
async function startProbes(targets: readonly SshTarget[], dir: string, keyFile: string, knownHosts: string) {
  const pool = new SshPool({ knownHostsFile: knownHosts, privateKeyFile: keyFile });
  const files = new SftpTransfer(pool);
  const tar = readFileSync(probeTar(dir));
  try {
    await mapLimit(targets, 8, async (t) => {
      const docker = remoteEngine(pool, t);
      try {
        const deadline = Date.now() + 120_000;
        for (;;) {
          const up = await docker.version().then(
            () => true,
            () => false,
          );
          if (up) break;
          if (Date.now() > deadline) throw new Error(`${t.node}: its dockerd does not answer`);
          await new Promise((r) => setTimeout(r, 500));
        }
        await files.upload(t, { data: tar }, '/tmp/probe.tar');
        const r = await pool.exec(t, ['docker', 'import', '/tmp/probe.tar', BENCH.probeImage], { timeoutMs: 60_000 });
        if (r.code !== 0) throw new Error(`${t.node}: docker import: ${r.stderr}`);
        await docker.createContainer({
          name: BENCH.probe,
          image: BENCH.probeImage,
          command: ['sleep', '86400'],
          network: 'none',
          restart: 'no',
        });
        await docker.startContainer(BENCH.probe);
      } finally {
        await docker.close();
      }
    });
  } finally {
    await pool.close();
  }
}

/**
 * stackctl: one pooled SSH connection per host, `perHost` tasks in flight on each, every host at
 * once. A task reads the file and writes it only when it differs (as Ansible's copy does).
 */
async function stackctlRun(targets: readonly SshTarget[], o: Options, keyFile: string, knownHosts: string) {
  const pool = new SshPool({ knownHostsFile: knownHosts, privateKeyFile: keyFile });
  const files = new SftpTransfer(pool);
  let written = 0;
  const started = performance.now();
  try {
    await mapLimit(targets, targets.length, async (t) => {
      const docker = remoteEngine(pool, t);
      try {
        await mapLimit(
          Array.from({ length: o.tasks }, (_, i) => i),
          o.perHost,
          async (i) => {
            const dest = `${BASE}/stackctl/f${i}`;
            const payload = `payload ${i}\n`;
            const now = await files.readFile(t, dest).then(
              (b) => b.toString(),
              () => undefined,
            );
            if (now !== payload) {
              await files.upload(t, { data: payload }, dest);
              written++;
              const back = (await files.readFile(t, dest)).toString();
              if (back !== payload) throw new Error(`${t.node}: f${i} reads back ${JSON.stringify(back)}`);
            }
            if (!(await docker.inspectContainer(BENCH.probe))?.state.running)
              throw new Error(`${t.node}: ${BENCH.probe} is not running`);
          },
        );
      } finally {
        await docker.close();
      }
    });
    return { ms: performance.now() - started, changed: written };
  } finally {
    await pool.close();
  }
}

/** Where both tools write, on every host. */
const BASE = '/tmp/stackctl-bench';

/** Remove both tools' files on every host (before a tool's first pass; not timed). */
async function clearFiles(targets: readonly SshTarget[], keyFile: string, knownHosts: string): Promise<void> {
  const pool = new SshPool({ knownHostsFile: knownHosts, privateKeyFile: keyFile });
  try {
    await mapLimit(targets, 8, async (t) => {
      const r = await pool.exec(t, ['rm', '-rf', BASE], { timeoutMs: 60_000 });
      if (r.code !== 0) throw new Error(`${t.node}: rm -rf ${BASE}: ${r.stderr}`);
    });
  } finally {
    await pool.close();
  }
}

/** The Ansible flavours compared: plain (strategy free) at a number of forks, or with Mitogen. */
interface AnsibleFlavour {
  readonly label: string;
  readonly forks: number;
  readonly mitogen: boolean;
}

/** Where Debian's ansible-mitogen puts its strategy plugins. */
const MITOGEN_STRATEGIES = '/usr/lib/python3/dist-packages/ansible_mitogen/plugins/strategy';

/** A cpuacct cgroup (v1) that a command and all its descendants run in: their CPU, whoever waits for them. */
const CGROUP = '/sys/fs/cgroup/cpuacct/stackctl-bench-controller';

/** CPU (ms) used so far by the processes of a cpuacct cgroup folder. */
const cgroupCpuMs = (dir: string): number => Number(readFileSync(join(dir, 'cpuacct.usage'), 'utf8')) / 1e6;

/** CPU (ms) used so far by the simulated hosts' containers (sshd, python, dockerd and the probes in them). */
function hostsCpuMs(ids: readonly string[]): number {
  let ms = 0;
  for (const id of ids) ms += cgroupCpuMs(`/sys/fs/cgroup/cpuacct/docker/${id}`);
  return ms;
}

/** End whatever is left in the controller cgroup (ssh masters) and remove it. */
function dropCgroup(): void {
  if (!existsSync(CGROUP)) return;
  for (const pid of readFileSync(join(CGROUP, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean))
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // gone already
    }
  for (let i = 0; i < 50; i++) {
    try {
      rmdirSync(CGROUP);
      return;
    } catch {
      spawnSync('sleep', ['0.1']);
    }
  }
}

/**
 * ansible-playbook with its fast settings: pipelining, ControlPersist, files
 * sent over the SSH session (`transfer_method = piped`), no facts; the free
 * strategy, or Mitogen's mitogen_free. Returns its wall time, the CPU of its
 * whole process tree, and how many tasks it reported changed.
 */
async function ansibleRun(
  targets: readonly SshTarget[],
  o: Options,
  flavour: AnsibleFlavour,
  dir: string,
  keyFile: string,
  knownHosts: string,
): Promise<{ ms: number; cpuMs: number; changed: number }> {
  const adir = join(dir, 'ansible');
  mkdirSync(join(adir, 'cp'), { recursive: true });
  writeFileSync(
    join(adir, 'hosts.ini'),
    ['[nodes]', ...targets.map((t) => `${t.node} ansible_host=${t.host}`)].join('\n') +
      `\n[nodes:vars]\nansible_user=root\nansible_ssh_private_key_file=${keyFile}\n` +
      'ansible_python_interpreter=/usr/bin/python3\n',
  );
  const loop = `"{{ range(${o.tasks}) | list }}"`;
  const base = `${BASE}/ansible`;
  writeFileSync(
    join(adir, 'play.yml'),
    `- hosts: nodes
  gather_facts: false
  tasks:
    - file: { path: "${base}", state: directory }
    - copy: { content: "payload {{ item }}\\n", dest: "${base}/f{{ item }}" }
      loop: ${loop}
    - slurp: { src: "${base}/f{{ item }}" }
      register: r
      failed_when: (r.content | b64decode) != ("payload %d\\n" % item)
      loop: ${loop}
    - command: docker inspect -f "{{ '{{' }}.State.Running{{ '}}' }}" ${BENCH.probe}
      register: r
      changed_when: false
      failed_when: r.stdout != "true"
      loop: ${loop}
`,
  );
  writeFileSync(
    join(adir, 'ansible.cfg'),
    `[defaults]
forks = ${flavour.forks}
strategy = ${flavour.mitogen ? 'mitogen_free' : 'free'}
${flavour.mitogen ? `strategy_plugins = ${MITOGEN_STRATEGIES}\n` : ''}host_key_checking = True
# the connection timeout (default 10 s) is too short for a loaded 2-core machine
timeout = 60
display_ok_hosts = False
display_skipped_hosts = False
[ssh_connection]
pipelining = True
transfer_method = piped
ssh_args = -o ControlMaster=auto -o ControlPersist=300s -o UserKnownHostsFile=${knownHosts} -o StrictHostKeyChecking=yes
control_path_dir = ${adir}/cp
`,
  );
  dropCgroup();
  mkdirSync(CGROUP);
  // Output to a file, not a pipe: the ControlPersist masters inherit the
  // output descriptors and would hold a pipe open after ansible exits.
  const logFile = join(adir, 'ansible.log');
  const out = openSync(logFile, 'w');
  const started = performance.now();
  // the shell joins the cgroup before it becomes ansible-playbook: every process it starts is counted
  const child = spawn(
    'sh',
    [
      '-c',
      'echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
      'sh',
      CGROUP,
      'ansible-playbook',
      '-i',
      join(adir, 'hosts.ini'),
      join(adir, 'play.yml'),
    ],
    { cwd: adir, env: { ...process.env, ANSIBLE_CONFIG: join(adir, 'ansible.cfg') }, stdio: ['ignore', out, out] },
  );
  running.add(child);
  const status = await new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  running.delete(child);
  closeSync(out);
  const ms = performance.now() - started;
  // End the control masters now (their CPU counts) rather than when their hosts disappear.
  for (const t of targets) {
    spawnSync('ssh', ['-o', `ControlPath=${adir}/cp/%C`, '-O', 'exit', '-p', '22', `root@${t.host}`], {
      stdio: 'ignore',
    });
  }
  const cpuMs = cgroupCpuMs(CGROUP);
  dropCgroup();
  const text = readFileSync(logFile, 'utf8');
  if (status !== 0) throw new Error(`ansible-playbook (${flavour.label}) failed (${status}):\n${text.slice(-4000)}`);
  const changed = [...text.matchAll(/changed=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
  return { ms, cpuMs, changed };
}

/** One tool's figures in one round: both passes. */
interface PassFigures {
  readonly ms: number;
  /** CPU of the controller (this process for stackctl; Ansible's process tree). */
  readonly ctlCpuMs: number;
  /** CPU of all simulated hosts together. */
  readonly hostCpuMs: number;
  readonly changed: number;
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** The one-minute load average. */
const load1 = (): number => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

async function main(): Promise<void> {
  const o = options();
  const before = load1();
  if (before > o.maxLoad) {
    console.error(
      `load average ${before} is above ${o.maxLoad}: the figures would measure the other work on this machine. ` +
        'Wait for a quiet machine, or pass --max-load N to measure anyway (the load is printed beside the figures).',
    );
    process.exit(2);
  }
  const engine = localEngine();
  await engine.ping();
  if (!o.skipAnsible) ensureAnsible();
  const flavours: AnsibleFlavour[] = o.skipAnsible
    ? []
    : o.forks.map((f) => ({ label: `ansible forks=${f}`, forks: f, mitogen: false }));
  if (!o.skipAnsible && !o.skipMitogen) {
    if (existsSync(MITOGEN_STRATEGIES)) {
      const f = Math.max(...o.forks);
      flavours.push({ label: `ansible+mitogen forks=${f}`, forks: f, mitogen: true });
    } else console.log(`ansible+mitogen: not installed, not measured (Debian: apt-get install ansible-mitogen)`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'stackctl-bench-'));
  const knownHosts = join(dir, 'known_hosts');
  const keyFile = join(dir, 'ssh', 'id_ed25519');
  const stop = (): void => {
    log('interrupted: cleaning up');
    for (const c of running) c.kill('SIGINT');
    dropCgroup();
    void cleanup(engine).finally(() => {
      rmSync(dir, { recursive: true, force: true });
      process.exit(130);
    });
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    await cleanup(engine);
    const t = performance.now();
    const targets = await startHosts(engine, o, dir, knownHosts);
    await startProbes(targets, dir, keyFile, knownHosts);
    const ids = (await engine.containers({ [BENCH.label]: '1' })).map((c) => c.id);
    log(`${o.hosts} hosts up (sshd, dockerd, probe container) in ${seconds(performance.now() - t)}`);
    const ops = o.hosts * o.tasks;
    console.log(
      `${o.hosts} hosts x ${o.tasks} tasks (write a file if it differs, read it back, check a container's state) = ` +
        `${ops} host-tasks; ${o.rounds} round(s), tools alternating first; load average ${before} at the start`,
    );

    type Tool = { label: string; run: () => Promise<{ ms: number; cpuMs: number; changed: number }> };
    const tools: Tool[] = [
      {
        label: 'stackctl (remote layer)',
        run: async () => {
          const cpu0 = process.cpuUsage();
          const r = await stackctlRun(targets, o, keyFile, knownHosts);
          const cpu = process.cpuUsage(cpu0);
          return { ms: r.ms, cpuMs: (cpu.user + cpu.system) / 1000, changed: r.changed };
        },
      },
      ...flavours.map((f) => ({ label: f.label, run: () => ansibleRun(targets, o, f, dir, keyFile, knownHosts) })),
    ];
    const figures = new Map<string, { first: PassFigures[]; again: PassFigures[] }>(
      tools.map((x) => [x.label, { first: [], again: [] }]),
    );
    const failed = new Map<string, string>();
    for (let round = 0; round < o.rounds; round++) {
      const order = round % 2 === 0 ? tools : [...tools.slice(1), tools[0]!];
      for (const tool of order) {
        if (failed.has(tool.label)) continue;
        await clearFiles(targets, keyFile, knownHosts);
        for (const pass of ['first', 'again'] as const) {
          const h0 = hostsCpuMs(ids);
          try {
            const r = await tool.run();
            const fig = { ms: r.ms, ctlCpuMs: r.cpuMs, hostCpuMs: hostsCpuMs(ids) - h0, changed: r.changed };
            figures.get(tool.label)![pass].push(fig);
            log(
              `round ${round + 1} ${tool.label} ${pass === 'first' ? 'first pass' : 'nothing changed'}: ` +
                `${seconds(fig.ms)}, controller CPU ${fig.ctlCpuMs.toFixed(0)} ms, hosts CPU ${fig.hostCpuMs.toFixed(0)} ms, ` +
                `${fig.changed} changed, load ${load1()}`,
            );
          } catch (err) {
            const msg = err instanceof Error ? err.message : String(err);
            failed.set(tool.label, msg);
            log(`${tool.label}: failed: ${msg.slice(0, 4000)}`);
            break;
          }
        }
      }
    }

    const row = (label: string, pass: string, f: readonly PassFigures[]): string => {
      const ms = median(f.map((x) => x.ms));
      const ctl = median(f.map((x) => x.ctlCpuMs));
      const hostCpu = median(f.map((x) => x.hostCpuMs));
      return (
        `${label.padEnd(30)} ${pass.padEnd(15)} ${seconds(ms).padStart(10)} ${(ops / (ms / 1000)).toFixed(1).padStart(9)}` +
        ` ${(ctl / ops).toFixed(2).padStart(12)} ${(hostCpu / o.hosts).toFixed(0).padStart(13)}` +
        ` ${(hostCpu / ops).toFixed(2).padStart(14)}`
      );
    };
    console.log(
      `${'tool'.padEnd(30)} ${'pass'.padEnd(15)} ${'wall'.padStart(10)} ${'tasks/s'.padStart(9)}` +
        ` ${'ctl ms/task'.padStart(12)} ${'host CPU ms'.padStart(13)} ${'host ms/task'.padStart(14)}`,
    );
    for (const [label, f] of figures) {
      if (f.first.length) console.log(row(label, 'first', f.first));
      if (f.again.length) console.log(row(label, 'nothing changed', f.again));
      if (failed.has(label)) {
        // the reasons first (unreachable hosts, fatal errors), then the end of the log
        const lines = failed.get(label)!.split('\n');
        const why = lines.filter((l) => /UNREACHABLE|fatal:|ERROR|Traceback|Error:/.test(l)).slice(0, 6);
        console.log(`${label.padEnd(30)} failed: ${[...why, ...lines.slice(-6)].join(' | ')}`);
      }
    }
    const ours = figures.get(tools[0]!.label)!;
    const bestOf = (mitogen: boolean, pass: 'first' | 'again'): [string, number] | undefined => {
      let best: [string, number] | undefined;
      for (const f of flavours.filter((x) => x.mitogen === mitogen)) {
        const xs = figures.get(f.label)![pass];
        if (xs.length === o.rounds && (!best || median(xs.map((x) => x.ms)) < best[1]))
          best = [f.label, median(xs.map((x) => x.ms))];
      }
      return best;
    };
    for (const pass of ['first', 'again'] as const) {
      if (ours[pass].length !== o.rounds) continue;
      const mine = median(ours[pass].map((x) => x.ms));
      for (const mitogen of [false, true]) {
        const b = bestOf(mitogen, pass);
        if (b)
          console.log(
            `ratio (${pass === 'first' ? 'first pass' : 'nothing changed'}) vs ${b[0]}: ${(b[1] / mine).toFixed(1)}x`,
          );
      }
    }
    console.log(
      `goal: >= 50x plain Ansible, >= 10x Mitogen (wall), <= 3 ms deploy-host CPU per host-task; load average ${before} -> ${load1()}`,
    );
  } catch (err) {
    log(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exitCode = 1;
  } finally {
    dropCgroup();
    await cleanup(engine);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
