/** The deploy plan's registry trust: every node's dockerd made to trust the registry served over TLS, whatever --services selects. */
import { describe, expect, it } from 'vitest';
import { loadAll, planOf } from '../../src/cli/context.js';
import { planDeploy } from '../../src/orchestrator/planner.js';
import { copyInventory } from '../helpers/cli.js';
import { tlsRegistryInventory } from '../helpers/tls.js';

describe('registry trust in the deploy plan', () => {
  it('puts a host preparation with the cloud CA on every node at step 1 when the registry serves TLS, and none otherwise', async () => {
    const plain = loadAll({ inventory: copyInventory('lab.yaml') });
    expect(
      planOf(plain)
        .plan.nodes.flatMap((n) => n.host ?? [])
        .filter((h) => h.registryTrust),
    ).toEqual([]);

    const { file, ca } = await tlsRegistryInventory();
    const all = loadAll({ inventory: file });
    const { plan } = planOf(all);
    for (const n of plan.nodes)
      expect(n.host?.[0]).toEqual({
        service: 'docker-registry-trust',
        step: 1,
        modules: [],
        devices: [],
        stopUnits: [],
        registryTrust: { registry: '192.168.24.1:5000', ca },
      });

    // a deploy of one service still makes every node trust the registry, before step 1
    const deploy = planDeploy(plan, all.catalog, { services: ['memcached'] });
    const trusted = deploy.steps.flatMap((st) =>
      st.nodes.flatMap((n) => n.host.filter((h) => h.registryTrust).map((h) => `${st.step} ${h.node}`)),
    );
    expect(trusted).toEqual(plan.nodes.map((n) => `1 ${n.name}`));
  });
});
