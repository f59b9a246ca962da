/**
 * Our client against OpenIPMI's ipmi_sim (Debian package openipmi): an
 * independent implementation of the BMC side. It lists cipher suites 0-11
 * (not 17), so suite selection must settle on 3. Its "machine" is a
 * `sleep 3600` child: power on starts it, power off kills it, so the power
 * state is checked on real processes, not only on what the BMC reports.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthError, RemoteError } from '../../../src/core/errors.js';
import { Secret } from '../../../src/core/secret.js';
import { IpmiDriver } from '../../../src/bmc/ipmi/driver.js';
import { freeTcpPort, freeUdpPort, requireTool } from './lab.js';

let sim: ChildProcess | undefined;
let dir = '';
let port = 0;
let simStderr = '';

/** Children of a process whose command is `name`, from /proc. */
function childrenNamed(ppid: number, name: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === ppid && comm === name) found.push(Number(entry));
    } catch {
      // the process ended while we looked
    }
  }
  return found;
}

function machinePids(): number[] {
  return sim?.pid ? childrenNamed(sim.pid, 'sleep') : [];
}

async function until(check: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

/** Polls the BMC until it reports `state`: ipmi_sim updates its power state a moment after the process changes. */
async function untilPower(d: IpmiDriver, state: 'on' | 'off', ms: number): Promise<string> {
  const end = Date.now() + ms;
  let seen = await d.powerState();
  while (seen !== state && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 100));
    seen = await d.powerState();
  }
  return seen;
}

function driver(password = 'password', username = 'admin'): IpmiDriver {
  return new IpmiDriver(
    { node: 'sim-0', address: `ipmi://127.0.0.1:${port}`, username, password: new Secret(password) },
    { timeoutMs: 300, retries: 2 },
  );
}

beforeAll(async () => {
  requireTool('ipmi_sim');
  dir = mkdtempSync(join(tmpdir(), 'ipmi-sim-'));
  port = await freeUdpPort();
  const serial = await freeTcpPort();
  writeFileSync(
    join(dir, 'lan.conf'),
    [
      'name "bmc1"',
      'set_working_mc 0x20',
      '  startlan 1',
      `    addr 127.0.0.1 ${port}`,
      '    priv_limit admin',
      '    allowed_auths_callback none md2 md5 straight',
      '    allowed_auths_user none md2 md5 straight',
      '    allowed_auths_operator none md2 md5 straight',
      '    allowed_auths_admin none md2 md5 straight',
      '    guid a123456789abcdefa123456789abcdef',
      '  endlan',
      `  serial 15 127.0.0.1 ${serial} codec VM`,
      '  startcmd "sleep 3600"',
      '  startnow false',
      '  poweroff_wait 2',
      '  kill_wait 2',
      '  user 2 true "admin" "password" admin 10 md2 md5 straight',
      '',
    ].join('\n'),
  );
  // mc_enable must come last, or the simulator starts and silently serves nothing
  writeFileSync(
    join(dir, 'sim.emu'),
    'mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nsel_enable 0x20 1000 0x0a\nmc_enable 0x20\n',
  );
  // -n: no console on stdin (it asserts when stdin is not a terminal)
  sim = spawn('ipmi_sim', ['-c', join(dir, 'lan.conf'), '-f', join(dir, 'sim.emu'), '-n', '-s', join(dir, 'state')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  sim.stderr?.on('data', (b: Buffer) => (simStderr += b.toString()));
  const probe = new IpmiDriver(
    { node: 'sim-0', address: `ipmi://127.0.0.1:${port}`, username: 'admin', password: new Secret('password') },
    { timeoutMs: 100, retries: 0 },
  );
  let ready = false;
  for (let i = 0; i < 50 && !ready; i++) ready = await probe.ping().catch(() => false);
  await probe.close();
  if (!ready) throw new Error(`ipmi_sim did not answer on port ${port}: ${simStderr}`);
});

afterAll(async () => {
  const leftovers = machinePids();
  sim?.kill('SIGTERM');
  if (sim && sim.exitCode === null) await new Promise((r) => sim?.once('exit', r));
  for (const pid of leftovers) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone with its parent
    }
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('IpmiDriver against OpenIPMI ipmi_sim', () => {
  it('answers the ASF presence ping', async () => {
    const d = driver();
    expect(await d.ping()).toBe(true);
    await d.close();
  });

  it('sets up an RMCP+ session with suite 3 (17 is not offered) and reads the device id', async () => {
    const d = driver();
    const id = await d.identify();
    expect(id).toMatchObject({
      cipherSuite: 3,
      manufacturerId: 0x1291,
      manufacturer: 'MontaVista',
      productId: 0xf02,
      firmwareVersion: '9.08',
      ipmiVersion: '2.0',
    });
    await d.close();
  });

  it('powers the machine on, off and through a cycle, and the machine process follows', async () => {
    const d = driver();
    expect(await d.powerState()).toBe('off');
    expect(machinePids()).toEqual([]);

    await d.powerOn();
    expect(await until(() => machinePids().length === 1, 3000)).toBe(true);
    expect(await untilPower(d, 'on', 3000)).toBe('on');
    const [first] = machinePids();

    await d.powerCycle();
    // the simulator kills the process and starts a new one about a second later
    expect(await until(() => machinePids().length === 1 && machinePids()[0] !== first, 5000)).toBe(true);
    expect(await untilPower(d, 'on', 3000)).toBe('on');

    await d.powerOff();
    expect(await until(() => machinePids().length === 0, 3000)).toBe(true);
    expect(await untilPower(d, 'off', 3000)).toBe('off');
    await d.close();
  });

  it('reports the boot options it does not support as a RemoteError, not as success', async () => {
    const d = driver();
    const err = await d.setBootDevice('pxe').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RemoteError);
    expect((err as RemoteError).code).toMatch(/^E_IPMI_/);
    await d.close();
  });

  it('refuses a wrong password with an AuthError after one attempt', async () => {
    const d = driver('not-the-password');
    const before = machinePids();
    const err = await d.powerOn().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthError);
    expect((err as AuthError).message).toMatch(
      new RegExp(`authentication failed for node sim-0 at ipmi://127\\.0\\.0\\.1:${port}`),
    );
    expect(machinePids()).toEqual(before);
    await d.close();
  });

  it('refuses an unknown user with an AuthError', async () => {
    const d = driver('password', 'mallory');
    await expect(d.powerState()).rejects.toBeInstanceOf(AuthError);
    await d.close();
  });
});
