import { catalog, planFromText } from '../helpers/plan.js';
import { describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { parseSteps, planDeploy } from '../../src/orchestrator/planner.js';
import { changedInputs, diffConfig, diffContainer, labelsFor, parseSha256sum } from '../../src/orchestrator/state.js';
import type { ContainerInfo } from '../../src/remote/index.js';

const planFor = (text: string) => planFromText(text).plan;

const plan = planFor(generateInventoryYaml({ controllers: 3, computes: 2 }));

const running = (labels: Record<string, string>, isRunning = true): ContainerInfo => ({
  id: 'x',
  name: 'memcached',
  image: 'img',
  imageId: 'sha256:x',
  labels,
  state: {
    status: isRunning ? 'running' : 'exited',
    running: isRunning,
    exitCode: 0,
    startedAt: '',
    finishedAt: '',
    oomKilled: false,
  },
  restartCount: 0,
});

describe('the deploy planner', () => {
  const deploy = planDeploy(plan, catalog);

  it('orders the steps 1 to 5 as barriers, each with per-node work and run-once work', () => {
    expect(deploy.steps.map((s) => s.step)).toEqual(
      [1, 2, 3, 4, 5].filter((n) => deploy.steps.some((s) => s.step === n)),
    );
    const step1 = deploy.steps.find((s) => s.step === 1)!;
    expect(step1.nodes.map((n) => n.node)).toEqual(['ctl-0', 'ctl-1', 'ctl-2']);
    expect(step1.nodes[0]!.containers.map((c) => c.name).sort()).toEqual(['haproxy', 'keepalived']);
    const step2 = deploy.steps.find((s) => s.step === 2)!;
    expect(step2.nodes[0]!.containers.map((c) => c.service)).toEqual(
      expect.arrayContaining(['mariadb', 'memcached', 'rabbitmq']),
    );
    // nova-compute runs on the computes at step 4, nowhere earlier
    expect(deploy.steps.find((s) => s.step === 4)!.nodes.map((n) => n.node)).toContain('cmp-0');
    // a compute's step 2 is Open vSwitch alone (the datapath its OVN chassis needs)
    const cmpStep2 = step2.nodes.find((n) => n.node === 'cmp-0');
    expect([...new Set(cmpStep2?.containers.map((c) => c.service))]).toEqual(['openvswitch']);
  });

  it('creates databases and runs bootstrap tasks once, at step 3, on the bootstrap node', () => {
    const step3 = deploy.steps.find((s) => s.step === 3)!;
    const dbs = step3.runOnce.filter((w) => w.kind === 'database');
    expect(dbs.map((w) => w.name)).toContain('keystone');
    expect(new Set(dbs.map((w) => w.node))).toEqual(new Set(['ctl-0']));
    const tasks = step3.runOnce.filter((w) => w.kind === 'task');
    expect(tasks.map((w) => `${w.service}/${w.name}`)).toEqual(
      expect.arrayContaining(['keystone/db-sync', 'keystone/bootstrap', 'keystone/credential-migrate']),
    );
    // the credentials move to the primary key once every Keystone holds the deployed keys (the step's
    // barrier) and after the schema and the bootstrap
    const keystone = tasks.filter((w) => w.service === 'keystone').map((w) => w.name);
    expect(keystone.indexOf('credential-migrate')).toBeGreaterThan(keystone.indexOf('bootstrap'));
    expect(keystone.indexOf('bootstrap')).toBeGreaterThan(keystone.indexOf('db-sync'));
    // the databases come before the tasks that need them
    expect(step3.runOnce.findIndex((w) => w.kind === 'task')).toBeGreaterThan(
      step3.runOnce.findLastIndex((w) => w.kind === 'database'),
    );
  });

  it("uploads a service's configs at its first step, so its step-3 tasks find them", () => {
    const step3 = deploy.steps.find((s) => s.step === 3)!;
    const ctl0 = step3.nodes.find((n) => n.node === 'ctl-0')!;
    expect(ctl0.configs.map((c) => c.dest)).toContain('/etc/stackctl/keystone/keystone.conf');
    const step4 = deploy.steps.find((s) => s.step === 4)!;
    expect(step4.nodes.flatMap((n) => n.configs).some((c) => c.service === 'keystone')).toBe(false);
    // and the image its tasks borrow is pulled at step 3, not only with the step-4 container
    expect(ctl0.images).toContainEqual(expect.stringMatching(/\/stackctl\/keystone:zed-1$/));
    expect(step3.nodes.find((n) => n.node === 'ctl-1')!.images).toEqual([]);
  });

  it('keeps a per-input hash of each container: image, options and each config it reads', () => {
    const mc = deploy.steps.find((s) => s.step === 2)!.nodes[0]!.containers.find((c) => c.name === 'memcached')!;
    expect(mc.inputs.image).toBe(mc.image);
    expect(Object.keys(mc.inputs.configs)).toEqual(['/etc/stackctl/memcached/options']);
    expect(mc.hash).toBe(plan.nodes[0]!.containers.find((c) => c.name === 'memcached')!.hash);
  });

  it('filters by service and step', () => {
    const only = planDeploy(plan, catalog, { services: ['memcached'] });
    expect(only.steps.map((s) => [s.step, s.nodes.map((n) => n.node)])).toEqual([[2, ['ctl-0', 'ctl-1', 'ctl-2']]]);
    expect(planDeploy(plan, catalog, { steps: [1] }).steps.map((s) => s.step)).toEqual([1]);
    expect(() => planDeploy(plan, catalog, { services: ['nope'] })).toThrow(/not part of this cloud's plan/);
  });

  it('parses step ranges', () => {
    expect(parseSteps('1-5')).toEqual([1, 2, 3, 4, 5]);
    expect(parseSteps('2,4')).toEqual([2, 4]);
    expect(parseSteps('3')).toEqual([3]);
    for (const bad of ['0', '6', '4-2', 'x', '']) expect(() => parseSteps(bad), bad).toThrow(/deploy steps/);
  });
});

describe('real state against the plan', () => {
  const mc = planDeploy(plan, catalog, { services: ['memcached'] }).steps[0]!.nodes[0]!.containers[0]!;
  const labels = labelsFor('lab', mc);

  it.each([
    { scenario: 'absent', info: undefined, action: 'create', changed: [] },
    { scenario: 'same hash, running', info: running(labels), action: 'unchanged', changed: [] },
    { scenario: 'same hash, stopped', info: running(labels, false), action: 'start', changed: [] },
    { scenario: 'not ours', info: running({}), action: 'recreate', changed: ['not deployed by stackctl'] },
  ])('a container $scenario: $action', ({ info, action, changed }) => {
    const d = diffContainer(mc, info);
    expect([d.action, d.changed]).toEqual([action, changed]);
  });

  it('names the changed input of a recreate: image, options or which config file', () => {
    const old = { ...mc.inputs, image: 'other:1', configs: { '/etc/stackctl/memcached/options': 'f'.repeat(64) } };
    expect(changedInputs({ 'org.stackctl.inputs': JSON.stringify(old) }, mc.inputs)).toEqual([
      'image',
      'config /etc/stackctl/memcached/options',
    ]);
    const d = diffContainer(
      mc,
      running({
        ...labels,
        'org.stackctl.hash': 'old',
        'org.stackctl.inputs': JSON.stringify({ ...mc.inputs, options: 'x' }),
      }),
    );
    expect([d.action, d.changed, d.currentHash]).toEqual(['recreate', ['options'], 'old']);
  });

  it('compares config files by sha256', () => {
    const cfg = { node: 'n', service: 's', dest: '/etc/stackctl/x', mode: '0640', sha256: 'a'.repeat(64) };
    expect(diffConfig(cfg, undefined)).toMatchObject({ action: 'upload', detail: 'missing' });
    expect(diffConfig(cfg, 'b'.repeat(64))).toMatchObject({ action: 'upload', detail: 'content changed' });
    expect(diffConfig(cfg, 'a'.repeat(64))).toMatchObject({ action: 'unchanged' });
    const sums = parseSha256sum(
      `${'a'.repeat(64)}  /etc/a\n${'b'.repeat(64)} */etc/b c\nsha256sum: /x: No such file\n`,
    );
    expect([...sums]).toEqual([
      ['/etc/a', 'a'.repeat(64)],
      ['/etc/b c', 'b'.repeat(64)],
    ]);
  });
});
