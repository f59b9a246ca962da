/**
 * What `stackctl deploy` does with the nodes before the services: which
 * nodes it provisions and what each still needs, by state (the table walked
 * row by row), the nodes it never touches (active, preprovisioned), the
 * states it refuses, and a dry run that touches nothing.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import { nodesToProvision, provisionBeforeDeploy, withoutNodes } from '../../src/cli/deploy-nodes.js';
import type { DeployPlan } from '../../src/orchestrator/planner.js';
import { targetOf } from '../../src/cli/nodes-provision.js';
import { nodeFiles } from '../../src/provision/deploy.js';
import { nodesFileFor } from '../../src/provision/machine.js';
import { ALL_STATES, NodeState } from '../../src/provision/states.js';
import { copyInventory } from '../helpers/cli.js';

const inventory = { nodes: [{ name: 'a' }, { name: 'b', preprovisioned: true }] } as Parameters<
  typeof nodesToProvision
>[0];

describe('nodes deploy provisions first', () => {
  it.each([
    { state: NodeState.ENROLL, phases: ['enroll', 'inspect', 'provision'] },
    { state: NodeState.MANAGEABLE, phases: ['inspect', 'provision'] },
    { state: NodeState.INSPECT_FAILED, phases: ['inspect', 'provision'] },
    { state: NodeState.CLEAN_FAILED, phases: ['provision'] },
    { state: NodeState.AVAILABLE, phases: ['provision'] },
    { state: NodeState.DEPLOY_FAILED, phases: ['provision'] },
    { state: NodeState.ERROR, phases: ['provision'] },
  ])('from $state: $phases', ({ state, phases }) => {
    expect(
      nodesToProvision(
        inventory,
        () => state,
        () => false,
        false,
      ),
    ).toEqual([{ node: 'a', state, phases }]);
  });

  it('skips the inspection of a manageable node that was inspected already', () => {
    expect(
      nodesToProvision(
        inventory,
        () => NodeState.MANAGEABLE,
        () => true,
        false,
      )[0]!.phases,
    ).toEqual(['provision']);
  });

  it('leaves active and preprovisioned nodes alone, whatever the state file says of the latter', () => {
    expect(
      nodesToProvision(
        inventory,
        () => NodeState.ACTIVE,
        () => false,
        false,
      ),
    ).toEqual([]);
    const seen: string[] = [];
    nodesToProvision(
      inventory,
      (n) => {
        seen.push(n);
        return NodeState.ENROLL;
      },
      () => false,
      false,
    );
    expect(seen).toEqual(['a']);
  });

  it.each([
    NodeState.VERIFYING,
    NodeState.INSPECTING,
    NodeState.INSPECT_WAIT,
    NodeState.CLEANING,
    NodeState.CLEAN_WAIT,
    NodeState.DEPLOYING,
    NodeState.DEPLOY_WAIT,
  ])('takes a node in %s up again only with --resume', (state) => {
    expect(() =>
      nodesToProvision(
        inventory,
        () => state,
        () => false,
        false,
      ),
    ).toThrow(expect.objectContaining({ code: 'E_NODE_STATE', hint: expect.stringContaining('--resume') }));
    expect(
      nodesToProvision(
        inventory,
        () => state,
        () => false,
        true,
      ),
    ).toHaveLength(1);
  });

  it('refuses a node being undeployed, even with --resume: that operation is finished by nodes undeploy', () => {
    expect(() =>
      nodesToProvision(
        inventory,
        () => NodeState.UNDEPLOYING,
        () => false,
        true,
      ),
    ).toThrow(expect.objectContaining({ code: 'E_NODE_STATE', hint: expect.stringContaining('nodes undeploy') }));
  });

  it('has a decision for every state', () => {
    for (const state of ALL_STATES) {
      let decided = true;
      try {
        nodesToProvision(
          inventory,
          () => state,
          () => false,
          true,
        );
      } catch {
        decided = state === NodeState.UNDEPLOYING;
      }
      expect(decided, state).toBe(true);
    }
  });

  it('drops the work of nodes not provisioned yet from a plan (a dry run cannot look into them)', () => {
    const plan = {
      cloud: 'c',
      unsupported: [],
      steps: [{ step: 2, title: 't', nodes: [{ node: 'a' }, { node: 'b' }], runOnce: [{ node: 'a' }, { node: 'b' }] }],
    } as unknown as DeployPlan;
    const out = withoutNodes(plan, ['a']);
    expect(out.steps[0]!.nodes.map((n) => n.node)).toEqual(['b']);
    expect(out.steps[0]!.runOnce.map((n) => n.node)).toEqual(['b']);
    expect(withoutNodes(plan, [])).toBe(plan);
  });
});

describe('targetOf', () => {
  it("carries the node's other networks (VLAN tags from the inventory) and the registry its dockerd pulls from", () => {
    const all = loadAll({ inventory: copyInventory('lab.yaml') });
    const t = targetOf(all, 'ctl-0');
    expect(t).toMatchObject({ node: 'ctl-0', mac: '52:54:00:00:10:01', prefix: 24, gateway: '192.168.24.1' });
    // plain HTTP because the inventory says so (cloud.registry_insecure: true)
    expect(all.loaded.inventory.cloud.registry_insecure).toBe(true);
    expect(t.insecureRegistries).toEqual(['192.168.24.1:5000']);
    expect(t.networks).toContainEqual({ name: 'internal_api', ip: '172.17.0.11', prefix: 24, vlan: 20 });
    expect(t.networks?.find((n) => n.name === 'external')).toMatchObject({ prefix: 24 });
    expect(t.networks?.find((n) => n.name === 'external')?.vlan).toBeUndefined();
    expect(t.networks?.some((n) => n.name === 'provisioning')).toBe(false);
  });

  it('lists no registry as insecure, and writes no daemon.json, unless the inventory says the registry is plain HTTP', () => {
    const all = loadAll({ inventory: copyInventory('lab.yaml') });
    const inv = all.loaded.inventory;
    // (validate refuses such an inventory today: the TLS registry is to come; the target already follows the flag)
    const tls = {
      ...all,
      loaded: { ...all.loaded, inventory: { ...inv, cloud: { ...inv.cloud, registry_insecure: false } } },
    };
    const t = targetOf(tls, 'ctl-0');
    expect(t.insecureRegistries).toEqual([]);
    expect(nodeFiles(t, 'ssh-ed25519 AAAA test').map((f) => f.path)).not.toContain('/etc/docker/daemon.json');
    expect(nodeFiles(targetOf(all, 'ctl-0'), 'ssh-ed25519 AAAA test').map((f) => f.path)).toContain(
      '/etc/docker/daemon.json',
    );
  });
});

describe('provisionBeforeDeploy', () => {
  it('a dry run prints the nodes to provision and writes nothing', async () => {
    const file = copyInventory('lab.yaml');
    let text = '';
    const all = loadAll({ inventory: file });
    const pending = await provisionBeforeDeploy({
      opts: { inventory: file, dryRun: true },
      all,
      concurrency: 4,
      write: (t) => void (text += t),
      tty: false,
    });
    expect(pending.map((p) => p.node)).toEqual(['ctl-0', 'cmp-0']);
    expect(text).toMatch(/ctl-0\s+enroll\s+enroll, inspect, provision/);
    expect(text).toContain('dry run: 2 node(s) would be provisioned first');
    expect(existsSync(nodesFileFor(file))).toBe(false);
  });

  it('does nothing, and opens no session, when every node is preprovisioned', async () => {
    const file = copyInventory('lab.yaml');
    writeFileSync(
      file,
      readFileSync(file, 'utf8').replace(/root_device: \{ min_size_gb: 8 \}/g, '$&\n    preprovisioned: true'),
    );
    let text = '';
    const pending = await provisionBeforeDeploy({
      opts: { inventory: file },
      all: loadAll({ inventory: file }),
      concurrency: 4,
      write: (t) => void (text += t),
      tty: false,
    });
    expect(pending).toEqual([]);
    expect(text).toBe('');
    expect(existsSync(nodesFileFor(file))).toBe(false);
    expect(existsSync(file.replace(/\.yaml$/, '.events.jsonl'))).toBe(false);
  });
});
