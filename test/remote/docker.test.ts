import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RemoteError } from '../../src/core/errors.js';
import { Secret } from '../../src/core/secret.js';
import { localEngine, remoteEngine, type ContainerEngine, type PullProgress } from '../../src/remote/docker.js';
import { recordHostKey } from '../../src/remote/known-hosts.js';
import { SshPool, type SshTarget } from '../../src/remote/ssh.js';
import { tempDir } from '../helpers/cli.js';
import { hostPublicKey, startSshd, type TestSshd } from './sshd.js';

/** A tiny image made from Debian's static busybox: no registry needed. */
const IMAGE = 'stackctl-test/busybox:1';
/** Every container and image made here carries this label (or name prefix) so cleanup finds it. */
const LABEL = 'stackctl-test';

function requireDocker(): void {
  try {
    execFileSync('docker', ['version', '--format', '{{.Server.Version}}'], { stdio: 'pipe' });
  } catch {
    throw new Error('dockerd is not running: apt-get install docker.io, then start it with `dockerd &`');
  }
  if (!existsSync('/bin/busybox')) throw new Error('missing /bin/busybox: apt-get install busybox-static');
  // NOTE: Debian's `busybox` package (which replaces busybox-static) is dynamically linked and
  // cannot run alone in an image made of just that file.
  const ldd = spawnSync('ldd', ['/bin/busybox'], { encoding: 'utf8' });
  if (!/not a dynamic executable|statically linked/.test(`${ldd.stdout}${ldd.stderr}`)) {
    throw new Error('/bin/busybox is dynamically linked: apt-get install busybox-static (it replaces busybox)');
  }
}

function buildImage(): void {
  const root = join(tempDir('stackctl-test-busybox-'), 'root');
  mkdirSync(root);
  mkdirSync(join(root, 'bin'));
  copyFileSync('/bin/busybox', join(root, 'bin', 'busybox'));
  for (const applet of ['sh', 'echo', 'sleep', 'cat', 'true']) symlinkSync('busybox', join(root, 'bin', applet));
  execFileSync('tar', ['-C', root, '-cf', join(root, '..', `${LABEL}-busybox.tar`), '.']);
  execFileSync(
    'docker',
    [
      'import',
      '--change',
      `LABEL ${LABEL}=1`,
      '--change',
      'CMD ["/bin/sh"]',
      join(root, '..', `${LABEL}-busybox.tar`),
      IMAGE,
    ],
    { stdio: 'pipe' },
  );
}

let sshd: TestSshd;
let pool: SshPool;
let target: SshTarget;
let engine: ContainerEngine;
const local = localEngine();
const name = `stackctl-test-${process.pid}`;

beforeAll(async () => {
  requireDocker();
  buildImage();
  sshd = await startSshd();
  recordHostKey(sshd.knownHostsFile, '127.0.0.1', sshd.port, hostPublicKey(sshd.hostKeyFile));
  pool = new SshPool({ knownHostsFile: sshd.knownHostsFile, privateKeyFile: sshd.clientKeyFile });
  target = { node: 'test-node', host: '127.0.0.1', port: sshd.port, user: 'root' };
  engine = remoteEngine(pool, target);
});

afterAll(async () => {
  for (const c of await local.listContainers({ labels: { [LABEL]: '1' } })) {
    await local.removeContainer(c.id, { force: true });
  }
  await engine?.close();
  await pool?.close();
  await sshd?.stop();
  execFileSync('docker', ['image', 'rm', '-f', IMAGE], { stdio: 'ignore' });
});

describe('Docker over the pooled SSH connection', () => {
  it('runs a container through its lifecycle; labels round-trip', async () => {
    expect((await engine.version()).version).toMatch(/^\d+\./);
    expect(await engine.imageExists(IMAGE)).toBe(true);
    expect((await engine.inspectImage(IMAGE))?.labels).toMatchObject({ [LABEL]: '1' });
    expect(await engine.imageExists('stackctl-test/absent:1')).toBe(false);

    const labels = { [LABEL]: '1', 'org.stackctl.service': 'keystone', 'org.stackctl.config-hash': 'abc123' };
    const id = await engine.createContainer({
      name,
      image: IMAGE,
      command: ['sh', '-c', 'echo hello; echo oops >&2; exec sleep 300'],
      env: { GREETING: 'hi', PASSWORD: new Secret('pw-in-env') },
      labels,
      restart: 'no',
      healthcheck: { test: ['true'], intervalMs: 200, timeoutMs: 1000, retries: 1 },
    });
    expect((await engine.inspectContainer(name))?.state.status).toBe('created');
    await engine.startContainer(name);
    await engine.startContainer(name); // starting a running container is harmless

    const info = await engine.inspectContainer(name);
    expect(info).toMatchObject({ id, name, image: IMAGE, labels, state: { status: 'running', running: true } });
    expect(Date.parse(info!.state.startedAt)).toBeGreaterThan(Date.now() - 60_000);

    const listed = await engine.listContainers({ labels: { 'org.stackctl.service': 'keystone', [LABEL]: '1' } });
    expect(listed.map((c) => c.name)).toEqual([name]);
    expect(listed[0]!.labels).toMatchObject(labels);

    const ex = await engine.exec(name, ['sh', '-c', 'echo "$GREETING $PASSWORD $EXTRA"; echo e >&2; exit 4'], {
      env: { EXTRA: 'x y' },
    });
    expect(ex).toEqual({ code: 4, stdout: 'hi pw-in-env x y\n', stderr: 'e\n' });

    // The healthcheck runs every 200 ms.
    let health: string | undefined;
    for (let i = 0; i < 50 && health !== 'healthy'; i++) {
      health = (await engine.inspectContainer(name))?.state.health;
      if (health !== 'healthy') await new Promise((r) => setTimeout(r, 100));
    }
    expect(health).toBe('healthy');

    expect(await engine.logs(name, { tail: 10 })).toEqual({ stdout: 'hello\n', stderr: 'oops\n' });

    await engine.stopContainer(name, { timeoutS: 1 });
    await engine.stopContainer(name, { timeoutS: 1 }); // stopping a stopped container is harmless
    expect((await engine.inspectContainer(name))?.state).toMatchObject({ status: 'exited', running: false });
    await engine.removeContainer(name);
    await engine.removeContainer(name); // and removing a removed one
    expect(await engine.inspectContainer(name)).toBeUndefined();

    // All of it went over the single SSH connection.
    expect(sshd.connections()).toBe(1);
  });

  it('removes a named volume and its data, refusing while a container uses it; a missing one is no error', async () => {
    const vol = `stackctl-test-vol-${process.pid}`;
    const user = `${name}-vol`;
    await engine.createContainer({
      name: user,
      image: IMAGE,
      command: ['sh', '-c', 'echo kept > /data/f; exec sleep 300'],
      labels: { [LABEL]: '1' },
      volumes: [`${vol}:/data`],
      restart: 'no',
    });
    await engine.startContainer(user);
    const inspect = (): boolean => spawnSync('docker', ['volume', 'inspect', vol], { stdio: 'ignore' }).status === 0;
    expect(inspect()).toBe(true);
    await expect(engine.removeVolume(vol)).rejects.toBeInstanceOf(RemoteError);
    expect(inspect()).toBe(true);
    await engine.removeContainer(user, { force: true });
    await engine.removeVolume(vol);
    expect(inspect()).toBe(false);
    await engine.removeVolume(vol); // removing a removed one
  });

  it('reports pull progress and turns a failed pull into a RemoteError', async () => {
    const events: PullProgress[] = [];
    const err = await engine.pullImage('127.0.0.1:1/stackctl-test/none:1', { onProgress: (p) => events.push(p) }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RemoteError);
    expect((err as RemoteError).message).toContain('test-node');
  });

  it('gives API failures our codes and hints', async () => {
    await expect(engine.startContainer('stackctl-test-missing')).rejects.toMatchObject({
      code: 'E_DOCKER_NOT_FOUND',
      hint: expect.any(String),
    });
  });

  it('keeps answering after many streamed answers at once: no channel is left holding a slot', async () => {
    // Logs and exec answers end with their connection; 12 at once, three times over, is more than the
    // 8 channels the engine keeps: a channel not read to its end would hold its slot for ever.
    const busy = `${name}-busy`;
    await engine.createContainer({
      name: busy,
      image: IMAGE,
      command: ['sh', '-c', 'echo ready; exec sleep 300'],
      labels: { [LABEL]: '1' },
      restart: 'no',
    });
    await engine.startContainer(busy);
    const bounded = <T>(p: Promise<T>, what: string): Promise<T> =>
      Promise.race([
        p,
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error(`${what}: no answer within 30 s`)), 30_000),
        ),
      ]);
    // watch the http agents' own books (the engine's agent is private): sockets lent out and not given back
    const agents = new Set<http.Agent>();
    const addRequest = Object.getOwnPropertyDescriptor(http.Agent.prototype, 'addRequest')!;
    Object.defineProperty(http.Agent.prototype, 'addRequest', {
      ...addRequest,
      value(this: http.Agent, ...args: unknown[]) {
        agents.add(this);
        return (addRequest.value as (...a: unknown[]) => unknown).apply(this, args);
      },
    });
    const held = (): number => [...agents].reduce((n, a) => n + Object.values(a.sockets).flat().length, 0);
    try {
      for (let round = 1; round <= 3; round++) {
        const logs = await bounded(
          Promise.all(Array.from({ length: 12 }, () => engine.logs(busy, { tail: 5 }))),
          `round ${round}: 12 logs at once`,
        );
        expect(logs.every((l) => l.stdout.includes('ready'))).toBe(true);
        const execs = await bounded(
          Promise.all(
            Array.from({ length: 12 }, (_, i) =>
              engine.exec(busy, ['sh', '-c', `sleep 1; echo n${i}`], { timeoutMs: 20_000 }),
            ),
          ),
          `round ${round}: 12 execs at once`,
        );
        expect(execs.map((e) => e.stdout.trim())).toEqual(Array.from({ length: 12 }, (_, i) => `n${i}`));
        // commands past their deadline: the engine gives up on them, and must give their channels back too
        const late = await bounded(
          Promise.all(
            Array.from({ length: 3 }, () =>
              engine.exec(busy, ['sleep', '5'], { timeoutMs: 1000 }).then(
                () => 'answered',
                (e: Error) => e.message,
              ),
            ),
          ),
          `round ${round}: 3 execs past their deadline`,
        );
        expect(late.every((m) => m !== 'answered')).toBe(true);
      }
      // every answer is complete: within a few seconds every channel is closed or idle in the pool
      const until = Date.now() + 5_000;
      while (held() > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
      expect(held()).toBe(0);
    } finally {
      Object.defineProperty(http.Agent.prototype, 'addRequest', addRequest);
    }
    expect((await bounded(engine.inspectContainer(busy), 'inspect after the rounds'))?.state.running).toBe(true);
    await engine.removeContainer(busy, { force: true });
  }, 240_000);

  it('falls back to docker system dial-stdio when sshd forbids stream-local forwarding', async () => {
    const strict = await startSshd({ extraConfig: 'AllowStreamLocalForwarding no' });
    const file = join(strict.dir, 'kh');
    recordHostKey(file, '127.0.0.1', strict.port, hostPublicKey(strict.hostKeyFile));
    const p = new SshPool({ knownHostsFile: file, privateKeyFile: strict.clientKeyFile });
    const t = { ...target, port: strict.port };
    try {
      const forced = remoteEngine(p, t, { transport: 'streamlocal' });
      await expect(forced.version()).rejects.toMatchObject({ code: 'E_SSH_CHANNEL' });
      await forced.close();
      const auto = remoteEngine(p, t);
      expect((await auto.version()).version).toMatch(/^\d+\./);
      expect(await auto.imageExists(IMAGE)).toBe(true);
      await auto.close();
    } finally {
      await p.close();
      await strict.stop();
    }
  });

  it('the local engine offers the same interface', async () => {
    expect((await local.version()).version).toMatch(/^\d+\./);
    expect(await local.imageExists(IMAGE)).toBe(true);
    const missing = localEngine('/nonexistent/docker.sock');
    await expect(missing.version()).rejects.toMatchObject({ code: 'E_DOCKER_UNREACHABLE' });
  });
});
