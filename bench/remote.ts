/**
 * Remote execution benchmark: stackctl's SSH pool against ansible-playbook
 * doing the same work on the same hosts.
 *
 * N sshd processes on loopback ports stand in for N nodes. Each host gets T
 * tasks; a task writes a file, reads it back, and reads a container's state
 * from dockerd (`docker inspect`). stackctl does it through SftpTransfer and
 * the SSH-carried ContainerEngine; Ansible through copy, slurp and command
 * with pipelining and ControlPersist (its fast settings).
 *
 *     npm run build && node dist/bench/remote.js [hosts=10] [tasks=100]
 *
 * Needs root, Debian's openssh-server, docker.io (dockerd running),
 * busybox-static and ansible-core. Host key checking is off for Ansible in
 * this benchmark only; stackctl checks keys as always (recorded up front).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
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
import pLimit from 'p-limit';
import { localEngine, remoteEngine } from '../src/remote/docker.js';
import { recordHostKey } from '../src/remote/known-hosts.js';
import { SshPool, type SshTarget } from '../src/remote/ssh.js';
import { SftpTransfer } from '../src/remote/transfer.js';
import { hostPublicKey, startSshd, type TestSshd } from '../test/remote/sshd.js';

/** The container whose state every task reads. */
const CONTAINER = 'stackctl-test-bench';
/** A tiny local image (static busybox), no registry needed. */
const IMAGE = 'stackctl-test/busybox:bench';
/** Tasks in flight per host for stackctl (below sshd's MaxSessions of 10). */
const PER_HOST_CONCURRENCY = 8;

function buildImage(dir: string): void {
  const root = join(dir, 'root');
  mkdirSync(join(root, 'bin'), { recursive: true });
  copyFileSync('/bin/busybox', join(root, 'bin', 'busybox'));
  for (const a of ['sh', 'sleep']) symlinkSync('busybox', join(root, 'bin', a));
  execFileSync('tar', ['-C', root, '-cf', join(dir, 'busybox.tar'), '.']);
  execFileSync('docker', ['import', '--change', 'LABEL stackctl-test=1', join(dir, 'busybox.tar'), IMAGE], {
    stdio: 'pipe',
  });
}

async function stackctlRun(hosts: readonly TestSshd[], tasks: number, knownHosts: string): Promise<number> {
  const pool = new SshPool({ knownHostsFile: knownHosts, privateKeyFile: hosts[0]!.clientKeyFile });
  const files = new SftpTransfer(pool);
  const started = performance.now();
  await Promise.all(
    hosts.map(async (h, n) => {
      const t: SshTarget = { node: `h${n}`, host: '127.0.0.1', port: h.port, user: 'root' };
      const docker = remoteEngine(pool, t);
      const limit = pLimit(PER_HOST_CONCURRENCY);
      await Promise.all(
        Array.from({ length: tasks }, (_, i) =>
          limit(async () => {
            const dest = `/tmp/stackctl-bench/stackctl/h${n}/f${i}`;
            const payload = `payload ${i}\n`;
            await files.upload(t, { data: payload }, dest);
            if ((await files.readFile(t, dest)).toString() !== payload) throw new Error(`h${n}: f${i} differs`);
            if (!(await docker.inspectContainer(CONTAINER))?.state.running) throw new Error(`h${n}: not running`);
          }),
        ),
      );
      await docker.close();
    }),
  );
  const ms = performance.now() - started;
  await pool.close();
  return ms;
}

async function ansibleRun(hosts: readonly TestSshd[], tasks: number, dir: string): Promise<number> {
  const inventory = [
    '[nodes]',
    ...hosts.map(
      (h, n) =>
        `h${n} ansible_host=127.0.0.1 ansible_port=${h.port} ansible_user=root ansible_ssh_private_key_file=${hosts[0]!.clientKeyFile} ansible_python_interpreter=/usr/bin/python3`,
    ),
  ].join('\n');
  writeFileSync(join(dir, 'hosts.ini'), inventory + '\n');
  const loop = `"{{ range(${tasks}) | list }}"`;
  const base = '/tmp/stackctl-bench/ansible/{{ inventory_hostname }}';
  writeFileSync(
    join(dir, 'play.yml'),
    `- hosts: nodes
  gather_facts: false
  tasks:
    - file: { path: "${base}", state: directory }
    - copy: { content: "payload {{ item }}\\n", dest: "${base}/f{{ item }}" }
      loop: ${loop}
    - slurp: { src: "${base}/f{{ item }}" }
      loop: ${loop}
    - command: docker inspect -f "{{ '{{' }}.State.Running{{ '}}' }}" ${CONTAINER}
      loop: ${loop}
      changed_when: false
`,
  );
  writeFileSync(
    join(dir, 'ansible.cfg'),
    `[defaults]
host_key_checking = False
forks = ${hosts.length}
display_ok_hosts = False
display_skipped_hosts = False
[ssh_connection]
pipelining = True
transfer_method = piped
ssh_args = -o ControlMaster=auto -o ControlPersist=30s -o UserKnownHostsFile=/dev/null
control_path_dir = ${dir}/cp
`,
  );
  const started = performance.now();
  // Not spawnSync: it would stop this process's event loop, and with it the reading of the test
  // sshds' stderr (their VERBOSE log); once that pipe is full, sshd blocks and so does Ansible (it
  // hung after ~19 `copy` items per host). Output to a file: the ControlPersist masters inherit
  // ansible's output descriptors and would keep a pipe open after it exits.
  const log = openSync(join(dir, 'ansible.log'), 'w');
  const child = spawn('ansible-playbook', ['-i', join(dir, 'hosts.ini'), join(dir, 'play.yml')], {
    cwd: dir,
    env: { ...process.env, ANSIBLE_CONFIG: join(dir, 'ansible.cfg') },
    stdio: ['ignore', log, log],
  });
  const status = await new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  closeSync(log);
  const ms = performance.now() - started;
  if (status !== 0) {
    throw new Error(`ansible-playbook failed (${status}): ${readFileSync(join(dir, 'ansible.log'), 'utf8')}`);
  }
  return ms;
}

async function main(): Promise<void> {
  const nHosts = Number(process.argv[2] ?? 10);
  const tasks = Number(process.argv[3] ?? 100);
  const dir = mkdtempSync(join(tmpdir(), 'stackctl-test-bench-'));
  const hosts: TestSshd[] = [];
  const local = localEngine();
  try {
    buildImage(dir);
    await local.removeContainer(CONTAINER, { force: true });
    await local.createContainer({
      name: CONTAINER,
      image: IMAGE,
      command: ['sleep', '3600'],
      labels: { 'stackctl-test': '1' },
    });
    await local.startContainer(CONTAINER);
    for (let i = 0; i < nHosts; i++) hosts.push(await startSshd());
    // Every test sshd authorizes its own client key; the bench uses the first one everywhere.
    const pub = execFileSync('cat', [`${hosts[0]!.clientKeyFile}.pub`], { encoding: 'utf8' });
    for (const h of hosts) writeFileSync(join(h.dir, 'authorized_keys'), pub);
    const knownHosts = join(dir, 'known_hosts');
    for (const h of hosts) recordHostKey(knownHosts, '127.0.0.1', h.port, hostPublicKey(h.hostKeyFile));

    const ops = nHosts * tasks;
    console.log(`${nHosts} hosts x ${tasks} tasks (write a file, read it back, docker inspect) = ${ops} tasks`);
    const ours = await stackctlRun(hosts, tasks, knownHosts);
    console.log(`stackctl pool:     ${(ours / 1000).toFixed(2)} s  (${(ops / (ours / 1000)).toFixed(0)} tasks/s)`);
    const theirs = await ansibleRun(hosts, tasks, dir);
    console.log(`ansible-playbook:  ${(theirs / 1000).toFixed(2)} s  (${(ops / (theirs / 1000)).toFixed(1)} tasks/s)`);
    console.log(`ratio:             ${(theirs / ours).toFixed(1)}x`);
  } finally {
    await Promise.all(hosts.map((h) => h.stop()));
    await local.removeContainer(CONTAINER, { force: true }).catch(() => undefined);
    spawnSync('docker', ['image', 'rm', '-f', IMAGE], { stdio: 'ignore' });
    rmSync('/tmp/stackctl-bench', { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
