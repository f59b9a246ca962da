/**
 * What `stackctl deploy` does with the nodes before the services on the
 * command line: a dry run that lists them and touches nothing, nothing at
 * all when every node is preprovisioned (which nodes and what each needs:
 * test/provision/workflows/before-deploy.test.ts).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import { provisionBeforeDeploy, withoutNodes } from '../../src/cli/deploy-nodes.js';
import type { DeployPlan } from '../../src/orchestrator/planner.js';
import { nodesFileFor } from '../../src/provision/machine.js';
import { copyInventory } from '../helpers/cli.js';

describe('a deploy with nodes not yet active', () => {
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
