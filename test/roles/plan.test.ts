import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { sha256, uuidFromName } from '../../src/core/hash.js';
import { Secret } from '../../src/core/secret.js';
import { entriesOf } from '../../src/inventory/secrets.js';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { defaultReleasesDir } from '../../src/core/paths.js';
import { allocate, EMPTY_IPAM } from '../../src/inventory/ipam.js';
import { parseInventory } from '../../src/inventory/load.js';
import { buildPlan, planToJson, type Plan, type PlanResult } from '../../src/roles/plan.js';
import { loadRelease } from '../../src/roles/release.js';
import { planDeploy } from '../../src/orchestrator/planner.js';
import { catalog, catalogWith, planFromText, release } from '../helpers/plan.js';
import { copyInventory, runCli } from '../helpers/cli.js';
import { python } from '../helpers/parsers.js';

const planFor = planFromText;

function allSecrets(value: (name: string) => string): Map<string, Secret> {
  const m = new Map<string, Secret>();
  for (const svc of catalog.services.values())
    for (const s of svc.secrets ?? []) for (const e of entriesOf(s)) m.set(e, new Secret(value(e)));
  return m;
}

describe('the plan', () => {
  it('is byte-identical across runs, through the CLI', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const a = await runCli('plan', '-i', inv, '--json');
    const b = await runCli('plan', '-i', inv, '--json');
    const human1 = await runCli('plan', '-i', inv);
    const human2 = await runCli('plan', '-i', inv);
    expect(a.code).toBe(0);
    expect(a.stdout).toBe(b.stdout);
    expect(human1.stdout).toBe(human2.stdout);
  });

  it('is a pure function of its inputs: two independent builds agree', () => {
    const text = generateInventoryYaml({ controllers: 3, computes: 20 });
    expect(planToJson(planFor(text).plan)).toBe(planToJson(planFor(text).plan));
  });

  it('finds the database, identity and compute API services by their files, not their names', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 });
    const kinds = (p: Plan): string[] => p.steps.flatMap((s) => s.actions.map((a) => a.kind));
    const shipped = planFor(text).plan;
    expect(kinds(shipped)).toEqual(expect.arrayContaining(['database', 'register']));
    // the database server's file no longer says it is the database: no databases are created on it
    const noDb = catalogWith('services/mariadb.yaml', (doc) => {
      const p = doc['provides'] as Record<string, unknown>;
      delete p['database'];
    });
    const plan = planFromText(text, undefined, release, undefined, noDb).plan;
    expect(kinds(plan)).not.toContain('database');
    expect(kinds(plan)).toContain('register');
  });

  it('lays out nodes, containers, VIPs, bootstrap nodes and the five steps', () => {
    const { plan } = planFor(generateInventoryYaml({ controllers: 3, computes: 2 }));
    expect(plan.vips).toEqual({ external: '10.130.255.250', internal_api: '10.129.255.250' });
    const ctl = plan.nodes.find((n) => n.name === 'ctl-1')!;
    expect(ctl.services).toContain('mariadb');
    expect(ctl.containers.find((c) => c.name === 'keystone')!.image).toBe('192.168.24.1:5000/stackctl/keystone:zed-1');
    const cmp = plan.nodes.find((n) => n.name === 'cmp-0')!;
    expect(cmp.containers.map((c) => c.name)).toEqual([
      'openvswitch_db',
      'openvswitch_vswitchd',
      'nova_virtlogd',
      'nova_libvirt',
      'nova_compute',
      'ovn_controller',
      'neutron_ovn_metadata_agent',
    ]);
    expect(plan.services.find((s) => s.name === 'mariadb')!.bootstrap).toBe('ctl-0');
    expect(plan.steps.map((s) => s.step)).toEqual([1, 2, 3, 4, 5]);
    expect(
      plan.steps[0]!.actions.every((a) => a.kind === 'container' && ['haproxy', 'keepalived'].includes(a.service)),
    ).toBe(true);
    expect(
      plan.steps[2]!.actions.filter((a) => a.kind === 'database').map((a) => (a as { database: string }).database),
    ).toContain('nova_cell0');
    expect(
      // registered at the end of keystone's step, before the services that log in as them start
      plan.steps[2]!.actions.filter((a) => a.kind === 'register')
        .map((a) => a.service)
        .sort(),
    ).toEqual(['glance', 'neutron-server', 'nova-api', 'placement']);
    const keystone = plan.services.find((s) => s.name === 'keystone')!;
    expect(keystone.endpoints).toContainEqual({
      type: 'identity',
      interface: 'public',
      url: 'http://10.130.255.250:5000/v3',
    });
  });

  it('renders configs with the secrets but shows only hashes', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 });
    const { plan, effective, rendered } = planFor(
      text,
      allSecrets((n) => `value-of-${n}`),
    );
    const nova = rendered.get('cmp-0')!.get('/etc/stackctl/nova-compute/nova.conf')!;
    expect(nova).toContain('password = value-of-nova_keystone_password');
    expect(nova).toContain('compute_driver = libvirt.LibvirtDriver');
    // Nova's check of old computes stays on outside a fast-forward upgrade
    expect(nova).toContain('disable_compute_service_check_for_ffu = false');
    // Computes get no database credentials: they go through the conductor.
    expect(nova).not.toContain('nova_db_password');
    expect(nova).not.toContain('[database]');
    expect(planToJson(plan)).not.toContain('value-of-');
    // The deploy compares the real file; the printed plan hashes the file with placeholders.
    const novaConf = (p: Plan) => p.nodes[1]!.configs.find((c) => c.dest === '/etc/stackctl/nova-compute/nova.conf')!;
    expect(novaConf(effective).sha256).toBe(sha256(nova));
    expect(novaConf(plan).sha256).toBe(novaConf(planFor(text).plan).sha256);
    expect(planToJson(effective)).not.toContain('value-of-');
  });

  it('is the same without its rendered files, which only deploying commands keep', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 2 });
    const secrets = allSecrets((n) => `value-of-${n}`);
    const loaded = parseInventory('inv.yaml', text, { roles: catalog.roleInfo });
    const addresses = allocate(loaded.inventory, loaded.networks, catalog.roleInfo, EMPTY_IPAM, (p) =>
      loaded.source.locate(p),
    ).addresses;
    const input = { inventory: loaded.inventory, inventoryDigest: sha256(text), catalog, release, addresses, secrets };
    const kept = buildPlan(input);
    const shown = buildPlan({ ...input, keepRendered: false });
    expect(planToJson(shown.plan)).toBe(planToJson(kept.plan));
    expect(planToJson(shown.effective)).toBe(planToJson(kept.effective));
    expect(kept.rendered.size).toBe(3);
    expect(shown.rendered.size).toBe(0);
  });

  it('changes the hash of exactly the containers whose inputs changed', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 });
    const a = planFor(
      text,
      allSecrets((n) => `v1-${n}`),
    ).effective;
    const b = planFor(
      text,
      allSecrets((n) => (n === 'glance_db_password' ? 'v2' : `v1-${n}`)),
    ).effective;
    const hashes = (p: typeof a) =>
      Object.fromEntries(p.nodes.flatMap((n) => n.containers.map((c) => [`${n.name}/${c.name}`, c.hash])));
    const ha = hashes(a);
    const hb = hashes(b);
    const changed = Object.keys(ha).filter((k) => ha[k] !== hb[k]);
    expect(changed).toEqual(['ctl-0/glance_api']);
  });

  it('lets the inventory choose the compute driver, and refuses unknown settings', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 }).replace(
      'release: zed }',
      'release: zed, settings: { nova_compute_driver: fake.FakeDriver } }',
    );
    const { rendered, plan } = planFor(text);
    expect(rendered.get('cmp-0')!.get('/etc/stackctl/nova-compute/nova.conf')).toContain(
      'compute_driver = fake.FakeDriver',
    );
    // libvirt's daemons are declared in the service file and run only with the libvirt driver
    const computeContainers = (p: Plan) =>
      p.nodes
        .find((n) => n.name === 'cmp-0')!
        .containers.map((c) => c.name)
        .filter((c) => c.startsWith('nova_'));
    expect(computeContainers(plan)).toEqual(['nova_compute']);
    expect(computeContainers(planFor(generateInventoryYaml({ controllers: 1, computes: 1 })).plan)).toEqual([
      'nova_virtlogd',
      'nova_libvirt',
      'nova_compute',
    ]);
    const bad = text.replace('nova_compute_driver', 'nova_compute_drivr');
    expect(() => planFor(bad)).toThrow(
      expect.objectContaining({
        issues: [
          expect.objectContaining({
            code: 'E_UNKNOWN_SETTING',
            message: expect.stringMatching(/nova_compute_drivr.*not a setting/),
            hint: expect.stringContaining('Did you mean nova_compute_driver?'),
          }),
        ],
      }),
    );
  });

  it('sends every Glance request to one controller: the file store is node-local, the others stand by', () => {
    const { rendered } = planFor(generateInventoryYaml({ controllers: 3, computes: 1 }));
    const cfg = rendered.get('ctl-2')!.get('/etc/stackctl/haproxy/haproxy.cfg')!;
    const glance = cfg.split('\nlisten ').find((b) => b.startsWith('glance_api'))!;
    expect(glance.match(/^ {2}server \S+/gm)).toEqual(['  server ctl-0', '  server ctl-1', '  server ctl-2']);
    expect(glance.match(/^ {2}server .* backup$/gm)?.map((l) => l.split(' ')[3])).toEqual(['ctl-1', 'ctl-2']);
    // Keystone, stateless, keeps all three active
    const keystone = cfg.split('\nlisten ').find((b) => b.startsWith('keystone'))!;
    expect(keystone).not.toMatch(/ backup$/m);
  });

  it("prepares a compute's own OS for libvirt (KVM module, devices, no host libvirtd), and not for the fake driver", () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 });
    const { plan } = planFor(text);
    const cmp = plan.nodes.find((n) => n.name === 'cmp-0')!;
    expect(cmp.host).toEqual([
      // the kernel datapath of Open vSwitch (the default: hardware)
      expect.objectContaining({ service: 'openvswitch', step: 2, modules: [['openvswitch']] }),
      expect.objectContaining({
        service: 'nova-compute',
        step: 4,
        modules: [['kvm_intel', 'kvm_amd'], ['vhost_net']],
        devices: ['/dev/kvm', '/dev/vhost-net', '/dev/net/tun'],
        stopUnits: expect.arrayContaining(['libvirtd.service', 'libvirtd.socket', 'virtqemud.socket']),
        hint: expect.stringContaining('VT-x or AMD-V'),
      }),
    ]);
    expect(plan.nodes.find((n) => n.name === 'ctl-0')!.host).toEqual([
      expect.objectContaining({ service: 'openvswitch', modules: [['openvswitch']] }),
    ]);
    // in step 4, the node's OS comes before the compute's containers
    const step4 = plan.steps[3]!.actions.filter((a) => a.node === 'cmp-0').map((a) => a.kind);
    expect(step4).toEqual(['host', 'container', 'container', 'container', 'container', 'container']);
    const deploy = planDeploy(plan, catalog);
    const work = deploy.steps.find((s) => s.step === 4)!.nodes.find((n) => n.node === 'cmp-0')!;
    expect(work.host.map((h) => `${h.node} ${h.service}`)).toEqual(['cmp-0 nova-compute']);
    expect(deploy.unsupported).toEqual([]);

    // the lab: Nova's fake driver and Open vSwitch's userspace datapath need nothing of the host
    const lab = planFor(
      text.replace(
        'release: zed }',
        'release: zed, settings: { nova_compute_driver: fake.FakeDriver, ovs_datapath_type: netdev } }',
      ),
    );
    expect(lab.plan.nodes.some((n) => n.host)).toBe(false);
    expect(lab.plan.steps.flatMap((s) => s.actions).some((a) => a.kind === 'host')).toBe(false);
  });

  it('with nova_virt_type qemu (emulation) asks the host for /dev/net/tun only, and gives libvirt its own host_uuid per node and a capped TCG cache', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 2 }).replace(
      'release: zed }',
      'release: zed, settings: { nova_virt_type: qemu, ovs_datapath_type: netdev } }',
    );
    const { plan, rendered } = planFor(text);
    const cmp = plan.nodes.find((n) => n.name === 'cmp-0')!;
    expect(cmp.host).toEqual([expect.objectContaining({ modules: [], devices: ['/dev/net/tun'] })]);
    const uuids = ['cmp-0', 'cmp-1'].map(
      (n) =>
        /^host_uuid = "([0-9a-f-]{36})"$/m.exec(rendered.get(n)!.get('/etc/stackctl/nova-libvirt/libvirtd.conf')!)?.[1],
    );
    expect(uuids[0]).toBe(uuidFromName(`stackctl-node:${plan.cloud.name}/cmp-0`));
    expect(uuids[0]).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(uuids).size).toBe(2);
    expect(rendered.get('cmp-0')!.get('/etc/stackctl/nova-libvirt/qemu-tcg.conf')).toMatch(/^tb_size_mib=64$/m);
    const novaConf = rendered.get('cmp-0')!.get('/etc/stackctl/nova-compute/nova.conf')!;
    expect(novaConf).toMatch(/^virt_type = qemu\n#[^\n]*\ncpu_mode = none$/m);
    // KVM keeps the host's own CPU model (Nova's default) and needs its module and devices
    const kvm = planFor(generateInventoryYaml({ controllers: 1, computes: 1 }));
    expect(kvm.rendered.get('cmp-0')!.get('/etc/stackctl/nova-compute/nova.conf')).not.toMatch(/cpu_mode/);
  });

  it('the last step waits for the Neutron agents the service files declare, gateways by the external network', () => {
    const r = planFor(generateInventoryYaml({ controllers: 1, computes: 2 }));
    const script = r.rendered.get('ctl-0')!.get('/etc/stackctl/neutron-server/wait-agents.py')!;
    // the list, read by Python itself from the rendered source
    const listed = JSON.parse(
      python(
        'import ast,json,sys\n' +
          'values = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(sys.stdin.read()).body\n' +
          '          if isinstance(n, ast.Assign) and n.targets[0].id in ("EXPECTED", "DEADLINE_S")}\n' +
          'print(json.dumps(values))',
        [],
        script,
      ),
    ) as { EXPECTED: [string, string][]; DEADLINE_S: number };
    expect(listed.EXPECTED).toEqual([
      ['cmp-0', 'OVN Controller agent'],
      ['cmp-0', 'OVN Metadata agent'],
      ['cmp-1', 'OVN Controller agent'],
      ['cmp-1', 'OVN Metadata agent'],
      ['ctl-0', 'OVN Controller Gateway agent'],
    ]);
    expect(listed.DEADLINE_S).toBe(300);
    // run once, at the last step, on the bootstrap node; a new agent changes the file, so runs it again
    const step5 = planDeploy(r.plan, catalog).steps.find((s) => s.step === 5)!;
    expect(step5.runOnce.filter((w) => w.kind === 'task').map((w) => `${w.node} ${w.name}`)).toContain(
      'ctl-0 wait-agents',
    );
  });

  it('live migration over TCP: libvirtd listens on the migration network address of each compute, Nova dials it; none by default', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 2 });
    const conf = (r: PlanResult, node: string, file: string): string =>
      r.rendered
        .get(node)!
        .get(file.startsWith('libvirt/') ? `/etc/stackctl/nova-${file}` : `/etc/stackctl/nova-compute/${file}`)!;
    // the default: no listener at all, and Nova has no migration address
    const off = planFor(text);
    expect(conf(off, 'cmp-0', 'libvirt/libvirtd.conf')).toMatch(/^listen_tcp = 0$/m);
    expect(conf(off, 'cmp-0', 'libvirt/libvirtd.conf')).not.toMatch(/listen_addr|auth_tcp/);
    expect(conf(off, 'cmp-0', 'nova.conf')).not.toMatch(/live_migration/);
    const on = planFor(
      text.replace('release: zed }', 'release: zed, settings: { nova_live_migration_transport: tcp } }'),
    );
    for (const node of ['cmp-0', 'cmp-1']) {
      const addr = on.plan.nodes.find((n) => n.name === node)!.addresses['internal_api']!;
      expect(addr).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      const libvirtd = conf(on, node, 'libvirt/libvirtd.conf');
      expect(libvirtd).toMatch(/^listen_tls = 0$/m);
      expect(libvirtd).toMatch(/^listen_tcp = 1$/m);
      expect(libvirtd).toContain(`listen_addr = "${addr}"`);
      expect(libvirtd).toMatch(/^auth_tcp = "none"$/m);
      const nova = conf(on, node, 'nova.conf');
      expect(nova).toMatch(/^live_migration_scheme = tcp$/m);
      expect(nova).toContain(`live_migration_inbound_addr = ${addr}`);
    }
    // (libvirtd itself is started with --listen: the config decides what it listens on)
    const libvirt = catalog.services.get('nova-compute')!.containers.find((c) => c.name === 'nova_libvirt')!;
    expect(libvirt.command).toEqual(['sh', '/etc/stackctl/libvirt/start-libvirtd.sh']);
    expect(conf(on, 'cmp-0', 'libvirt/start-libvirtd.sh').trimEnd().split('\n').at(-1)).toBe('exec libvirtd --listen');
    // another network by name: the computes' tenant addresses
    const tenant = planFor(
      text.replace(
        'release: zed }',
        'release: zed, settings: { nova_live_migration_transport: tcp, nova_migration_network: tenant } }',
      ),
    );
    const tenantAddr = tenant.plan.nodes.find((n) => n.name === 'cmp-1')!.addresses['tenant']!;
    expect(conf(tenant, 'cmp-1', 'libvirt/libvirtd.conf')).toContain(`listen_addr = "${tenantAddr}"`);
    // a network the computes have no address on, and one the inventory does not define: refused, located
    for (const [net, message] of [
      ['external', /network 'external', on which node\(s\) cmp-0, cmp-1 have no address/],
      ['storage', /network 'storage', which this inventory does not define/],
    ] as const) {
      const bad = text.replace(
        'release: zed }',
        `release: zed, settings: { nova_live_migration_transport: tcp, nova_migration_network: ${net} } }`,
      );
      expect(() => planFor(bad)).toThrow(
        expect.objectContaining({
          issues: [expect.objectContaining({ code: 'E_SETTING_NETWORK', message: expect.stringMatching(message) })],
        }),
      );
    }
  });

  it("takes the release manifest's settings over the services' defaults: epoxy's RabbitMQ 4 gets no mirroring policy", () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 });
    const defs = (r: PlanResult): Record<string, unknown> =>
      JSON.parse(r.rendered.get('ctl-0')!.get('/etc/stackctl/rabbitmq/definitions.json')!) as Record<string, unknown>;
    const epoxy = loadRelease(defaultReleasesDir(), 'epoxy');
    expect(defs(planFor(text)).policies).toEqual([expect.objectContaining({ name: 'ha-all' })]);
    expect(defs(planFor(text, undefined, epoxy)).policies).toEqual([]);
    // the inventory still has the last word
    const forced = text.replace('release: zed }', 'release: zed, settings: { rabbitmq_mirror_queues: true } }');
    expect(defs(planFor(forced, undefined, epoxy)).policies).toHaveLength(1);
    // the lab's fake driver: the release picks the class (epoxy's nova-compute keeps a stable node identity)
    const lab = text.replace('release: zed }', 'release: zed, settings: { nova_compute_driver: fake.FakeDriver } }');
    const driverLine = (r: PlanResult): string | undefined =>
      r.rendered
        .get('cmp-0')!
        .get('/etc/stackctl/nova-compute/nova.conf')!
        .split('\n')
        .find((l) => l.startsWith('compute_driver'));
    expect(driverLine(planFor(lab))).toBe('compute_driver = fake.FakeDriver');
    expect(driverLine(planFor(lab, undefined, epoxy))).toBe('compute_driver = fake.FakeDriverWithoutFakeNodes');
    expect(driverLine(planFor(text, undefined, epoxy))).toBe('compute_driver = libvirt.LibvirtDriver');
    const typo = { ...epoxy, settings: { rabbitmq_mirror_queue: false } };
    expect(() => planFor(text, undefined, typo)).toThrow(
      expect.objectContaining({
        code: 'E_UNKNOWN_SETTING',
        message: expect.stringContaining('settings.rabbitmq_mirror_queue of release manifest epoxy'),
      }),
    );
  });

  it('adding a node changes no other node', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const before = JSON.parse((await runCli('plan', '-i', inv, '--json')).stdout);
    const text = readFileSync(inv, 'utf8').replace(
      'nodes:\n',
      "nodes:\n  - name: cmp-new\n    role: Compute\n    bmc: { address: 'ipmi://10.1.1.99', credentials: bmc-computes }\n    nics: [ { mac: '0c:c4:7a:20:00:99', network: provisioning } ]\n",
    );
    writeFileSync(inv, text);
    const after = JSON.parse((await runCli('plan', '-i', inv, '--json')).stdout);
    for (const node of before.nodes) {
      const same = after.nodes.find((n: { name: string }) => n.name === node.name);
      expect(same.addresses).toEqual(node.addresses);
      if (node.role === 'Compute') expect(same).toEqual(node);
    }
  });

  it('prints the same plan whatever secrets each machine generated', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 });
    const one = planFor(
      text,
      allSecrets((n) => `machine-one-${n}`),
    );
    const two = planFor(
      text,
      allSecrets((n) => `machine-two-${n}`),
    );
    expect(planToJson(one.plan)).toBe(planToJson(two.plan));
    expect(planToJson(one.effective)).not.toBe(planToJson(two.effective));
  });
});
