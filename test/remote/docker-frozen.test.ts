/**
 * Docker API calls against a dockerd that stops answering, and pulls from registries that stop
 * answering. The node is a lab node container (the image of src/lab/nodes: sshd and its own nested
 * dockerd), reached over SSH like any node; freezing it with SIGSTOP freezes that node's dockerd only,
 * never this machine's. The registries are small servers on this machine (test/remote/registry-fake.ts).
 * Starts a container: run it under the machine lock (`flock /tmp/stackctl-lab.lock npx vitest run ...`).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TimeoutError } from '../../src/core/errors.js';
import { labImageRef } from '../../src/images/catalog.js';
import { NODE_CONTAINER_OPTIONS } from '../../src/lab/nodes/lab.js';
import { tarFiles } from '../../src/core/tar.js';
import { localEngine, remoteEngine, type DockerTimeouts } from '../../src/remote/docker.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { ensureClientKey } from '../../src/remote/keys.js';
import { recordHostKey } from '../../src/remote/known-hosts.js';
import { SshPool, type SshTarget } from '../../src/remote/ssh.js';
import { dockerOrFail, release, testImages } from '../images/fixture.js';
import { tempDir } from '../helpers/cli.js';
import { silentRegistry, slowRegistry, type FakeRegistry } from './registry-fake.js';
import { hostPublicKey, makeHostKey } from './sshd.js';

const NAME = `stackctl-test-frozen-${process.pid}`;
const LABELS = { 'org.stackctl.test': 'docker-frozen' };
/** Deadlines short enough for a test, long enough for a 2-core machine under load. */
const SHORT: DockerTimeouts = {
  readMs: 1500,
  createMs: 1500,
  startMs: 1500,
  stopMarginMs: 1500,
  removeMs: 1500,
  execMs: 1500,
  pullStallMs: 2500,
};
/** What a bounded call may take beyond its deadline (timer slack, a loaded machine). */
const SLACK_MS = 1500;

let engine: LocalEngine;
let pool: SshPool;
let target: SshTarget;
let gateway: string;
const registries: FakeRegistry[] = [];
let slow: FakeRegistry;
let stalling: FakeRegistry;
let silent: FakeRegistry;
let frozen = false;

/** Run a command in the node container (docker exec from this machine, not over SSH). */
async function inNode(...cmd: string[]): Promise<string> {
  const r = await engine.exec(NAME, cmd);
  if (r.exitCode !== 0) throw new Error(`${cmd.join(' ')} in ${NAME}: ${r.output}`);
  return r.output;
}

async function freeze(): Promise<void> {
  await inNode('pkill', '-STOP', '-x', 'dockerd');
  frozen = true;
}

async function thaw(): Promise<void> {
  await inNode('pkill', '-CONT', '-x', 'dockerd');
  frozen = false;
}

/** True once something answers with an SSH banner at host:22. */
function sshBanner(host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port: 22, timeout: 1000 });
    s.once('data', (b) => (s.destroy(), resolve(b.toString().startsWith('SSH-'))));
    s.once('error', () => resolve(false));
    s.once('timeout', () => (s.destroy(), resolve(false)));
  });
}

/** Run `call`, expecting a TimeoutError; returns it and the time it took. */
async function timedOut(call: () => Promise<unknown>): Promise<{ err: TimeoutError; ms: number }> {
  const started = Date.now();
  const err = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'a TimeoutError').toBeInstanceOf(TimeoutError);
  return { err: err as TimeoutError, ms: Date.now() - started };
}

/** SSH forwards and sessions open in the node's sshd, counted as sshd's Unix stream sockets. */
async function sshdSockets(): Promise<number> {
  const r = await pool.exec(target, 'ss -xp | grep -c \'"sshd"\' || true', { timeoutMs: 10_000 });
  return Number(r.stdout.trim());
}

beforeAll(async () => {
  engine = await dockerOrFail();
  await testImages(engine, ['node']);
  // This machine's address on Docker's default bridge, where the node reaches the test registries.
  // (from ip(8): os.networkInterfaces() leaves out a bridge without carrier, as docker0 is with no container on it)
  const ip = execFileSync('ip', ['-4', '-o', 'addr', 'show', 'dev', 'docker0'], { encoding: 'utf8' });
  gateway = /\binet (\d+\.\d+\.\d+\.\d+)\//.exec(ip)?.[1] ?? '';
  expect(gateway, "this machine's address on docker0 (Docker's default bridge)").toMatch(/^\d+\.\d+\.\d+\.\d+$/);
  slow = await slowRegistry(gateway, { chunks: 12, gapMs: 600 });
  stalling = await slowRegistry(gateway, { chunks: 12, gapMs: 100, stopAfter: 4 });
  silent = await silentRegistry(gateway);
  registries.push(slow, stalling, silent);

  const dir = tempDir('stackctl-test-frozen-');
  const hostKey = makeHostKey(dir, 'host_ed25519');
  const client = ensureClientKey(join(dir, 'client', 'id_ed25519'));
  await engine.createContainer({
    name: NAME,
    image: labImageRef(release, 'node'),
    labels: LABELS,
    ...NODE_CONTAINER_OPTIONS,
  });
  await engine.putArchive(
    NAME,
    '/',
    tarFiles([
      { path: 'etc/ssh/ssh_host_ed25519_key', data: readFileSync(hostKey, 'utf8'), mode: 0o600 },
      { path: 'etc/ssh/ssh_host_ed25519_key.pub', data: readFileSync(`${hostKey}.pub`, 'utf8'), mode: 0o644 },
      { path: 'root/.ssh/authorized_keys', data: `${client.publicKey.line}\n`, mode: 0o600 },
      {
        path: 'etc/docker/daemon.json',
        data: JSON.stringify({ 'storage-driver': 'overlay2', 'insecure-registries': [slow.address, stalling.address] }),
        mode: 0o644,
      },
    ]),
  );
  await engine.start(NAME);
  const address = (await engine.container(NAME))?.addresses.bridge;
  expect(address, 'the node container has an address on the bridge network').toBeTruthy();
  for (let i = 0; i < 100 && !(await sshBanner(address!)); i++) await new Promise((r) => setTimeout(r, 200));
  const knownHosts = join(dir, 'known_hosts');
  recordHostKey(knownHosts, address!, 22, hostPublicKey(hostKey));
  pool = new SshPool({ knownHostsFile: knownHosts, privateKeyFile: join(dir, 'client', 'id_ed25519') });
  target = { node: 'frozen-0', host: address!, port: 22, user: 'root' };
  // The nested dockerd needs a second or so.
  const probe = remoteEngine(pool, target, { timeouts: SHORT });
  for (let i = 0; ; i++) {
    const up = await probe.version().then(
      () => true,
      () => false,
    );
    if (up) break;
    if (i > 60) throw new Error(`the nested dockerd of ${NAME} did not answer: see docker logs ${NAME}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  await probe.close();
}, 600_000);

afterAll(async () => {
  if (frozen) await thaw().catch(() => undefined);
  await pool?.close();
  if (engine) await engine.removeContainer(NAME);
  for (const r of registries) await r.close();
}, 120_000);

describe('a node whose dockerd is frozen (SIGSTOP)', () => {
  it('fails every Docker call within its deadline, naming the node and the call, and leaves no channel open', async () => {
    const docker = remoteEngine(pool, target, { transport: 'streamlocal', timeouts: SHORT });
    await docker.version();
    await docker.close(); // no idle keep-alive channel counts in the baseline
    const before = await sshdSockets();
    await freeze();
    const calls: { op: string; deadline: number; code?: string; call: () => Promise<unknown> }[] = [
      { op: 'docker version', deadline: SHORT.readMs!, call: () => docker.version() },
      { op: 'docker ps', deadline: SHORT.readMs!, call: () => docker.listContainers() },
      { op: 'docker inspect web', deadline: SHORT.readMs!, call: () => docker.inspectContainer('web') },
      { op: 'docker image inspect r/web:1', deadline: SHORT.readMs!, call: () => docker.imageExists('r/web:1') },
      { op: 'docker logs web', deadline: SHORT.readMs!, call: () => docker.logs('web') },
      {
        op: 'docker create web',
        deadline: SHORT.createMs!,
        call: () => docker.createContainer({ name: 'web', image: 'r/web:1' }),
      },
      { op: 'docker start web', deadline: SHORT.startMs!, call: () => docker.startContainer('web') },
      {
        op: 'docker stop web',
        deadline: 1000 + SHORT.stopMarginMs!,
        call: () => docker.stopContainer('web', { timeoutS: 1 }),
      },
      { op: 'docker rm web', deadline: SHORT.removeMs!, call: () => docker.removeContainer('web', { force: true }) },
      {
        op: "'true' in web",
        deadline: SHORT.execMs!,
        code: 'E_DOCKER_EXEC_TIMEOUT',
        call: () => docker.exec('web', ['true']),
      },
    ];
    // All at once, as a deploy step would: more calls than the engine keeps connections (8).
    const results = await Promise.all(calls.map((c) => timedOut(c.call)));
    for (const [i, { err, ms }] of results.entries()) {
      const c = calls[i]!;
      expect(err.code, c.op).toBe(c.code ?? 'E_DOCKER_TIMEOUT');
      expect(err.message, c.op).toMatch(new RegExp(`^frozen-0: ${c.op.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
      expect(err.hint, c.op).toBeTruthy();
      expect(ms, c.op).toBeGreaterThanOrEqual(c.deadline - 5);
      expect(ms, c.op).toBeLessThan(c.deadline + SLACK_MS);
    }
    // The node's SSH carries on while its dockerd is frozen, and every forward to docker.sock is closed.
    let after = Infinity;
    for (let i = 0; i < 20 && after > before; i++) {
      after = await sshdSockets();
      if (after > before) await new Promise((r) => setTimeout(r, 100));
    }
    expect(after).toBe(before);
    await thaw();
    expect((await docker.version()).version).toMatch(/^\d+\./);
    await docker.close();
  });

  it('over docker system dial-stdio, stops the dial-stdio processes so that no SSH session slot is lost', async () => {
    const docker = remoteEngine(pool, target, { transport: 'dial-stdio', timeouts: SHORT });
    await docker.version();
    await freeze();
    // More timed-out calls than sshd's MaxSessions (10): each one's exec session must be ended.
    for (let i = 0; i < 11; i++) {
      const { err, ms } = await timedOut(() => docker.inspectContainer('web'));
      expect(err.code).toBe('E_DOCKER_TIMEOUT');
      expect(ms).toBeLessThan(SHORT.readMs! + SLACK_MS);
    }
    // Commands still get a session, and the stopped dial-stdio processes are gone, dockerd still frozen.
    let left = -1;
    for (let i = 0; i < 50 && left !== 0; i++) {
      const r = await pool.exec(target, "pgrep -fc '^docker system dial-stdio' || true", { timeoutMs: 10_000 });
      left = Number(r.stdout.trim());
      if (left !== 0) await new Promise((r2) => setTimeout(r2, 200));
    }
    expect(left).toBe(0);
    await thaw();
    expect((await docker.version()).version).toMatch(/^\d+\./);
    await docker.close();
  });

  it('does not hold up another engine meanwhile', async () => {
    const docker = remoteEngine(pool, target, { timeouts: SHORT });
    await freeze();
    const local = localEngine();
    const stuck = timedOut(() => docker.listContainers());
    const started = Date.now();
    expect((await local.version()).version).toMatch(/^\d+\./);
    expect(Date.now() - started).toBeLessThan(SHORT.readMs!);
    await stuck;
    await thaw();
    await docker.close();
  });
});

describe('pulls', () => {
  it('a registry that accepts the connection and never answers fails the pull after the stall deadline', async () => {
    const docker = remoteEngine(pool, target, { timeouts: SHORT });
    const ref = `${silent.address}/stackctl-test/never:1`;
    const { err, ms } = await timedOut(() => docker.pullImage(ref));
    expect(err.code).toBe('E_DOCKER_TIMEOUT');
    expect(err.message).toBe(
      `frozen-0: docker pull ${ref}: no progress for ${SHORT.pullStallMs} ms (0 bytes of progress before that)`,
    );
    expect(ms).toBeLessThan(SHORT.pullStallMs! + SLACK_MS);
    expect(silent.connections()).toBeGreaterThan(0); // dockerd did reach it
    expect((await docker.version()).version).toMatch(/^\d+\./); // and the node's dockerd is fine
    await docker.close();
  });

  it('a registry that stops in the middle of a layer fails the pull after the stall deadline', async () => {
    const docker = remoteEngine(pool, target, { timeouts: SHORT });
    const ref = `${stalling.address}/stackctl-test/halfway:1`;
    const { err, ms } = await timedOut(() => docker.pullImage(ref));
    expect(err.code).toBe('E_DOCKER_TIMEOUT');
    expect(err.message).toMatch(/no progress for 2500 ms \((\d+) bytes of progress before that\)$/);
    expect(Number(/\((\d+) bytes/.exec(err.message)![1])).toBeGreaterThan(0);
    expect(ms).toBeGreaterThanOrEqual(SHORT.pullStallMs!);
    // Nothing half-pulled is taken for the image, and the node's dockerd answers as before.
    expect(await docker.imageExists(ref)).toBe(false);
    expect(stalling.connections()).toBeGreaterThan(0);
    await docker.close();
  });

  it('a slow pull that keeps making progress takes as long as it needs', async () => {
    const docker = remoteEngine(pool, target, { timeouts: SHORT });
    const ref = `${slow.address}/stackctl-test/slow:1`;
    const started = Date.now();
    const layers: number[] = [];
    await docker.pullImage(ref, { onProgress: (p) => p.status === 'Downloading' && layers.push(p.current ?? 0) });
    const took = Date.now() - started;
    // 12 chunks 600 ms apart: over 6 s in all, more than twice the stall deadline.
    expect(took).toBeGreaterThan(2 * SHORT.pullStallMs!);
    expect(layers.length).toBeGreaterThan(3);
    expect(await docker.imageExists(ref)).toBe(true);
    await docker.close();
  });
});
