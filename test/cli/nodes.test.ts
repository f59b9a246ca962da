import { execFile } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/core/paths.js';
import { loadSecrets } from '../../src/inventory/secrets.js';
import { startFleet, type RunningVbmc } from '../../src/lab/vbmc/fleet.js';
import { copyInventory, runCli } from '../helpers/cli.js';

const run = promisify(execFile);
const bin = join(packageRoot(), 'dist', 'src', 'cli', 'bin.js');

/** A lab inventory on free ports, its secrets generated, and its virtual BMCs running in this process. */
async function lab(ports: { ipmi: number; redfish: number }): Promise<{ inv: string; fleet: RunningVbmc[] }> {
  const inv = copyInventory('lab.yaml');
  writeFileSync(
    inv,
    readFileSync(inv, 'utf8')
      .replace('127.0.0.1:6230', `127.0.0.1:${ports.ipmi}`)
      .replace('127.0.0.1:8230', `127.0.0.1:${ports.redfish}`),
  );
  expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
  const secrets = loadSecrets(inv.replace('.yaml', '.secrets.yaml'))!;
  const cred = secrets.bmc.get('lab-bmc')!;
  const fleet = await startFleet([
    { node: 'ctl-0', address: `ipmi://127.0.0.1:${ports.ipmi}`, username: cred.username, password: cred.password },
    {
      node: 'cmp-0',
      address: `redfish+http://127.0.0.1:${ports.redfish}/redfish/v1/Systems/cmp-0`,
      username: cred.username,
      password: cred.password,
    },
  ]);
  return { inv, fleet };
}

let fleets: RunningVbmc[][] = [];
afterEach(async () => {
  for (const f of fleets) await Promise.allSettled(f.map((b) => b.close()));
  fleets = [];
});

describe('stackctl nodes', () => {
  it('powers nodes on and off through IPMI and Redfish and reads the state back', async () => {
    const { inv, fleet } = await lab({ ipmi: 16230, redfish: 18230 });
    fleets.push(fleet);
    const status = await runCli('nodes', 'power', 'status', '--all', '-i', inv, '--json');
    expect(JSON.parse(status.stdout).map((r: { result: string }) => r.result)).toEqual(['off', 'off']);
    const on = await runCli('nodes', 'power', 'on', '--role', 'Controller', '-i', inv);
    expect(on.code, on.stderr).toBe(0);
    expect(await fleet[0]!.machine.powerState()).toBe('on');
    expect(await fleet[1]!.machine.powerState()).toBe('off');
    await runCli('nodes', 'power', 'on', '--node', 'cmp-0', '-i', inv);
    expect(await fleet[1]!.machine.powerState()).toBe('on');
    await runCli('nodes', 'power', 'off', '--all', '-i', inv);
    expect(await fleet[0]!.machine.powerState()).toBe('off');
    expect(await fleet[1]!.machine.powerState()).toBe('off');
    const log = readFileSync(inv.replace('.yaml', '.events.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(
      log
        .filter((e) => e.kind === 'node.power' && e.action === 'off')
        .map((e) => e.node)
        .sort(),
    ).toEqual(['cmp-0', 'ctl-0']);
  });

  it('sets the boot device on both protocols', async () => {
    const { inv, fleet } = await lab({ ipmi: 16231, redfish: 18231 });
    fleets.push(fleet);
    const r = await runCli('nodes', 'bootdev', 'pxe', '--all', '--persistent', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    for (const b of fleet)
      expect(await b.machine.getBootDevice()).toEqual({ device: 'pxe', persistent: true, uefi: false });
  });

  it('validates every node, reports each failure and carries on with the others', async () => {
    const { inv, fleet } = await lab({ ipmi: 16232, redfish: 18232 });
    fleets.push(fleet);
    await fleet[1]!.close(); // the Redfish BMC goes away
    const r = await runCli('nodes', 'validate', '--all', '-i', inv, '--json');
    const results = JSON.parse(r.stdout) as { node: string; ok: boolean; error?: { code: string; message: string } }[];
    expect(results[0]).toMatchObject({ node: 'ctl-0', ok: true });
    expect(results[1]).toMatchObject({ node: 'cmp-0', ok: false });
    expect(results[1]!.error!.message).toContain('cmp-0');
    expect(r.code).toBe(5);
  });

  it('reports refused credentials as an authentication failure naming the node, without the password', async () => {
    const { inv, fleet } = await lab({ ipmi: 16233, redfish: 18233 });
    fleets.push(fleet);
    const file = inv.replace('.yaml', '.secrets.yaml');
    const real = loadSecrets(file)!.bmc.get('lab-bmc')!.password.reveal();
    writeFileSync(file, readFileSync(file, 'utf8').replace(real, 'wrongpassword123'), { mode: 0o600 });
    const r = await runCli('nodes', 'power', 'status', '--all', '-i', inv);
    expect(r.code).toBe(7);
    expect(r.stdout).toMatch(/ctl-0 .*authentication failed/i);
    expect(r.stdout).toMatch(/cmp-0 .*authentication failed/i);
    expect(r.stdout + r.stderr).not.toContain('wrongpassword123');
    expect(r.stdout + r.stderr).not.toContain(real);
  });

  it('insists on a node selection', async () => {
    const inv = copyInventory('lab.yaml');
    const r = await runCli('nodes', 'power', 'on', '-i', inv);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--node NAME, --role ROLE or --all');
  });
});

describe('stackctl lab bmc', () => {
  it('starts virtual BMCs in the background at the inventory addresses, lists and stops them', async () => {
    expect(existsSync(bin), 'build first: npm run build').toBe(true);
    const inv = copyInventory('lab.yaml');
    writeFileSync(
      inv,
      readFileSync(inv, 'utf8')
        .replace('127.0.0.1:6230', '127.0.0.1:16240')
        .replace('127.0.0.1:8230', '127.0.0.1:18240'),
    );
    await run('node', [bin, 'secrets', 'generate', '-i', inv]);
    let started = false;
    try {
      const start = await run('node', [bin, 'lab', 'bmc', 'start', '-i', inv]);
      expect(start.stdout, start.stdout + start.stderr).toContain('started 2 virtual BMC(s)');
      started = true;
      const list = JSON.parse((await run('node', [bin, 'lab', 'bmc', 'list', '-i', inv, '--json'])).stdout);
      expect(list.bmcs.every((b: { running: boolean }) => b.running)).toBe(true);
      const on = await run('node', [bin, 'nodes', 'power', 'on', '--all', '-i', inv, '--json']);
      expect(JSON.parse(on.stdout).map((x: { result: string }) => x.result)).toEqual(['on', 'on']);
    } finally {
      // always stop them; assert it only when they started (else the start's failure is the one to see)
      const stop = await run('node', [bin, 'lab', 'bmc', 'stop', '-i', inv]);
      if (started) expect(stop.stdout).toContain('stopped 2 virtual BMC(s)');
    }
    const after = JSON.parse((await run('node', [bin, 'lab', 'bmc', 'list', '-i', inv, '--json'])).stdout);
    expect(after.pid).toBeNull();
  }, 120_000); // five CLI runs: 5-7 s each on a loaded 2-core machine
});
