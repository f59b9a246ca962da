/**
 * A real OpenSSH server for the remote tests: Debian's sshd on a free
 * loopback port, with a host key and an authorized client key made for the
 * test, everything in a temporary folder. Started as root so that commands
 * run as root and may use this machine's docker.sock. Also used by
 * bench/remote.ts, so it imports nothing test-only.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureClientKey } from '../../src/remote/keys.js';

/** Binaries the tests need, with the Debian packages that provide them. */
const TOOLS: readonly (readonly [string, string])[] = [
  ['/usr/sbin/sshd', 'openssh-server'],
  ['/usr/bin/ssh-keygen', 'openssh-client'],
];

/** Fail with the install command when sshd or ssh-keygen is missing. */
export function requireOpenSsh(): void {
  const missing = TOOLS.filter(([bin]) => !existsSync(bin));
  if (missing.length) {
    throw new Error(`missing ${missing.map(([b]) => b).join(', ')}: run apt-get install openssh-server openssh-client`);
  }
}

/** A free TCP port on loopback (bound then released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

/** Generate an ed25519 host key with ssh-keygen; returns the private key path. */
export function makeHostKey(dir: string, name: string): string {
  const file = join(dir, name);
  execFileSync('/usr/bin/ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', name, '-f', file]);
  return file;
}

/** The public key line of a host key (`ssh-ed25519 AAAA…`). */
export function hostPublicKey(hostKeyFile: string): string {
  return readFileSync(hostKeyFile + '.pub', 'utf8')
    .trim()
    .split(/\s+/)
    .slice(0, 2)
    .join(' ');
}

/** SHA256 fingerprint of a key file as ssh-keygen prints it. */
export function sshKeygenFingerprint(file: string): string {
  return execFileSync('/usr/bin/ssh-keygen', ['-l', '-E', 'sha256', '-f', file], { encoding: 'utf8' }).split(' ')[1]!;
}

/** A running test sshd. */
export interface TestSshd {
  readonly dir: string;
  readonly port: number;
  readonly hostKeyFile: string;
  /** stackctl's client key (authorized on this server). */
  readonly clientKeyFile: string;
  readonly knownHostsFile: string;
  /** Established TCP connections to the server's port, counted from /proc/net/tcp. */
  connections(): number;
  /** sshd's log so far (-e: it logs to stderr). */
  log(): string;
  /**
   * Processes this sshd started for its connections (per-connection sshd, shells, sftp-server), found
   * by walking /proc from the listener: tests stop and continue them to play a hung peer.
   */
  sessionProcesses(): { pid: number; comm: string }[];
  stop(): Promise<void>;
  /** Stop and start again on the same port, optionally with another host key. */
  restart(hostKeyFile?: string): Promise<void>;
}

function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = (): void => {
      const s = createConnection({ host: '127.0.0.1', port }, () => {
        s.destroy();
        resolve();
      });
      s.once('error', () => {
        s.destroy();
        if (Date.now() > until) reject(new Error(`sshd did not listen on port ${port}`));
        else setTimeout(attempt, 50);
      });
    };
    attempt();
  });
}

/** Established connections with local port `port`, from /proc/net/tcp (state 01). */
function establishedTo(port: number): number {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  return readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .slice(1)
    .filter((l) => {
      const f = l.trim().split(/\s+/);
      return f[1]?.endsWith(`:${hex}`) && f[3] === '01';
    }).length;
}

/** Every process below `root` in the process tree, from /proc. */
export function descendantsOf(root: number): { pid: number; comm: string }[] {
  const procs: { pid: number; ppid: number; comm: string }[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // pid (comm) state ppid ...: comm may hold spaces and parentheses, so cut at the last ')'.
    const close = stat.lastIndexOf(')');
    const comm = stat.slice(stat.indexOf('(') + 1, close);
    const ppid = Number(stat.slice(close + 2).split(' ')[1]);
    procs.push({ pid: Number(name), ppid, comm });
  }
  const found: { pid: number; comm: string }[] = [];
  const parents = [root];
  while (parents.length) {
    const p = parents.pop()!;
    for (const c of procs.filter((x) => x.ppid === p)) {
      found.push({ pid: c.pid, comm: c.comm });
      parents.push(c.pid);
    }
  }
  return found;
}

/** Start sshd as described at the top of this file. */
export async function startSshd(
  opts: { hostKeyFile?: string; maxSessions?: number; extraConfig?: string } = {},
): Promise<TestSshd> {
  requireOpenSsh();
  const dir = mkdtempSync(join(tmpdir(), 'stackctl-test-sshd-'));
  // sshd refuses to start without its privilege separation folder.
  mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
  let hostKeyFile = opts.hostKeyFile ?? makeHostKey(dir, 'host_ed25519');
  const clientKeyFile = join(dir, 'client', 'id_ed25519');
  const { publicKey } = ensureClientKey(clientKeyFile);
  writeFileSync(join(dir, 'authorized_keys'), `${publicKey.line} stackctl-test\n`);
  const port = await freePort();
  let child: ChildProcess | undefined;
  let log = '';

  const start = async (): Promise<void> => {
    const config = join(dir, 'sshd_config');
    writeFileSync(
      config,
      [
        // First: for sshd the first value of a keyword wins, so extra lines override the defaults below.
        opts.extraConfig ?? '',
        'ListenAddress 127.0.0.1',
        `HostKey ${hostKeyFile}`,
        `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
        'PermitRootLogin prohibit-password',
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'StrictModes no',
        'AllowStreamLocalForwarding yes',
        `MaxSessions ${opts.maxSessions ?? 10}`,
        // Many tests connect at once; the default 10:30:100 would drop some of them.
        'MaxStartups 200',
        `PidFile ${join(dir, 'sshd.pid')}`,
        'Subsystem sftp /usr/lib/openssh/sftp-server',
        'LogLevel VERBOSE',
        // bash sources ~/.bashrc for commands run by sshd when SHLVL is unset; a developer's bashrc
        // (version managers and such) can cost 100 ms per command. Nodes have Debian's plain one.
        'SetEnv SHLVL=1',
      ].join('\n') + '\n',
    );
    const proc = spawn('/usr/sbin/sshd', ['-D', '-e', '-f', config, '-p', String(port)], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    proc.stderr!.on('data', (b: Buffer) => (log += b.toString()));
    child = proc;
    const exited = new Promise<never>((_, reject) =>
      proc.once('exit', (code) => reject(new Error(`sshd exited with ${code}: ${log}`))),
    );
    exited.catch(() => undefined);
    await Promise.race([waitForPort(port, 5000), exited]);
  };

  const stop = async (): Promise<void> => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      c.once('exit', () => resolve());
      c.kill('SIGTERM');
    });
    // Per-connection sshd processes outlive the listener and share its stderr; let go of it.
    c.stderr?.destroy();
  };

  await start();
  return {
    dir,
    port,
    get hostKeyFile() {
      return hostKeyFile;
    },
    clientKeyFile,
    knownHostsFile: join(dir, 'known_hosts'),
    connections: () => establishedTo(port),
    log: () => log,
    sessionProcesses: () => (child?.pid ? descendantsOf(child.pid) : []),
    stop,
    async restart(newKey?: string) {
      await stop();
      if (newKey) hostKeyFile = newKey;
      await start();
    },
  };
}
