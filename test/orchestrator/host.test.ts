import { describe, expect, it } from 'vitest';
import type { RemoteCommand, UploadSource } from '../../src/remote/index.js';
import {
  hostSummary,
  modulesLoadFile,
  modulesLoadText,
  prepareHost,
  registryCaFile,
} from '../../src/orchestrator/host.js';
import type { HostWork } from '../../src/orchestrator/planner.js';

/** A node's OS as host preparation sees it: modules, devices, files, systemd units. */
class FakeHost {
  readonly commands: string[] = [];
  readonly loaded = new Set<string>();
  readonly devices = new Set<string>(['/dev/net/tun']);
  readonly files = new Map<string, string>();
  readonly units = new Map<string, { load: string; active: string; file: string }>();
  systemd = true;
  maskFails = false;
  dockerd = true;

  constructor(
    readonly node: string,
    /** module -> devices it makes when loaded; absent: modprobe fails as for a missing module. */
    readonly loadable: ReadonlyMap<string, readonly string[]>,
  ) {}

  exec(command: RemoteCommand): Promise<{ code: number; stdout: string; stderr: string }> {
    const argv = typeof command === 'string' ? ['sh', '-c', command] : [...command];
    this.commands.push(argv.join(' '));
    const ok = (stdout = '') => Promise.resolve({ code: 0, stdout, stderr: '' });
    const no = (stderr = '', code = 1) => Promise.resolve({ code, stdout: '', stderr });
    const [cmd, ...args] = argv;
    if (cmd === 'test' && args[0] === '-d') return this.loaded.has(args[1]!.replace('/sys/module/', '')) ? ok() : no();
    if (cmd === 'test' && args[0] === '-e') return this.devices.has(args[1]!) ? ok() : no();
    if (cmd === 'modprobe') {
      const made = this.loadable.get(args[0]!);
      if (!made) return no(`modprobe: ERROR: could not insert '${args[0]}': Operation not supported`);
      this.loaded.add(args[0]!);
      for (const d of made) this.devices.add(d);
      return ok();
    }
    if (cmd === 'cat') return this.files.has(args[0]!) ? ok(this.files.get(args[0]!)) : no('No such file');
    if (cmd === 'sh') return this.systemd ? ok() : no('', 127);
    if (cmd === 'pkill') return this.dockerd ? ok() : no('', 1);
    if (cmd === 'systemctl') {
      const unit = args[args.length - 1]!;
      const u = this.units.get(unit);
      if (args[0] === 'show') {
        // systemd's own order, not the order asked for
        const v = u ?? { load: 'not-found', active: 'inactive', file: '' };
        return ok(`ActiveState=${v.active}\nLoadState=${v.load}\nUnitFileState=${v.file}\n`);
      }
      if (args[0] === 'disable' && u) u.active = 'inactive';
      if (args[0] === 'mask' && u) {
        if (this.maskFails) return no(`Failed to mask unit: Access denied`);
        u.load = 'masked';
      }
      return ok();
    }
    return no(`unexpected command ${argv.join(' ')}`, 127);
  }

  readonly upload = {
    upload: (source: UploadSource, dest: string): Promise<number> => {
      const data = 'data' in source ? String(source.data) : '';
      this.commands.push(`upload ${dest}`);
      this.files.set(dest, data);
      return Promise.resolve(data.length);
    },
  };

  access() {
    return { node: this.node, exec: (c: RemoteCommand) => this.exec(c), files: this.upload };
  }
}

const LIBVIRT: HostWork = {
  node: 'cmp-0',
  service: 'nova-compute',
  step: 4,
  modules: [['kvm_intel', 'kvm_amd'], ['vhost_net']],
  devices: ['/dev/kvm', '/dev/vhost-net', '/dev/net/tun'],
  stopUnits: ['libvirtd.service', 'libvirtd.socket', 'virtqemud.socket'],
  hint: 'Turn on VT-x or AMD-V.',
};

/** An AMD server with KVM: kvm_intel refuses to load, kvm_amd makes /dev/kvm. */
const amdServer = () =>
  new FakeHost(
    'cmp-0',
    new Map([
      ['kvm_amd', ['/dev/kvm']],
      ['vhost_net', ['/dev/vhost-net']],
    ]),
  );

describe('host preparation (a service file’s host: section)', () => {
  it("loads the CPU's KVM module, checks the devices, lists the modules for boot, stops the host's libvirtd; a second run changes nothing", async () => {
    const host = amdServer();
    host.units.set('libvirtd.service', { load: 'loaded', active: 'active', file: 'enabled' });
    host.units.set('libvirtd.socket', { load: 'loaded', active: 'active', file: 'enabled' });
    const first = await prepareHost(host.access(), LIBVIRT);
    expect(first).toEqual([
      { object: 'module', name: 'kvm_amd', action: 'loaded' },
      { object: 'module', name: 'vhost_net', action: 'loaded' },
      { object: 'file', name: '/etc/modules-load.d/stackctl-nova-compute.conf', action: 'written' },
      { object: 'unit', name: 'libvirtd.service', action: 'stopped and masked (was active, enabled)' },
      { object: 'unit', name: 'libvirtd.socket', action: 'stopped and masked (was active, enabled)' },
    ]);
    expect(host.files.get(modulesLoadFile('nova-compute'))).toBe(
      modulesLoadText('nova-compute', ['kvm_amd', 'vhost_net']),
    );
    expect(host.files.get(modulesLoadFile('nova-compute'))!.split('\n').slice(1)).toEqual(['kvm_amd', 'vhost_net', '']);
    // kvm_intel was tried first and refused; virtqemud.socket is not installed and was left alone
    expect(host.commands).toContain('modprobe kvm_intel');
    expect(host.commands.filter((c) => c.includes('virtqemud') && !c.startsWith('systemctl show'))).toEqual([]);

    host.commands.length = 0;
    expect(await prepareHost(host.access(), LIBVIRT)).toEqual([]);
    expect(host.commands.filter((c) => /^(modprobe|upload|systemctl (disable|mask))/.test(c))).toEqual([]);
  });

  it('takes a module already loaded (or built in) as it is, without modprobe', async () => {
    const host = amdServer();
    host.loaded.add('kvm_amd');
    host.loaded.add('vhost_net');
    host.devices.add('/dev/kvm');
    host.devices.add('/dev/vhost-net');
    const made = await prepareHost(host.access(), LIBVIRT);
    expect(made.map((c) => c.object)).toEqual(['file']);
    expect(host.commands.some((c) => c.startsWith('modprobe'))).toBe(false);
  });

  it('refuses a node whose CPU has no KVM, naming node, modules, the reason and the hint, and writes nothing', async () => {
    const host = new FakeHost('cmp-3', new Map([['vhost_net', ['/dev/vhost-net']]]));
    const err = await prepareHost(host.access(), { ...LIBVIRT, node: 'cmp-3' }).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'E_HOST_MODULE',
      message: expect.stringMatching(
        /^cmp-3: nova-compute needs the kernel module kvm_intel or kvm_amd, which does not load: .*could not insert 'kvm_intel'.*; .*could not insert 'kvm_amd'/,
      ),
      hint: expect.stringMatching(/^Turn on VT-x or AMD-V\. .*Nothing of nova-compute was started on cmp-3\.$/),
    });
    expect(host.files.size).toBe(0);
    expect(host.commands.some((c) => c.startsWith('systemctl'))).toBe(false);
  });

  it('refuses a node where the module loads but makes no device, before it lists the modules for boot', async () => {
    const host = new FakeHost(
      'cmp-1',
      new Map([
        ['kvm_intel', []],
        ['vhost_net', ['/dev/vhost-net']],
      ]),
    );
    const err = await prepareHost(host.access(), { ...LIBVIRT, node: 'cmp-1' }).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'E_HOST_DEVICE',
      message: 'cmp-1: nova-compute needs /dev/kvm, which does not exist with kvm_intel, vhost_net loaded',
    });
    expect(host.files.size).toBe(0);
  });

  it('leaves host units alone on a node without systemd, and masked units as they are', async () => {
    const host = amdServer();
    host.systemd = false;
    host.units.set('libvirtd.service', { load: 'loaded', active: 'active', file: 'enabled' });
    expect((await prepareHost(host.access(), LIBVIRT)).filter((c) => c.object === 'unit')).toEqual([]);
    const masked = amdServer();
    masked.units.set('libvirtd.service', { load: 'masked', active: 'inactive', file: 'masked' });
    expect((await prepareHost(masked.access(), LIBVIRT)).filter((c) => c.object === 'unit')).toEqual([]);
  });

  it('fails with the command to run by hand when a host unit cannot be masked', async () => {
    const host = amdServer();
    host.maskFails = true;
    host.units.set('libvirtd.service', { load: 'loaded', active: 'active', file: 'enabled' });
    await expect(prepareHost(host.access(), LIBVIRT)).rejects.toMatchObject({
      code: 'E_HOST_UNIT',
      message: expect.stringContaining(
        "cmp-0: nova-compute needs the host's libvirtd.service stopped and masked, which failed: Failed to mask unit: Access denied",
      ),
      hint: expect.stringContaining('systemctl mask libvirtd.service'),
    });
  });

  it('sums a preparation up in one line for the plan and the dry run', () => {
    expect(hostSummary(LIBVIRT)).toBe(
      'modules kvm_intel|kvm_amd, vhost_net; devices /dev/kvm, /dev/vhost-net, /dev/net/tun; stop libvirtd.service, libvirtd.socket, virtqemud.socket',
    );
    expect(hostSummary({ modules: [], devices: ['/dev/kvm'], stopUnits: [] })).toBe('devices /dev/kvm');
  });
});

const CA = '-----BEGIN CERTIFICATE-----\nMIIBcloudCA\n-----END CERTIFICATE-----\n';
const TRUST: HostWork = {
  node: 'cmp-0',
  service: 'docker-registry-trust',
  step: 1,
  modules: [],
  devices: [],
  stopUnits: [],
  registryTrust: { registry: '192.168.24.1:5000', ca: CA },
};

describe('host preparation: the node trusts the registry served over TLS', () => {
  const plainNode = () => {
    const h = new FakeHost('cmp-0', new Map());
    h.files.set(
      '/etc/docker/daemon.json',
      JSON.stringify({ 'storage-driver': 'overlay2', 'insecure-registries': ['192.168.24.1:5000', 'other:5000'] }),
    );
    return h;
  };

  it('writes the CA, takes the registry out of insecure-registries (keeping the rest) and reloads dockerd; a second run changes nothing', async () => {
    const h = plainNode();
    const made = await prepareHost(h.access(), TRUST);
    expect(made).toEqual([
      { object: 'file', name: '/etc/docker/certs.d/192.168.24.1:5000/ca.crt', action: 'written' },
      { object: 'file', name: '/etc/docker/daemon.json', action: 'written (192.168.24.1:5000 no longer insecure)' },
      { object: 'unit', name: 'dockerd', action: 'reloaded (SIGHUP)' },
    ]);
    expect(h.files.get(registryCaFile('192.168.24.1:5000'))).toBe(CA);
    expect(JSON.parse(h.files.get('/etc/docker/daemon.json')!)).toEqual({
      'storage-driver': 'overlay2',
      'insecure-registries': ['other:5000'],
    });
    expect(h.commands).toContain('pkill -HUP -x dockerd');
    h.commands.length = 0;
    expect(await prepareHost(h.access(), TRUST)).toEqual([]);
    expect(h.commands.filter((c) => c.startsWith('upload') || c.startsWith('pkill'))).toEqual([]);
  });

  it('writes the CA again when it changed (a new cloud CA), and needs no daemon.json', async () => {
    const h = new FakeHost('cmp-0', new Map());
    h.files.set(registryCaFile('192.168.24.1:5000'), 'an older CA');
    expect(await prepareHost(h.access(), TRUST)).toEqual([
      { object: 'file', name: '/etc/docker/certs.d/192.168.24.1:5000/ca.crt', action: 'written' },
    ]);
    expect(h.files.has('/etc/docker/daemon.json')).toBe(false);
  });

  it('does not need dockerd running to change its settings (it reads them when it starts)', async () => {
    const h = plainNode();
    h.dockerd = false;
    const made = await prepareHost(h.access(), TRUST);
    expect(made.map((c) => c.object + ' ' + c.name)).toEqual([
      'file /etc/docker/certs.d/192.168.24.1:5000/ca.crt',
      'file /etc/docker/daemon.json',
    ]);
  });

  it('refuses a daemon.json that is not a JSON object, naming the node, and leaves it as it is', async () => {
    const h = new FakeHost('cmp-0', new Map());
    h.files.set('/etc/docker/daemon.json', '{ "insecure-registries": [');
    await expect(prepareHost(h.access(), TRUST)).rejects.toMatchObject({
      code: 'E_HOST_DOCKER_CONFIG',
      message: expect.stringContaining('cmp-0: /etc/docker/daemon.json is not a JSON object'),
    });
    expect(h.files.get('/etc/docker/daemon.json')).toBe('{ "insecure-registries": [');
  });

  it('says what it ensures in the plan and the dry run', () => {
    expect(hostSummary(TRUST)).toBe('trust the cloud CA for 192.168.24.1:5000');
  });
});
