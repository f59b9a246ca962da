import { afterEach, describe, expect, it } from 'vitest';
import { Secret } from '../../../src/core/secret.js';
import { InMemoryMachine } from '../../../src/lab/vbmc/machine.js';
import {
  MACHINE_BOOT_TARGET,
  MACHINE_POWER_STATE,
  REDFISH_MODE_UEFI,
  REDFISH_TARGET_DEVICE,
  RESET_EFFECTS,
} from '../../../src/lab/vbmc/redfish/mappings.js';
import { VirtualRedfishBmc, type VirtualRedfishBmcOptions } from '../../../src/lab/vbmc/redfish/server.js';

const servers: VirtualRedfishBmc[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function start(options: Partial<VirtualRedfishBmcOptions> = {}) {
  const machine = (options.machine as InMemoryMachine | undefined) ?? new InMemoryMachine({ name: 'vm-0' });
  const bmc = new VirtualRedfishBmc({ username: 'admin', password: new Secret('lab-pass'), ...options, machine });
  servers.push(bmc);
  const { url, port } = await bmc.listen({ host: '127.0.0.1', port: 0 });
  return { bmc, machine, url, port };
}

const basic = (user: string, pass: string) => ({
  Authorization: `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}`,
});

async function call(url: string, init: RequestInit = {}) {
  const res = await fetch(url, init);
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    json: text ? (JSON.parse(text) as Record<string, unknown>) : undefined,
  };
}

async function login(url: string, user = 'admin', pass = 'lab-pass') {
  return call(`${url}/redfish/v1/SessionService/Sessions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ UserName: user, Password: pass }),
  });
}

describe('virtual Redfish BMC', () => {
  it('reports the chosen port and serves the service root without authentication', async () => {
    const { url, port, bmc } = await start();
    expect(port).toBeGreaterThan(0);
    expect(bmc.address.bmcAddress).toBe(`redfish+http://127.0.0.1:${port}/redfish/v1/Systems/1`);
    const root = await call(`${url}/redfish/v1/`);
    expect(root.status).toBe(200);
    expect(root.headers.get('odata-version')).toBe('4.0');
    expect(root.json).toMatchObject({
      Systems: { '@odata.id': '/redfish/v1/Systems' },
      Links: { Sessions: { '@odata.id': '/redfish/v1/SessionService/Sessions' } },
    });
    expect((await call(`${url}/redfish`)).json).toEqual({ v1: '/redfish/v1/' });
  });

  it('answers 401 with a Redfish error to a request without valid credentials', async () => {
    const { url, bmc } = await start();
    const anonymous = await call(`${url}/redfish/v1/Systems`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toContain('Basic');
    expect(anonymous.json).toHaveProperty('error.@Message\\.ExtendedInfo');
    expect((await call(`${url}/redfish/v1/Systems`, { headers: basic('admin', 'nope') })).status).toBe(401);
    expect((await call(`${url}/redfish/v1/Systems`, { headers: { 'X-Auth-Token': 'forged' } })).status).toBe(401);
    expect((await login(url, 'admin', 'nope')).status).toBe(401);
    expect(bmc.stats.authFailures).toBe(2);
  });

  it('accepts Basic authentication', async () => {
    const { url, bmc } = await start();
    const systems = await call(`${url}/redfish/v1/Systems`, { headers: basic('admin', 'lab-pass') });
    expect(systems.status).toBe(200);
    expect(systems.json).toMatchObject({
      'Members@odata.count': 1,
      Members: [{ '@odata.id': '/redfish/v1/Systems/1' }],
    });
    expect(bmc.stats.basicAuths).toBe(1);
  });

  it('creates, lists and deletes sessions; a deleted token is refused', async () => {
    const { url, bmc } = await start();
    const created = await login(url);
    expect(created.status).toBe(201);
    const token = created.headers.get('x-auth-token') ?? '';
    const location = created.headers.get('location') ?? '';
    expect(token).toMatch(/^[0-9a-f]{48}$/);
    expect(location).toMatch(/^\/redfish\/v1\/SessionService\/Sessions\/\d+$/);
    expect(JSON.stringify(created.json)).not.toContain('lab-pass');
    const list = await call(`${url}/redfish/v1/SessionService/Sessions`, { headers: { 'X-Auth-Token': token } });
    expect(list.json).toMatchObject({ 'Members@odata.count': 1 });
    expect((await call(`${url}${location}`, { headers: { 'X-Auth-Token': token } })).json).toMatchObject({
      UserName: 'admin',
    });
    expect((await call(`${url}${location}`, { method: 'DELETE', headers: { 'X-Auth-Token': token } })).status).toBe(
      204,
    );
    expect((await call(`${url}/redfish/v1/Systems/1`, { headers: { 'X-Auth-Token': token } })).status).toBe(401);
    expect(bmc.stats.sessionsDeleted).toBe(1);
  });

  it('expires idle sessions after the session timeout', async () => {
    let now = 0;
    const { url } = await start({ sessionTimeoutSeconds: 60, now: () => now });
    const token = (await login(url)).headers.get('x-auth-token') ?? '';
    now += 30_000;
    expect((await call(`${url}/redfish/v1/Systems/1`, { headers: { 'X-Auth-Token': token } })).status).toBe(200);
    now += 61_000;
    expect((await call(`${url}/redfish/v1/Systems/1`, { headers: { 'X-Auth-Token': token } })).status).toBe(401);
  });

  it('runs many BMCs in one process, each with its own credentials and machine', async () => {
    const a = await start({ machine: new InMemoryMachine({ name: 'a', power: 'on' }), password: new Secret('pass-a') });
    const b = await start({ machine: new InMemoryMachine({ name: 'b' }), password: new Secret('pass-b') });
    expect(a.port).not.toBe(b.port);
    expect((await call(`${a.url}/redfish/v1/Systems/1`, { headers: basic('admin', 'pass-a') })).json).toMatchObject({
      PowerState: 'On',
    });
    expect((await call(`${b.url}/redfish/v1/Systems/1`, { headers: basic('admin', 'pass-b') })).json).toMatchObject({
      PowerState: 'Off',
    });
    expect((await call(`${b.url}/redfish/v1/Systems/1`, { headers: basic('admin', 'pass-a') })).status).toBe(401);
  });

  it('describes the system with power, boot allowable values, reset allowable values and an ETag', async () => {
    const { url } = await start({ systemId: 'vm-0' });
    const res = await call(`${url}/redfish/v1/Systems/vm-0`, { headers: basic('admin', 'lab-pass') });
    expect(res.headers.get('etag')).toMatch(/^W\/"[0-9a-f]{16}"$/);
    expect(res.json).toMatchObject({
      Id: 'vm-0',
      PowerState: 'Off',
      '@odata.etag': res.headers.get('etag'),
      Boot: {
        BootSourceOverrideTarget: 'Hdd',
        BootSourceOverrideEnabled: 'Continuous',
        'BootSourceOverrideTarget@Redfish.AllowableValues': ['None', 'Pxe', 'Hdd'],
        'BootSourceOverrideMode@Redfish.AllowableValues': ['UEFI', 'Legacy'],
      },
      Actions: {
        '#ComputerSystem.Reset': {
          target: '/redfish/v1/Systems/vm-0/Actions/ComputerSystem.Reset',
          'ResetType@Redfish.AllowableValues': Object.keys(RESET_EFFECTS),
        },
      },
      Links: { ManagedBy: [{ '@odata.id': '/redfish/v1/Managers/BMC' }] },
    });
    const manager = await call(`${url}/redfish/v1/Managers/BMC`, { headers: basic('admin', 'lab-pass') });
    expect(manager.json).toMatchObject({
      ManagerType: 'BMC',
      Links: { ManagerForServers: [{ '@odata.id': '/redfish/v1/Systems/vm-0' }] },
    });
    expect((await call(`${url}/redfish/v1/Managers`, { headers: basic('admin', 'lab-pass') })).json).toMatchObject({
      'Members@odata.count': 1,
    });
  });

  it('enforces If-Match on PATCH: 412 for a stale ETag, 428 without one when required', async () => {
    const { url, bmc, machine } = await start();
    const auth = basic('admin', 'lab-pass');
    const sys = `${url}/redfish/v1/Systems/1`;
    const etag = (await call(sys, { headers: auth })).headers.get('etag') ?? '';
    const patch = (body: unknown, headers: Record<string, string> = {}) =>
      call(sys, {
        method: 'PATCH',
        headers: { ...auth, 'Content-Type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const ok = await patch(
      { Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once' } },
      { 'If-Match': etag },
    );
    expect(ok.status).toBe(200);
    expect(ok.headers.get('etag')).not.toBe(etag);
    expect(await machine.getBootDevice()).toEqual({ device: 'pxe', persistent: false, uefi: false });
    const stale = await patch({ Boot: { BootSourceOverrideTarget: 'Hdd' } }, { 'If-Match': etag });
    expect(stale.status).toBe(412);
    expect((await patch({ Boot: { BootSourceOverrideMode: 'UEFI' } }, { 'If-Match': '*' })).status).toBe(200);
    expect((await patch({ Boot: { BootSourceOverrideMode: 'UEFI' } })).status).toBe(200);
    bmc.ifMatch = 'required';
    expect((await patch({ Boot: { BootSourceOverrideMode: 'UEFI' } })).status).toBe(428);
    bmc.ifMatch = 'off';
    const plain = await call(sys, { headers: auth });
    expect(plain.headers.get('etag')).toBeNull();
    expect(plain.json).not.toHaveProperty('@odata\\.etag');
  });

  it('rejects bad PATCH bodies with Redfish messages and leaves the machine alone', async () => {
    const { url, machine } = await start();
    const before = await machine.getBootDevice();
    const patch = (body: string) =>
      call(`${url}/redfish/v1/Systems/1`, {
        method: 'PATCH',
        headers: { ...basic('admin', 'lab-pass'), 'Content-Type': 'application/json' },
        body,
      });
    for (const [body, messageId] of [
      ['{"Boot":{"BootSourceOverrideTarget":"Floppy"}}', 'PropertyValueNotInList'],
      ['{"Boot":{"BootSourceOverrideEnabled":"Always"}}', 'PropertyValueNotInList'],
      ['{"Boot":{"BootSourceOverrideMode":"EFI"}}', 'PropertyValueNotInList'],
      ['{"Boot":{"BootOrder":["Pxe"]}}', 'PropertyNotWritable'],
      ['{"Boot":{"BootSourceOverrideTarget":7}}', 'PropertyValueTypeError'],
      ['{"AssetTag":"x"}', 'PropertyNotWritable'],
      ['{not json', 'MalformedJSON'],
    ] as const) {
      const res = await patch(body);
      expect(res.status, body).toBe(400);
      expect(JSON.stringify(res.json)).toContain(`Base.1.8.${messageId}`);
    }
    expect(await machine.getBootDevice()).toEqual(before);
  });

  it('performs only allowed ResetTypes and can list them through an ActionInfo', async () => {
    const { url, machine } = await start({ resetTypes: ['On', 'ForceOff'], resetInfo: 'action-info' });
    const auth = { ...basic('admin', 'lab-pass'), 'Content-Type': 'application/json' };
    const reset = (body: unknown) =>
      call(`${url}/redfish/v1/Systems/1/Actions/ComputerSystem.Reset`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify(body),
      });
    expect((await reset({ ResetType: 'PowerCycle' })).status).toBe(400);
    expect((await reset({})).status).toBe(400);
    expect((await reset({ ResetType: 'On' })).status).toBe(200);
    expect(await machine.powerState()).toBe('on');
    const sys = await call(`${url}/redfish/v1/Systems/1`, { headers: auth });
    expect(sys.json).toMatchObject({
      Actions: { '#ComputerSystem.Reset': { '@Redfish.ActionInfo': '/redfish/v1/Systems/1/ResetActionInfo' } },
    });
    const info = await call(`${url}/redfish/v1/Systems/1/ResetActionInfo`, { headers: auth });
    expect(info.json).toMatchObject({ Parameters: [{ Name: 'ResetType', AllowableValues: ['On', 'ForceOff'] }] });
  });

  it('answers 404 and 405 like a Redfish service', async () => {
    const { url } = await start();
    const auth = basic('admin', 'lab-pass');
    expect((await call(`${url}/redfish/v1/Chassis/9`, { headers: auth })).status).toBe(404);
    const wrong = await call(`${url}/redfish/v1/Systems/1`, { method: 'DELETE', headers: auth });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('GET, PATCH');
  });

  it('injects faults: a Reset acknowledged without effect, and 503 with Retry-After once', async () => {
    const { url, bmc, machine } = await start();
    const auth = { ...basic('admin', 'lab-pass'), 'Content-Type': 'application/json' };
    bmc.faults.resetWithoutEffect = true;
    const res = await call(`${url}/redfish/v1/Systems/1/Actions/ComputerSystem.Reset`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ ResetType: 'On' }),
    });
    expect(res.status).toBe(200);
    expect(await machine.powerState()).toBe('off');
    bmc.faults.busy = 1;
    bmc.faults.retryAfterSeconds = 7;
    const busy = await call(`${url}/redfish/v1/Systems/1`, { headers: auth });
    expect(busy.status).toBe(503);
    expect(busy.headers.get('retry-after')).toBe('7');
    expect((await call(`${url}/redfish/v1/Systems/1`, { headers: auth })).status).toBe(200);
  });

  it('refuses to offer a ResetType it cannot perform', () => {
    expect(
      () =>
        new VirtualRedfishBmc({
          machine: new InMemoryMachine({ name: 'x' }),
          username: 'a',
          password: new Secret('b'),
          resetTypes: ['Nmi'],
        }),
    ).toThrow(RangeError);
  });
});

describe('virtual BMC mapping tables', () => {
  it.each(Object.entries(RESET_EFFECTS))(
    'ResetType %s leaves the machine in the expected state',
    async (resetType, effect) => {
      const expected: Record<string, { from: 'on' | 'off'; to: 'on' | 'off'; boots: number }[]> = {
        On: [
          { from: 'off', to: 'on', boots: 1 },
          { from: 'on', to: 'on', boots: 0 },
        ],
        ForceOn: [{ from: 'off', to: 'on', boots: 1 }],
        ForceOff: [{ from: 'on', to: 'off', boots: 0 }],
        GracefulShutdown: [{ from: 'on', to: 'off', boots: 0 }],
        GracefulRestart: [
          { from: 'on', to: 'on', boots: 1 },
          { from: 'off', to: 'off', boots: 0 },
        ],
        ForceRestart: [
          { from: 'on', to: 'on', boots: 1 },
          { from: 'off', to: 'off', boots: 0 },
        ],
        PowerCycle: [
          { from: 'on', to: 'on', boots: 1 },
          { from: 'off', to: 'on', boots: 1 },
        ],
        PushPowerButton: [
          { from: 'on', to: 'off', boots: 0 },
          { from: 'off', to: 'on', boots: 1 },
        ],
      };
      const cases = expected[resetType];
      expect(cases, `no expectation written for ${resetType}`).toBeDefined();
      for (const c of cases ?? []) {
        const m = new InMemoryMachine({ name: 'm', power: c.from });
        await effect(m);
        expect(await m.powerState()).toBe(c.to);
        expect(m.boots).toBe(c.boots);
      }
    },
  );

  it.each(Object.entries(MACHINE_POWER_STATE))('shows machine power %s as %s', (ours, redfish) => {
    expect(redfish.toLowerCase()).toBe(ours);
  });

  it.each(Object.entries(REDFISH_TARGET_DEVICE))('round-trips boot target %s', (target, device) => {
    expect(MACHINE_BOOT_TARGET[device]).toBe(target);
  });

  it.each(Object.entries(REDFISH_MODE_UEFI))('knows boot mode %s', (mode, uefi) => {
    expect(mode === 'UEFI').toBe(uefi);
  });
});
