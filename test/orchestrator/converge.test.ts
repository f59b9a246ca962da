/**
 * The deploy as the engine's phases, from what a deploy observed: a fresh cloud is created step by
 * step, a converged one gets no phase at all, and a change to a service that runs on several nodes
 * rolls node by node (quorum clusters one member at a time, with their cluster check around each),
 * while a service on one node is recreated in place with an outage declared.
 */
import { describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { planConverge, predictions, runOnceKey, type Observation } from '../../src/orchestrator/converge.js';
import type { NodeAction, Phase } from '../../src/orchestrator/model.js';
import { planDeploy, type DeployPlan } from '../../src/orchestrator/planner.js';
import { ContainerAction, type ConfigDiff, type ContainerDiff } from '../../src/orchestrator/state.js';
import { catalog, planFromText } from '../helpers/plan.js';

/**
 * The deploy plan of a lab-shaped cloud on Nova's fake driver and Open vSwitch's userspace datapath
 * (no libvirt containers, no host preparation).
 */
const deployOf = (controllers: number, computes = 1): DeployPlan =>
  planDeploy(
    planFromText(
      generateInventoryYaml({ name: 'lab', controllers, computes, lab: true }).replace(
        'release: zed }',
        'release: zed, settings: { nova_compute_driver: fake.FakeDriver, ovs_datapath_type: netdev } }',
      ),
    ).effective,
    catalog,
  );

/** An observation of `plan` where every container is `action` unless `over` says otherwise. */
function observed(
  plan: DeployPlan,
  o: {
    container?: (node: string, name: string, service: string) => ContainerDiff['action'];
    configs?: 'upload' | 'unchanged';
    images?: boolean;
    done?: boolean;
    unreachable?: readonly string[];
  },
): Observation {
  const containers = new Map<string, ContainerDiff>();
  const configs = new Map<string, ConfigDiff>();
  const images = new Map<string, boolean>();
  const done = new Set<string>();
  for (const st of plan.steps) {
    for (const n of st.nodes) {
      for (const w of n.containers) {
        const action = o.container?.(n.node, w.name, w.service) ?? ContainerAction.UNCHANGED;
        containers.set(`${n.node}/${w.name}`, { work: w, action, changed: action === 'recreate' ? ['config x'] : [] });
        images.set(`${n.node}/${w.image}`, o.images ?? true);
      }
      for (const c of n.configs)
        configs.set(`${n.node}/${c.dest}`, {
          work: c,
          action: o.configs ?? 'unchanged',
          detail: o.configs === 'upload' ? 'missing' : '',
        });
      for (const i of n.images) images.set(`${n.node}/${i}`, o.images ?? true);
    }
    for (const w of st.runOnce) if (o.done ?? true) done.add(runOnceKey(w));
  }
  return {
    containers,
    configs,
    images,
    done,
    unreachable: new Map((o.unreachable ?? []).map((n) => [n, new Error('down')])),
  };
}

const ids = (ps: readonly Phase<NodeAction>[]): string[] => ps.map((p) => p.id);
const kinds = (p: Phase<NodeAction>): string[] =>
  p.steps.map((s) => [...new Set(s.actions.map((a) => a.kind))].join('+'));

describe('planConverge', () => {
  it('creates a fresh cloud step by step: pull, apply, run-once per step, no rolling, no outage', () => {
    const plan = deployOf(3, 2);
    const c = planConverge(
      plan,
      observed(plan, { container: () => ContainerAction.CREATE, configs: 'upload', images: false, done: false }),
      catalog,
    );
    expect(c.outages).toEqual([]);
    expect(c.phases.every((p) => p.kind !== 'roll')).toBe(true);
    expect(ids(c.phases)).toEqual(
      expect.arrayContaining(['step:1:pull', 'step:1:apply', 'step:2:apply', 'step:3:run-once', 'step:4:apply']),
    );
    // pulls precede every apply of their step, and run-once work comes last in it
    for (const step of [1, 2, 3, 4]) {
      const own = ids(c.phases).filter((id) => id.startsWith(`step:${step}:`));
      expect(own[0], `step ${step}`).toBe(`step:${step}:pull`);
    }
    // the joiners of Galera wait for the bootstrap node inside one parallel apply step
    const apply2 = c.phases.find((p) => p.id === 'step:2:apply')!;
    expect(apply2.onFailure).toBe('budget');
    expect(apply2.steps).toHaveLength(1);
    const mariadb = apply2.steps[0]!.actions.filter((a) => a.kind === 'ensure' && a.services.includes('mariadb'));
    expect(mariadb.map((a) => (a as { node: string }).node)).toEqual(['ctl-0', 'ctl-1', 'ctl-2']);
  });

  it('plans nothing for a cloud that runs its plan, and predicts every object unchanged or done', () => {
    const plan = deployOf(3, 2);
    const obs = observed(plan, {});
    expect(planConverge(plan, obs, catalog)).toEqual({ phases: [], outages: [] });
    expect(predictions(plan, obs).every((r) => ['unchanged', 'done', 'check'].includes(r.action))).toBe(true);
  });

  it("a changed file HAProxy re-reads: uploaded on each controller with HAProxy's ensure (health waited for there), predicted a reload, no roll, no outage", () => {
    const plan = deployOf(3, 2);
    const CFG = '/etc/stackctl/haproxy/haproxy.cfg';
    const obs = observed(plan, {});
    const configs = new Map(obs.configs);
    for (const [k, d] of obs.configs)
      if (k.endsWith(`/${CFG}`)) configs.set(k, { ...d, action: 'upload', detail: 'content changed' });
    const changed = { ...obs, configs };
    const c = planConverge(plan, changed, catalog);
    expect(c.outages).toEqual([]);
    expect(c.phases.map((p) => p.kind)).toEqual(['apply']);
    const ensures = c.phases[0]!.steps[0]!.actions;
    expect(ensures).toEqual(
      ['ctl-0', 'ctl-1', 'ctl-2'].map((node) => ({
        kind: 'ensure',
        node,
        services: ['haproxy'],
        containers: [],
        frontendGate: true,
      })),
    );
    const rows = predictions(plan, changed).filter(
      (r) => r.action !== 'unchanged' && r.action !== 'done' && r.action !== 'check',
    );
    expect(rows.map((r) => `${r.node} ${r.object} ${r.name} ${r.action} ${r.detail}`)).toEqual(
      ['ctl-0', 'ctl-1', 'ctl-2'].flatMap((n) => [
        `${n} config ${CFG} upload content changed`,
        `${n} container haproxy reload ${CFG}`,
      ]),
    );
  });

  it('rolls a changed Galera one member at a time, its cluster whole before and after each', () => {
    const plan = deployOf(3, 2);
    const c = planConverge(
      plan,
      observed(plan, {
        container: (_n, _c, s) => (s === 'mariadb' ? ContainerAction.RECREATE : ContainerAction.UNCHANGED),
      }),
      catalog,
    );
    expect(ids(c.phases)).toEqual(['step:2:roll:mariadb']);
    const roll = c.phases[0]!;
    expect(roll).toMatchObject({ kind: 'roll', onFailure: 'stop', availability: 'rolling' });
    expect(kinds(roll)).toEqual([
      'cluster-check',
      'drain+ensure+health+enable',
      'cluster-check',
      'drain+ensure+health+enable',
      'cluster-check',
      'drain+ensure+health+enable',
      'cluster-check',
    ]);
    expect(
      roll.steps.filter((s) => s.actions[0]!.kind === 'ensure' || s.actions[0]!.kind === 'drain').map((s) => s.title),
    ).toEqual(['restart on ctl-0', 'restart on ctl-1', 'restart on ctl-2']);
    const check = roll.steps[0]!.actions[0]!;
    expect(check).toEqual({ kind: 'cluster-check', service: 'mariadb', nodes: ['ctl-0', 'ctl-1', 'ctl-2'] });
    const ensure = roll.steps[1]!.actions.find((a) => a.kind === 'ensure')!;
    expect(ensure).toMatchObject({ node: 'ctl-0', services: ['mariadb'], frontendGate: false });
    expect(roll.steps[1]!.actions[0]).toEqual({ kind: 'drain', node: 'ctl-0', frontends: ['mariadb'] });
  });

  it('rolls the changed OpenStack services of a step together, node by node, drained and enabled', () => {
    const plan = deployOf(3, 2);
    const changed = new Set(['keystone', 'nova-api', 'nova-conductor', 'nova-compute']);
    const c = planConverge(
      plan,
      observed(plan, {
        container: (_n, _c, s) => (changed.has(s) ? ContainerAction.RECREATE : ContainerAction.UNCHANGED),
      }),
      catalog,
    );
    expect(ids(c.phases)).toEqual(['step:3:roll:keystone', 'step:4:roll:nova-api+nova-conductor+nova-compute']);
    const nova = c.phases[1]!;
    expect(nova.steps.map((s) => s.title)).toEqual([
      'restart on ctl-0',
      'restart on ctl-1',
      'restart on ctl-2',
      'restart on cmp-0',
      'restart on cmp-1',
    ]);
    expect(nova.steps[0]!.actions.map((a) => a.kind)).toEqual(['drain', 'ensure', 'health', 'enable']);
    // a compute has no backend to drain
    expect(nova.steps[3]!.actions.map((a) => a.kind)).toEqual(['ensure', 'health']);
    expect(nova.steps[0]!.actions[1]).toMatchObject({ services: ['nova-api', 'nova-conductor'] });
    expect(c.outages).toEqual([]);
  });

  it('recreates a service on one node in place and declares its API down for that step', () => {
    const plan = deployOf(1, 1);
    const c = planConverge(
      plan,
      observed(plan, {
        container: (_n, _c, s) => (s === 'keystone' ? ContainerAction.RECREATE : ContainerAction.UNCHANGED),
      }),
      catalog,
    );
    expect(ids(c.phases)).toEqual(['step:3:apply']);
    expect(c.outages).toEqual([{ step: 3, service: 'keystone', nodes: ['ctl-0'], reason: 'single-node' }]);
    expect(c.phases[0]!.steps[0]!.actions).toEqual([
      expect.objectContaining({ kind: 'ensure', node: 'ctl-0', services: ['keystone'], frontendGate: true }),
    ]);
  });

  it('creates a new member in the parallel apply and rolls the running ones', () => {
    const plan = deployOf(3, 1);
    const c = planConverge(
      plan,
      observed(plan, {
        container: (n, _c, s) =>
          s !== 'mariadb'
            ? ContainerAction.UNCHANGED
            : n === 'ctl-2'
              ? ContainerAction.CREATE
              : ContainerAction.RECREATE,
      }),
      catalog,
    );
    expect(ids(c.phases)).toEqual(['step:2:apply', 'step:2:roll:mariadb']);
    expect(c.phases[0]!.steps[0]!.actions.map((a) => (a as { node: string }).node)).toEqual(['ctl-2']);
    const restarted = c.phases[1]!.steps.flatMap((s) => s.actions).filter((a) => a.kind === 'ensure');
    expect(restarted.map((a) => (a as { node: string }).node)).toEqual(['ctl-0', 'ctl-1']);
  });

  it("prepares the hosts before step 1 when a service declares it (libvirt's KVM), every deploy", () => {
    const plan = planDeploy(
      planFromText(
        generateInventoryYaml({ name: 'lab', controllers: 1, computes: 1, lab: true }).replace(
          'release: zed }',
          'release: zed, settings: { ovs_datapath_type: netdev } }',
        ),
      ).effective,
      catalog,
    );
    const c = planConverge(plan, observed(plan, {}), catalog);
    expect(ids(c.phases)).toEqual(['host']);
    expect(c.phases[0]!.steps[0]!.actions).toEqual([{ kind: 'host', node: 'cmp-0', services: ['nova-compute'] }]);
  });

  it('leaves a node that could not be looked at out of every phase', () => {
    const plan = deployOf(3, 2);
    const c = planConverge(
      plan,
      observed(plan, {
        container: () => ContainerAction.CREATE,
        configs: 'upload',
        images: false,
        done: false,
        unreachable: ['cmp-1'],
      }),
      catalog,
    );
    const nodes = c.phases.flatMap((p) => p.steps.flatMap((s) => s.actions.map((a) => (a as { node?: string }).node)));
    expect(nodes).not.toContain('cmp-1');
    expect(nodes).toContain('cmp-0');
  });

  it('runs only the run-once work whose input hash changed', () => {
    const plan = deployOf(1, 1);
    const obs = observed(plan, {});
    const first = plan.steps.flatMap((s) => s.runOnce)[0]!;
    (obs.done as Set<string>).delete(runOnceKey(first));
    const c = planConverge(plan, obs, catalog);
    expect(c.phases.map((p) => p.steps.flatMap((s) => s.actions))).toEqual([
      [{ kind: 'run-once', node: first.node, service: first.service, work: first.kind, name: first.name }],
    ]);
  });

  it('gates the health of a container left alone but not well: the deploy does not call the cloud converged', () => {
    const plan = deployOf(3, 1);
    const obs = { ...observed(plan, {}), unwell: new Map([['ctl-1/mariadb', 'restarting (12 restart(s))']]) };
    const c = planConverge(plan, obs, catalog);
    expect(ids(c.phases)).toEqual(['step:2:apply']);
    expect(c.phases[0]!.steps[0]!.actions).toEqual([
      { kind: 'health', node: 'ctl-1', services: ['mariadb'], unwell: ['mariadb'] },
    ]);
    const row = predictions(plan, obs).find((r) => r.node === 'ctl-1' && r.name === 'mariadb')!;
    expect(row).toMatchObject({ action: 'unchanged', detail: 'restarting (12 restart(s))' });
  });
});
