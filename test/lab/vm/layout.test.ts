import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { clashingRoutes, type HostRoute } from '../../../src/lab/vm/host.js';
import { planVmLab, type VmLabInput, type VmLabState } from '../../../src/lab/vm/lab.js';
import {
  VM_LAB_DEFAULTS,
  bridgeName,
  checkNodeCount,
  labTag,
  tapName,
  ulaPrefix,
  vmLabInventoryYaml,
} from '../../../src/lab/vm/layout.js';
import { qemuArgv, validateQemuOptions } from '../../../src/lab/vbmc/qemu.js';
import { runCli } from '../../helpers/cli.js';

const empty = (): VmLabState => ({ version: 1, addresses: [], rules: [], taps: {}, files: [] });

describe('VM lab layout', () => {
  it('names every host object svm<tag>..., within the 15 characters Linux allows, different per inventory path', () => {
    const a = labTag('/srv/a/lab.yaml');
    const b = labTag('/srv/b/lab.yaml');
    expect(a).not.toBe(b);
    expect(bridgeName(a)).toMatch(/^svm[0-9a-f]{6}$/);
    expect(tapName(a, VM_LAB_DEFAULTS.maxNodes - 1).length).toBeLessThanOrEqual(15);
    expect(tapName(a, 999).length).toBeLessThanOrEqual(15);
  });

  it.each([
    ['10.97.124.0/24', 'fd0a:61:7c::'],
    ['192.168.24.0/24', 'fdc0:a8:18::'],
    ['10.0.0.0/8', 'fd0a:0:0::'],
  ])('derives the ULA of %s as %s', (cidr, prefix) => {
    expect(ulaPrefix(cidr)).toBe(prefix);
  });

  it.each([
    { scenario: 'an unrelated route', routes: [{ dst: '172.17.0.0/16', dev: 'docker0' }], clash: 0 },
    { scenario: 'the default route', routes: [{ dst: 'default', dev: 'eth0' }], clash: 0 },
    { scenario: 'a route on the lab bridge itself', routes: [{ dst: '10.97.124.0/24', dev: 'svmabc123' }], clash: 0 },
    { scenario: 'the same subnet on another link', routes: [{ dst: '10.97.124.0/24', dev: 'eth1' }], clash: 1 },
    { scenario: 'a wider network containing it', routes: [{ dst: '10.96.0.0/14', dev: 'tun0' }], clash: 1 },
    { scenario: 'a host address inside it', routes: [{ dst: '10.97.124.7', dev: 'eth0', table: 'local' }], clash: 1 },
  ] satisfies { scenario: string; routes: HostRoute[]; clash: number }[])(
    'subnet clash check: $scenario',
    ({ routes, clash }) => {
      expect(clashingRoutes('10.97.124.0/24', routes, 'svmabc123')).toHaveLength(clash);
    },
  );

  it('keeps recorded tap names and gives a new node the lowest free index', () => {
    const input: VmLabInput = {
      inventoryFile: '/srv/lab.yaml',
      name: 'lab',
      provisioning: { cidr: '10.97.124.0/24', gateway: '10.97.124.254' },
      nodes: ['ctl-0', 'cmp-0', 'cmp-1'].map((name, i) => ({
        name,
        mac: `52:54:00:97:00:0${i}`,
        address: `10.97.124.${10 + i}`,
        bmc: `ipmi://127.0.0.1:${7230 + i}`,
      })),
    };
    const tag = labTag('/srv/lab.yaml');
    const st = { ...empty(), taps: { 'cmp-1': tapName(tag, 0) } };
    const plan = planVmLab(input, st);
    expect(plan.nodes.map((n) => [n.node, n.tap])).toEqual([
      ['ctl-0', tapName(tag, 1)],
      ['cmp-0', tapName(tag, 2)],
      ['cmp-1', tapName(tag, 0)],
    ]);
    expect(plan).toMatchObject({ hostCidr: '10.97.124.254/24', hostCidr6: 'fd0a:61:7c::1/64', cidr: '10.97.124.0/24' });
    expect(plan.nodes[2]!.runDir).toBe('/srv/lab.lab/vm/cmp-1');
  });

  it('puts this machine on the other lab networks: VLAN interfaces for tagged ones, the bridge for the others', () => {
    const tag = labTag('/srv/lab.yaml');
    const plan = planVmLab(
      {
        inventoryFile: '/srv/lab.yaml',
        name: 'lab',
        provisioning: { cidr: '10.97.124.0/24', gateway: '10.97.124.254' },
        networks: [
          { name: 'internal_api', cidr: '10.97.120.0/24', vlan: 20 },
          { name: 'external', cidr: '10.97.110.0/24', gateway: '10.97.110.254' },
        ],
        nodes: [],
      },
      empty(),
    );
    expect(plan.networks).toEqual([
      { name: 'internal_api', cidr: '10.97.120.0/24', link: `svm${tag}v20`, vlan: 20, hostCidr: '10.97.120.254/24' },
      { name: 'external', cidr: '10.97.110.0/24', link: `svm${tag}`, hostCidr: '10.97.110.254/24' },
    ]);
    expect(`svm${tag}v4094`.length).toBeLessThanOrEqual(15);
  });

  it('writes inventories that stackctl accepts: --nodes N and every topology', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stackctl-svm-inv-'));
    for (const [file, opts] of [
      ['n1.yaml', { nodes: 1 }],
      ['n3.yaml', { nodes: 3 }],
      ['t1.yaml', { topology: '1ctl-1comp' }],
      ['t3.yaml', { topology: '3ctl-2comp' }],
    ] as const) {
      const inv = join(dir, file);
      writeFileSync(
        inv,
        vmLabInventoryYaml({
          name: 'v',
          topology: '1ctl-1comp',
          prefix16: '10.97',
          bmcPort: 7230,
          diskGiB: 4,
          ...opts,
        }),
      );
      const r = await runCli('inventory', 'validate', '-i', inv, '--json');
      const result = JSON.parse(r.stdout) as { valid: boolean; issues: { code: string }[] };
      expect(
        result.issues.filter((i) => i.code.startsWith('E_')),
        file,
      ).toEqual([]);
      expect(result.valid, file).toBe(true);
    }
    const three = vmLabInventoryYaml({
      name: 'v',
      topology: 'x',
      nodes: 3,
      prefix16: '10.97',
      bmcPort: 7230,
      diskGiB: 4,
    });
    expect(three.match(/- name: /g)).toHaveLength(3);
    expect(three).toContain("ipmi://127.0.0.1:7230'");
    expect(three).toContain('redfish+http://127.0.0.1:7331/redfish/v1/Systems/cmp-1');
    expect(three).toContain('provisioning: { cidr: 10.97.124.0/24, gateway: 10.97.124.254');
    expect(three).toContain('root_device: { min_size_gb: 3 }');
    rmSync(dir, { recursive: true, force: true });
  });

  it.each(['0', '-1', 'two', '2.5', String(VM_LAB_DEFAULTS.maxNodes + 1)])('refuses --nodes %s', (n) => {
    expect(() => checkNodeCount(n)).toThrow(/--nodes must be a whole number/);
  });
});

describe('QEMU disk with a serial number', () => {
  const spec = {
    name: 'n',
    runDir: '/run/n',
    memoryMiB: 512,
    cpus: 1,
    disk: '/lab/n.qcow2',
    nics: [],
    extraArgs: [],
    boot: { device: 'pxe', persistent: true, uefi: false },
    persistent: { device: 'pxe', persistent: true, uefi: false },
  } as const;

  it('attaches the disk as its own virtio-blk device carrying the serial', () => {
    const argv = qemuArgv({ ...spec, diskSerial: 'SVMABC1230' });
    expect(argv.join(' ')).toContain(
      '-drive file=/lab/n.qcow2,if=none,id=disk0,format=qcow2 -device virtio-blk-pci,drive=disk0,serial=SVMABC1230',
    );
    expect(qemuArgv(spec).join(' ')).toContain('-drive file=/lab/n.qcow2,if=virtio,format=qcow2');
  });

  it.each(['', 'A,B', 'X'.repeat(21), 'a b'])('refuses the serial %j', (serial) => {
    expect(() =>
      validateQemuOptions({ name: 'n', runDir: '/run/n', disk: '/lab/n.qcow2', diskSerial: serial }),
    ).toThrow(/diskSerial/);
  });
});
