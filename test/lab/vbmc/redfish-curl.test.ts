import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Secret } from '../../../src/core/secret.js';
import { InMemoryMachine } from '../../../src/lab/vbmc/machine.js';
import { VirtualRedfishBmc } from '../../../src/lab/vbmc/redfish/server.js';
import { makeTlsFixture, type TlsFixture } from '../../bmc/redfish/tls-fixture.js';

const run = promisify(execFile);
const PASSWORD = 'curl-Pw-9x';

/**
 * A generic client must be able to use the virtual BMC. curl runs
 * asynchronously: the server lives in this process, a blocking spawn would
 * starve it. Credentials and tokens go through 0600 files, never argv.
 */
async function curl(args: readonly string[]): Promise<string> {
  try {
    const { stdout } = await run('curl', ['--silent', '--show-error', '--max-time', '10', ...args]);
    return stdout;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new Error('the curl command is missing: apt-get install curl', { cause: err });
    }
    throw err;
  }
}

let dir: string;
let tls: TlsFixture;
let machine: InMemoryMachine;
let http: VirtualRedfishBmc;
let https: VirtualRedfishBmc;
let netrc: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'redfish-curl-'));
  tls = await makeTlsFixture();
  machine = new InMemoryMachine({ name: 'curl-0' });
  http = new VirtualRedfishBmc({ machine, username: 'operator', password: new Secret(PASSWORD), ifMatch: 'required' });
  https = new VirtualRedfishBmc({
    machine: new InMemoryMachine({ name: 'curl-1', power: 'on' }),
    username: 'operator',
    password: new Secret(PASSWORD),
    tls: { key: tls.leafKey, cert: tls.leafCert },
  });
  await http.listen({ host: '127.0.0.1', port: 0 });
  await https.listen({ host: '127.0.0.1', port: 0 });
  netrc = join(dir, 'netrc');
  await writeFile(netrc, `machine 127.0.0.1 login operator password ${PASSWORD}\n`, { mode: 0o600 });
});

afterAll(async () => {
  await http?.close();
  await https?.close();
  await tls?.cleanup();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('virtual Redfish BMC with curl', () => {
  it('serves the system as JSON to Basic authentication from a netrc file', async () => {
    expect((await stat(netrc)).mode & 0o777).toBe(0o600);
    const body = await curl(['--netrc-file', netrc, `${http.address.url}/redfish/v1/Systems/1`]);
    const system = JSON.parse(body) as Record<string, unknown>;
    expect(system).toMatchObject({ Id: '1', PowerState: 'Off', Boot: { BootSourceOverrideTarget: 'Hdd' } });
  });

  it('walks a session: login, PATCH with If-Match, Reset, logout', async () => {
    const loginBody = join(dir, 'login.json');
    await writeFile(loginBody, JSON.stringify({ UserName: 'operator', Password: PASSWORD }), { mode: 0o600 });
    const headersOut = join(dir, 'login.headers');
    await curl([
      '-X',
      'POST',
      '-H',
      'Content-Type: application/json',
      '--data-binary',
      `@${loginBody}`,
      '--dump-header',
      headersOut,
      '--output',
      '/dev/null',
      `${http.address.url}/redfish/v1/SessionService/Sessions`,
    ]);
    const headers = await readFile(headersOut, 'utf8');
    expect(headers).toMatch(/^HTTP\/1\.1 201/);
    const token = /^x-auth-token: (\S+)/im.exec(headers)?.[1] ?? '';
    const location = /^location: (\S+)/im.exec(headers)?.[1] ?? '';
    expect(token).not.toBe('');
    const tokenHeader = join(dir, 'token.header');
    await writeFile(tokenHeader, `X-Auth-Token: ${token}\n`, { mode: 0o600 });

    const sysHeaders = join(dir, 'sys.headers');
    await curl([
      '-H',
      `@${tokenHeader}`,
      '--dump-header',
      sysHeaders,
      '--output',
      '/dev/null',
      `${http.address.url}/redfish/v1/Systems/1`,
    ]);
    const etag = /^etag: (.+?)\r?$/im.exec(await readFile(sysHeaders, 'utf8'))?.[1] ?? '';
    expect(etag).toMatch(/^W\//);

    const patched = await curl([
      '-X',
      'PATCH',
      '-H',
      `@${tokenHeader}`,
      '-H',
      'Content-Type: application/json',
      '-H',
      `If-Match: ${etag}`,
      '--data',
      '{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once","BootSourceOverrideMode":"UEFI"}}',
      `${http.address.url}/redfish/v1/Systems/1`,
    ]);
    expect(JSON.parse(patched)).toMatchObject({
      Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' },
    });

    const status = await curl([
      '-X',
      'POST',
      '-H',
      `@${tokenHeader}`,
      '-H',
      'Content-Type: application/json',
      '--data',
      '{"ResetType":"On"}',
      '--write-out',
      '%{http_code}',
      '--output',
      '/dev/null',
      `${http.address.url}/redfish/v1/Systems/1/Actions/ComputerSystem.Reset`,
    ]);
    expect(status).toBe('200');
    expect(await machine.powerState()).toBe('on');
    expect(machine.lastBootDevice).toBe('pxe');

    const deleted = await curl([
      '-X',
      'DELETE',
      '-H',
      `@${tokenHeader}`,
      '--write-out',
      '%{http_code}',
      '--output',
      '/dev/null',
      `${http.address.url}${location}`,
    ]);
    expect(deleted).toBe('204');
    expect(http.activeSessions).toBe(0);
  });

  it('serves HTTPS that curl verifies against the CA bundle', async () => {
    const body = await curl([
      '--cacert',
      tls.caPath,
      '--netrc-file',
      netrc,
      `${https.address.url}/redfish/v1/Systems/1`,
    ]);
    expect(JSON.parse(body)).toMatchObject({ PowerState: 'On' });
    await expect(curl(['--netrc-file', netrc, `${https.address.url}/redfish/v1/Systems/1`])).rejects.toThrow(
      /certificate/i,
    );
  });

  it('gives curl a 401 with a Redfish error body for a wrong password', async () => {
    const bad = join(dir, 'netrc-bad');
    await writeFile(bad, 'machine 127.0.0.1 login operator password wrong\n', { mode: 0o600 });
    const out = await curl([
      '--netrc-file',
      bad,
      '--write-out',
      '\n%{http_code}',
      `${http.address.url}/redfish/v1/Systems/1`,
    ]);
    const [json, code] = [out.slice(0, out.lastIndexOf('\n')), out.slice(out.lastIndexOf('\n') + 1)];
    expect(code).toBe('401');
    expect(JSON.parse(json)).toHaveProperty('error.code');
  });
});
