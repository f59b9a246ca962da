/**
 * The registration program (roles/programs/identity.py) under Debian's python3 and keystoneauth1,
 * the versions the Zed images carry: a request that cannot connect is tried again (the VIP moving,
 * Keystone's listener not up yet), and one that connected is not.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultRolesDir } from '../../src/core/paths.js';

/** Debian's interpreter: the one apt's python3-keystoneauth1 is installed for. */
const PYTHON = '/usr/bin/python3';
const program = readFileSync(join(defaultRolesDir(), 'programs', 'identity.py'), 'utf8');

function need(): void {
  if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: apt-get install python3 python3-keystoneauth1`);
}

/** Run the program with `spec` as stackctl does (SPEC line, then the program, on stdin). */
function run(spec: unknown): Promise<{ code: number | null; stderr: string; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const p = spawn(PYTHON, ['-'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('exit', (code) => resolve({ code, stderr, ms: Date.now() - t0 }));
    p.stdin.end(`SPEC = ${JSON.stringify(Buffer.from(JSON.stringify(spec)).toString('base64'))}\n${program}`);
  });
}

/** A free loopback port, closed again: nothing listens there until `listenLater`. */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise<void>((r) => s.close(() => r()));
});

/** An HTTP listener that answers every request 401 and counts them. */
function unauthorized(port: number): { requests: () => number } {
  let n = 0;
  const s = createServer((req, res) => {
    n++;
    req.resume();
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        error: { code: 401, title: 'Unauthorized', message: 'The request you have made requires authentication.' },
      }),
    );
  });
  s.listen(port, '127.0.0.1');
  servers.push(s);
  return { requests: () => n };
}

const spec = (port: number, connectTries?: number) => ({
  ...(connectTries ? { connect_tries: connectTries } : {}),
  auth: { url: `http://127.0.0.1:${port}/v3`, user: 'admin', password: 'x', project: 'admin', region: 'RegionOne' },
  flavors: [{ name: 'm1.tiny', vcpus: 1, ram_mb: 256, disk_gb: 1 }],
  images: [],
});

describe('the registration program', () => {
  it('tries a connection again while nothing listens, and reaches a listener that comes up 3 s later', async () => {
    need();
    const port = await freePort();
    let listener: { requests: () => number } | undefined;
    const later = setTimeout(() => (listener = unauthorized(port)), 3000);
    const r = await run(spec(port));
    clearTimeout(later);
    // it got through to the listener (which refuses the password), after waiting for it
    expect(r.stderr).toMatch(/Unauthorized|401/);
    expect(r.stderr).not.toMatch(/ConnectFailure|Unable to establish connection/);
    expect(r.code).not.toBe(0);
    expect(r.ms).toBeGreaterThanOrEqual(3000);
    expect(listener!.requests()).toBe(1);
  }, 60_000);

  it('gives up on a port that never opens, saying it could not connect', async () => {
    need();
    const port = await freePort();
    // three tries (seven by default): at once, at once again, then 2 s later (the wait doubles each time)
    const r = await run(spec(port, 3));
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/ConnectFailure|Unable to establish connection|Max retries exceeded/);
    expect(r.ms).toBeGreaterThan(1_900);
  }, 180_000);
});
