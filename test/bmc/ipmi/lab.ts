/**
 * Test helpers for the IPMI tests: virtual BMCs on loopback, free ports,
 * external tools (which must be installed: tests fail, never skip), and a
 * noisy UDP proxy that mixes garbage into a BMC's answers.
 */
import { execFile, spawnSync } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import { createServer } from 'node:net';
import { Secret } from '../../../src/core/secret.js';
import type { BmcTarget } from '../../../src/bmc/driver.js';
import { InMemoryMachine } from '../../../src/lab/vbmc/machine.js';
import { IpmiBmcServer, type IpmiBmcServerOptions } from '../../../src/lab/vbmc/ipmi/server.js';

/** Credentials every lab BMC in these tests uses. */
export const USER = 'admin';
export const PASSWORD = 'password';

/** Fail (never skip) when a Debian tool the tests need is missing. */
export function requireTool(name: string): string {
  const r = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  const path = r.stdout.trim();
  if (r.status !== 0 || !path) {
    throw new Error(`${name} is not installed: run "apt-get install openipmi ipmitool" (Debian packages) and retry`);
  }
  return path;
}

/** A virtual BMC on loopback in front of an in-memory machine. */
export interface LabBmc {
  readonly server: IpmiBmcServer;
  readonly machine: InMemoryMachine;
  readonly port: number;
  readonly target: BmcTarget;
}

/** Start a virtual BMC; `password` overrides the password in the returned target (not the server's). */
export async function startLabBmc(
  name: string,
  options: Partial<IpmiBmcServerOptions> = {},
  clientPassword = PASSWORD,
): Promise<LabBmc> {
  const machine = new InMemoryMachine({ name });
  const server = new IpmiBmcServer({ backend: machine, username: USER, password: new Secret(PASSWORD), ...options });
  const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
  return {
    server,
    machine,
    port,
    target: { node: name, address: `ipmi://127.0.0.1:${port}`, username: USER, password: new Secret(clientPassword) },
  };
}

/** A UDP port free right now (bound then released). */
export async function freeUdpPort(): Promise<number> {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
  const port = s.address().port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A TCP port free right now (bound then released). */
export async function freeTcpPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const addr = srv.address();
  await new Promise<void>((r) => srv.close(() => r()));
  if (!addr || typeof addr === 'string') throw new Error('no TCP port');
  return addr.port;
}

/** A UDP socket that receives and never answers (a BMC that is down). */
export async function blackHole(): Promise<{ port: number; close(): Promise<void> }> {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
  return { port: s.address().port, close: () => new Promise<void>((r) => s.close(() => r())) };
}

/**
 * A proxy in front of a BMC that precedes every real answer with noise:
 * random bytes, the answer truncated, the answer with a flipped AuthCode
 * byte, the answer with another session id; and repeats the real answer
 * afterwards (a replay).
 */
export async function noisyProxy(bmcPort: number): Promise<{ port: number; close(): Promise<void> }> {
  const front = createSocket('udp4');
  const back = createSocket('udp4');
  let client: { address: string; port: number } | undefined;
  await new Promise<void>((r) => front.bind(0, '127.0.0.1', () => r()));
  await new Promise<void>((r) => back.bind(0, '127.0.0.1', () => r()));
  front.on('message', (msg, rinfo) => {
    client = { address: rinfo.address, port: rinfo.port };
    back.send(msg, bmcPort, '127.0.0.1');
  });
  back.on('message', (msg) => {
    if (!client) return;
    const to = client;
    const send = (b: Buffer) => front.send(b, to.port, to.address);
    send(Buffer.from([0xde, 0xad, 0xbe, 0xef, 0x00, 0x11]));
    send(msg.subarray(0, Math.max(1, msg.length - 9)));
    const flipped = Buffer.from(msg);
    flipped[flipped.length - 1] = (flipped[flipped.length - 1] ?? 0) ^ 0xff;
    send(flipped);
    const otherSession = Buffer.from(msg);
    if (otherSession.length > 10) otherSession.writeUInt32LE(0x0badcafe, 6);
    send(otherSession);
    send(msg);
    send(msg);
  });
  const close = async (): Promise<void> => {
    await Promise.all([front, back].map((s: Socket) => new Promise<void>((r) => s.close(() => r()))));
  };
  return { port: front.address().port, close };
}

/** Run ipmitool lanplus against a BMC (suite undefined: let it discover), the password passed through the environment (-E), never argv. */
export function ipmitool(
  port: number,
  suite: number | undefined,
  args: readonly string[],
  password = PASSWORD,
  user = USER,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const argv = ['-I', 'lanplus', '-H', '127.0.0.1', '-p', String(port), '-U', user, '-E'];
  if (suite !== undefined) argv.push('-C', String(suite));
  argv.push('-R', '2', '-N', '1', ...args);
  return new Promise((resolve) => {
    execFile(
      'ipmitool',
      argv,
      { env: { ...process.env, IPMI_PASSWORD: password }, timeout: 20_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}
