/**
 * Tenant networking in the plan: Open vSwitch and ovn-controller where ports and gateways are,
 * OVN's databases standalone or as a RAFT cluster, the datapath chosen by a setting, Neutron's
 * ML2/OVN configuration, and the starter networks of `cloud.resources`.
 */
import { describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { planDeploy } from '../../src/orchestrator/planner.js';
import { catalog, planFromText } from '../helpers/plan.js';

const withSettings = (text: string, settings: string): string =>
  text.replace('release: zed }', `release: zed, settings: { ${settings} } }`);
const file = (r: ReturnType<typeof planFromText>, node: string, path: string): string => {
  const f = r.rendered.get(node)?.get(path);
  if (f === undefined) throw new Error(`no ${path} on ${node}`);
  return f;
};
const RESOURCES = `  resources:
    external_network: { name: public, floating_range: [10.130.1.10, 10.130.1.99] }
    tenant_network: { name: demo-net, cidr: 192.168.200.0/24, router: demo-router }
`;
/** A generated inventory with cloud.resources, the nodes of the external network kept below 10.130.1.0. */
const withResources = (text: string, resources = RESOURCES): string =>
  text
    .replace(
      'cloud: { name: gen, registry_insecure: true, release: zed }',
      `cloud:\n  name: gen\n  registry_insecure: true\n  release: zed\n${resources}`,
    )
    .replace(
      'external: { cidr: 10.130.0.0/16, gateway: 10.130.0.1, vip: 10.130.255.250 }',
      'external: { cidr: 10.130.0.0/16, gateway: 10.130.0.1, vip: 10.130.255.250, allocation_range: [10.130.0.10, 10.130.0.250] }',
    );

describe('tenant networking in the plan', () => {
  it('puts Open vSwitch and ovn-controller on computes and controllers, OVN central on the controllers', () => {
    const { plan } = planFromText(generateInventoryYaml({ controllers: 3, computes: 1 }));
    const names = (node: string) => plan.nodes.find((n) => n.name === node)!.containers.map((c) => c.name);
    expect(names('cmp-0')).toEqual(
      expect.arrayContaining(['openvswitch_db', 'openvswitch_vswitchd', 'ovn_controller']),
    );
    expect(names('cmp-0')).not.toContain('ovn_nb_db');
    for (const c of ['ctl-0', 'ctl-1', 'ctl-2'])
      expect(names(c)).toEqual(
        expect.arrayContaining(['openvswitch_vswitchd', 'ovn_controller', 'ovn_nb_db', 'ovn_sb_db', 'ovn_northd']),
      );
    // OVN's databases before Neutron and before the chassis that connect to them
    const step = (svc: string) => plan.services.find((s) => s.name === svc)!.step;
    expect(step('ovn-central')).toBeLessThan(step('neutron-server'));
    expect(step('openvswitch')).toBeLessThanOrEqual(step('ovn-controller'));
  });

  it('makes the gateway chassis of the nodes on the external network, br-ex mapped to the physnet', () => {
    const r = planFromText(
      withSettings(generateInventoryYaml({ controllers: 1, computes: 1 }), 'neutron_external_physnet: datacentre'),
    );
    const ctl = file(r, 'ctl-0', '/etc/stackctl/ovn-controller/start.sh');
    expect(ctl).toMatch(/^gateway=yes$/m);
    expect(ctl).toContain('external_ids:ovn-bridge-mappings=datacentre:br-ex');
    expect(ctl).toContain('external_ids:ovn-encap-ip=10.131.');
    // a restarted ovn-controller keeps br-int's flows while it computes its own (the setting's default)
    expect(ctl).toMatch(/^ {2}external_ids:ovn-ofctrl-wait-before-clear=10000$/m);
    expect(file(r, 'cmp-0', '/etc/stackctl/ovn-controller/start.sh')).toMatch(/^gateway=$/m);
    // Neutron 21 reads the gateway flag and the physnets from the Southbound Chassis row's external_ids:
    // the start script mirrors both keys there from the chassis' own settings, on every node
    for (const node of ['ctl-0', 'cmp-0']) {
      const start = file(r, node, '/etc/stackctl/ovn-controller/start.sh');
      expect(start).toMatch(/^ {2}for key in ovn-cms-options ovn-bridge-mappings; do$/m);
      expect(start).toContain('sb set Chassis "$chassis" "external_ids:$key=$want"');
      expect(start).toContain('sb remove Chassis "$chassis" external_ids "$key"');
    }
    expect(file(r, 'ctl-0', '/etc/stackctl/openvswitch/start-vswitchd.sh')).toMatch(/^external_ip=10\.130\./m);
    expect(file(r, 'cmp-0', '/etc/stackctl/openvswitch/start-vswitchd.sh')).toMatch(/^external_ip=$/m);
    const ml2 = file(r, 'ctl-0', '/etc/stackctl/neutron-server/ml2_conf.ini');
    expect(ml2).toContain('flat_networks = datacentre');
    expect(ml2).toContain('mechanism_drivers = ovn');
    expect(ml2).toContain('tenant_network_types = geneve');
    expect(ml2).toMatch(/^ovn_nb_connection = tcp:10\.129\.\d+\.\d+:6641$/m);
    expect(file(r, 'ctl-0', '/etc/stackctl/neutron-server/neutron.conf')).toContain('service_plugins = ovn-router');
  });

  it('chooses the datapath by a setting: the kernel one (module loaded by host preparation) or the userspace one', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 });
    const hw = planFromText(text);
    expect(file(hw, 'cmp-0', '/etc/stackctl/openvswitch/start-vswitchd.sh')).toMatch(/^dp=system$/m);
    expect(hw.plan.nodes.find((n) => n.name === 'cmp-0')!.host).toEqual(
      expect.arrayContaining([expect.objectContaining({ service: 'openvswitch', modules: [['openvswitch']] })]),
    );
    const lab = planFromText(withSettings(text, 'ovs_datapath_type: netdev'));
    expect(file(lab, 'cmp-0', '/etc/stackctl/openvswitch/start-vswitchd.sh')).toMatch(/^dp=netdev$/m);
    expect(file(lab, 'cmp-0', '/etc/stackctl/ovn-controller/start.sh')).toContain(
      'external_ids:ovn-bridge-datapath-type=netdev',
    );
    expect(lab.plan.nodes.find((n) => n.name === 'cmp-0')!.host ?? []).not.toEqual(
      expect.arrayContaining([expect.objectContaining({ service: 'openvswitch' })]),
    );
    // the flows kept through an ovn-controller restart: the inventory's time, bounded
    const keep = planFromText(withSettings(text, 'ovn_ofctrl_wait_before_clear_ms: 30000'));
    expect(file(keep, 'cmp-0', '/etc/stackctl/ovn-controller/start.sh')).toContain(
      'external_ids:ovn-ofctrl-wait-before-clear=30000',
    );
    expect(() => planFromText(withSettings(text, 'ovn_ofctrl_wait_before_clear_ms: -1'))).toThrow(
      expect.objectContaining({
        issues: [
          expect.objectContaining({
            code: 'E_SETTING_VALUE',
            message: expect.stringContaining('ovn_ofctrl_wait_before_clear_ms'),
          }),
        ],
      }),
    );
    expect(() => planFromText(withSettings(text, 'ovs_datapath_type: dpdk'))).toThrow(
      expect.objectContaining({
        issues: [
          expect.objectContaining({ code: 'E_SETTING_VALUE', message: expect.stringContaining('ovs_datapath_type') }),
        ],
      }),
    );
  });

  it('gives tenant networks the underlay MTU: global_physnet_mtu is the tenant network MTU', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 }).replace(
      'tenant: { cidr: 10.131.0.0/16, vlan: 50 }',
      'tenant: { cidr: 10.131.0.0/16, vlan: 50, mtu: 9000 }',
    );
    const r = planFromText(text);
    expect(file(r, 'ctl-0', '/etc/stackctl/neutron-server/neutron.conf')).toContain('global_physnet_mtu = 9000');
    expect(file(r, 'cmp-0', '/etc/stackctl/openvswitch/start-vswitchd.sh')).toMatch(/^tunnel_mtu=9000$/m);
    expect(file(r, 'ctl-0', '/etc/stackctl/neutron-server/ml2_conf.ini')).toContain('max_header_size = 38');
  });

  it("sends Nova port events as Nova's service user, and the compute waits for them (fatal after the timeout)", () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 });
    const r = planFromText(text);
    const neutron = file(r, 'ctl-0', '/etc/stackctl/neutron-server/neutron.conf');
    expect(neutron).toMatch(/^notify_nova_on_port_status_changes = true$/m);
    expect(neutron).toMatch(/^notify_nova_on_port_data_changes = true$/m);
    const section = /^\[nova\]\n([^[]*)/m.exec(neutron)?.[1] ?? '';
    expect(section).toMatch(/^username = nova$/m);
    expect(section).toMatch(/^project_name = service$/m);
    expect(section).toMatch(/^endpoint_type = internal$/m);
    // the same password as nova's own [keystone_authtoken]
    const novaConf = file(r, 'ctl-0', '/etc/stackctl/nova-api/nova.conf');
    const novaPassword = /^\[keystone_authtoken\]\n[^[]*?^password = (.+)$/m.exec(novaConf)?.[1];
    expect(novaPassword).toBeTruthy();
    expect(section).toContain(`password = ${novaPassword}`);
    const compute = file(r, 'cmp-0', '/etc/stackctl/nova-compute/nova.conf');
    expect(compute).toMatch(/^vif_plugging_timeout = 300$/m);
    expect(compute).toMatch(/^vif_plugging_is_fatal = true$/m);
    const noWait = planFromText(withSettings(text, 'nova_vif_plugging_timeout: 0'));
    expect(file(noWait, 'cmp-0', '/etc/stackctl/nova-compute/nova.conf')).toMatch(/^vif_plugging_is_fatal = false$/m);
  });

  it('runs OVN standalone on one controller, a RAFT cluster joined through the bootstrap node on three', () => {
    const one = planFromText(generateInventoryYaml({ controllers: 1, computes: 1 }));
    const db1 = file(one, 'ctl-0', '/etc/stackctl/ovn-central/start-db.sh');
    expect(db1).toMatch(/^members=10\.129\.\d+\.\d+$/m);
    const three = planFromText(generateInventoryYaml({ controllers: 3, computes: 1 }));
    const addr = (n: string) => three.plan.nodes.find((x) => x.name === n)!.addresses['internal_api'];
    const db2 = file(three, 'ctl-2', '/etc/stackctl/ovn-central/start-db.sh');
    expect(db2).toContain(`members=${['ctl-0', 'ctl-1', 'ctl-2'].map(addr).join(',')}`);
    expect(db2).toContain(`bootstrap_address=${addr('ctl-0')}`);
    expect(db2).toContain(`address=${addr('ctl-2')}`);
    const northd = file(three, 'ctl-1', '/etc/stackctl/ovn-central/start-northd.sh');
    expect(northd).toContain(`--ovnsb-db=${['ctl-0', 'ctl-1', 'ctl-2'].map((n) => `tcp:${addr(n)}:6642`).join(',')}`);
    // a quorum service: the bootstrap node's members first, then the others join
    expect(three.plan.services.find((s) => s.name === 'ovn-central')!.bootstrap).toBe('ctl-0');
    expect(catalog.services.get('ovn-central')!.bootstrap_first).toBe(true);
  });

  it('makes the external network, its floating-IP subnet, a tenant network and its router at step 5', () => {
    const r = planFromText(withResources(generateInventoryYaml({ controllers: 1, computes: 1 })));
    expect(r.plan.cloud.resources).toEqual({
      flavors: [],
      images: [],
      external_network: {
        name: 'public',
        physnet: 'physnet1',
        cidr: '10.130.0.0/16',
        gateway: '10.130.0.1',
        floating_range: ['10.130.1.10', '10.130.1.99'],
      },
      tenant_network: { name: 'demo-net', cidr: '192.168.200.0/24', router: 'demo-router' },
    });
    const work = planDeploy(r.plan, catalog)
      .steps.flatMap((s) => s.runOnce)
      .find((w) => w.kind === 'resources');
    expect(work && 'resources' in work ? work.resources.external_network?.name : undefined).toBe('public');
  });

  it.each([
    ['a range outside the network', '[10.140.0.10, 10.140.0.20]', /not a range inside network external/],
    ['a range holding the VIP', '[10.130.255.200, 10.130.255.254]', /holds the VIP of network external/],
    ['a reversed range', '[10.130.1.99, 10.130.1.10]', /not a range inside network external/],
    ['a range overlapping the nodes', '[10.130.0.200, 10.130.1.20]', /overlaps the addresses IPAM gives nodes/],
  ])('refuses %s, naming the line', (_what, range, message) => {
    const text = withResources(
      generateInventoryYaml({ controllers: 1, computes: 1 }),
      `  resources:\n    external_network: { name: public, floating_range: ${range} }\n`,
    );
    expect(() => planFromText(text)).toThrow(
      expect.objectContaining({
        issues: [
          expect.objectContaining({
            code: 'E_EXTERNAL_NETWORK',
            message: expect.stringMatching(message),
            location: expect.objectContaining({ line: 6 }),
          }),
        ],
      }),
    );
  });

  it('refuses an external network the inventory lacks, and a tenant MTU that cannot carry Geneve', () => {
    const missing = withResources(
      generateInventoryYaml({ controllers: 1, computes: 1 }),
      '  resources:\n    external_network: { name: public, network: provider, floating_range: [10.130.1.10, 10.130.1.20] }\n',
    );
    expect(() => planFromText(missing)).toThrow(
      expect.objectContaining({
        issues: [
          expect.objectContaining({ code: 'E_EXTERNAL_NETWORK', message: expect.stringContaining("'provider'") }),
        ],
      }),
    );
    const small = generateInventoryYaml({ controllers: 1, computes: 1 }).replace(
      'tenant: { cidr: 10.131.0.0/16, vlan: 50 }',
      'tenant: { cidr: 10.131.0.0/16, vlan: 50, mtu: 1300 }',
    );
    expect(() => planFromText(small)).toThrow(
      expect.objectContaining({
        issues: [expect.objectContaining({ code: 'E_TENANT_MTU', hint: expect.stringContaining('at least 1338') })],
      }),
    );
  });
});
