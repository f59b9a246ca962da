/**
 * Every Docker API call has a deadline, and at the deadline the request's connection is closed rather
 * than left waiting. Against a small HTTP server on a Unix socket that takes requests and never answers
 * (or, for a pull, answers with progress and then stops), so that each call's bound is checked in
 * milliseconds; test/remote/docker-frozen.test.ts does the same against a real, frozen dockerd.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { TimeoutError } from '../../src/core/errors.js';
import { localEngine, type ContainerEngine } from '../../src/remote/docker.js';
import { tempDir } from '../helpers/cli.js';

/** Short deadlines, each distinct so that a test can tell which one applied. */
const SHORT = {
  readMs: 300,
  createMs: 400,
  startMs: 500,
  stopMarginMs: 200,
  removeMs: 600,
  execMs: 700,
  pullStallMs: 400,
} as const;

let server: Server | undefined;
const sockets = new Set<Socket>();
afterEach(async () => {
  for (const s of sockets) s.destroy();
  sockets.clear();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
});

/** A dockerd stand-in whose answers `handle` decides; by default it never answers. */
async function standIn(
  handle: (req: IncomingMessage, res: ServerResponse) => void = () => undefined,
): Promise<{ engine: ContainerEngine; open: () => number; seen: string[] }> {
  const seen: string[] = [];
  server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url?.split('?')[0]}`);
    handle(req, res);
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  const socket = join(tempDir('stackctl-docker-deadline-'), 'docker.sock');
  await new Promise<void>((r) => server!.listen(socket, r));
  return { engine: localEngine(socket, SHORT), open: () => sockets.size, seen };
}

/** Run `call`, expecting a TimeoutError; returns it and the time it took. */
async function timedOut(call: () => Promise<unknown>): Promise<{ err: TimeoutError; ms: number }> {
  const started = Date.now();
  const err = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(TimeoutError);
  return { err: err as TimeoutError, ms: Date.now() - started };
}

/** Wait up to 1 s for the client to close every connection. */
async function closed(open: () => number): Promise<number> {
  for (let i = 0; i < 100 && open() > 0; i++) await new Promise((r) => setTimeout(r, 10));
  return open();
}

describe('Docker API deadlines', () => {
  it.each([
    { op: 'version', ms: SHORT.readMs, call: (e: ContainerEngine) => e.version() },
    { op: 'ps', ms: SHORT.readMs, call: (e: ContainerEngine) => e.listContainers() },
    { op: 'inspect web', ms: SHORT.readMs, call: (e: ContainerEngine) => e.inspectContainer('web') },
    { op: 'image inspect r/web:1', ms: SHORT.readMs, call: (e: ContainerEngine) => e.imageExists('r/web:1') },
    { op: 'logs web', ms: SHORT.readMs, call: (e: ContainerEngine) => e.logs('web') },
    {
      op: 'create web',
      ms: SHORT.createMs,
      call: (e: ContainerEngine) => e.createContainer({ name: 'web', image: 'r/web:1' }),
    },
    { op: 'start web', ms: SHORT.startMs, call: (e: ContainerEngine) => e.startContainer('web') },
    // dockerd answers a stop once the container is down: the caller's grace plus the margin.
    {
      op: 'stop web',
      ms: 1000 + SHORT.stopMarginMs,
      call: (e: ContainerEngine) => e.stopContainer('web', { timeoutS: 1 }),
    },
    { op: 'rm web', ms: SHORT.removeMs, call: (e: ContainerEngine) => e.removeContainer('web', { force: true }) },
    { op: 'volume rm data', ms: SHORT.removeMs, call: (e: ContainerEngine) => e.removeVolume('data') },
  ])('docker $op gives up after its deadline ($ms ms) and closes its connection', async ({ op, ms, call }) => {
    const { engine, open } = await standIn();
    const { err, ms: took } = await timedOut(() => call(engine));
    expect(err.code).toBe('E_DOCKER_TIMEOUT');
    expect(err.message).toBe(`local: docker ${op}: no answer from dockerd within ${ms} ms`);
    expect(err.details).toMatchObject({ engine: 'local', timeoutMs: ms });
    expect(err.hint).toMatch(/dockerd on local/);
    expect(took).toBeGreaterThanOrEqual(ms - 5);
    expect(took).toBeLessThan(ms + 400);
    expect(await closed(open)).toBe(0);
  });

  it('an exec has one deadline for create, run and inspect, and closes its connection', async () => {
    const { engine, open, seen } = await standIn((req, res) => {
      res.setHeader('Content-Type', 'application/json');
      if (req.url?.startsWith('/containers/web/exec')) return void res.end(JSON.stringify({ Id: 'e1' }));
      res.writeHead(200, { 'Content-Type': 'application/vnd.docker.raw-stream' });
      res.write(Buffer.from([1, 0, 0, 0, 0, 0, 0, 3, 0x6f, 0x6b, 0x0a])); // "ok\n" on stdout, then silence
    });
    const { err, ms } = await timedOut(() => engine.exec('web', ['sleep', '60']));
    expect(err.code).toBe('E_DOCKER_EXEC_TIMEOUT');
    expect(err.message).toBe(`local: 'sleep 60' in web did not finish within ${SHORT.execMs} ms`);
    expect(ms).toBeLessThan(SHORT.execMs + 400);
    expect(seen).toEqual(['POST /containers/web/exec', 'POST /exec/e1/start']);
    expect(await closed(open)).toBe(0);
  });

  it('a pull is bounded by its progress, not by its total time', async () => {
    // Progress every 150 ms for 1.2 s: three times the stall deadline in all, never 400 ms without a byte.
    const { engine } = await standIn((_req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      let n = 0;
      const tick = setInterval(() => {
        n += 1;
        res.write(JSON.stringify({ status: 'Downloading', id: 'l1', progressDetail: { current: n, total: 8 } }) + '\n');
        if (n === 8) {
          clearInterval(tick);
          res.end(JSON.stringify({ status: 'Status: Downloaded newer image for r/web:1' }) + '\n');
        }
      }, 150);
    });
    const events: number[] = [];
    const started = Date.now();
    await engine.pullImage('r/web:1', { onProgress: (p) => p.current !== undefined && events.push(p.current) });
    expect(Date.now() - started).toBeGreaterThan(3 * SHORT.pullStallMs - 100);
    expect(events).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it('a pull whose progress stops fails after the stall deadline, naming what it got, and closes its connection', async () => {
    const { engine, open } = await standIn((_req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write(JSON.stringify({ status: 'Pulling fs layer', id: 'l1' }) + '\n'); // and then nothing
    });
    const { err, ms } = await timedOut(() => engine.pullImage('r/web:1'));
    expect(err.code).toBe('E_DOCKER_TIMEOUT');
    expect(err.message).toMatch(
      /^local: docker pull r\/web:1: no progress for 400 ms \(\d+ bytes of progress before that\)$/,
    );
    expect(ms).toBeLessThan(SHORT.pullStallMs + 400);
    expect(await closed(open)).toBe(0);
  });

  it('a pull that never gets an answer fails after the stall deadline', async () => {
    const { engine, open } = await standIn();
    const { err } = await timedOut(() => engine.pullImage('r/web:1'));
    expect(err.message).toContain('no progress for 400 ms (0 bytes');
    expect(await closed(open)).toBe(0);
  });

  it('keeps working after timeouts: answers that come in time are served', async () => {
    let slow = true;
    const { engine } = await standIn((_req, res) => {
      if (slow) return;
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ Version: '20.10.24', ApiVersion: '1.41' }));
    });
    for (let i = 0; i < 10; i++) await timedOut(() => engine.version()); // more than the agent's 8 sockets
    slow = false;
    expect(await engine.version()).toEqual({ version: '20.10.24', apiVersion: '1.41' });
  });
});
