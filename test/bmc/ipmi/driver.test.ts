import { afterEach, describe, expect, it } from 'vitest';
import { AuthError, RemoteError, TimeoutError } from '../../../src/core/errors.js';
import { IpmiDriver } from '../../../src/bmc/ipmi/driver.js';
import { Command, NetFn } from '../../../src/bmc/ipmi/message.js';
import { Privilege } from '../../../src/bmc/ipmi/privilege.js';
import { IpmiTransport, droppedTotal } from '../../../src/bmc/ipmi/transport.js';
import { IpmiBmcServer } from '../../../src/lab/vbmc/ipmi/server.js';
import { blackHole, noisyProxy, startLabBmc, type LabBmc } from './lab.js';

const fast = { timeoutMs: 200, retries: 2 };
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()?.();
});

async function lab(
  name: string,
  ...args: Parameters<typeof startLabBmc> extends [string, ...infer R] ? R : never
): Promise<LabBmc> {
  const bmc = await startLabBmc(name, ...args);
  cleanups.push(() => bmc.server.close());
  return bmc;
}

/** Wait up to 500 ms for `done` (the BMC handles datagrams in a later turn of the event loop). */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 50 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
}

function driverFor(bmc: LabBmc, options: ConstructorParameters<typeof IpmiDriver>[1] = {}): IpmiDriver {
  const d = new IpmiDriver(bmc.target, { ...fast, ...options });
  cleanups.push(() => d.close());
  return d;
}

describe('IpmiDriver against the virtual BMC', () => {
  it('negotiates suite 17 and drives power on, off, cycle and soft off on the machine', async () => {
    const bmc = await lab('n1');
    const d = driverFor(bmc);
    expect(await d.powerState()).toBe('off');
    await d.powerOn();
    expect(await bmc.machine.powerState()).toBe('on');
    expect(await d.powerState()).toBe('on');
    const boots = bmc.machine.boots;
    await d.powerCycle();
    expect(bmc.machine.boots).toBe(boots + 1);
    await d.softOff();
    expect(await d.powerState()).toBe('off');
    await d.powerOn();
    await d.powerOff();
    expect(await bmc.machine.powerState()).toBe('off');
    expect((await d.identify()).cipherSuite).toBe(17);
  });

  it('power cycle of a machine that is off powers it on (the BMC answers D5h)', async () => {
    const bmc = await lab('n1');
    const d = driverFor(bmc);
    await d.powerCycle();
    expect(await bmc.machine.powerState()).toBe('on');
  });

  it('sets and reads the boot device: PXE once in legacy mode, disk persistent in UEFI mode', async () => {
    const bmc = await lab('n1');
    const d = driverFor(bmc);
    await d.setBootDevice('pxe');
    expect(await d.getBootDevice()).toEqual({ device: 'pxe', persistent: false, uefi: false });
    await d.powerOn();
    expect(bmc.machine.lastBootDevice).toBe('pxe');
    // a one-time setting is consumed by the boot, as firmware does
    expect((await d.getBootDevice()).device).toBe('disk');
    await d.setBootDevice('disk', { persistent: true, uefi: true });
    expect(await bmc.machine.getBootDevice()).toEqual({ device: 'disk', persistent: true, uefi: true });
    expect(await d.getBootDevice()).toEqual({ device: 'disk', persistent: true, uefi: true });
  });

  it('identifies the BMC from Get Device ID', async () => {
    const bmc = await lab('n1', {
      device: { manufacturerId: 674, productId: 0x0100, firmwareMajor: 2, firmwareMinor: 41 },
    });
    const id = await driverFor(bmc).identify();
    expect(id).toMatchObject({
      manufacturer: 'Dell',
      manufacturerId: 674,
      productId: 0x100,
      firmwareVersion: '2.41',
      ipmiVersion: '2.0',
    });
  });

  it('keeps one session for consecutive calls and closes it on close()', async () => {
    const bmc = await lab('n1');
    const d = new IpmiDriver(bmc.target, fast);
    await d.powerState();
    await d.powerOn();
    await d.getBootDevice();
    expect(bmc.server.sessionCount).toBe(1);
    await d.close();
    expect(bmc.server.sessionCount).toBe(0);
    await d.close(); // twice is fine
  });

  it('falls back to suite 3 when the BMC only offers 3', async () => {
    const bmc = await lab('n1', { suites: [3] });
    expect((await driverFor(bmc).identify()).cipherSuite).toBe(3);
  });

  it('refuses a BMC that offers none of the suites it accepts', async () => {
    const bmc = await lab('n1', { suites: [17] });
    const err = await driverFor(bmc, { suites: [3] })
      .powerState()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RemoteError);
    expect(err).toMatchObject({ code: 'E_IPMI_NO_CIPHER_SUITE' });
  });

  it('a wrong password is an AuthError after one attempt, and later calls do not touch the BMC again', async () => {
    const bmc = await lab('n1', {}, 'wrong-password');
    const d = driverFor(bmc, { timeoutMs: 500 });
    const err = await d.powerState().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthError);
    const auth = err as AuthError;
    expect(auth.message).toMatch(/^authentication failed for node n1 at ipmi:\/\/127\.0\.0\.1:\d+/);
    expect(auth.hint).toMatch(/did not retry/);
    // auth caps + cipher suites + open session + RAKP 1 + RAKP 3 (error notice): one attempt only
    await until(() => bmc.server.counters.received >= 5); // the BMC reads it in a later turn of the event loop
    expect(bmc.server.counters.received).toBe(5);
    await expect(d.powerOn()).rejects.toBe(auth);
    expect(bmc.server.counters.received).toBe(5);
    expect(await bmc.machine.powerState()).toBe('off');
    for (const text of [auth.message, auth.hint ?? '', JSON.stringify(auth), String(auth.stack)]) {
      expect(text).not.toContain('wrong-password');
    }
  });

  it('the RAKP 3 error notice reaches the BMC even when the driver is closed right after the failure', async () => {
    const bmc = await lab('n1', {}, 'wrong-password');
    const d = new IpmiDriver(bmc.target, { timeoutMs: 500 }); // owns its transport: close() closes the socket
    const err = await d.powerState().catch((e: unknown) => e);
    await d.close();
    expect(err).toBeInstanceOf(AuthError);
    // The BMC heard the notice: five datagrams, and it let go of the half-open session at once.
    await until(() => bmc.server.sessionCount === 0);
    expect(bmc.server.counters.received).toBe(5);
    expect(bmc.server.sessionCount).toBe(0);
    expect(d.counters.sent).toBe(5);
  });

  it('an unknown user is refused by the BMC (RAKP 2 unauthorized name) as an AuthError', async () => {
    const bmc = await lab('n1');
    const d = driverFor(bmc);
    const err = await new IpmiDriver({ ...bmc.target, username: 'nobody' }, fast).powerState().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthError);
    expect((err as AuthError).message).toMatch(/unauthorized name/);
    expect(await d.powerState()).toBe('off'); // the right user still gets in
  });

  it('an unreachable BMC gives a TimeoutError naming the node within the bounded retry window', async () => {
    const hole = await blackHole();
    cleanups.push(() => hole.close());
    const d = new IpmiDriver(
      {
        node: 'dead-0',
        address: `ipmi://127.0.0.1:${hole.port}`,
        username: 'admin',
        password: (await lab('x')).target.password,
      },
      { timeoutMs: 60, retries: 2 },
    );
    cleanups.push(() => d.close());
    const started = Date.now();
    const err = await d.powerState().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as TimeoutError).message).toMatch(/dead-0/);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(d.counters.retransmits).toBe(2);
  });

  it('retries a busy BMC (C0h) with backoff, and gives up with E_IPMI_NODE_BUSY after the budget', async () => {
    const bmc = await lab('n1', { faults: { busyAnswers: 2 } });
    expect(await driverFor(bmc, { busyBackoffMs: 1 }).powerState()).toBe('off');
    const stubborn = await lab('n2', { faults: { busyAnswers: 100 } });
    const err = await driverFor(stubborn, { busyBackoffMs: 1, busyRetries: 2 })
      .powerOn()
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'E_IPMI_NODE_BUSY' });
    expect(await stubborn.machine.powerState()).toBe('off');
  });

  it('survives lost datagrams by retransmitting', async () => {
    const bmc = await lab('n1', { faults: { dropDatagrams: 3 } });
    const d = driverFor(bmc, { timeoutMs: 50, retries: 4 });
    await d.powerOn();
    expect(await bmc.machine.powerState()).toBe('on');
    expect(d.counters.retransmits).toBeGreaterThanOrEqual(3);
  });

  it('a user limited to Operator is refused when asking for Administrator, and works when asking for Operator', async () => {
    const bmc = await lab('n1', { privilege: Privilege.OPERATOR });
    const err = await driverFor(bmc)
      .powerState()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthError);
    expect((err as AuthError).message).toMatch(/unauthorized role.*administrator/);
    const d = driverFor(bmc, { privilege: Privilege.OPERATOR });
    await d.powerOn();
    expect(await bmc.machine.powerState()).toBe('on');
  });

  it('a user limited to User privilege can read status but chassis control is refused with D4h', async () => {
    const bmc = await lab('n1', { privilege: Privilege.USER });
    const d = driverFor(bmc, { privilege: Privilege.USER });
    expect(await d.powerState()).toBe('off');
    await expect(d.powerOn()).rejects.toMatchObject({ code: 'E_IPMI_INSUFFICIENT_PRIVILEGE' });
    expect(await bmc.machine.powerState()).toBe('off');
  });

  it('drops and counts garbage, truncated, bad-HMAC, foreign-session and replayed answers, and still works', async () => {
    const bmc = await lab('n1');
    const proxy = await noisyProxy(bmc.port);
    cleanups.push(() => proxy.close());
    const d = driverFor(
      { ...bmc, target: { ...bmc.target, address: `ipmi://127.0.0.1:${proxy.port}` } },
      { timeoutMs: 1000 },
    );
    await d.powerOn();
    expect(await d.powerState()).toBe('on');
    await d.setBootDevice('pxe');
    await new Promise((r) => setTimeout(r, 20)); // let the trailing replays arrive
    const c = d.counters;
    expect(c.dropped.malformed).toBeGreaterThan(0);
    expect(c.dropped.badIntegrity).toBeGreaterThan(0);
    expect(c.dropped.unknownSession).toBeGreaterThan(0);
    expect(c.dropped.replay + c.dropped.unsolicited + c.dropped.unexpected).toBeGreaterThan(0);
    expect(droppedTotal(c)).toBeGreaterThan(20);
    expect(c.retransmits).toBe(0);
  });

  it('a power cycle whose answer is lost is retransmitted, and the machine cycles exactly once', async () => {
    const lose = { netFn: NetFn.CHASSIS, cmd: Command.CHASSIS_CONTROL, count: 1 };
    const bmc = await lab('n1', { faults: { loseReplies: lose } });
    await bmc.machine.powerOn();
    const d = driverFor(bmc, { timeoutMs: 100, retries: 3 });
    await d.powerCycle();
    expect(lose.count).toBe(0); // the first answer was lost...
    expect(d.counters.retransmits).toBe(1); // ...so the request went out again
    // The retransmission kept its rqSeq, the BMC knew it for a duplicate and answered from the first execution.
    expect(bmc.machine.transitions).toEqual(['on', 'off', 'on']);
  });

  it('a power cycle in a reused session that never answers is not sent again in a new session', async () => {
    const lose = { netFn: NetFn.CHASSIS, cmd: Command.CHASSIS_CONTROL, count: 1000 };
    const bmc = await lab('n1', { faults: { loseReplies: lose } });
    await bmc.machine.powerOn();
    const d = driverFor(bmc, { timeoutMs: 60, retries: 2 });
    expect(await d.powerState()).toBe('on'); // the session the cycle reuses
    const err = await d.powerCycle().catch((e: unknown) => e);
    expect(bmc.machine.transitions).toEqual(['on', 'off', 'on']);
    expect(err).toBeInstanceOf(TimeoutError);
    expect(err).toMatchObject({ code: 'E_IPMI_TIMEOUT', details: { node: 'n1' } });
    expect((err as TimeoutError).message).toMatch(/Chassis Control \(power cycle\)/);
    expect((err as TimeoutError).hint).toMatch(/did not send the command again/);
    expect(bmc.server.sessionCount).toBe(1); // no second session was opened
  });

  it('a power cycle after the BMC forgot the reused session gets a fresh session and cycles once', async () => {
    const bmc = await lab('n1');
    await bmc.machine.powerOn();
    const d = driverFor(bmc, { timeoutMs: 80, retries: 1 });
    expect(await d.powerState()).toBe('on');
    await bmc.server.close();
    const again = new IpmiBmcServer({ backend: bmc.machine, username: 'admin', password: bmc.target.password });
    await again.listen({ host: '127.0.0.1', port: bmc.port });
    cleanups.push(() => again.close());
    await d.powerCycle();
    expect(bmc.machine.transitions).toEqual(['on', 'off', 'on']);
    expect(again.counters.dropped.unknownSession).toBeGreaterThan(0); // the check in the old session went unanswered
  });

  it('re-establishes a session once when the BMC forgot it (BMC restarted)', async () => {
    const bmc = await lab('n1');
    const d = driverFor(bmc, { timeoutMs: 80, retries: 1 });
    expect(await d.powerState()).toBe('off');
    await bmc.server.close();
    const again = new IpmiBmcServer({ backend: bmc.machine, username: 'admin', password: bmc.target.password });
    await again.listen({ host: '127.0.0.1', port: bmc.port });
    cleanups.push(() => again.close());
    await bmc.machine.powerOn();
    expect(await d.powerState()).toBe('on');
    expect(again.counters.dropped.unknownSession).toBeGreaterThan(0);
  });
});

describe('one transport for many BMCs', () => {
  it('drives 40 BMCs concurrently over a single UDP socket', async () => {
    const transport = new IpmiTransport();
    cleanups.push(() => transport.close());
    const bmcs = await Promise.all(Array.from({ length: 40 }, (_, i) => lab(`node-${i}`)));
    const drivers = bmcs.map((b) => driverFor(b, { transport }));
    await Promise.all(drivers.map((d) => d.powerOn()));
    const states = await Promise.all(drivers.map((d) => d.powerState()));
    expect(states.every((s) => s === 'on')).toBe(true);
    for (const b of bmcs) expect(await b.machine.powerState()).toBe('on');
    expect(transport.counters.timeouts).toBe(0);
    // every BMC saw the same client port: one socket
    const port = await transport.localPort();
    expect(port).toBeGreaterThan(0);
    await Promise.all(drivers.map((d) => d.close()));
    expect(bmcs.every((b) => b.server.sessionCount === 0)).toBe(true);
  });

  it('paces commands to one BMC (one in flight, minimum interval) without slowing the others', async () => {
    const transport = new IpmiTransport({ minIntervalMs: 40 });
    cleanups.push(() => transport.close());
    const [a, b] = await Promise.all([lab('a'), lab('b')]);
    if (!a || !b) throw new Error('lab');
    const da = driverFor(a, { transport });
    const db = driverFor(b, { transport });
    await Promise.all([da.powerState(), db.powerState()]); // sessions up
    const started = Date.now();
    await Promise.all([da.powerState(), da.powerState(), da.powerState(), db.powerState()]);
    const elapsed = Date.now() - started;
    // three exchanges with a: at least two 40 ms gaps
    expect(elapsed).toBeGreaterThanOrEqual(75);
  });
});
