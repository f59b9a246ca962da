/** The per-node provisioning steps: the deploy target of an inventory node, the states each operation starts from. */
import { describe, expect, it } from 'vitest';
import { loadAll } from '../../../src/cli/context.js';
import { siteOf } from '../../../src/cli/nodes-session.js';
import { nodeFiles } from '../../../src/provision/deploy.js';
import { ALL_STATES, NodeState } from '../../../src/provision/states.js';
import { checkStartState, targetOf } from '../../../src/provision/workflows/provision-node.js';
import { copyInventory } from '../../helpers/cli.js';
import { tlsRegistryInventory } from '../../helpers/tls.js';

describe('targetOf', () => {
  it("carries the node's other networks (VLAN tags from the inventory) and the registry its dockerd pulls from", () => {
    const site = siteOf(loadAll({ inventory: copyInventory('lab.yaml') }));
    const t = targetOf(site, 'ctl-0');
    expect(t).toMatchObject({ node: 'ctl-0', mac: '52:54:00:00:10:01', prefix: 24, gateway: '192.168.24.1' });
    // plain HTTP because the inventory says so (cloud.registry_insecure: true)
    expect(site.inventory.cloud.registry_insecure).toBe(true);
    expect(t.insecureRegistries).toEqual(['192.168.24.1:5000']);
    expect(t.networks).toContainEqual({ name: 'internal_api', ip: '172.17.0.11', prefix: 24, vlan: 20 });
    expect(t.networks?.find((n) => n.name === 'external')).toMatchObject({ prefix: 24 });
    expect(t.networks?.find((n) => n.name === 'external')?.vlan).toBeUndefined();
    expect(t.networks?.some((n) => n.name === 'provisioning')).toBe(false);
  });

  it('lists no registry as insecure, and writes no daemon.json, unless the inventory says the registry is plain HTTP', () => {
    const site = siteOf(loadAll({ inventory: copyInventory('lab.yaml') }));
    const inv = site.inventory;
    const tls = { ...site, inventory: { ...inv, cloud: { ...inv.cloud, registry_insecure: false } } };
    const t = targetOf(tls, 'ctl-0');
    expect(t.insecureRegistries).toEqual([]);
    expect(nodeFiles(t, 'ssh-ed25519 AAAA test').map((f) => f.path)).not.toContain('/etc/docker/daemon.json');
    expect(nodeFiles(targetOf(site, 'ctl-0'), 'ssh-ed25519 AAAA test').map((f) => f.path)).toContain(
      '/etc/docker/daemon.json',
    );
  });

  it("with a tls section and registry_insecure false, the node's dockerd trusts the cloud CA for the registry", async () => {
    const { file, ca } = await tlsRegistryInventory();
    const site = siteOf(loadAll({ inventory: file }));
    expect(site.registryCa).toBe(ca);
    const t = targetOf(site, 'ctl-0');
    expect(t.insecureRegistries).toEqual([]);
    expect(t.registryTrust).toEqual({ registry: '192.168.24.1:5000', ca });
    const files = nodeFiles(t, 'ssh-ed25519 AAAA test');
    expect(files.map((f) => f.path)).not.toContain('/etc/docker/daemon.json');
    expect(files.find((f) => f.path === '/etc/docker/certs.d/192.168.24.1:5000/ca.crt')).toMatchObject({
      mode: 0o644,
      content: ca,
    });
    // only the CA goes to the node over the provisioning network: no key of any kind
    expect(JSON.stringify(files)).not.toContain('PRIVATE KEY');
  });
});

describe('checkStartState', () => {
  const starts = {
    provision: ['manageable', 'clean failed', 'available', 'deploy failed', 'error', 'active'],
    undeploy: ['active', 'deploy failed', 'error'],
  };
  const resumes = {
    provision: ['cleaning', 'clean wait', 'deploying', 'deploy wait'],
    undeploy: ['undeploying', 'cleaning', 'clean wait'],
  };
  it.each(['provision', 'undeploy'] as const)(
    '%s: starts from its states, carries on the others only with resume',
    (op) => {
      for (const state of ALL_STATES) {
        const starts_ = (starts[op] as string[]).includes(state);
        const resumes_ = (resumes[op] as string[]).includes(state);
        const ok = (resume: boolean): boolean => {
          try {
            checkStartState(state, 'n1', op, resume);
            return true;
          } catch (e) {
            expect(e).toMatchObject({ code: 'E_NODE_STATE', exitCode: 2 });
            return false;
          }
        };
        expect(ok(false), `${op} from ${state}`).toBe(starts_);
        expect(ok(true), `${op} --resume from ${state}`).toBe(starts_ || resumes_);
      }
    },
  );

  it('says what to do instead', () => {
    expect(() => checkStartState(NodeState.DEPLOY_WAIT, 'n1', 'provision', false)).toThrow(
      expect.objectContaining({ hint: 'An interrupted provision: carry on with --resume.' }),
    );
    expect(() => checkStartState(NodeState.ENROLL, 'n1', 'provision', false)).toThrow(
      expect.objectContaining({ hint: expect.stringContaining('stackctl nodes enroll --node n1') }),
    );
  });
});
