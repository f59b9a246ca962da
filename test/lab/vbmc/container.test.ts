import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { imageSpecs } from '../../../src/images/catalog.js';
import type { LocalEngine } from '../../../src/remote/docker-local.js';
import { CONTAINER_POWER_ACTIONS, ContainerMachine } from '../../../src/lab/vbmc/container.js';
import { dockerOrFail, release, testImages } from '../../images/fixture.js';

const NAME = `stackctl-test-machine-${process.pid}`;

describe('ContainerMachine: a container behind a virtual BMC', () => {
  let engine: LocalEngine;
  let machine: ContainerMachine;
  beforeAll(async () => {
    engine = await dockerOrFail();
    await testImages(engine, ['base']);
    // A shell loop as PID 1 so that a soft power off (SIGTERM) ends it at once.
    await engine.createContainer({
      name: NAME,
      image: imageSpecs(release).get('base')!.ref,
      labels: { 'org.stackctl.test': 'vbmc' },
      cmd: ['sh', '-c', 'trap "exit 0" TERM; while :; do sleep 1 & wait $!; done'],
    });
    machine = new ContainerMachine({
      name: 'node-0',
      container: NAME,
      engine,
      bootFile: join(mkdtempSync(join(tmpdir(), 'stackctl-boot-')), 'boot.json'),
      stopTimeoutS: 5,
    });
  }, 900_000);
  afterAll(async () => {
    await engine?.removeContainer(NAME);
  });

  it('maps every power action to a Docker call', () => {
    expect(Object.keys(CONTAINER_POWER_ACTIONS).sort()).toEqual(['off', 'on', 'reset', 'soft']);
    for (const call of Object.values(CONTAINER_POWER_ACTIONS))
      expect(call).toMatch(/^docker (start|kill|stop|restart)$/);
  });

  it('powers on (start), off (kill), soft off (stop) and resets (restart) the container', async () => {
    expect(await machine.powerState()).toBe('off'); // created, never started
    await machine.powerOn();
    expect((await engine.container(NAME))?.running).toBe(true);
    expect(await machine.powerState()).toBe('on');
    await machine.powerOn(); // already on: nothing happens
    await machine.powerOff();
    expect(await machine.powerState()).toBe('off');
    expect((await engine.container(NAME))?.status).toBe('exited');
    await machine.reset(); // a reset of a machine that is off does nothing
    expect(await machine.powerState()).toBe('off');
    await machine.powerOn();
    const t0 = Date.now();
    await machine.softOff();
    expect(await machine.powerState()).toBe('off');
    expect(Date.now() - t0).toBeLessThan(5000); // TERM was honoured, not the kill after the grace period
    await machine.powerOn();
    const before = (await engine.container(NAME))!;
    await machine.reset();
    expect(await machine.powerState()).toBe('on');
    expect((await engine.container(NAME))!.id).toBe(before.id);
  }, 120_000);

  it('keeps the boot device in its file; a one-time setting falls back after the next boot', async () => {
    expect(await machine.getBootDevice()).toEqual({ device: 'disk', persistent: true, uefi: false });
    await machine.setBootDevice('pxe', false, false);
    expect((await machine.getBootDevice()).device).toBe('pxe');
    await machine.powerOff();
    await machine.powerOn();
    expect(await machine.getBootDevice()).toEqual({ device: 'disk', persistent: true, uefi: false });
    await machine.setBootDevice('pxe', true, true);
    await machine.reset();
    expect(await machine.getBootDevice()).toEqual({ device: 'pxe', persistent: true, uefi: true });
  }, 60_000);

  it('names the node when its container is gone', async () => {
    const gone = new ContainerMachine({
      name: 'ghost',
      container: `${NAME}-missing`,
      engine,
      bootFile: '/nonexistent',
    });
    await expect(gone.powerState()).rejects.toThrow(/node ghost: container .* does not exist/);
  });
});
