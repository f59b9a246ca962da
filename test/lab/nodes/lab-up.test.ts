import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { runLabDown, runLabStatus, runLabUp } from '../../../src/cli/lab-up.js';
import type { LocalEngine } from '../../../src/remote/docker-local.js';
import { pushImages } from '../../../src/images/registry.js';
import { LAB_LABEL } from '../../../src/lab/nodes/lab.js';
import { dockerOrFail, release, testImages } from '../../images/fixture.js';
import { tempDir } from '../../helpers/cli.js';

const run = promisify(execFile);
const bin = join(import.meta.dirname, '..', '..', '..', 'dist', 'src', 'cli', 'bin.js');
const NAME = 'labtest';
const REGISTRY = `127.0.0.1:${16100 + (process.pid % 800)}`;
const BMC_PORT = 17000 + (process.pid % 800);

/** Run one of the lab commands, capturing what it prints. */
async function capture(f: () => Promise<void>): Promise<string> {
  let text = '';
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((c: string | Uint8Array) => {
    text += String(c);
    return true;
  });
  try {
    await f();
  } finally {
    spy.mockRestore();
  }
  return text;
}

describe('stackctl lab up --kind container --topology 1ctl-1comp (real dockerd)', () => {
  let engine: LocalEngine;
  const dir = tempDir('stackctl-lab-');
  const inventory = join(dir, `${NAME}.yaml`);
  const opts = {
    kind: 'container',
    name: NAME,
    inventory,
    topology: '1ctl-1comp',
    prefix: '10.97',
    bmcPort: BMC_PORT,
    registry: REGISTRY,
    registryContainer: `stackctl-${NAME}-registry`,
    timeout: 60,
  };
  const deps = () => ({ engine, bin });
  const ssh = (addr: string, command: string) =>
    run('ssh', [
      '-o',
      'BatchMode=yes',
      '-o',
      `UserKnownHostsFile=${join(dir, `${NAME}.known_hosts`)}`,
      '-o',
      'StrictHostKeyChecking=yes',
      '-o',
      'ConnectTimeout=5',
      '-i',
      join(dir, `${NAME}.ssh`, 'id_ed25519'),
      `root@${addr}`,
      command,
    ]);
  const bmcPassword = (): string => {
    const secrets = parse(readFileSync(join(dir, `${NAME}.secrets.yaml`), 'utf8')) as {
      bmc: Record<string, { password: string }>;
    };
    return secrets.bmc['lab-bmc']!.password;
  };
  const ipmi = (...args: string[]) =>
    run(
      'ipmitool',
      ['-I', 'lanplus', '-C', '3', '-H', '127.0.0.1', '-p', String(BMC_PORT), '-U', 'admin', '-E', ...args],
      {
        env: { ...process.env, IPMITOOL_PASSWORD: bmcPassword() }, // never in argv
      },
    );

  beforeAll(async () => {
    expect(existsSync(bin), 'the virtual BMC process runs the built stackctl: npm run build first').toBe(true);
    engine = await dockerOrFail();
    await testImages(engine, ['memcached', 'node', 'registry']);
  }, 900_000);

  afterAll(async () => {
    if (engine) await capture(() => runLabDown({ kind: 'container', name: NAME, inventory, purge: true }, deps()));
  }, 120_000);

  it("refuses a subnet another lab's network holds, naming both, and creates nothing", async () => {
    const other = `stackctl-${NAME}x-tenant`;
    await engine.createNetwork({
      name: other,
      subnet: '10.97.50.0/24',
      gateway: '10.97.50.1',
      labels: { [LAB_LABEL.lab]: `${NAME}x` },
    });
    try {
      const refused = await capture(() => runLabUp(opts, deps())).then(
        () => undefined,
        (e: { code?: string; message: string; hint?: string }) => e,
      );
      expect(refused?.code).toBe('E_LAB_SUBNET_TAKEN');
      expect(refused?.message).toBe(
        `lab '${NAME}': subnet 10.97.50.0/24 is already used by Docker network ${other} (lab '${NAME}x')`,
      );
      expect(refused?.hint).toContain(`Take lab '${NAME}x' down`);
      expect(await engine.networks({ [LAB_LABEL.lab]: NAME })).toEqual([]);
      expect(await engine.containers({ [LAB_LABEL.lab]: NAME })).toEqual([]);
    } finally {
      await engine.removeNetwork(other);
    }
  }, 120_000);

  it('brings up two nodes reachable over SSH with the recorded host keys, each with its own dockerd', async () => {
    const t0 = Date.now();
    const text = await capture(() => runLabUp(opts, deps()));
    process.stderr.write(`lab up: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(text).toContain('ctl-0');
    // (the registry container carries the lab label too, when this lab started it)
    const nodes = (await engine.containers({ [LAB_LABEL.lab]: NAME })).filter((c) => c.labels[LAB_LABEL.node]);
    expect(nodes.map((c) => [c.name, c.running])).toEqual([
      [`stackctl-${NAME}-cmp-0`, true],
      [`stackctl-${NAME}-ctl-0`, true],
    ]);
    // Inventory and reality agree: the container's address on the provisioning network is its IPAM address.
    const ipam = JSON.parse(readFileSync(join(dir, `${NAME}.ipam.json`), 'utf8'));
    expect(nodes.find((c) => c.name.endsWith('ctl-0'))!.addresses[`stackctl-${NAME}-provisioning`]).toBe(
      ipam.networks.provisioning['ctl-0'],
    );
    expect(statSync(join(dir, `${NAME}.ssh`, 'id_ed25519')).mode & 0o777).toBe(0o600);
    for (const addr of ['10.97.24.10', '10.97.24.11']) {
      let info = '';
      for (let i = 0; i < 20 && !info.includes('Storage Driver: overlay2'); i++) {
        info = await ssh(addr, 'docker info').then(
          (r) => r.stdout,
          () => '',
        );
        if (!info) await new Promise((r) => setTimeout(r, 500)); // the nested dockerd needs about a second
      }
      expect(info).toContain('Storage Driver: overlay2');
    }
    // This machine's side of the external network (floating IPs): no transmit checksum offload on the
    // bridge holding this machine's address there, nor on the veths into the nodes
    const hostnet = `stackctl-${NAME}-hostnet`;
    const br = await engine.exec(hostnet, [
      'sh',
      '-c',
      'ip -o -4 addr show | awk \'$4 == "10.97.10.254/24" {print $2}\'',
    ]);
    const bridge = br.output.trim();
    expect(bridge, 'the bridge holding 10.97.10.254').toMatch(/^br-[0-9a-f]{12}$/);
    const ports = (await engine.exec(hostnet, ['ls', `/sys/class/net/${bridge}/brif`])).output.trim().split(/\s+/);
    expect(ports, 'one veth: only ctl-0 is on the external network').toHaveLength(1);
    for (const dev of [bridge, ...ports]) {
      const k = await engine.exec(hostnet, ['ethtool', '-k', dev]);
      expect(k.output, dev).toMatch(/^tx-checksumming: off$/m);
    }
  }, 300_000);

  it('nodes pull from the lab registry over the lab network and run nested containers', async () => {
    await pushImages(engine, release, REGISTRY, ['memcached'], () => undefined);
    const r = await ssh(
      '10.97.24.10',
      'docker pull -q lab-registry:5000/stackctl/memcached:zed-1 >/dev/null && ' +
        'docker run --rm lab-registry:5000/stackctl/memcached:zed-1 sh -c "echo nested-ok"',
    );
    expect(r.stdout.trim()).toBe('nested-ok');
    await engine.removeImage(`${REGISTRY}/stackctl/memcached:zed-1`);
  }, 300_000);

  it('powers a node off and on through its virtual BMC', async () => {
    const ctl = `stackctl-${NAME}-ctl-0`;
    await ipmi('chassis', 'power', 'off');
    expect((await engine.container(ctl))?.running).toBe(false);
    const off = await capture(() => runLabStatus({ kind: 'container', name: NAME, inventory, json: true }, deps()));
    expect(JSON.parse(off).find((n: { node: string }) => n.node === 'ctl-0')).toMatchObject({
      power: 'off',
      ssh: false,
    });
    await ipmi('chassis', 'power', 'on');
    expect((await engine.container(ctl))?.running).toBe(true);
    let ok = false;
    for (let i = 0; i < 40 && !ok; i++) {
      ok = await ssh('10.97.24.10', 'true').then(
        () => true,
        () => false,
      );
      if (!ok) await new Promise((r) => setTimeout(r, 250));
    }
    expect(ok).toBe(true);
    // the node's own dockerd comes back too (a stale pid file from the previous boot must not stop it)
    let docker = false;
    for (let i = 0; i < 60 && !docker; i++) {
      docker = await ssh('10.97.24.10', 'docker info --format "{{.ServerVersion}}" >/dev/null').then(
        () => true,
        () => false,
      );
      if (!docker) await new Promise((r) => setTimeout(r, 500));
    }
    expect(docker, 'dockerd on ctl-0 answers after the power cycle').toBe(true);
  }, 120_000);

  it('changes nothing when run again', async () => {
    const before = (await engine.containers({ [LAB_LABEL.lab]: NAME })).map((c) => c.id);
    const text = await capture(() => runLabUp(opts, deps()));
    expect(text).toContain('nothing changed');
    expect((await engine.containers({ [LAB_LABEL.lab]: NAME })).map((c) => c.id)).toEqual(before);
  }, 120_000);

  it('lab down --purge leaves no container, network or file behind', async () => {
    const t0 = Date.now();
    await capture(() => runLabDown({ kind: 'container', name: NAME, inventory, purge: true }, deps()));
    process.stderr.write(`lab down: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(await engine.containers({ [LAB_LABEL.lab]: NAME })).toEqual([]);
    expect(await engine.networks({ [LAB_LABEL.lab]: NAME })).toEqual([]);
    expect(await engine.container(`stackctl-${NAME}-registry`)).toBeUndefined();
    expect(readdirSync(dir)).toEqual([]);
  }, 120_000);
});
