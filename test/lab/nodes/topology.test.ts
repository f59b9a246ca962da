import { describe, expect, it } from 'vitest';
import { parseInventory } from '../../../src/inventory/load.js';
import { loadCatalog } from '../../../src/roles/catalog.js';
import { defaultRolesDir } from '../../../src/core/paths.js';
import { labInventoryYaml, TOPOLOGIES } from '../../../src/lab/nodes/topology.js';
import { planLab } from '../../../src/lab/nodes/lab.js';
import { allocate, EMPTY_IPAM } from '../../../src/inventory/ipam.js';
import { release } from '../../images/fixture.js';

describe('container lab topologies', () => {
  const catalog = loadCatalog(defaultRolesDir());
  for (const [name, t] of Object.entries(TOPOLOGIES)) {
    it(`${name}: a valid inventory whose networks become Docker networks with the IPAM addresses`, () => {
      const text = labInventoryYaml({ name: 'lab', topology: name, prefix16: '10.96', bmcPort: 6230 });
      const loaded = parseInventory('lab.yaml', text, { roles: catalog.roleInfo });
      expect(loaded.inventory.nodes).toHaveLength(t.controllers + t.computes);
      // the lab's registry speaks plain HTTP, and its inventory says so
      expect(loaded.inventory.cloud.registry_insecure).toBe(true);
      // the lab's nodes share this machine's cores: an upgrade pulls on one at a time
      expect(loaded.inventory.upgrade?.pull?.concurrency).toBe(1);
      const alloc = allocate(loaded.inventory, loaded.networks, catalog.roleInfo, EMPTY_IPAM, () => ({
        file: 'lab.yaml',
      }));
      expect(alloc.issues.filter((i) => i.severity === 'error')).toEqual([]);
      const plan = planLab({
        inventoryFile: '/tmp/lab.yaml',
        name: 'lab',
        registry: loaded.inventory.cloud.registry!,
        registryInsecure: loaded.inventory.cloud.registry_insecure === true,
        release,
        networks: loaded.networks,
        nodes: loaded.inventory.nodes.map((n) => ({
          name: n.name,
          role: n.role,
          addresses: alloc.addresses.get(n.name)!,
        })),
      });
      expect(plan.networks.map((n) => n.docker).sort()).toEqual(
        ['external', 'internal_api', 'provisioning', 'tenant'].map((n) => `stackctl-lab-${n}`),
      );
      expect(plan.registry).toEqual({ network: 'stackctl-lab-provisioning', ip: '10.96.24.1', port: '5000' });
      for (const n of plan.nodes) {
        expect(Object.keys(n.addresses)[0]).toBe('provisioning');
        expect(n.sshAddress).toMatch(/^10\.96\.24\.\d+$/);
      }
      // this machine's address on each network is outside every node's
      const gateways = new Set(plan.networks.map((n) => n.gateway));
      for (const n of plan.nodes) for (const ip of Object.values(n.addresses)) expect(gateways.has(ip)).toBe(false);
    });
  }

  it("chooses Nova's virt driver by a setting: the fake driver by default, libvirt/TCG with the guest image on --compute libvirt", () => {
    const settings = (compute?: 'fake' | 'libvirt') => {
      const text = labInventoryYaml({
        name: 'lab',
        topology: '1ctl-1comp',
        prefix16: '10.96',
        bmcPort: 6230,
        ...(compute ? { compute } : {}),
      });
      const cloud = parseInventory('lab.yaml', text, { roles: catalog.roleInfo }).inventory.cloud;
      return { settings: cloud.settings, images: cloud.resources?.images };
    };
    expect(settings()).toEqual({
      settings: { nova_compute_driver: 'fake.FakeDriver', nova_virt_type: 'qemu', ovs_datapath_type: 'netdev' },
      images: [{ name: 'lab-tiny', size_kb: 1024 }],
    });
    expect(settings('libvirt')).toEqual({
      settings: {
        nova_compute_driver: 'libvirt.LibvirtDriver',
        nova_virt_type: 'qemu',
        nova_live_migration_transport: 'tcp',
        ovs_datapath_type: 'netdev',
      },
      images: [{ name: 'lab-guest', build: 'guest' }],
    });
  });

  it('rejects an unknown topology with the known ones', () => {
    expect(() => labInventoryYaml({ name: 'lab', topology: '9ctl', prefix16: '10.96', bmcPort: 6230 })).toThrow(
      /no lab topology '9ctl'/,
    );
  });
});
