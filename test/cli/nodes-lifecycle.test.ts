/**
 * The lifecycle commands and `lab --kind vm` on bad input: each refusal
 * names what is wrong and what to do, and touches nothing. Cheap: no QEMU,
 * no dnsmasq; the BMC cases use the real virtual BMC servers in-process, or
 * a port where nothing listens.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadSecrets } from '../../src/inventory/secrets.js';
import { startFleet, type RunningVbmc } from '../../src/lab/vbmc/fleet.js';
import { NodeStateStore, nodesFileFor } from '../../src/provision/machine.js';
import { copyInventory, runCli, tempDir } from '../helpers/cli.js';

/** A TCP port nobody listens on (bound, then released). */
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** The shipped lab inventory with its BMCs moved to the given ports and its secrets generated. */
async function inventory(ipmi: number, redfish: number): Promise<string> {
  const inv = copyInventory('lab.yaml');
  writeFileSync(
    inv,
    readFileSync(inv, 'utf8')
      .replace('127.0.0.1:6230', `127.0.0.1:${ipmi}`)
      .replace('127.0.0.1:8230', `127.0.0.1:${redfish}`),
  );
  expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
  return inv;
}

let fleet: RunningVbmc[] = [];
afterEach(async () => {
  await Promise.allSettled(fleet.map((b) => b.close()));
  fleet = [];
});

describe('stackctl lab --kind vm: bad input is refused before anything is created', () => {
  it.each([
    { args: ['--kind', 'bogus'], code: 'E_LAB_KIND', exit: 2 },
    { args: ['--kind', 'vm', '--nodes', '0'], code: 'E_OPTION', exit: 2 },
    { args: ['--kind', 'vm', '--nodes', 'two'], code: 'E_OPTION', exit: 2 },
    { args: ['--kind', 'vm', '--nodes', '9'], code: 'E_OPTION', exit: 2 },
    { args: ['--kind', 'vm', '--topology', 'huge'], code: 'E_UNKNOWN_TOPOLOGY', exit: 2 },
    { args: ['--kind', 'vm', '--memory', '12'], code: 'E_OPTION', exit: 2 },
    { args: ['--kind', 'vm', '--disk-gb', 'big'], code: 'E_OPTION', exit: 2 },
    { args: ['--kind', 'vm', '--cpus', '9'], code: 'E_OPTION', exit: 2 },
  ])('lab up $args -> $code', async ({ args, code, exit }) => {
    const dir = tempDir();
    const r = await runCli('lab', 'up', '--name', 'svmbad', '-i', `${dir}/svmbad.yaml`, ...args);
    expect(r.code).toBe(exit);
    expect(r.stderr).toContain(`error ${code}`);
    expect(r.stderr).toContain('hint:');
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe('stackctl nodes enroll|inspect|list|show on bad input', () => {
  it('enroll with an unreachable BMC: the node goes back to enroll, the error is recorded and listed', async () => {
    const inv = await inventory(await freePort(), await freePort());
    const r = await runCli('nodes', 'enroll', '--node', 'cmp-0', '-i', inv);
    expect(r.code).not.toBe(0);
    expect(r.stdout).toMatch(/cmp-0\s+enroll\s+\S+ s\s+FAILED E_REDFISH/);
    const rec = NodeStateStore.open(nodesFileFor(inv)).get('cmp-0');
    expect(rec.state).toBe('enroll');
    expect(rec.history.map((h) => `${h.from}-${h.event}->${h.to}`)).toEqual([
      'enroll-manage->verifying',
      'verifying-fail->enroll',
    ]);
    const list = await runCli('nodes', 'list', '-i', inv, '--no-power');
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/cmp-0\s+Compute\s+enroll\s+unknown\s+\S+\s+E_REDFISH/);
    expect(list.stdout).toMatch(/ctl-0\s+Controller\s+enroll\s+unknown\s+-\s+-/);
    // the secrets file's password is nowhere in what was written or printed
    const password = loadSecrets(inv.replace('.yaml', '.secrets.yaml'))!.bmc.get('lab-bmc')!.password.reveal();
    expect(readFileSync(nodesFileFor(inv), 'utf8')).not.toContain(password);
    expect(r.stdout + r.stderr + list.stdout).not.toContain(password);
  });

  it('enroll through real virtual BMCs: both nodes manageable; show prints the history, and no introspection yet', async () => {
    const [ipmi, redfish] = [await freePort(), await freePort()];
    const inv = await inventory(ipmi, redfish);
    const cred = loadSecrets(inv.replace('.yaml', '.secrets.yaml'))!.bmc.get('lab-bmc')!;
    fleet = await startFleet([
      { node: 'ctl-0', address: `ipmi://127.0.0.1:${ipmi}`, username: cred.username, password: cred.password },
      {
        node: 'cmp-0',
        address: `redfish+http://127.0.0.1:${redfish}/redfish/v1/Systems/cmp-0`,
        username: cred.username,
        password: cred.password,
      },
    ]);
    const r = await runCli('nodes', 'enroll', '--all', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/ctl-0\s+manageable\s+\S+ s\s+manageable \(ipmi BMC answers, power off/);
    const show = await runCli('nodes', 'show', 'ctl-0', '-i', inv);
    expect(show.stdout).toContain('state:  manageable');
    expect(show.stdout).toContain('introspection: none yet');
    expect(show.stdout).toMatch(/manage\s+enroll\s+verifying\s+operator: enroll/);
    const events = readFileSync(inv.replace('.yaml', '.events.jsonl'), 'utf8');
    expect(events).toContain('"kind":"node.state","node":"cmp-0","from":"verifying","event":"done","to":"manageable"');
  });

  it('inspect refuses a node still in enroll, naming the command that comes first', async () => {
    const inv = copyInventory('lab.yaml');
    const r = await runCli('nodes', 'inspect', '--node', 'ctl-0', '-i', inv);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("error E_NODE_STATE: node 'ctl-0' is in state 'enroll'");
    expect(r.stderr).toContain('hint: Enroll it first: stackctl nodes enroll --node ctl-0');
  });

  it('inspect without a lab bridge asks for --interface; with one but no ramdisk, says how to build it', async () => {
    const inv = copyInventory('lab.yaml');
    const store = NodeStateStore.open(nodesFileFor(inv));
    for (const n of ['ctl-0', 'cmp-0']) {
      store.apply(n, 'manage');
      store.apply(n, 'done');
    }
    const noIface = await runCli('nodes', 'inspect', '--all', '-i', inv);
    expect(noIface.code).toBe(2);
    expect(noIface.stderr).toContain('error E_PXE_INTERFACE');
    const noRamdisk = await runCli(
      'nodes',
      'inspect',
      '--all',
      '-i',
      inv,
      '--interface',
      'lo',
      '--ramdisk',
      `${dirname(inv)}/none`,
    );
    expect(noRamdisk.code).toBe(4);
    expect(noRamdisk.stderr).toContain('error E_RAMDISK_MISSING');
    expect(noRamdisk.stderr).toContain('hint: Build it: stackctl images build-ramdisk --out');
    // nothing moved: the nodes wait in manageable
    expect(NodeStateStore.open(nodesFileFor(inv)).get('ctl-0').state).toBe('manageable');
    expect(existsSync(inv.replace('.yaml', '.pxe'))).toBe(false);
  });

  it.each([
    { args: ['inspect', '--timeout', 'soon', '--all'], code: 'E_OPTION' },
    { args: ['provision', '--ssh-timeout', 'soon', '--all'], code: 'E_OPTION' },
    { args: ['undeploy', '--http-port', '70000', '--all'], code: 'E_OPTION' },
    { args: ['inspect'], code: 'E_NODE_SELECTION' },
    { args: ['enroll', '--node', 'nope'], code: 'E_UNKNOWN_NODE' },
    { args: ['show', 'nope'], code: 'E_UNKNOWN_NODE' },
  ])('nodes $args -> $code', async ({ args, code }) => {
    const inv = copyInventory('lab.yaml');
    const r = await runCli('nodes', ...args, '-i', inv);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`error ${code}`);
  });
});

describe('stackctl nodes provision|undeploy on bad input', () => {
  /** The lab inventory with both nodes walked to `state` through the transition table. */
  function at(events: string[]): string {
    const inv = copyInventory('lab.yaml');
    const store = NodeStateStore.open(nodesFileFor(inv));
    for (const n of ['ctl-0', 'cmp-0']) for (const e of events) store.apply(n, e as 'manage');
    return inv;
  }

  it('provision refuses a node in enroll, naming the commands that come first', async () => {
    const r = await runCli('nodes', 'provision', '--node', 'ctl-0', '-i', copyInventory('lab.yaml'));
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("error E_NODE_STATE: node 'ctl-0' is in state 'enroll'");
    expect(r.stderr).toContain('hint: Enroll and inspect it first');
  });

  it('provision of a node left in deploy wait asks for --resume', async () => {
    const inv = at(['manage', 'done', 'provide', 'done', 'deploy', 'wait']);
    const r = await runCli('nodes', 'provision', '--node', 'cmp-0', '-i', inv);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("'deploy wait'");
    expect(r.stderr).toContain('carry on with --resume');
  });

  it('undeploy refuses a node that is not deployed', async () => {
    const r = await runCli('nodes', 'undeploy', '--all', '-i', at(['manage', 'done']));
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("node 'ctl-0' is in state 'manageable': it cannot be undeployed from there");
  });

  it('provision without a host image says how to build it, and moves no node', async () => {
    const inv = at(['manage', 'done']);
    const dir = dirname(inv);
    writeFileSync(
      `${dir}/ramdisk.json`,
      JSON.stringify({ kernel: { name: 'vmlinuz' }, initrd: { name: 'initrd.gz' } }),
    );
    const r = await runCli(
      'nodes',
      'provision',
      '--all',
      '-i',
      inv,
      '--interface',
      'lo',
      '--ramdisk',
      dir,
      '--host-image',
      `${dir}/noimage`,
    );
    expect(r.code).toBe(4);
    expect(r.stderr).toContain('error E_IMAGE_MISSING');
    expect(r.stderr).toContain('hint: Build it: stackctl images build host --out');
    expect(NodeStateStore.open(nodesFileFor(inv)).get('ctl-0').state).toBe('manageable');
  });
});
