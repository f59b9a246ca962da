/**
 * The virtual IPMI BMC against Debian's ipmitool (lanplus), an independent
 * client: power, boot device and boot parameter reads with suites 3 and 17,
 * and refused credentials. Plus what the server does with junk.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Secret } from '../../../src/core/secret.js';
import { IpmiDriver } from '../../../src/bmc/ipmi/driver.js';
import { encodeAsfPing, decodeAsf, AsfMessageType } from '../../../src/bmc/ipmi/rmcp.js';
import { InMemoryMachine } from '../../../src/lab/vbmc/machine.js';
import { IpmiBmcServer } from '../../../src/lab/vbmc/ipmi/server.js';
import { ipmitool, requireTool, startLabBmc, type LabBmc } from '../../bmc/ipmi/lab.js';

beforeAll(() => {
  requireTool('ipmitool');
});

const servers: IpmiBmcServer[] = [];
afterEach(async () => {
  while (servers.length) await servers.pop()?.close();
});

async function lab(name: string): Promise<LabBmc> {
  const bmc = await startLabBmc(name);
  servers.push(bmc.server);
  return bmc;
}

for (const suite of [3, 17]) {
  describe(`ipmitool -I lanplus -C ${suite} against the virtual BMC`, () => {
    it('chassis power status, on, cycle and off act on the machine', async () => {
      const bmc = await lab('vm-0');
      const status = await ipmitool(bmc.port, suite, ['chassis', 'power', 'status']);
      expect(status.stderr).toBe('');
      expect(status.stdout).toContain('Chassis Power is off');

      expect((await ipmitool(bmc.port, suite, ['chassis', 'power', 'on'])).code).toBe(0);
      expect(await bmc.machine.powerState()).toBe('on');
      expect((await ipmitool(bmc.port, suite, ['chassis', 'power', 'status'])).stdout).toContain('Chassis Power is on');

      const boots = bmc.machine.boots;
      expect((await ipmitool(bmc.port, suite, ['chassis', 'power', 'cycle'])).code).toBe(0);
      expect(bmc.machine.boots).toBe(boots + 1);

      expect((await ipmitool(bmc.port, suite, ['chassis', 'power', 'off'])).code).toBe(0);
      expect(await bmc.machine.powerState()).toBe('off');
      // ipmitool closes its session at exit: nothing is left behind
      expect(bmc.server.sessionCount).toBe(0);
    });

    it('chassis bootdev pxe sets a one-time PXE boot that bootparam get 5 reads back', async () => {
      const bmc = await lab('vm-0');
      const set = await ipmitool(bmc.port, suite, ['chassis', 'bootdev', 'pxe']);
      expect(set.stderr).toBe('');
      expect(set.stdout).toContain('Set Boot Device to pxe');
      expect(await bmc.machine.getBootDevice()).toEqual({ device: 'pxe', persistent: false, uefi: false });

      const get = await ipmitool(bmc.port, suite, ['chassis', 'bootparam', 'get', '5']);
      expect(get.code).toBe(0);
      expect(get.stdout).toContain('Boot parameter 5 is valid/unlocked');
      expect(get.stdout).toContain('Boot Flag Valid');
      expect(get.stdout).toContain('Options apply to only next boot');
      expect(get.stdout).toContain('Force PXE');

      // and our own client reads what ipmitool wrote
      const d = new IpmiDriver(bmc.target, { timeoutMs: 200, retries: 1 });
      expect(await d.getBootDevice()).toEqual({ device: 'pxe', persistent: false, uefi: false });
      await d.close();
    });

    it('refuses a wrong password and an unknown user, and the machine is untouched', async () => {
      const bmc = await lab('vm-0');
      const wrong = await ipmitool(bmc.port, suite, ['chassis', 'power', 'on'], 'not-the-password');
      expect(wrong.code).not.toBe(0);
      expect(wrong.stderr).toMatch(/Unable to establish IPMI v2 \/ RMCP\+ session/);
      const nobody = await ipmitool(bmc.port, suite, ['chassis', 'power', 'on'], 'password', 'mallory');
      expect(nobody.code).not.toBe(0);
      expect(await bmc.machine.powerState()).toBe('off');
    });
  });
}

describe('weak cipher suites', () => {
  for (const suite of [0, 1, 2]) {
    it(`refuses ipmitool -C ${suite} (no authentication, integrity or confidentiality)`, async () => {
      const bmc = await lab('vm-0');
      const out = await ipmitool(bmc.port, suite, ['chassis', 'power', 'on']);
      expect(out.code).not.toBe(0);
      expect(await bmc.machine.powerState()).toBe('off');
      expect(bmc.server.sessionCount).toBe(0);
    });
  }
});

describe('ipmitool without -C', () => {
  it('discovers the cipher suites and gets a session', async () => {
    const bmc = await lab('vm-0');
    const out = await ipmitool(bmc.port, undefined, ['channel', 'getciphers', 'ipmi']);
    expect(out.stdout).toMatch(/^17\s+N\/A\s+hmac_sha256\s+sha256_128\s+aes_cbc_128/m);
    expect(out.stdout).toMatch(/^3\s+N\/A\s+hmac_sha1\s+hmac_sha1_96\s+aes_cbc_128/m);
  });
});

describe('the virtual BMC with junk and many peers', () => {
  let server: IpmiBmcServer;
  beforeAll(() => {
    server = new IpmiBmcServer({
      backend: new InMemoryMachine({ name: 'x' }),
      username: 'admin',
      password: new Secret('pw'),
    });
  });
  afterAll(async () => {
    await server.close();
  });

  it('answers an ASF presence ping with a pong that announces IPMI', async () => {
    const pong = await server.handle(encodeAsfPing(0x42), '127.0.0.1:1');
    const m = pong ? decodeAsf(pong) : undefined;
    expect(m).toEqual({ type: AsfMessageType.PONG, tag: 0x42, ipmiSupported: true });
  });

  it('drops and counts garbage, truncated packets, v1.5 sessions and unknown sessions without answering', async () => {
    const junk = [
      Buffer.alloc(0),
      Buffer.from('hello'),
      Buffer.from([0x06, 0x00, 0xff, 0x07]),
      Buffer.from([0x06, 0x00, 0xff, 0x07, 0x02, 1, 0, 0, 0, 1, 0, 0, 0, 0]), // v1.5 MD5 session
      Buffer.from([0x06, 0x00, 0xff, 0x07, 0x06, 0xc0, 1, 2, 3, 4, 1, 0, 0, 0, 0x20, 0x00]), // unknown session, truncated
      Buffer.from([0x06, 0x00, 0xff, 0x07, 0x06, 0xc0, 1, 2, 3, 4, 1, 0, 0, 0, 0x00, 0x00, 0xff, 0xff, 0x07]), // unknown session
      Buffer.from([0x06, 0x00, 0xff, 0x07, 0x06, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0x00, 1, 2, 3, 4]), // short open session
    ];
    const before = Object.values(server.counters.dropped).reduce((a, b) => a + b, 0);
    for (const j of junk) expect(await server.handle(j, '127.0.0.1:1')).toBeUndefined();
    const after = Object.values(server.counters.dropped).reduce((a, b) => a + b, 0);
    expect(after - before).toBe(junk.length);
    expect(server.counters.dropped.unknownSession).toBeGreaterThanOrEqual(1);
    expect(server.counters.dropped.malformed).toBeGreaterThanOrEqual(3);
    expect(server.counters.dropped.unsupported).toBeGreaterThanOrEqual(1);
  });

  it('refuses sessions beyond its limit with "insufficient resources"', async () => {
    const machine = new InMemoryMachine({ name: 'small' });
    const small = new IpmiBmcServer({
      backend: machine,
      username: 'admin',
      password: new Secret('pw'),
      maxSessions: 2,
    });
    const { port } = await small.listen({ port: 0 });
    servers.push(small);
    const target = {
      node: 'small',
      address: `ipmi://127.0.0.1:${port}`,
      username: 'admin',
      password: new Secret('pw'),
    };
    const drivers = [0, 1, 2].map(() => new IpmiDriver(target, { timeoutMs: 200, retries: 1 }));
    await drivers[0]?.powerState();
    await drivers[1]?.powerState();
    await expect(drivers[2]?.powerState()).rejects.toMatchObject({ code: 'E_IPMI_OPEN_SESSION_REFUSED' });
    await Promise.all(drivers.map((d) => d.close()));
    expect(small.sessionCount).toBe(0);
  });

  it('serves many BMCs in one process, each with its own credentials', async () => {
    const bmcs = await Promise.all(
      Array.from({ length: 5 }, async (_, i) => {
        const machine = new InMemoryMachine({ name: `m${i}` });
        const s = new IpmiBmcServer({ backend: machine, username: `user${i}`, password: new Secret(`pass${i}`) });
        servers.push(s);
        return { machine, port: (await s.listen({ port: 0 })).port };
      }),
    );
    for (const [i, b] of bmcs.entries()) {
      expect((await ipmitool(b.port, 17, ['chassis', 'power', 'on'], `pass${i}`, `user${i}`)).code).toBe(0);
      expect(await b.machine.powerState()).toBe('on');
      // another BMC's credentials do not open this one
      const j = (i + 1) % bmcs.length;
      expect((await ipmitool(b.port, 17, ['chassis', 'power', 'off'], `pass${j}`, `user${j}`)).code).not.toBe(0);
      expect(await b.machine.powerState()).toBe('on');
    }
  });
});

describe('the virtual BMC with a reply delay', () => {
  it('holds every answer for faults.replyDelayMs, read at each answer, and still serves the session', async () => {
    const held: number[] = [];
    const faults = { replyDelayMs: 20 };
    const machine = new InMemoryMachine({ name: 'slow', power: 'on' });
    const server = new IpmiBmcServer({
      backend: machine,
      username: 'admin',
      password: new Secret('pw'),
      faults,
      // a real timer, recorded: the answer goes out only through it
      schedule: (send, ms) => {
        held.push(ms);
        setTimeout(send, ms);
      },
    });
    const { port } = await server.listen({ port: 0 });
    servers.push(server);
    const target = { node: 'slow', address: `ipmi://127.0.0.1:${port}`, username: 'admin', password: new Secret('pw') };
    const d = new IpmiDriver(target, { timeoutMs: 2000, retries: 1 });
    expect(await d.powerState()).toBe('on');
    // every datagram the BMC answered went through the delay (discovery, RAKP, the command)
    expect(held.length).toBe(server.counters.sent);
    expect(held.length).toBeGreaterThanOrEqual(4);
    expect(new Set(held)).toEqual(new Set([20]));

    faults.replyDelayMs = 0; // changed between runs: answers go out at once
    const before = held.length;
    expect(await d.powerState()).toBe('on');
    expect(held.length).toBe(before);
    await d.close();
  });
});
