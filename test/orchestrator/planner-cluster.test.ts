import { describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { planDeploy } from '../../src/orchestrator/planner.js';
import { catalog, planFromText } from '../helpers/plan.js';

const three = planDeploy(planFromText(generateInventoryYaml({ controllers: 3, computes: 1 })).plan, catalog);
const one = planDeploy(planFromText(generateInventoryYaml({ controllers: 1, computes: 1 })).plan, catalog);
const step2 = (d: typeof three) => d.steps.find((s) => s.step === 2)!;
const afterOf = (d: typeof three, node: string, container: string) =>
  step2(d)
    .nodes.find((n) => n.node === node)!
    .containers.find((c) => c.name === container)!.after;

describe('the deploy planner: clustered services start on their bootstrap node first', () => {
  it('makes the other controllers wait for the bootstrap node of Galera and RabbitMQ (bootstrap_first)', () => {
    for (const c of ['mariadb', 'rabbitmq']) {
      expect(catalog.services.get(c)!.bootstrap_first, c).toBe(true);
      expect(afterOf(three, 'ctl-0', c), c).toBeUndefined();
      expect(afterOf(three, 'ctl-1', c), c).toBe('ctl-0');
      expect(afterOf(three, 'ctl-2', c), c).toBe('ctl-0');
    }
  });

  it('lets services without a cluster to form start everywhere at once', () => {
    for (const n of ['ctl-0', 'ctl-1', 'ctl-2']) expect(afterOf(three, n, 'memcached')).toBeUndefined();
  });

  it('has nothing to wait for with a single controller', () => {
    expect(afterOf(one, 'ctl-0', 'mariadb')).toBeUndefined();
    expect(afterOf(one, 'ctl-0', 'rabbitmq')).toBeUndefined();
  });

  it('keeps the bootstrap node ahead of the nodes that wait for it, so a concurrency limit cannot deadlock', () => {
    const order = step2(three).nodes.map((n) => n.node);
    for (const n of step2(three).nodes)
      for (const c of n.containers) if (c.after) expect(order.indexOf(c.after)).toBeLessThan(order.indexOf(n.node));
  });
});
