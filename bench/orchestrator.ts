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
 *     npm run bench:orchestrator -- [--hosts 50] [--tasks 100] [--forks N] [--per-host 1] [--skip-ansible] [--prefix 10.93]
 *
 * Needs root, Docker (dockerd running), busybox-static; installs Debian's
 * ansible-core when ansible-playbook is missing. Both tools use the same
 * client key and the same known_hosts, with strict host-key checking.
 * Everything it creates is named stackctl-bench-* and removed at the end.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  closeSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
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
import { tarFiles } from '../src/lab/nodes/tar.js';
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
  /** ansible forks. */
  readonly forks: number;
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
      hosts: { type: 'string', default: '50' },
      tasks: { type: 'string', default: '100' },
      forks: { type: 'string' },
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
    forks: int(values.forks ?? String(hosts), 'forks', 1000),
    perHost: int(values['per-host'], 'per-host', 9),
    skipAnsible: values['skip-ansible'],
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

/** stackctl: one pooled SSH connection per host, `perHost` tasks in flight on each, every host at once. */
async function stackctlRun(targets: readonly SshTarget[], o: Options, keyFile: string, knownHosts: string) {
  const pool = new SshPool({ knownHostsFile: knownHosts, privateKeyFile: keyFile });
  const files = new SftpTransfer(pool);
  const started = performance.now();
  try {
    await mapLimit(targets, targets.length, async (t) => {
      const docker = remoteEngine(pool, t);
      try {
        await mapLimit(
          Array.from({ length: o.tasks }, (_, i) => i),
          o.perHost,
          async (i) => {
            const dest = `/tmp/stackctl-bench/stackctl/f${i}`;
            const payload = `payload ${i}\n`;
            await files.upload(t, { data: payload }, dest);
            const back = (await files.readFile(t, dest)).toString();
            if (back !== payload) throw new Error(`${t.node}: f${i} reads back ${JSON.stringify(back)}`);
            if (!(await docker.inspectContainer(BENCH.probe))?.state.running)
              throw new Error(`${t.node}: ${BENCH.probe} is not running`);
          },
        );
      } finally {
        await docker.close();
      }
    });
    return performance.now() - started;
  } finally {
    await pool.close();
  }
}

/**
 * ansible-playbook with its fast settings: pipelining, ControlPersist, the
 * free strategy, forks = hosts by default, files sent over the SSH session
 * (`transfer_method = piped`), no facts.
 */
async function ansibleRun(
  targets: readonly SshTarget[],
  o: Options,
  dir: string,
  keyFile: string,
  knownHosts: string,
): Promise<number> {
  const adir = join(dir, 'ansible');
  mkdirSync(join(adir, 'cp'), { recursive: true });
  writeFileSync(
    join(adir, 'hosts.ini'),
    ['[nodes]', ...targets.map((t) => `${t.node} ansible_host=${t.host}`)].join('\n') +
      `\n[nodes:vars]\nansible_user=root\nansible_ssh_private_key_file=${keyFile}\n` +
      'ansible_python_interpreter=/usr/bin/python3\n',
  );
  const loop = `"{{ range(${o.tasks}) | list }}"`;
  const base = '/tmp/stackctl-bench/ansible';
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
forks = ${o.forks}
strategy = free
host_key_checking = True
display_ok_hosts = False
display_skipped_hosts = False
[ssh_connection]
pipelining = True
transfer_method = piped
ssh_args = -o ControlMaster=auto -o ControlPersist=300s -o UserKnownHostsFile=${knownHosts} -o StrictHostKeyChecking=yes
control_path_dir = ${adir}/cp
`,
  );
  // Output to a file, not a pipe: the ControlPersist masters inherit the
  // output descriptors and would hold a pipe open after ansible exits.
  const out = openSync(join(adir, 'ansible.log'), 'w');
  const started = performance.now();
  const child = spawn('ansible-playbook', ['-i', join(adir, 'hosts.ini'), join(adir, 'play.yml')], {
    cwd: adir,
    env: { ...process.env, ANSIBLE_CONFIG: join(adir, 'ansible.cfg') },
    stdio: ['ignore', out, out],
  });
  running.add(child);
  const status = await new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  running.delete(child);
  closeSync(out);
  const ms = performance.now() - started;
  // End the control masters now rather than when their hosts disappear.
  for (const t of targets) {
    spawnSync('ssh', ['-o', `ControlPath=${adir}/cp/%C`, '-O', 'exit', '-p', '22', `root@${t.host}`], {
      stdio: 'ignore',
    });
  }
  if (status !== 0) {
    const text = readFileSync(join(adir, 'ansible.log'), 'utf8');
    throw new Error(`ansible-playbook failed (${status}):\n${text.slice(-4000)}`);
  }
  return ms;
}

async function main(): Promise<void> {
  const o = options();
  const engine = localEngine();
  await engine.ping();
  if (!o.skipAnsible) ensureAnsible();
  const dir = mkdtempSync(join(tmpdir(), 'stackctl-bench-'));
  const knownHosts = join(dir, 'known_hosts');
  const keyFile = join(dir, 'ssh', 'id_ed25519');
  const stop = (): void => {
    log('interrupted: cleaning up');
    for (const c of running) c.kill('SIGINT');
    void cleanup(engine).finally(() => {
      rmSync(dir, { recursive: true, force: true });
      process.exit(130);
    });
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    await cleanup(engine);
    let t = performance.now();
    const targets = await startHosts(engine, o, dir, knownHosts);
    await startProbes(targets, dir, keyFile, knownHosts);
    log(`${o.hosts} hosts up (sshd, dockerd, probe container) in ${seconds(performance.now() - t)}`);

    const ops = o.hosts * o.tasks;
    console.log(
      `${o.hosts} hosts x ${o.tasks} tasks (write a file, read it back, check a container's state) = ${ops} tasks`,
    );
    t = performance.now();
    const ours = await stackctlRun(targets, o, keyFile, knownHosts);
    console.log(`stackctl (remote layer): ${seconds(ours)}  (${(ops / (ours / 1000)).toFixed(0)} tasks/s)`);
    if (!o.skipAnsible) {
      const theirs = await ansibleRun(targets, o, dir, keyFile, knownHosts);
      console.log(`ansible-playbook:        ${seconds(theirs)}  (${(ops / (theirs / 1000)).toFixed(1)} tasks/s)`);
      console.log(`ratio:                   ${(theirs / ours).toFixed(1)}x`);
    }
  } catch (err) {
    log(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exitCode = 1;
  } finally {
    await cleanup(engine);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
