import net from 'node:net';
import { inspect } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { AuthError, RemoteError, StackctlError, TimeoutError } from '../../../src/core/errors.js';
import { HostLimiters } from '../../../src/bmc/redfish/limiter.js';
import { InMemoryMachine } from '../../../src/lab/vbmc/machine.js';
import { driverFor, fakeClock, PASSWORD, startBmc, type RunningBmc } from './harness.js';
import type { RedfishDriver } from '../../../src/bmc/redfish/driver.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()?.();
});

async function bmc(options: Parameters<typeof startBmc>[0] = {}): Promise<RunningBmc> {
  const running = await startBmc(options);
  cleanups.push(() => running.bmc.close());
  return running;
}

function track<T extends { driver: RedfishDriver }>(made: T): T {
  cleanups.push(() => made.driver.close());
  return made;
}

async function rejection(promise: Promise<unknown>): Promise<StackctlError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StackctlError);
  return err as StackctlError;
}

describe('RedfishDriver against the virtual Redfish BMC over http', () => {
  it('reads the power state and drives on, off, soft off and cycle through ComputerSystem.Reset', async () => {
    const { bmc: server, machine, address } = await bmc();
    const { driver } = track(driverFor(address));
    expect(await driver.powerState()).toBe('off');
    await driver.powerOn();
    expect(await machine.powerState()).toBe('on');
    expect(await driver.powerState()).toBe('on');
    const bootsBefore = machine.boots;
    await driver.powerCycle();
    expect(machine.boots).toBe(bootsBefore + 1);
    await driver.softOff();
    expect(await machine.powerState()).toBe('off');
    await driver.powerOn();
    await driver.powerOff();
    expect(await driver.powerState()).toBe('off');
    expect(server.stats.resets).toEqual(['On', 'PowerCycle', 'GracefulShutdown', 'On', 'ForceOff']);
  });

  it('sends nothing when the machine is already in the requested state (re-entrant)', async () => {
    const { bmc: server, address } = await bmc({ machine: new InMemoryMachine({ name: 'n', power: 'on' }) });
    const { driver } = track(driverFor(address));
    await driver.powerOn();
    await driver.powerOn();
    expect(server.stats.resets).toEqual([]);
    await driver.powerOff();
    await driver.softOff();
    expect(server.stats.resets).toEqual(['ForceOff']);
  });

  it('cycles a machine that is off by powering it on', async () => {
    const { bmc: server, machine, address } = await bmc();
    const { driver } = track(driverFor(address));
    await driver.powerCycle();
    expect(await machine.powerState()).toBe('on');
    expect(server.stats.resets).toEqual(['On']);
  });

  it('falls back to ForceRestart where PowerCycle is not allowed, also when values come from an ActionInfo', async () => {
    for (const resetInfo of ['inline', 'action-info'] as const) {
      const {
        bmc: server,
        machine,
        address,
      } = await bmc({
        machine: new InMemoryMachine({ name: 'n', power: 'on' }),
        resetTypes: ['On', 'ForceOff', 'GracefulShutdown', 'ForceRestart'],
        resetInfo,
      });
      const { driver } = track(driverFor(address));
      await driver.powerCycle();
      expect(server.stats.resets).toEqual(['ForceRestart']);
      expect(machine.boots).toBe(1);
    }
  });

  it('fails with the allowed values when no ResetType fits the action', async () => {
    const { address } = await bmc({ resetTypes: ['ForceOff'] });
    const { driver } = track(driverFor(address, { node: 'cmp-3' }));
    const err = await rejection(driver.powerOn());
    expect(err.code).toBe('E_REDFISH_RESET_UNSUPPORTED');
    expect(err.message).toContain('cmp-3');
    expect(err.message).toContain('ForceOff');
  });

  it.each([
    { scenario: 'pxe once in UEFI mode', device: 'pxe', persistent: false, uefi: true },
    { scenario: 'pxe persistent in legacy mode', device: 'pxe', persistent: true, uefi: false },
    { scenario: 'disk once in legacy mode', device: 'disk', persistent: false, uefi: false },
    { scenario: 'disk persistent in UEFI mode', device: 'disk', persistent: true, uefi: true },
  ] as const)('sets the boot device ($scenario) and reads it back', async ({ device, persistent, uefi }) => {
    const { machine, address } = await bmc();
    const { driver } = track(driverFor(address));
    await driver.setBootDevice(device, { persistent, uefi });
    expect(await driver.getBootDevice()).toEqual({ device, persistent, uefi });
    expect(await machine.getBootDevice()).toEqual({ device, persistent, uefi });
  });

  it('shows a one-time override used up after the next boot', async () => {
    const { machine, address } = await bmc();
    const { driver } = track(driverFor(address));
    await driver.setBootDevice('pxe', { uefi: true });
    await driver.powerOn();
    expect(machine.lastBootDevice).toBe('pxe');
    expect(await driver.getBootDevice()).toEqual({ device: 'disk', persistent: true, uefi: false });
  });

  it('identifies the system: manufacturer, model, serial, UUID, BIOS and BMC firmware versions', async () => {
    const identity = {
      manufacturer: 'Acme',
      model: 'R-42',
      serialNumber: 'SN123',
      uuid: '2c3fa1b2-1111-4222-8333-444455556666',
      biosVersion: '2.7.1',
      firmwareVersion: '5.10',
    };
    const { address } = await bmc({ identity, systemId: 'node-7' });
    const { driver } = track(driverFor(address));
    expect(await driver.identify()).toEqual({ ...identity, systemId: 'node-7' });
  });

  it('logs in once, reuses the session for every request and deletes it on close', async () => {
    const { bmc: server, address } = await bmc();
    const { driver } = driverFor(address);
    await Promise.all([driver.powerState(), driver.powerState(), driver.getBootDevice()]);
    await driver.powerOn();
    await driver.identify();
    expect(server.stats.sessionsCreated).toBe(1);
    expect(server.activeSessions).toBe(1);
    await driver.close();
    await driver.close();
    expect(server.stats.sessionsDeleted).toBe(1);
    expect(server.activeSessions).toBe(0);
  });

  it('logs in again once when the BMC drops the session, and carries on', async () => {
    const { bmc: server, address } = await bmc();
    const { driver } = track(driverFor(address));
    await driver.powerState();
    server.expireSessions();
    expect(await driver.powerState()).toBe('off');
    expect(server.stats.tokenRejections).toBe(1);
    expect(server.stats.sessionsCreated).toBe(2);
  });

  it('fails with AuthError after one login attempt when the password is wrong', async () => {
    const { bmc: server, address } = await bmc();
    const { driver, transcript } = track(driverFor(address, { node: 'ctl-1', password: 'wrong-password' }));
    const err = await rejection(driver.powerState());
    expect(err).toBeInstanceOf(AuthError);
    expect(err.message).toBe(`authentication failed for node ctl-1 at ${address}`);
    expect(server.stats.authFailures).toBe(1);
    expect(server.stats.sessionsCreated).toBe(0);
    const everything = [err.message, err.hint, JSON.stringify(err), ...transcript.traces, ...transcript.warnings].join(
      '\n',
    );
    expect(everything).not.toContain('wrong-password');
  });

  it('re-reads and retries once on 412, and gives up on a second one', async () => {
    const { bmc: server, address } = await bmc({ ifMatch: 'required' });
    const { driver } = track(driverFor(address));
    server.faults.preconditionFailures = 1;
    await driver.setBootDevice('pxe', { persistent: true });
    expect(await driver.getBootDevice()).toMatchObject({ device: 'pxe', persistent: true });
    expect(server.stats.preconditionFailed).toBe(1);
    expect(server.stats.ifMatchSeen).toBe(2);

    server.faults.preconditionFailures = 2;
    const err = await rejection(driver.setBootDevice('disk'));
    expect(err).toBeInstanceOf(RemoteError);
    expect(err.code).toBe('E_REDFISH_PRECONDITION');
  });

  it("sends If-Match with the resource's ETag on PATCH", async () => {
    const { bmc: server, address } = await bmc();
    const { driver } = track(driverFor(address));
    await driver.setBootDevice('pxe');
    expect(server.stats.ifMatchSeen).toBe(1);
    expect(server.stats.preconditionFailed).toBe(0);
  });

  it('does without If-Match when the service offers no ETag', async () => {
    const { bmc: server, address } = await bmc({ ifMatch: 'off' });
    const { driver } = track(driverFor(address));
    await driver.setBootDevice('disk', { persistent: true, uefi: true });
    expect(await driver.getBootDevice()).toEqual({ device: 'disk', persistent: true, uefi: true });
    expect(server.stats.ifMatchSeen).toBe(0);
  });

  it('honours Retry-After on 503, bounded, and gives up when the BMC stays busy', async () => {
    const { bmc: server, address } = await bmc();
    const clock = fakeClock();
    const { driver } = track(driverFor(address, { now: clock.now, sleep: clock.sleep, maxRetryAfterMs: 5_000 }));
    await driver.powerState();
    server.faults.retryAfterSeconds = 2;
    server.faults.busy = 1;
    expect(await driver.powerState()).toBe('off');
    expect(clock.slept).toEqual([2_000]);

    server.faults.retryAfterSeconds = 3600;
    server.faults.busy = 1;
    await driver.powerState();
    expect(clock.slept.at(-1)).toBe(5_000);

    server.faults.retryAfterSeconds = 1;
    server.faults.busy = 100;
    const err = await rejection(driver.powerState());
    expect(err.code).toBe('E_REDFISH_BUSY');
    expect(err.message).toContain('ctl-0');
  });

  it('keeps at most 4 requests in flight per BMC, across drivers', async () => {
    const { bmc: server, address } = await bmc({ responseDelayMs: 25 });
    const limiters = new HostLimiters();
    const drivers = [0, 1, 2].map(() => track(driverFor(address, { limiters })).driver);
    await Promise.all(drivers.flatMap((d) => [0, 1, 2, 3, 4].map(() => d.powerState())));
    expect(server.stats.requests).toBe(3 + 15);
    expect(server.stats.maxInFlight).toBe(4);
  });

  it('fails naming the node when a Reset answers 200 but the power state never changes', async () => {
    const { bmc: server, machine, address } = await bmc();
    server.faults.resetWithoutEffect = true;
    const clock = fakeClock();
    const { driver } = track(
      driverFor(address, {
        node: 'cmp-9',
        now: clock.now,
        sleep: clock.sleep,
        powerDeadlineMs: 10_000,
        pollIntervalMs: 1_000,
      }),
    );
    const err = await rejection(driver.powerOn());
    expect(err).toBeInstanceOf(RemoteError);
    expect(err.code).toBe('E_REDFISH_POWER_UNCHANGED');
    expect(err.message).toContain('cmp-9');
    expect(err.message).toContain('On');
    expect(await machine.powerState()).toBe('off');
    expect(server.stats.resets).toEqual(['On']);
    expect(clock.slept.reduce((a, b) => a + b, 0)).toBe(10_000);
  });

  it('times out on a BMC that accepts connections but never answers, naming the node', async () => {
    const sockets: net.Socket[] = [];
    const hole = net.createServer((s) => sockets.push(s));
    await new Promise<void>((resolve) => hole.listen(0, '127.0.0.1', resolve));
    cleanups.push(async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => hole.close(() => resolve()));
    });
    const port = (hole.address() as net.AddressInfo).port;
    const { driver } = track(
      driverFor(`redfish+http://127.0.0.1:${port}/redfish/v1/Systems/1`, { node: 'ctl-2', timeoutMs: 200 }),
    );
    const err = await rejection(driver.powerState());
    expect(err).toBeInstanceOf(TimeoutError);
    expect(err.code).toBe('E_REDFISH_TIMEOUT');
    expect(err.message).toContain('ctl-2');
  });

  it('reports a closed port as refused, naming the node', async () => {
    const probe = net.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const { driver } = track(driverFor(`redfish+http://127.0.0.1:${port}/redfish/v1/Systems/1`, { node: 'ctl-4' }));
    const err = await rejection(driver.powerState());
    expect(err.code).toBe('E_REDFISH_REFUSED');
    expect(err.message).toContain('ctl-4');
  });

  it('warns about plain HTTP once, and never lets the password into warnings, traces or errors', async () => {
    const { bmc: server, address } = await bmc();
    const clock = fakeClock();
    const { driver, transcript } = track(
      driverFor(address, { now: clock.now, sleep: clock.sleep, powerDeadlineMs: 5_000, pollIntervalMs: 1_000 }),
    );
    await driver.powerOn();
    await driver.setBootDevice('pxe');
    server.expireSessions();
    await driver.identify();
    server.faults.resetWithoutEffect = true;
    const err = await rejection(driver.powerOff());
    expect(transcript.warnings.filter((w) => w.includes('plain HTTP'))).toHaveLength(1);
    expect(transcript.traces.length).toBeGreaterThan(5);
    const everything = [
      ...transcript.warnings,
      ...transcript.traces,
      err.message,
      JSON.stringify(err),
      inspect(err, { depth: 8 }),
      JSON.stringify(driver),
      inspect(driver, { depth: 8 }),
    ].join('\n');
    expect(everything).not.toContain(PASSWORD);
  });
});
