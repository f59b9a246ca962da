import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { StackctlError, type ValidationFailed } from '../../src/core/errors.js';
import { defaultReleasesDir, defaultRolesDir } from '../../src/core/paths.js';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { parseInventory } from '../../src/inventory/load.js';
import { loadCatalog } from '../../src/roles/catalog.js';
import { loadRelease } from '../../src/roles/release.js';
import type { Release } from '../../src/roles/schema.js';
import { withNewOvnImages } from './fakes.js';
import { ACTION_FORMAT, formatAction, formatUpgradePlan, upgradePlanToJson } from '../../src/upgrade/format.js';
import { BUILTIN_HOOKS, resolveHook } from '../../src/upgrade/hooks.js';
import { planDigest } from '../../src/upgrade/journal.js';
import type { UpgradeAction, UpgradeOptions, UpgradePhase, UpgradePlan } from '../../src/upgrade/model.js';
import {
  planUpgrade as planWithPlans,
  SkewRefused,
  upgradeKind,
  type UpgradeInput,
} from '../../src/upgrade/planner.js';
import { upgradeDeployPlansOf } from '../helpers/plan.js';
import { runOnceOf } from '../../src/orchestrator/context.js';
import { moveTogether, seriesOrdinal, skippedSeries } from '../../src/upgrade/skew.js';

/** The planner with the two deploy plans it diffs, built from the input's inventory and catalog. */
function planUpgrade(input: Omit<UpgradeInput, 'currentDeploy' | 'targetDeploy'>): UpgradePlan {
  return planWithPlans({
    ...input,
    ...upgradeDeployPlansOf(input.inventory, input.catalog, input.current, input.target),
  });
}

const catalog = loadCatalog(defaultRolesDir());
const releases = defaultReleasesDir();
const zed = loadRelease(releases, 'zed');
const zedUpdate = loadRelease(releases, 'zed-update');
const epoxy = loadRelease(releases, 'epoxy');
/** The OpenStack services of the shipped roles (every one changes its image between releases), sorted. */
const OPENSTACK = [
  'glance',
  'keystone',
  'neutron-ovn-metadata-agent',
  'neutron-server',
  'nova-api',
  'nova-compute',
  'nova-conductor',
  'nova-scheduler',
  'placement',
];
/** The infrastructure services, in the order the plan rolls them. */
const INFRASTRUCTURE = [
  'haproxy',
  'keepalived',
  'mariadb',
  'memcached',
  'openvswitch',
  'ovn-central',
  'rabbitmq',
  'ovn-controller',
];

/** A 3-controller, 2-compute inventory (the lab topology 3ctl-2comp), optionally with extra YAML. */
function inventory(extra = '', computes = 2) {
  const text = generateInventoryYaml({ name: 'lab', controllers: 3, computes, lab: true }) + extra;
  return parseInventory('inv.yaml', text, { roles: catalog.roleInfo }).inventory;
}

function plan(target: Release, options: UpgradeOptions = {}, extra = '', computes = 2): UpgradePlan {
  return planUpgrade({ inventory: inventory(extra, computes), catalog, current: zed, target, options });
}

const phaseById = (p: UpgradePlan, id: string): UpgradePhase => {
  const found = p.phases.find((x) => x.id === id);
  if (!found) throw new Error(`no phase ${id} in ${p.phases.map((x) => x.id).join(', ')}`);
  return found;
};
const actions = (ph: UpgradePhase): UpgradeAction[] => ph.steps.flatMap((s) => s.actions);
const kinds = (ph: UpgradePhase): string[] => ph.steps.map((s) => [...new Set(s.actions.map((a) => a.kind))].join('+'));

/** A release one series after zed with every tag bumped (as an Antelope manifest would be). */
const antelope: Release = {
  ...zedUpdate,
  name: 'antelope',
  openstack: 'antelope',
  series: '2023.1',
  images: Object.fromEntries(Object.entries(zed.images).map(([k, v]) => [k, { ...v, tag: 'antelope-1' }])),
};

describe('release manifests', () => {
  it('loads every shipped manifest, zed-update as an update of zed and epoxy on trixie', () => {
    const names = readdirSync(releases)
      .filter((f) => f.endsWith('.yaml'))
      .map((f) => f.replace(/\.yaml$/, ''))
      .sort();
    expect(names).toEqual(['epoxy', 'zed', 'zed-update']);
    for (const n of names) expect(loadRelease(releases, n).name).toBe(n);
    expect(upgradeKind(zed, zedUpdate)).toBe('update');
    expect(upgradeKind(zed, epoxy)).toBe('major');
    expect(epoxy.distro.suite).toBe('trixie');
    expect(Object.keys(zedUpdate.images).sort()).toEqual(Object.keys(zed.images).sort());
  });

  it('refuses an unknown target manifest, naming it', () => {
    expect(() => loadRelease(releases, 'zed-nope')).toThrow(
      expect.objectContaining({ code: 'E_UNKNOWN_RELEASE', message: expect.stringContaining("'zed-nope'") }),
    );
  });

  it('orders series: consecutive releases differ by one', () => {
    expect(seriesOrdinal('2023.1') - seriesOrdinal('2022.2')).toBe(1);
    expect(seriesOrdinal('2025.1') - seriesOrdinal('2022.2')).toBe(5);
    expect(() => seriesOrdinal('2022.3')).toThrow(expect.objectContaining({ code: 'E_SERIES' }));
  });
});

describe('planUpgrade zed -> zed-update on 3 controllers and 2 computes', () => {
  it("swaps only the containers the deploy runs: libvirt's are left out under the fake driver", () => {
    const containersOn = (p: UpgradePlan, node: string): string[] =>
      p.phases
        .flatMap((ph) => ph.steps.flatMap((s) => s.actions))
        .flatMap((a) => (a.kind === 'ensure' && a.node === node ? a.containers.map((c) => c.name) : []))
        .sort();
    const libvirt = plan(zedUpdate, { batch: 1 });
    expect(containersOn(libvirt, 'cmp-0')).toEqual([
      'neutron_ovn_metadata_agent',
      'nova_compute',
      'nova_libvirt',
      'nova_virtlogd',
      'ovn_controller',
    ]);
    const inv = inventory();
    const fake = planUpgrade({
      inventory: { ...inv, cloud: { ...inv.cloud, settings: { nova_compute_driver: 'fake.FakeDriver' } } },
      catalog,
      current: zed,
      target: zedUpdate,
      options: { batch: 1 },
    });
    expect(containersOn(fake, 'cmp-0')).toEqual(['neutron_ovn_metadata_agent', 'nova_compute', 'ovn_controller']);
  });

  it('moves only the services whose image tag changes, and leaves the others running', () => {
    const p = plan(zedUpdate);
    expect(p.kind).toBe('update');
    expect(p.releasesAhead).toBe(0);
    // every OpenStack service and OVN's two (rebuilt from bookworm's current packages)
    expect(p.changes.map((c) => c.service).sort()).toEqual([...OPENSTACK, 'ovn-central', 'ovn-controller'].sort());
    expect(p.unchanged).toEqual(INFRASTRUCTURE.filter((s) => !s.startsWith('ovn-')));
    expect(p.changes.find((c) => c.service === 'keystone')!.images).toEqual({ keystone: ['zed-1', 'zed-2'] });
    expect(p.changes.find((c) => c.service === 'ovn-controller')!.images).toEqual({
      'ovn-controller': ['zed-2', 'zed-3'],
    });
    // Nothing of an unchanged service is pulled, stopped or swapped.
    const moved = p.phases
      .flatMap(actions)
      .flatMap((a) =>
        a.kind === 'ensure' ? a.containers.map((c) => c.service) : a.kind === 'stop' ? [a.service] : [],
      );
    for (const s of p.unchanged) expect(moved).not.toContain(s);
    const pulled = actions(phaseById(p, 'pull')).flatMap((a) => (a.kind === 'pull' ? a.images : []));
    expect([...new Set(pulled.filter((ref) => !ref.endsWith(':zed-2')))]).toEqual([
      '192.168.24.1:5000/stackctl/ovn-controller:zed-3',
    ]);
  });

  it('puts the phases in order: prechecks, pull, control plane in requires order, then computes', () => {
    const p = plan(zedUpdate, { batch: 1 });
    expect(p.phases.map((x) => x.id)).toEqual([
      'precheck',
      'pull',
      // OVN's order: every chassis, then the databases and ovn-northd (before neutron-server, which requires them)
      'control:ovn-controller',
      'control:ovn-central',
      'control:keystone',
      'control:glance',
      'control:neutron-server',
      'control:neutron-ovn-metadata-agent',
      'control:placement',
      'control:nova-api+nova-conductor+nova-scheduler',
      'batch:1',
      'batch:2',
    ]);
  });

  it('checks the target images and runs the target nova-status upgrade check before anything stops', () => {
    const pre = actions(phaseById(plan(zedUpdate), 'precheck'));
    const images = pre.find((a) => a.kind === 'check-images');
    expect(images && images.kind === 'check-images' && images.images).toContain(
      '192.168.24.1:5000/stackctl/keystone:zed-2',
    );
    expect(pre).toContainEqual(
      expect.objectContaining({
        kind: 'check-service',
        service: 'nova-api',
        // through set-configs.sh: the rendered nova.conf copied into /etc/nova for the nova user
        command: [
          'sh',
          '/etc/stackctl/nova-api/set-configs.sh',
          '/etc/nova',
          'nova',
          'nova',
          'nova-status',
          'upgrade',
          'check',
        ],
        image: '192.168.24.1:5000/stackctl/nova-api:zed-2',
      }),
    );
    expect(pre.map((a) => a.kind)).toEqual(expect.arrayContaining(['cluster-check', 'check-capacity']));
  });

  it.each([
    { batch: 1, batches: [['cmp-0'], ['cmp-1']] },
    { batch: 2, batches: [['cmp-0', 'cmp-1']] },
    { batch: undefined, batches: [['cmp-0'], ['cmp-1']] }, // the Compute role's update_serial: 1
  ])('makes compute batches of $batch', ({ batch, batches }) => {
    const p = plan(zedUpdate, batch === undefined ? {} : { batch });
    const got = p.phases
      .filter((x) => x.kind === 'batches')
      .map((x) => actions(x).flatMap((a) => (a.kind === 'ensure' ? [a.node] : [])));
    expect(got).toEqual(batches);
    expect(p.options.batch).toBe(batch ?? 'role');
  });

  it('pulls on a bounded number of nodes at once: 4 by default, upgrade.pull.concurrency in the inventory', () => {
    const pullStep = (p: UpgradePlan) => phaseById(p, 'pull').steps[0]!;
    const byDefault = pullStep(plan(zedUpdate));
    expect(byDefault.actions.map((a) => ('node' in a ? a.node : '')).sort()).toEqual([
      'cmp-0',
      'cmp-1',
      'ctl-0',
      'ctl-1',
      'ctl-2',
    ]);
    expect(byDefault.concurrency).toBe(4);
    const one = pullStep(plan(zedUpdate, {}, 'upgrade:\n  pull:\n    concurrency: 1\n'));
    expect(one.concurrency).toBe(1);
    expect(one.title).toBe('pull, 1 node(s) at a time');
    // fewer nodes than the limit: no limit to state
    expect(pullStep(plan(zedUpdate, {}, 'upgrade:\n  pull:\n    concurrency: 8\n')).concurrency).toBeUndefined();
    const bad = (() => {
      try {
        inventory('upgrade:\n  pull:\n    concurrency: 0\n');
      } catch (err) {
        return err as ValidationFailed;
      }
      return undefined;
    })();
    expect(bad?.issues.map((i) => i.location.path)).toEqual(['/upgrade/pull/concurrency']);
  });

  it('evacuates each batch with the nova-compute hooks around the swap', () => {
    const b = phaseById(plan(zedUpdate, { batch: 1 }), 'batch:2');
    expect(b.steps.map((s) => s.title)).toEqual([
      'pre-batch hook nova-evacuate',
      'upgrade cmp-1',
      'health gate',
      'post-batch hook nova-up',
      'post-batch hook nova-enable',
    ]);
    expect(b.steps[0]!.actions[0]).toMatchObject({
      kind: 'hook',
      hook: 'nova-evacuate',
      source: 'built-in',
      nodes: ['cmp-1'],
    });
  });

  it('warns when a batch holds every compute host: evacuation has nowhere to go', () => {
    expect(plan(zedUpdate, { batch: 2 }).warnings.join('\n')).toMatch(/batch 1 holds every host of nova-compute/);
    expect(plan(zedUpdate, { batch: 1 }).warnings).toEqual([]);
  });

  it('gives keystone (offline migration) a window: stop everywhere, back up, migrate once, start, health gate', () => {
    const k = phaseById(plan(zedUpdate, { pauseAt: 'migration' }), 'control:keystone');
    expect(k.availability).toBe('window');
    expect(k.pauseBefore?.reason).toMatch(/offline migration of keystone/);
    expect(kinds(k)).toEqual(['stop', 'backup', 'migrate', 'ensure', 'health', 'run-once', 'run-once', 'run-once']);
    expect(k.steps[0]!.actions.map((a) => (a.kind === 'stop' ? a.node : ''))).toEqual(['ctl-0', 'ctl-1', 'ctl-2']);
    expect(k.steps[1]!.actions[0]).toMatchObject({ kind: 'backup', node: 'ctl-0', databases: ['keystone'] });
    expect(k.steps[2]!.actions).toEqual([
      expect.objectContaining({
        kind: 'migrate',
        stage: 'offline',
        node: 'ctl-0',
        image: expect.stringMatching(/keystone:zed-2$/),
      }),
    ]);
    // Without --pause-at migration the window runs through.
    expect(phaseById(plan(zedUpdate), 'control:keystone').pauseBefore).toBeUndefined();
  });

  it('runs glance (online) as expand, rolling restart behind HAProxy node by node, migrate, backup, contract', () => {
    const g = phaseById(plan(zedUpdate, { pauseAt: 'migration' }), 'control:glance');
    expect(g.availability).toBe('rolling');
    expect(g.pauseBefore).toBeUndefined();
    expect(kinds(g)).toEqual([
      'migrate',
      'drain+ensure+health+enable',
      'drain+ensure+health+enable',
      'drain+ensure+health+enable',
      'migrate',
      'backup',
      'migrate',
      'run-once',
    ]);
    const stages = actions(g).flatMap((a) => (a.kind === 'migrate' ? [a.stage] : []));
    expect(stages).toEqual(['expand', 'migrate', 'contract']);
    expect(g.steps[1]!.actions.map((a) => a.kind + ':' + ('node' in a ? a.node : ''))).toEqual([
      'drain:ctl-0',
      'ensure:ctl-0',
      'health:ctl-0',
      'enable:ctl-0',
    ]);
    expect(g.steps[1]!.actions[0]).toMatchObject({ frontends: ['glance_api'] });
  });

  it("ends each control phase with the deploy's tasks of what it moved, in the target plan's order, as run-once work", () => {
    const p = plan(zedUpdate);
    const tasks = (id: string) =>
      actions(phaseById(p, id)).flatMap((a) => (a.kind === 'run-once' ? [`${a.service}/${a.name}@${a.node}`] : []));
    expect(tasks('control:keystone')).toEqual([
      'keystone/db-sync@ctl-0',
      'keystone/bootstrap@ctl-0',
      'keystone/credential-migrate@ctl-0',
    ]);
    expect(tasks('control:nova-api+nova-conductor+nova-scheduler')).toEqual([
      'nova-api/api-db-sync@ctl-0',
      'nova-api/cell0@ctl-0',
      'nova-api/cell1@ctl-0',
      'nova-api/db-sync@ctl-0',
      'nova-api/discover-hosts@ctl-0',
    ]);
    // the last steps of their phase, one task per step (a step's actions run in parallel)
    const k = phaseById(p, 'control:keystone');
    expect(k.steps.slice(-3).map((st) => st.actions.length)).toEqual([1, 1, 1]);
    // each is the target plan's own work (the handler finds it there), and only tasks: the other
    // run-once work's input hash does not hold an image
    const { targetDeploy } = upgradeDeployPlansOf(inventory(), catalog, zed, zedUpdate);
    const all = p.phases.flatMap(actions).filter((a) => a.kind === 'run-once');
    expect(all.every((a) => a.kind === 'run-once' && a.work === 'task')).toBe(true);
    for (const a of all)
      if (a.kind === 'run-once') expect(runOnceOf(targetDeploy, a.node, a.service, a.work, a.name)).toBeDefined();
    // an upgrade that moves nothing runs no task
    expect(
      plan(zed)
        .phases.flatMap(actions)
        .some((a) => a.kind === 'run-once'),
    ).toBe(false);
  });

  it('moves nova-api, nova-conductor and nova-scheduler together, as their skew rules say', () => {
    expect(moveTogether(catalog, ['keystone', 'nova-api', 'nova-conductor', 'nova-scheduler'])).toEqual([
      ['keystone'],
      ['nova-api', 'nova-conductor', 'nova-scheduler'],
    ]);
    const n = phaseById(plan(zedUpdate), 'control:nova-api+nova-conductor+nova-scheduler');
    const swap = actions(n).find((a) => a.kind === 'ensure');
    expect(swap && swap.kind === 'ensure' && swap.containers.map((c) => c.name)).toEqual([
      'nova_api',
      // Nova's metadata API is a container of the nova-api service: it moves with it
      'nova_metadata',
      'nova_conductor',
      'nova_scheduler',
    ]);
  });

  it('pauses after each batch with --pause-at batch, and after a one-node canary with --canary', () => {
    const byBatch = plan(zedUpdate, { batch: 1, pauseAt: 'batch' }, '', 3);
    expect(byBatch.phases.filter((x) => x.kind === 'batches').map((x) => x.pauseBefore?.reason)).toEqual([
      undefined,
      'batch 1 (cmp-0) done',
      'batch 2 (cmp-1) done',
    ]);
    const canary = plan(zedUpdate, { batch: 2, canary: true }, '', 3);
    const batches = canary.phases.filter((x) => x.kind === 'batches');
    expect(batches.map((x) => actions(x).flatMap((a) => (a.kind === 'ensure' ? [a.node] : [])))).toEqual([
      ['cmp-0'],
      ['cmp-1', 'cmp-2'],
    ]);
    expect(batches[1]!.pauseBefore?.reason).toMatch(/canary batch cmp-0 done/);
  });

  it('places user hooks from the inventory, and lets one replace the built-in evacuation', () => {
    const hooks = [
      'upgrade:',
      '  hooks:',
      '    notify: { at: [pre-upgrade, post-upgrade], run_on: deploy-host, command: [/usr/local/bin/notify] }',
      '    nova-evacuate: { run_on: deploy-host, command: [/usr/local/bin/my-evacuate] }',
      '    drain-monitoring: { at: [pre-batch], run_on: nodes, command: [systemctl, stop, monitoring] }',
      '',
    ].join('\n');
    const p = plan(zedUpdate, { batch: 1 }, hooks);
    expect(p.phases[1]!.id).toBe('pre-upgrade');
    expect(p.phases.at(-1)!.id).toBe('post-upgrade');
    const b = phaseById(p, 'batch:1');
    expect(b.steps.map((s) => s.title).slice(0, 2)).toEqual([
      'pre-batch hook nova-evacuate',
      'pre-batch hook drain-monitoring',
    ]);
    expect(b.steps[0]!.actions[0]).toMatchObject({ source: 'inventory', command: ['/usr/local/bin/my-evacuate'] });
    expect(b.steps[1]!.actions[0]).toMatchObject({ runOn: 'nodes', nodes: ['cmp-0'] });
  });

  it('refuses a hook a service file names when it is neither built in nor in the inventory', () => {
    expect(Object.keys(BUILTIN_HOOKS)).toEqual(['nova-evacuate', 'nova-up', 'nova-enable']);
    expect(() => resolveHook('nova-drain', inventory(), 'roles/services/nova-compute.yaml')).toThrow(
      expect.objectContaining({ code: 'E_UNKNOWN_HOOK', message: expect.stringContaining("'nova-drain'") }),
    );
  });

  it('plans nothing when no image changes', () => {
    const p = plan(zed);
    expect(p.phases).toEqual([]);
    expect(p.warnings.join()).toMatch(/no image of this cloud changes/);
  });

  it('prints every phase and gives stable JSON', () => {
    const p = plan(zedUpdate, { batch: 1, pauseAt: 'migration' });
    const text = formatUpgradePlan(p);
    expect(text).toContain('update within OpenStack zed');
    expect(text).toContain('-- pause: offline migration of keystone');
    for (const ph of p.phases) expect(text).toContain(`${ph.id}: `);
    expect(upgradePlanToJson(p)).toBe(upgradePlanToJson(plan(zedUpdate, { batch: 1, pauseAt: 'migration' })));
    expect(JSON.parse(upgradePlanToJson(p))).toEqual(p);
  });

  it('has a formatter for every action kind a plan uses', () => {
    const p = plan(
      zedUpdate,
      { batch: 1 },
      'upgrade: { hooks: { notify: { at: [post-upgrade], run_on: nodes, command: [/bin/true] } } }\n',
    );
    const used = new Set<string>(p.phases.flatMap(actions).map((a) => a.kind));
    // Every kind only an upgrade has is used by this plan; every kind used has a formatter.
    for (const k of Object.keys(ACTION_FORMAT).filter((k) => k.startsWith('check-') || k === 'hook'))
      expect(used.has(k), k).toBe(true);
    for (const k of used) expect(Object.keys(ACTION_FORMAT), k).toContain(k);
    for (const a of p.phases.flatMap(actions)) expect(formatAction(a).length).toBeGreaterThan(0);
  });
});

describe('version skew and release order', () => {
  it('accepts a major upgrade one release ahead: computes may lag the control plane by one', () => {
    const p = plan(antelope, { batch: 1 });
    expect(p.kind).toBe('major');
    expect(p.releasesAhead).toBe(1);
    expect(p.unchanged).toEqual([]);
    expect(phaseById(p, 'control:mariadb').availability).toBe('rolling');
  });

  it('plans an all-in-one node: one batch with nowhere to evacuate, and APIs down while they restart', () => {
    const text = [
      'cloud: { name: aio, registry_insecure: true, release: zed }',
      'networks:',
      '  provisioning: { cidr: 192.168.24.0/24, dhcp_range: [192.168.24.100, 192.168.24.199] }',
      '  internal_api: { cidr: 172.17.0.0/24 }',
      '  external: { cidr: 10.0.0.0/24 }',
      '  tenant: { cidr: 172.19.0.0/24 }',
      'nodes:',
      '  - name: aio-0',
      '    role: AllInOne',
      "    bmc: { address: 'ipmi://127.0.0.1:10000', credentials: bmc-default }",
      "    nics: [ { mac: '52:54:00:00:00:01', network: provisioning } ]",
      '',
    ].join('\n');
    const inv = parseInventory('aio.yaml', text, { roles: catalog.roleInfo }).inventory;
    const p = planUpgrade({ inventory: inv, catalog, current: zed, target: zedUpdate });
    expect(p.phases.filter((x) => x.kind === 'batches').map((x) => x.id)).toEqual(['batch:1']);
    expect(p.warnings.join('\n')).toMatch(/batch 1 holds every host of nova-compute \(aio-0\)/);
    expect(p.warnings.join('\n')).toMatch(/glance run\(s\) on one node only \(aio-0\)/);
  });

  it('refuses zed -> epoxy: nova-compute would run five releases behind nova-conductor', () => {
    let err: unknown;
    try {
      plan(epoxy);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SkewRefused);
    const e = err as SkewRefused;
    expect(e.code).toBe('E_UPGRADE_SKEW');
    expect(e.message).toContain('zed (zed 2022.2) -> epoxy (epoxy 2025.1)');
    expect(e.message).toContain('nova-compute would run 5 release(s) behind nova-conductor (allowed: 1)');
    expect(e.violations).toEqual([
      expect.objectContaining({ service: 'nova-compute', relativeTo: 'nova-conductor', behind: 5, allowed: 1 }),
    ]);
    expect(e.hint).toMatch(/one at a time/);
  });

  it('refuses a downgrade and manifests that disagree on the OpenStack release of a series', () => {
    expect(() => upgradeKind(epoxy, zed)).toThrow(expect.objectContaining({ code: 'E_UPGRADE_DOWNGRADE' }));
    expect(() => upgradeKind(zed, { ...zedUpdate, openstack: 'antelope' })).toThrow(
      expect.objectContaining({ code: 'E_RELEASE_MISMATCH' }),
    );
  });

  it('refuses a target that lacks an image a service needs', () => {
    const { keystone: _dropped, ...images } = zedUpdate.images;
    expect(() => plan({ ...zedUpdate, images })).toThrow(
      expect.objectContaining({ code: 'E_IMAGE_NOT_IN_RELEASE', message: expect.stringContaining("'keystone'") }),
    );
  });

  it('refuses bad options before planning', () => {
    expect(() => plan(zedUpdate, { batch: 0 })).toThrow(StackctlError);
    expect(() => plan(zedUpdate, { maxFailPercent: 101 })).toThrow(/between 0 and 100/);
  });
});

describe('fast-forward: a major upgrade that skips releases (zed -> epoxy)', () => {
  const NOVA = 'control:nova-api+nova-conductor+nova-scheduler';
  const refusal = (f: () => unknown): SkewRefused => {
    try {
      f();
    } catch (e) {
      if (e instanceof SkewRefused) return e;
      throw e;
    }
    throw new Error('not refused');
  };
  /** The catalog with nova-compute allowed to lag `behind` releases (as if Nova allowed a skip). */
  const lenient = (behind: number): typeof catalog => {
    const services = new Map(catalog.services);
    const nc = services.get('nova-compute')!;
    services.set('nova-compute', {
      ...nc,
      upgrade: { ...nc.upgrade, skew: { relative_to: 'nova-conductor', max_releases_behind: behind } },
    });
    return { ...catalog, services };
  };
  const ff = (options: UpgradeOptions = {}): UpgradePlan => plan(epoxy, { fastForward: true, ...options });

  it('names the skipped series', () => {
    expect(skippedSeries(seriesOrdinal('2022.2'), seriesOrdinal('2025.1'))).toEqual([
      '2023.1 antelope',
      '2023.2 bobcat',
      '2024.1 caracal',
      '2024.2 dalmatian',
    ]);
    expect(skippedSeries(seriesOrdinal('2022.2'), seriesOrdinal('2023.1'))).toEqual([]);
  });

  it('refuses a plain zed -> epoxy with a hint naming --fast-forward and the services it takes down', () => {
    const e = refusal(() => plan(epoxy));
    expect(e.code).toBe('E_UPGRADE_SKEW');
    expect(e.message).toContain('epoxy is 5 releases after zed, skipping 4 (2023.1 antelope');
    expect(e.hint).toMatch(/from one release to the next only/);
    expect(e.hint).toMatch(/--fast-forward: every API of keystone, glance, neutron-server, placement, nova-api/);
    expect(e.hint).toContain(`nova-compute stops and starts inside ${NOVA}`);
    expect(e.details).toMatchObject({ releasesAhead: 5, fastForward: { riders: [{ service: 'nova-compute' }] } });
  });

  it('refuses a skip without --fast-forward even when no skew rule breaks', () => {
    const inv = inventory();
    const e = refusal(() => planUpgrade({ inventory: inv, catalog: lenient(9), current: zed, target: epoxy }));
    expect(e.violations).toEqual([]);
    expect(e.hint).toMatch(/--fast-forward/);
  });

  it('plans every changed OpenStack service as a window, and rolls the infrastructure as before', () => {
    const p = ff();
    expect(p.options.fastForward).toBe(true);
    expect(p.fastForward?.skipped).toHaveLength(4);
    const control = p.phases.filter((x) => x.kind === 'control');
    const windows = control.filter((x) => x.availability === 'window').flatMap((x) => x.services);
    // the metadata agent keeps no database and runs beside its instances: it rolls, like the infrastructure
    expect(windows.sort()).toEqual(OPENSTACK.filter((s) => s !== 'neutron-ovn-metadata-agent'));
    // OVN's order (ovn-controller's upgrade.before): every chassis before the databases and northd.
    expect(p.fastForward?.rolling).toEqual([
      ...INFRASTRUCTURE.filter((s) => !s.startsWith('ovn-') && s !== 'rabbitmq'),
      'ovn-controller',
      'ovn-central',
      'rabbitmq',
      'neutron-ovn-metadata-agent',
    ]);
    for (const s of p.fastForward!.rolling) expect(phaseById(p, `control:${s}`).availability).not.toBe('window');
    // The phase ids and their order are those of every plan.
    expect(control.map((x) => x.id).slice(-6)).toEqual([
      'control:keystone',
      'control:glance',
      'control:neutron-server',
      'control:neutron-ovn-metadata-agent',
      'control:placement',
      NOVA,
    ]);
    expect(p.phases.map((x) => x.id).slice(0, 2)).toEqual(['precheck', 'pull']);
  });

  it('resets RabbitMQ across the distribution change: stopped everywhere, its volume emptied, bootstrap node first', () => {
    const p = ff();
    const r = phaseById(p, 'control:rabbitmq');
    expect(r.availability).toBe('all-at-once');
    expect(r.steps.map((s) => s.title)).toEqual([
      'stop rabbitmq on every node and empty its data (bookworm -> trixie)',
      'start the new rabbitmq on ctl-0',
      'health gate: rabbitmq on ctl-0',
      'start the new rabbitmq on ctl-1, ctl-2',
      'health gate: rabbitmq on ctl-1, ctl-2',
    ]);
    expect(r.steps[0]!.actions).toEqual(
      ['ctl-0', 'ctl-1', 'ctl-2'].map((node) => ({
        kind: 'stop',
        service: 'rabbitmq',
        node,
        containers: ['rabbitmq'],
        resetVolumes: ['rabbitmq_data'],
      })),
    );
    expect(formatAction(r.steps[0]!.actions[0]!)).toBe(
      'ctl-0: stop rabbitmq (rabbitmq), then empty volume(s) rabbitmq_data',
    );
    expect(p.warnings).toContainEqual(
      expect.stringMatching(/^rabbitmq: the distribution changes \(bookworm -> trixie\)/),
    );
    // MariaDB keeps its data and rolls (start.sh runs mariadb-upgrade on the older data)
    expect(actions(phaseById(p, 'control:mariadb')).some((a) => a.kind === 'stop')).toBe(false);
    // an update within the distribution never resets
    const rabbitUpdate: Release = {
      ...zedUpdate,
      images: { ...zedUpdate.images, rabbitmq: { ...zedUpdate.images['rabbitmq']!, tag: 'zed-9' } },
    };
    const rolled = phaseById(plan(rabbitUpdate), 'control:rabbitmq');
    expect(rolled.availability).toBe('rolling');
    expect(actions(rolled).map((a) => a.kind)).not.toContain('stop');
  });

  it('declares every service on a single controller down while it restarts, HAProxy and keepalived included', () => {
    const text = generateInventoryYaml({ name: 'lab', controllers: 1, computes: 1, lab: true });
    const one = parseInventory('inv.yaml', text, { roles: catalog.roleInfo }).inventory;
    const p = planUpgrade({ inventory: one, catalog, current: zed, target: epoxy, options: { fastForward: true } });
    const availability = Object.fromEntries(
      p.phases.filter((x) => x.kind === 'control').map((x) => [x.id, x.availability]),
    );
    expect(availability).toMatchObject({
      'control:haproxy': 'single-node',
      'control:keepalived': 'single-node',
      'control:mariadb': 'single-node',
      'control:memcached': 'single-node',
      'control:rabbitmq': 'all-at-once',
      'control:keystone': 'window',
    });
  });

  it('refuses a service file whose distro_change names a volume its containers do not mount', () => {
    const services = new Map(catalog.services);
    const r = services.get('rabbitmq')!;
    services.set('rabbitmq', { ...r, upgrade: { ...r.upgrade, distro_change: { reset_volumes: ['rabbit_nope'] } } });
    expect(() =>
      planUpgrade({
        inventory: inventory(),
        catalog: { ...catalog, services },
        current: zed,
        target: epoxy,
        options: { fastForward: true },
      }),
    ).toThrow(expect.objectContaining({ code: 'E_SERVICE_DEF', message: expect.stringContaining('rabbit_nope') }));
  });

  it('stops and starts nova-compute inside the Nova window: no batches, no evacuation, no capacity check', () => {
    const p = ff({ batch: 1 });
    expect(p.phases.filter((x) => x.kind === 'batches')).toEqual([]);
    expect(p.warnings).toContainEqual(expect.stringMatching(/^--canary, --batch and --pause-at batch have no compute/));
    expect(ff().warnings.join('\n')).not.toMatch(/no compute batch/);
    const all = p.phases.flatMap(actions);
    expect(all.some((a) => a.kind === 'hook' && a.hook === 'nova-evacuate')).toBe(false);
    expect(all.some((a) => a.kind === 'check-capacity')).toBe(false);
    const n = phaseById(p, NOVA);
    expect(n.services).toContain('nova-compute');
    expect(p.changes.find((c) => c.service === 'nova-compute')!.phase).toBe(NOVA);
    expect(kinds(n)).toEqual([
      'stop',
      'backup',
      'migrate',
      'migrate',
      'migrate',
      'check-service',
      'ensure',
      'health',
      'hook',
      'hook',
      ...Array<string>(5).fill('run-once'),
    ]);
    const [stop, , , , , check, start, health] = n.steps;
    // Epoxy's nova-status cannot read Zed's schema: the check runs in the window, after the migrations
    expect(check!.actions).toEqual([
      expect.objectContaining({
        kind: 'check-service',
        service: 'nova-api',
        image: expect.stringMatching(/epoxy-1$/),
        inWindow: true,
        // the window replaces the computes whose old records this finding reports
        waive: ['Older than N-1 computes'],
      }),
    ]);
    expect(
      phaseById(p, 'precheck')
        .steps.flatMap((st) => st.actions)
        .some((a) => a.kind === 'check-service'),
    ).toBe(false);
    expect(stop!.actions.filter((a) => a.kind === 'stop' && a.service === 'nova-compute')).toEqual([
      expect.objectContaining({ node: 'cmp-0', containers: ['nova_virtlogd', 'nova_libvirt', 'nova_compute'] }),
      expect.objectContaining({ node: 'cmp-1' }),
    ]);
    expect(stop!.actions.filter((a) => a.kind === 'stop' && a.service === 'nova-conductor')).toHaveLength(3);
    const started = start!.actions.flatMap((a) => (a.kind === 'ensure' && a.containers.length ? [a.node] : []));
    expect(new Set(started)).toEqual(new Set(['ctl-0', 'ctl-1', 'ctl-2', 'cmp-0', 'cmp-1']));
    expect(health!.actions).toContainEqual({ kind: 'health', node: 'cmp-1', services: ['nova-compute'] });
  });

  it('runs each window as stop, backups, every migration command in order (expand, migrate, contract), start, health', () => {
    const p = ff();
    const g = phaseById(p, 'control:glance');
    expect(kinds(g)).toEqual(['stop', 'backup', 'migrate', 'migrate', 'migrate', 'ensure', 'health', 'run-once']);
    expect(actions(g).flatMap((a) => (a.kind === 'migrate' ? [a.stage] : []))).toEqual([
      'expand',
      'migrate',
      'contract',
    ]);
    expect(phaseById(p, 'control:keystone').steps.map((s) => s.actions[0]!.kind)).toEqual([
      'stop',
      'backup',
      'migrate',
      'ensure',
      'health',
      'run-once',
      'run-once',
      'run-once',
    ]);
    const nova = actions(phaseById(p, NOVA)).flatMap((a) => (a.kind === 'migrate' ? [a.stage] : []));
    expect(nova).toEqual(['expand', 'expand', 'migrate']);
    for (const w of p.phases.filter((x) => x.availability === 'window')) {
      // the deploy's tasks of what moved come last (taskSteps); before them, the window's end
      const k = w.steps.map((s) => s.actions[0]!.kind).filter((kind) => kind !== 'run-once');
      expect(k[0], w.id).toBe('stop');
      expect(k.lastIndexOf('backup'), w.id).toBeLessThan(k.indexOf('migrate'));
      // the computes riding in Nova's window end it as they end a batch: reporting to Nova, enabled
      expect(k.slice(-2), w.id).toEqual(w.id === NOVA ? ['hook', 'hook'] : ['ensure', 'health']);
      if (w.id !== NOVA) continue;
      expect(
        w.steps
          .filter((st) => st.actions[0]!.kind !== 'run-once')
          .slice(-2)
          .map((st) => st.actions[0]),
      ).toEqual([
        expect.objectContaining({ kind: 'hook', hook: 'nova-up', nodes: ['cmp-0', 'cmp-1'] }),
        expect.objectContaining({ kind: 'hook', hook: 'nova-enable', nodes: ['cmp-0', 'cmp-1'] }),
      ]);
    }
  });

  it('pauses before each window with --pause-at migration', () => {
    const p = ff({ pauseAt: 'migration' });
    const paused = p.phases.filter((x) => x.pauseBefore).map((x) => x.id);
    expect(paused).toEqual(['control:keystone', 'control:glance', 'control:neutron-server', 'control:placement', NOVA]);
    expect(phaseById(p, NOVA).pauseBefore?.reason).toMatch(/fast-forward window of .*nova-compute/);
  });

  it('keeps the batches of a compute whose skew rule holds across the skip', () => {
    const p = planUpgrade({
      inventory: inventory(),
      catalog: lenient(9),
      current: zed,
      target: epoxy,
      options: { fastForward: true, batch: 1 },
    });
    expect(p.fastForward?.riders).toEqual([]);
    expect(p.phases.filter((x) => x.kind === 'batches').map((x) => x.id)).toEqual(['batch:1', 'batch:2']);
    expect(phaseById(p, 'batch:1').steps[0]!.title).toBe('pre-batch hook nova-evacuate');
  });

  it('says so in the printed plan and the JSON, and gives a resumed run the same digest', () => {
    const p = ff();
    const text = formatUpgradePlan(p);
    expect(text).toContain('major upgrade, 5 release(s) ahead, fast-forward');
    expect(text).toMatch(/Fast-forward: skips 4 release\(s\) \(2023\.1 antelope.*every API is down for its window/);
    expect(text).toContain(`nova-compute stops and starts inside ${NOVA}`);
    expect(JSON.parse(upgradePlanToJson(p))).toEqual(p);
    expect(JSON.parse(upgradePlanToJson(p))).toMatchObject({ options: { fastForward: true }, fastForward: {} });
    // --resume and --continue plan again from the options the run recorded.
    const o = p.options;
    const again = plan(epoxy, { pauseAt: o.pauseAt, canary: o.canary, fastForward: o.fastForward ?? false });
    expect(planDigest(again)).toBe(planDigest(p));
  });

  it.each([
    ['zed-update', zedUpdate, /an update within zed/],
    ['antelope', antelope, /the release after zed/],
  ])('ignores the flag, with a warning, for %s: the plan is the one without it', (_name, target, why) => {
    const without = plan(target, { batch: 1 });
    const withIt = plan(target, { batch: 1, fastForward: true });
    expect(withIt.phases).toEqual(without.phases);
    expect(planDigest(withIt)).toBe(planDigest(without));
    expect(withIt.fastForward).toBeUndefined();
    expect(withIt.options.fastForward).toBe(false);
    expect(withIt.warnings.filter((w) => !without.warnings.includes(w))).toEqual([
      expect.stringMatching(new RegExp(`^--fast-forward ignored: .*${why.source}`)),
    ]);
  });
});

describe("OVN's order: every ovn-controller before the databases and ovn-northd, both databases saved first", () => {
  /** zed-update with new OVN images too. */
  const ovnUpdate = withNewOvnImages(zedUpdate);
  const ids = (p: UpgradePlan): string[] => p.phases.map((x) => x.id);
  const nodesMoved = (ph: UpgradePhase): string[] =>
    actions(ph).flatMap((a) => (a.kind === 'ensure' && a.containers.length ? [a.node] : []));
  /** The catalog with one service's upgrade section changed (in memory: the shipped files stay). */
  const withUpgrade = (service: string, change: object) => {
    const services = new Map(catalog.services);
    const s = services.get(service)!;
    services.set(service, { ...s, upgrade: { ...s.upgrade, ...change } });
    return { ...catalog, services };
  };

  it('moves ovn-controller on every node, computes included, in its own phase before ovn-central, then neutron', () => {
    const p = plan(ovnUpdate, { batch: 1 });
    const at = (id: string): number => ids(p).indexOf(id);
    expect(at('control:ovn-controller')).toBeGreaterThan(at('pull'));
    expect(at('control:ovn-controller')).toBeLessThan(at('control:ovn-central'));
    expect(at('control:ovn-central')).toBeLessThan(at('control:neutron-server'));
    expect(at('control:neutron-server')).toBeLessThan(at('control:neutron-ovn-metadata-agent'));
    // every chassis, one node at a time, long before the compute batches (nova-compute only)
    const chassis = phaseById(p, 'control:ovn-controller');
    expect(nodesMoved(chassis)).toEqual(['ctl-0', 'ctl-1', 'ctl-2', 'cmp-0', 'cmp-1']);
    expect(chassis.availability).toBe('rolling');
    expect(at('control:ovn-central')).toBeLessThan(at('batch:1'));
    expect(phaseById(p, 'batch:1').services).toEqual(['nova-compute']);
    expect(p.changes.find((c) => c.service === 'ovn-controller')!.phase).toBe('control:ovn-controller');
    // The printed plan says why and where.
    expect(chassis.title).toBe(
      'control plane: ovn-controller, before ovn-central (upgrade.before), on every node that runs it: ' +
        'ctl-0, ctl-1, ctl-2, cmp-0, cmp-1',
    );
    expect(formatUpgradePlan(p)).toContain(chassis.title);
    expect(phaseById(p, 'control:ovn-central').title).toBe('control plane: ovn-central');
  });

  it('keeps that order when only the two OVN services change, and in a major upgrade', () => {
    const onlyOvn: Release = {
      ...zed,
      name: 'zed-ovn-only',
      images: {
        ...zed.images,
        'ovn-controller': ovnUpdate.images['ovn-controller']!,
        'ovn-central': ovnUpdate.images['ovn-central']!,
      },
    };
    expect(ids(plan(onlyOvn))).toEqual(['precheck', 'pull', 'control:ovn-controller', 'control:ovn-central']);
    const major = ids(plan(antelope, { batch: 1 }));
    expect(major.indexOf('control:ovn-controller')).toBeLessThan(major.indexOf('control:ovn-central'));
    expect(major.indexOf('control:openvswitch')).toBeLessThan(major.indexOf('control:ovn-controller'));
  });

  it('saves the Northbound and Southbound databases on the first controller before any ovn-central container moves', () => {
    const central = phaseById(plan(ovnUpdate, { batch: 1 }), 'control:ovn-central');
    expect(kinds(central)[0]).toBe('backup');
    expect(central.steps[0]!.title).toBe('back up ovnnb_db.db, ovnsb_db.db of ovn-central on ctl-0, before it moves');
    const [save] = central.steps[0]!.actions;
    expect(save).toEqual({
      kind: 'backup',
      service: 'ovn-central',
      node: 'ctl-0',
      databases: [],
      commands: [
        {
          name: 'ovnnb_db.db',
          container: 'ovn_nb_db',
          command: [
            'ovsdb-client',
            '--timeout=120',
            '--no-leader-only',
            'backup',
            'unix:/run/ovn/ovnnb_db.sock',
            'OVN_Northbound',
          ],
        },
        {
          name: 'ovnsb_db.db',
          container: 'ovn_sb_db',
          command: [
            'ovsdb-client',
            '--timeout=120',
            '--no-leader-only',
            'backup',
            'unix:/run/ovn/ovnsb_db.sock',
            'OVN_Southbound',
          ],
        },
      ],
    });
    // the sockets are the ones the database containers serve (start-db.sh, their health checks)
    const files = catalog.services.get('ovn-central')!.containers;
    for (const c of (save as Extract<UpgradeAction, { kind: 'backup' }>).commands!)
      expect(JSON.stringify(files.find((f) => f.name === c.container)!.healthcheck)).toContain(c.command[4]);
    // then the rolling restart, node by node: the backup precedes every swap
    expect(kinds(central).slice(1)).toEqual(['ensure+health', 'ensure+health', 'ensure+health']);
    expect(formatAction(save!)).toBe(
      'ctl-0: save ovnnb_db.db (ovn_nb_db: ovsdb-client --timeout=120 --no-leader-only backup unix:/run/ovn/ovnnb_db.sock OVN_Northbound); ' +
        'ovnsb_db.db (ovn_sb_db: ovsdb-client --timeout=120 --no-leader-only backup unix:/run/ovn/ovnsb_db.sock OVN_Southbound) (ovn-central)',
    );
    // no image of OVN changes: nothing saved
    const ovnKept: Release = {
      ...zedUpdate,
      images: {
        ...zedUpdate.images,
        'ovn-controller': zed.images['ovn-controller']!,
        'ovn-central': zed.images['ovn-central']!,
      },
    };
    expect(
      plan(ovnKept)
        .phases.flatMap(actions)
        .filter((a) => a.kind === 'backup' && a.commands),
    ).toEqual([]);
  });

  it('refuses a before that the plan cannot keep: a batched service ahead of the control plane', () => {
    const bad = withUpgrade('nova-compute', { before: ['nova-api'] });
    expect(() =>
      planUpgrade({ inventory: inventory(), catalog: bad, current: zed, target: zedUpdate, options: { batch: 1 } }),
    ).toThrow(
      expect.objectContaining({
        code: 'E_UPGRADE_ORDER',
        message: expect.stringContaining('nova-compute moves in compute batches, after the control plane'),
        hint: expect.stringContaining('roles/services/nova-compute.yaml'),
      }),
    );
  });

  it('refuses a before between services the skew rules move in one phase', () => {
    const bad = withUpgrade('nova-conductor', { before: ['nova-api'] });
    expect(() => planUpgrade({ inventory: inventory(), catalog: bad, current: zed, target: zedUpdate })).toThrow(
      expect.objectContaining({
        code: 'E_UPGRADE_ORDER',
        message: expect.stringContaining('nova-conductor must move before nova-api (upgrade.before)'),
        hint: expect.stringContaining('roles/services/nova-conductor.yaml'),
      }),
    );
  });
});
