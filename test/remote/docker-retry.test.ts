/**
 * A Docker API request whose channel dies under it (the engine closed an idle keep-alive
 * connection): idempotent requests are sent once more, the others fail at once. Against a
 * small HTTP server on a Unix socket that drops chosen requests without answering.
 */
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import { isDeadChannel, localEngine } from '../../src/remote/docker.js';
import { tempDir } from '../helpers/cli.js';

const INSPECT = {
  Id: 'abc',
  Name: '/web',
  Image: 'sha256:1',
  RestartCount: 0,
  Config: { Image: 'r/web:1', Labels: {} },
  State: { Status: 'running', Running: true, ExitCode: 0, StartedAt: '', FinishedAt: '', OOMKilled: false },
};

let server: Server | undefined;
afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

/** A dockerd stand-in: drops the first `drop` requests of each path, answers the others. */
async function flakyEngine(drop: number) {
  const seen: string[] = [];
  const dropped = new Map<string, number>();
  server = createServer((req, res) => {
    const key = `${req.method} ${req.url?.split('?')[0]}`;
    seen.push(key);
    const n = dropped.get(key) ?? 0;
    if (n < drop) {
      dropped.set(key, n + 1);
      req.socket.destroy(); // the channel dies before any answer
      return;
    }
    res.setHeader('Content-Type', 'application/json');
    if (key.endsWith('/json')) res.end(JSON.stringify(INSPECT));
    else if (key.endsWith('/create')) res.end(JSON.stringify({ Id: 'abc' }));
    else res.end('{}');
  });
  const socket = join(tempDir('stackctl-docker-retry-'), 'docker.sock');
  await new Promise<void>((r) => server!.listen(socket, r));
  return { engine: localEngine(socket), seen };
}

describe('a Docker request whose channel died', () => {
  it('is sent once more when it is idempotent (inspect, start, stop, remove)', async () => {
    const { engine, seen } = await flakyEngine(1);
    expect((await engine.inspectContainer('web'))?.state.running).toBe(true);
    await engine.startContainer('web');
    await engine.stopContainer('web');
    await engine.removeContainer('web');
    expect(seen.filter((k) => k === 'GET /containers/web/json')).toHaveLength(2);
    expect(seen.filter((k) => k === 'POST /containers/web/start')).toHaveLength(2);
  });

  it('fails at once when it is not (create), and only once more for a channel that keeps dying', async () => {
    const { engine, seen } = await flakyEngine(2);
    const err = await engine.createContainer({ name: 'web', image: 'r/web:1' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StackctlError);
    expect((err as StackctlError).code).toBe('E_DOCKER_API');
    expect(seen.filter((k) => k.endsWith('/create'))).toHaveLength(1);
    await expect(engine.inspectContainer('web')).rejects.toThrow(/socket hang up/);
    expect(seen.filter((k) => k === 'GET /containers/web/json')).toHaveLength(2);
  });

  it('tells a dead channel from an answer', () => {
    expect(isDeadChannel(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }))).toBe(true);
    expect(isDeadChannel(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }))).toBe(true);
    expect(isDeadChannel(Object.assign(new Error('no such container'), { statusCode: 404 }))).toBe(false);
    expect(isDeadChannel(Object.assign(new Error('connect ENOENT'), { code: 'ENOENT' }))).toBe(false);
  });
});
