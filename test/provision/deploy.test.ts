/**
 * The deploy and undeploy workflows against an in-memory machine and our
 * boot server (in process, on loopback), with the agent's calls made here
 * over HTTP as the ramdisk makes them: what the command carries (no private
 * key), the host key the agent reports recorded before the disk boots,
 * success, the agent's failures, silence, the deadline with what the boot
 * services saw, a lost token, an arming gone suspect (a forged result is not
 * trusted), undeploy and cleaning, and the states the API refuses. The same
 * chain with real VMs is deploy-e2e.test.ts.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RemoteError } from '../../src/core/errors.js';
import { InMemoryMachine } from '../../src/lab/vbmc/machine.js';
import {
  AgentResults,
  bootTrailFrom,
  networkFile,
  nodeFiles,
  reconcileDeploy,
  reconcileUndeploy,
  startDeploy,
  startUndeploy,
  type DeployDeps,
  type DeployTarget,
} from '../../src/provision/deploy.js';
import { NodeStateStore } from '../../src/provision/machine.js';
import { memoryNodeFiles } from '../../src/provision/node-files.js';
import { provisionNodes } from '../../src/provision/provision.js';
import { BootServer } from '../../src/pxe/http.js';
import { generateEd25519 } from '../../src/remote/keys.js';
import { recordedKeys } from '../../src/remote/known-hosts.js';
import { machinePower } from './machine-power.js';

const NODE = 'n1';
const MAC = '52:54:00:00:77:01';
const TARGET: DeployTarget = {
  node: NODE,
  mac: MAC,
  ip: '192.168.24.11',
  prefix: 24,
  gateway: '192.168.24.1',
  rootDevice: { serial: 'S1' },
};
const OPERATOR_KEY = generateEd25519('operator').publicKey.line;
/** What the agent reports after making the node's key. */
const NODE_KEY = generateEd25519('root@n1').publicKey.line;

let dir: string;
let server: BootServer;
let clock = Date.parse('2026-01-01T00:00:00Z');
let token = '';
let tokens = 0;
const results = new AgentResults(() => clock);

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stackctl-deploy-unit-'));
  server = await BootServer.start({
    host: '127.0.0.1',
    port: 0,
    filesDir: dir,
    kernel: 'vmlinuz',
    initrd: 'initrd.gz',
    // the agent's calls come from this process: the node's lease address is loopback here
    nodes: [{ name: NODE, mac: MAC, ip: '127.0.0.1' }],
    onReport: results.handler,
    now: () => clock,
    newToken: () => (token = `token-${++tokens}`),
  });
});

afterAll(async () => {
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

afterEach(() => server.disarm(NODE));

function setup(): { deps: DeployDeps; machine: InMemoryMachine; nodes: NodeStateStore; knownHosts: string } {
  // results of an earlier test must be older than this one's deploy
  clock += 1_000;
  const nodes = NodeStateStore.open(join(dir, `${tokens}-lab.nodes.json`), {
    now: () => new Date(clock),
    files: memoryNodeFiles(),
  });
  const machine = new InMemoryMachine({ name: NODE });
  const knownHosts = join(dir, `${tokens}-lab.known_hosts`);
  const deps: DeployDeps = {
    nodes,
    boot: server,
    results,
    power: () => machinePower(machine),
    image: { name: 'host-abc.img.lzo', sha256: 'b'.repeat(64), rawBytes: 900_000_000, bytes: 300_000_000 },
    authorizedKey: OPERATOR_KEY,
    knownHostsFile: knownHosts,
    bootTrail: bootTrailFrom(join(dir, 'no-dnsmasq.log'), server),
    now: () => clock,
    sleep: async (ms) => void (clock += ms),
    timeoutMs: 600_000,
    heartbeatTimeoutMs: 60_000,
    agentPowerOffMs: 5_000,
    pollMs: 1_000,
  };
  for (const [event, reason] of [
    ['manage', ''],
    ['done', 'BMC answers'],
    ['provide', ''],
    ['done', 'cleaned'],
  ] as const) {
    nodes.apply(NODE, event, reason);
  }
  return { deps, machine, nodes, knownHosts };
}

async function agent(method: 'GET' | 'POST', endpoint: string, body?: unknown): Promise<Response> {
  return fetch(`${server.url}/v1/agent/${NODE}/${endpoint}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

/** The node's boot script, as iPXE asks for it. */
function script(): Promise<Response> {
  return fetch(`${server.url}/boot/${MAC.replace(/:/g, '-')}.ipxe`);
}

/** The `file` lines of a command, decoded, by path. */
function filesOf(command: string): Map<string, { mode: string; text: string }> {
  const out = new Map<string, { mode: string; text: string }>();
  for (const line of command.split('\n')) {
    const [kw, mode, path, b64] = line.split(' ');
    if (kw === 'file') out.set(path!, { mode: mode!, text: Buffer.from(b64!, 'base64').toString() });
  }
  return out;
}

describe('what the deploy writes into the node', () => {
  const carried: DeployTarget = {
    ...TARGET,
    networks: [
      { name: 'external', ip: '10.0.0.11', prefix: 24 },
      { name: 'internal_api', ip: '172.17.0.11', prefix: 24, vlan: 20 },
    ],
    insecureRegistries: ['192.168.24.1:5000'],
  };
  const byPath = (t: DeployTarget): Map<string, string> =>
    new Map(nodeFiles(t, OPERATOR_KEY).map((f) => [f.path, String(f.content)]));

  it('carries the other networks on the provisioning NIC: untagged as more addresses, tagged as VLAN interfaces', () => {
    const files = byPath(carried);
    const prov = files.get('/etc/systemd/network/10-provisioning.network')!;
    expect(prov).toContain('Address=192.168.24.11/24\nGateway=192.168.24.1\nAddress=10.0.0.11/24\nVLAN=vlan20\n');
    expect(files.get('/etc/systemd/network/20-vlan20.netdev')).toContain(
      '[NetDev]\nName=vlan20\nKind=vlan\n\n[VLAN]\nId=20\n',
    );
    expect(files.get('/etc/systemd/network/20-vlan20.network')).toContain(
      '[Match]\nName=vlan20\n\n[Network]\nAddress=172.17.0.11/24\n',
    );
  });

  it('tells dockerd to pull from the plain-HTTP registry, and writes no daemon.json when there is none', () => {
    expect(JSON.parse(byPath(carried).get('/etc/docker/daemon.json')!)).toEqual({
      'insecure-registries': ['192.168.24.1:5000'],
    });
    expect(byPath(TARGET).has('/etc/docker/daemon.json')).toBe(false);
    expect([...byPath(TARGET).keys()].some((p) => p.includes('vlan'))).toBe(false);
  });
});

describe('reconcileDeploy', () => {
  it('boots the ramdisk with a command that carries identity, network and no key, and records the reported key before the disk boots', async () => {
    const t = setup();
    startDeploy(t.deps, NODE);
    const booted = await reconcileDeploy(t.deps, TARGET);
    expect(booted).toMatchObject({ state: 'deploy wait', dirty: true });
    expect(await t.machine.powerState()).toBe('on');
    // nothing is known of the node's key until its agent makes one
    expect(recordedKeys(t.knownHosts, TARGET.ip, 22)).toHaveLength(0);

    const command = await (await agent('GET', 'command')).text();
    const lines = command.split('\n');
    expect(lines.slice(0, 4)).toEqual([
      'deploy',
      `image ${server.url}/files/host-abc.img.lzo ${'b'.repeat(64)} 900000000 300000000`,
      'hint serial S1',
      'hostkey ed25519 root@n1',
    ]);
    expect(lines.slice(-2)).toEqual(['end', '']);
    // no private key crosses the network: the agent makes it on the node
    expect(command).not.toMatch(/PRIVATE|ssh_host_ed25519_key /);
    const files = filesOf(command);
    expect(files.get('/etc/hostname')).toEqual({ mode: '0644', text: 'n1\n' });
    expect(files.get('/etc/systemd/network/10-provisioning.network')?.text).toBe(networkFile(TARGET));
    expect(networkFile(TARGET)).toContain(`MACAddress=${MAC}\n`);
    expect(networkFile(TARGET)).toContain('Address=192.168.24.11/24\nGateway=192.168.24.1\n');
    expect(files.get('/root/.ssh/authorized_keys')).toEqual({ mode: '0600', text: `${OPERATOR_KEY}\n` });
    expect(files.get('/etc/ssh/sshd_config.d/20-stackctl-hostkey.conf')?.text).toContain(
      'HostKey /etc/ssh/ssh_host_ed25519_key\n',
    );
    expect([...files.keys()].some((p) => p.startsWith('/etc/ssh/ssh_host_'))).toBe(false);

    clock += 5_000;
    expect((await agent('POST', 'heartbeat', { step: 'write-image' })).status).toBe(202);
    expect(await reconcileDeploy(t.deps, TARGET)).toMatchObject({ state: 'deploy wait', dirty: true });
    clock += 5_000;
    const hostKey = `${NODE_KEY} root@n1`;
    const result = {
      status: 'ok',
      step: 'deploy',
      root_device: '/dev/vda',
      host_key: hostKey,
      timings: { 'write-image': 40 },
    };
    expect((await agent('POST', 'result', result)).status).toBe(202);
    // the agent powers off by itself
    await t.machine.powerOff();
    const done = await reconcileDeploy(t.deps, TARGET);
    expect(done).toMatchObject({ state: 'active', dirty: false });
    // the reported key, known before the node boots from its disk
    expect(recordedKeys(t.knownHosts, TARGET.ip, 22).map((k) => k.line)).toEqual([NODE_KEY]);
    expect(await t.machine.powerState()).toBe('on');
    expect(await t.machine.getBootDevice()).toMatchObject({ device: 'disk', persistent: true });
    expect(server.isArmed(NODE)).toBe(false);
    expect(t.nodes.get(NODE).history.at(-1)?.reason).toBe(`image ${'b'.repeat(12)} written to /dev/vda; booting it`);
    expect(readFileSync(t.knownHosts, 'utf8')).toBe(`${TARGET.ip} ${NODE_KEY}\n`);
  });

  it('fails an ok result that reports no host key, and boots nothing', async () => {
    const t = setup();
    startDeploy(t.deps, NODE);
    await reconcileDeploy(t.deps, TARGET);
    expect((await agent('POST', 'result', { status: 'ok', step: 'deploy', root_device: '/dev/vda' })).status).toBe(202);
    await t.machine.powerOff();
    const step = await reconcileDeploy(t.deps, TARGET);
    expect(step).toMatchObject({ state: 'deploy failed', dirty: false, error: { code: 'E_AGENT_HOST_KEY' } });
    expect(step.error?.hint).toMatch(/build-ramdisk --force/);
    expect(await t.machine.powerState()).toBe('off');
  });

  it("fails the deploy on the agent's failure, with its reason, and powers the node off", async () => {
    const t = setup();
    startDeploy(t.deps, NODE);
    await reconcileDeploy(t.deps, TARGET);
    const why = 'root device hints (serial S1) match 0 disks; disks seen: /dev/vda 4294967296 bytes serial S2';
    expect((await agent('POST', 'result', { status: 'failed', step: 'select-disk', message: why })).status).toBe(202);
    const step = await reconcileDeploy(t.deps, TARGET);
    expect(step).toMatchObject({ state: 'deploy failed', dirty: false });
    expect(step.error?.code).toBe('E_AGENT_SELECT_DISK');
    expect(step.error?.hint).toMatch(/root_device hints/);
    expect(t.nodes.get(NODE).history.at(-1)?.reason).toBe(
      `E_AGENT_SELECT_DISK: node 'n1': the deploy failed at 'select-disk': ${why}`,
    );
    expect(await t.machine.powerState()).toBe('off');
  });

  it('fails a node whose agent stops calling in', async () => {
    const t = setup();
    startDeploy(t.deps, NODE);
    await reconcileDeploy(t.deps, TARGET);
    await agent('GET', 'command');
    clock += 30_000;
    expect(await reconcileDeploy(t.deps, TARGET)).toMatchObject({ state: 'deploy wait', dirty: true });
    clock += 31_000;
    const step = await reconcileDeploy(t.deps, TARGET);
    expect(step.error?.code).toBe('E_AGENT_HEARTBEAT');
    expect(step.error?.message).toBe(
      "node 'n1': the ramdisk agent stopped calling in during 'command' (61 s without a heartbeat)",
    );
    expect(await t.machine.powerState()).toBe('off');
    expect(server.isArmed(NODE)).toBe(false);
  });

  it('fails at the deadline a node that never called, saying what the boot services saw', async () => {
    const t = setup();
    startDeploy(t.deps, NODE);
    await reconcileDeploy(t.deps, TARGET);
    clock += 600_001;
    const step = await reconcileDeploy(t.deps, TARGET);
    expect(step.error?.code).toBe('E_DEPLOY_TIMEOUT');
    expect(step.error?.message).toBe(
      `node 'n1' (MAC ${MAC}): no deploy result within 600 s; the ramdisk agent never called in; ` +
        'the boot services saw: DHCP: nothing; TFTP: nothing; HTTP: nothing',
    );
    expect(t.nodes.get(NODE).state).toBe('deploy failed');
    expect(await t.machine.powerState()).toBe('off');
  });

  it('boots again with a new token when the boot server lost the token (resume)', async () => {
    const t = setup();
    startDeploy(t.deps, NODE);
    await reconcileDeploy(t.deps, TARGET);
    const first = token;
    server.disarm(NODE);
    expect(await reconcileDeploy(t.deps, TARGET)).toMatchObject({ state: 'deploy wait', dirty: true });
    expect(token).not.toBe(first);
    expect(server.isArmed(NODE)).toBe(true);
  });
});

// NOTE: after the deadline test: these fetch boot scripts, which the boot trail counts
describe('an arming gone suspect', () => {
  it('fails at once when the node asks for its boot script a second time (rebooted, or someone took it first)', async () => {
    const t = setup();
    startDeploy(t.deps, NODE);
    await reconcileDeploy(t.deps, TARGET);
    expect((await script()).status).toBe(200);
    expect((await script()).status).toBe(403);
    const step = await reconcileDeploy(t.deps, TARGET);
    expect(step).toMatchObject({ state: 'deploy failed', dirty: false, error: { code: 'E_BOOT_TOKEN_EXPOSED' } });
    expect(step.error?.message).toBe(
      "node 'n1': its network boot can no longer be trusted: its boot script was asked for a second time " +
        '(from 127.0.0.1); the deploy stopped before trusting anything the node reported',
    );
    expect(step.error?.hint).toMatch(/pxe\.refused/);
    expect(await t.machine.powerState()).toBe('off');
    expect(server.isArmed(NODE)).toBe(false);
  });

  it('does not trust a forged result: the real node asking for its script meanwhile fails the deploy, key unrecorded', async () => {
    const t = setup();
    startDeploy(t.deps, NODE);
    await reconcileDeploy(t.deps, TARGET);
    // someone with the node's MAC and address is faster: script, then a result with their own key
    expect((await script()).status).toBe(200);
    const forged = { status: 'ok', step: 'deploy', root_device: '/dev/vda', host_key: `${NODE_KEY} root@n1` };
    expect((await agent('POST', 'result', forged)).status).toBe(202);
    // the real node, still powered on, asks for its script while stackctl waits for the agent's power-off
    let asked = 0;
    const deps: DeployDeps = {
      ...t.deps,
      sleep: async (ms) => {
        clock += ms;
        if (!asked++) expect((await script()).status).toBe(403);
      },
    };
    const step = await reconcileDeploy(deps, TARGET);
    expect(asked).toBeGreaterThan(0);
    expect(step).toMatchObject({ state: 'deploy failed', error: { code: 'E_BOOT_TOKEN_EXPOSED' } });
    expect(recordedKeys(t.knownHosts, TARGET.ip, 22)).toHaveLength(0);
    expect(await t.machine.powerState()).toBe('off');
  });
});

describe('reconcileUndeploy', () => {
  it('powers off, cleans the disks through the ramdisk, and makes the node available again', async () => {
    const t = setup();
    t.nodes.apply(NODE, 'deploy');
    t.nodes.apply(NODE, 'done', 'deployed');
    await t.machine.powerOn();
    startUndeploy(t.deps, NODE);
    expect(await reconcileUndeploy(t.deps, TARGET)).toMatchObject({ state: 'cleaning', dirty: true });
    expect(await t.machine.powerState()).toBe('off');
    expect(await reconcileUndeploy(t.deps, TARGET)).toMatchObject({ state: 'clean wait', dirty: true });
    expect(await t.machine.powerState()).toBe('on');
    expect(await (await agent('GET', 'command')).text()).toBe('clean\nend\n');
    const message = 'wiped the partition tables and ends of: /dev/vda';
    expect((await agent('POST', 'result', { status: 'ok', step: 'clean', message })).status).toBe(202);
    await t.machine.powerOff();
    expect(await reconcileUndeploy(t.deps, TARGET)).toMatchObject({ state: 'available', dirty: false });
    expect(t.nodes.get(NODE).history.at(-1)?.reason).toBe(message);
  });
});

describe('cleaning in an arming gone suspect', () => {
  it('does not make the node available on a "cleaned" result when its boot script was asked for twice', async () => {
    const t = setup();
    t.nodes.apply(NODE, 'deploy');
    t.nodes.apply(NODE, 'done', 'deployed');
    startUndeploy(t.deps, NODE);
    await reconcileUndeploy(t.deps, TARGET);
    await reconcileUndeploy(t.deps, TARGET);
    expect((await script()).status).toBe(200);
    expect((await script()).status).toBe(403);
    const message = 'wiped the partition tables and ends of: /dev/vda';
    expect((await agent('POST', 'result', { status: 'ok', step: 'clean', message })).status).toBe(202);
    await t.machine.powerOff();
    const step = await reconcileUndeploy(t.deps, TARGET);
    expect(step).toMatchObject({ state: 'clean failed', dirty: false, error: { code: 'E_BOOT_TOKEN_EXPOSED' } });
    expect(step.error?.message).toMatch(/the clean stopped before trusting anything the node reported$/);
    expect(server.isArmed(NODE)).toBe(false);
  });
});

describe('provisionNodes', () => {
  it('leaves a node whose BMC does not answer in its state, with a clear error', async () => {
    const t = setup();
    const unreachable = {
      ...t.deps,
      power: () => ({
        ...machinePower(t.machine),
        powerState: () =>
          Promise.reject(
            new RemoteError('E_BMC_UNREACHABLE', 'no answer from ipmi://127.0.0.1:1 within 5 s', {
              hint: 'Is the BMC on the network?',
            }),
          ),
      }),
    };
    const [r] = await provisionNodes({ targets: [TARGET], deps: unreachable });
    expect(r).toMatchObject({ ok: false, state: 'available', error: { code: 'E_PROVISION_BMC' } });
    expect(r!.error?.message).toBe(
      "node 'n1' stays in 'available': its BMC did not answer (E_BMC_UNREACHABLE: no answer from ipmi://127.0.0.1:1 within 5 s)",
    );
    expect(r!.error?.hint).toBe('Is the BMC on the network?');
    expect(t.nodes.get(NODE).state).toBe('available');
  });

  it('refuses nodes that are not available, and leaves them alone', async () => {
    const t = setup();
    t.nodes.apply(NODE, 'manage');
    const [r] = await provisionNodes({ targets: [TARGET], deps: t.deps });
    expect(r).toMatchObject({ node: NODE, ok: false, state: 'manageable', error: { code: 'E_PROVISION_STATE' } });
    expect(r!.error?.hint).toMatch(/must be available/);
    expect(await t.machine.powerState()).toBe('off');
  });
});
