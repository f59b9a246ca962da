import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { StackctlEvent } from '../../src/core/events.js';
import { defaultReleasesDir, defaultRolesDir } from '../../src/core/paths.js';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { parseInventory } from '../../src/inventory/load.js';
import { loadCatalog } from '../../src/roles/catalog.js';
import { loadRelease } from '../../src/roles/release.js';
import { actionKey } from '../../src/orchestrator/engine.js';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import { backup, migrate } from '../../src/orchestrator/handlers.js';
import { JournalFile, RunMode } from '../../src/orchestrator/journal.js';
import { planDigest, subjectOf } from '../../src/upgrade/journal.js';
import type { PauseAt, UpgradeAction, UpgradePhase, UpgradePlan } from '../../src/upgrade/model.js';
import { planUpgrade } from '../../src/upgrade/planner.js';
import { setInventoryRelease } from '../../src/upgrade/release-file.js';
import { RunOutcome } from '../../src/upgrade/report.js';
import { runUpgrade } from '../../src/upgrade/run.js';
import { upgradeDeployPlans } from '../helpers/plan.js';
import {
  deployPlanOf,
  fakeContext,
  planOf,
  recordingHandlers,
  withNewOvnImages,
  work,
  type FakeCloud,
} from './fakes.js';

const catalog = loadCatalog(defaultRolesDir());
const zed = loadRelease(defaultReleasesDir(), 'zed');
const zedUpdate = loadRelease(defaultReleasesDir(), 'zed-update');

/** The real update plan of a 3-controller, 2-compute cloud. */
function updatePlan(pauseAt: PauseAt = 'never'): UpgradePlan {
  const text = generateInventoryYaml({ name: 'lab', controllers: 3, computes: 2, lab: true });
  const inventory = parseInventory('inv.yaml', text, { roles: catalog.roleInfo }).inventory;
  return planUpgrade({
    inventory,
    catalog,
    current: zed,
    target: zedUpdate,
    ...upgradeDeployPlans(text, zed, zedUpdate),
    options: { pauseAt, batch: 1 },
  });
}

const journalFile = (): string => join(mkdtempSync(join(tmpdir(), 'upgrade-run-')), 'inv.journal.jsonl');

/** Open the journal of a run the way the CLI does. */
function journal(file: string, plan: UpgradePlan, mode: RunMode): JournalFile {
  return new JournalFile(file, {
    command: 'upgrade',
    mode,
    target: plan.to.release,
    options: plan.options,
    digest: planDigest(plan),
    inventory: 'inv.yaml',
  });
}

const swapOf = (node: string, service: string, container = service): UpgradeAction => ({
  kind: 'ensure',
  node,
  services: [service],
  containers: [{ name: container, service, from: `r/${container}:zed-1`, image: `r/${container}:zed-2`, hash: 'h' }],
  frontendGate: false,
});
const phase = (id: string, kind: UpgradePhase['kind'], steps: UpgradeAction[][]): UpgradePhase => ({
  id,
  kind,
  title: id,
  services: [],
  onFailure: kind === 'batches' ? 'budget' : 'stop',
  steps: steps.map((actions, i) => ({ title: `step ${i + 1}`, actions })),
});

describe('an upgrade run on the engine', () => {
  it('runs every phase in plan order, then names the target release in the inventory', async () => {
    const plan = updatePlan();
    const { handlers, calls } = recordingHandlers();
    const { ctx, events } = fakeContext(plan);
    let written = '';
    const r = await runUpgrade(ctx, {
      handlers,
      journal: journal(journalFile(), plan, RunMode.NEW),
      mode: RunMode.NEW,
      setRelease: (rel) => (written = rel),
    });
    expect(r.outcome).toBe(RunOutcome.DONE);
    expect(r.failures).toEqual([]);
    expect(written).toBe('zed-update');
    expect(r.releaseWritten).toBe(true);
    const started = events.flatMap((e) => (e.kind === 'run.phase' && e.state === 'start' ? [e.phase] : []));
    expect(started).toEqual(plan.phases.map((p) => p.id));
    expect(calls.length).toBe(plan.phases.flatMap((p) => p.steps.flatMap((s) => s.actions)).length);
    expect(r.phases.every((p) => p.state === 'done')).toBe(true);
  });

  it('closes a run refused by its prechecks: nothing changed, so the next run starts afresh', async () => {
    const plan = updatePlan();
    const images = plan.phases[0]!.steps.flatMap((s) => s.actions).find((a) => a.kind === 'check-images')!;
    const { handlers, calls } = recordingHandlers({
      fail: new Map([[`check-images ${subjectOf(images)}`, undefined]]),
    });
    const file = journalFile();
    const { ctx } = fakeContext(plan);
    const r = await runUpgrade(ctx, { handlers, journal: journal(file, plan, RunMode.NEW), mode: RunMode.NEW });
    expect(r.outcome).toBe(RunOutcome.FAILED);
    expect(r.refused).toBe(true);
    expect(r.phases.filter((p) => p.state !== 'not-run').map((p) => `${p.id} ${p.state}`)).toEqual([
      `${plan.phases[0]!.id} failed`,
    ]);
    expect(calls.every((c) => c.kind.startsWith('check-') || c.kind === 'cluster-check')).toBe(true);
    // the journal records the run as ended: a new run opens, --resume has nothing to go on with
    expect(() => journal(file, plan, RunMode.RESUME)).toThrow(/no open upgrade run/);
    expect(() => journal(file, plan, RunMode.NEW)).not.toThrow();
  });

  it('treats a step as a barrier: one node in order, nodes in parallel, the next step after all', async () => {
    const drain: UpgradeAction = { kind: 'drain', node: 'a', frontends: ['glance_api'] };
    const enable: UpgradeAction = { kind: 'enable', node: 'a', frontends: ['glance_api'] };
    const plan = planOf([
      phase('control:glance', 'control', [
        [drain, swapOf('a', 'glance'), enable, swapOf('b', 'glance')],
        [{ kind: 'health', node: 'b', services: ['glance'] }],
      ]),
    ]);
    const { handlers, spans } = recordingHandlers({ ticks: (a) => ('node' in a && a.node === 'a' ? 5 : 1) });
    const { ctx } = fakeContext(plan);
    await runUpgrade(ctx, {
      handlers,
      journal: journal(journalFile(), plan, RunMode.NEW),
      mode: RunMode.NEW,
      setRelease: () => undefined,
    });
    const span = (kind: string, subject: string) => spans.find((s) => s.kind === kind && s.subject === subject)!;
    // node a: drain, then swap, then enable
    expect(span('drain', 'a').to).toBeLessThan(span('ensure', 'glance@a').from);
    expect(span('ensure', 'glance@a').to).toBeLessThan(span('enable', 'a').from);
    // node b's swap starts while node a is still draining
    expect(span('ensure', 'glance@b').from).toBeLessThan(span('drain', 'a').to);
    // the health gate of step 2 waits for every action of step 1
    const step1End = Math.max(...spans.filter((s) => s.kind !== 'health').map((s) => s.to));
    expect(span('health', 'glance@b').from).toBeGreaterThan(step1End);
  });

  it("holds a step to its concurrency: with 2, at most two nodes' actions are in flight at once", async () => {
    const pulls = ['a', 'b', 'c', 'd', 'e'].map((node): UpgradeAction => ({ kind: 'pull', node, images: ['r/x:2'] }));
    const base = planOf([phase('pull', 'pull', [pulls])]);
    const plan: UpgradePlan = {
      ...base,
      phases: base.phases.map((p) => ({ ...p, steps: p.steps.map((s) => ({ ...s, concurrency: 2 })) })),
    };
    const { handlers, spans } = recordingHandlers({ ticks: () => 3 });
    const { ctx } = fakeContext(plan);
    await runUpgrade(ctx, {
      handlers,
      journal: journal(journalFile(), plan, RunMode.NEW),
      mode: RunMode.NEW,
      setRelease: () => undefined,
    });
    expect(spans.map((s) => s.subject).sort()).toEqual(['a', 'b', 'c', 'd', 'e']);
    const inFlight = (t: number): number => spans.filter((s) => s.from <= t && t < s.to).length;
    const most = Math.max(...spans.map((s) => inFlight(s.from)));
    expect(most).toBe(2);
  });

  it('stops before a declared pause; --resume stops there again; --continue passes it and skips what is done', async () => {
    const plan = updatePlan('migration');
    const paused = plan.phases.find((p) => p.pauseBefore)!;
    expect(paused.id).toBe('control:keystone');
    const file = journalFile();
    let written = '';
    const setRelease = (rel: string): void => void (written = rel);

    const first = recordingHandlers();
    const firstCtx = fakeContext(plan);
    const r1 = await runUpgrade(firstCtx.ctx, {
      handlers: first.handlers,
      journal: journal(file, plan, RunMode.NEW),
      mode: RunMode.NEW,
      setRelease,
    });
    expect(r1.outcome).toBe(RunOutcome.PAUSED);
    expect(r1.pause).toEqual({ phase: 'control:keystone', reason: paused.pauseBefore!.reason });
    expect(
      first.calls.some((c) => ['stop', 'migrate', 'ensure'].includes(c.kind) && c.subject.startsWith('keystone@')),
    ).toBe(false);
    expect(written).toBe('');

    const second = recordingHandlers();
    const r2 = await runUpgrade(fakeContext(plan).ctx, {
      handlers: second.handlers,
      journal: journal(file, plan, RunMode.RESUME),
      mode: RunMode.RESUME,
      setRelease,
    });
    expect(r2.outcome).toBe(RunOutcome.PAUSED);
    expect(second.calls).toEqual([]);
    // the phases done before the pause are skipped as a whole
    expect(r2.phases.filter((p) => p.state === 'skipped').map((p) => p.id)).toEqual(
      r1.phases.filter((p) => p.state === 'done').map((p) => p.id),
    );

    // Each --continue passes one pause: the next offline window stops the run again.
    const pauses = plan.phases.filter((p) => p.pauseBefore).map((p) => p.id);
    expect(pauses.length).toBeGreaterThanOrEqual(2);
    const later: string[] = [];
    const doneIn = (events: StackctlEvent[]): string[] =>
      events.flatMap((e) =>
        e.kind === 'run.action' && e.state === 'done' ? [`${e.phase} ${e.action} ${e.subject}`] : [],
      );
    const seen = new Set(doneIn(firstCtx.events));
    for (const expected of [...pauses.slice(1), undefined]) {
      const next = recordingHandlers();
      const { ctx, events } = fakeContext(plan);
      const r = await runUpgrade(ctx, {
        handlers: next.handlers,
        journal: journal(file, plan, RunMode.CONTINUE),
        mode: RunMode.CONTINUE,
        setRelease,
      });
      expect(r.pause?.phase).toBe(expected);
      expect(r.outcome).toBe(expected ? RunOutcome.PAUSED : RunOutcome.DONE);
      // nothing done by an earlier invocation runs twice
      const keys = doneIn(events);
      expect(keys.filter((k) => seen.has(k))).toEqual([]);
      for (const k of keys) seen.add(k);
      later.push(...next.calls.map((c) => `${c.kind} ${c.subject}`));
    }
    // the window's offline migration ran after the pause was passed
    const windowMigration = paused.steps.flatMap((st) => st.actions).find((a) => a.kind === 'migrate');
    expect(windowMigration).toBeDefined();
    expect(later).toContain(`migrate ${subjectOf(windowMigration!)}`);
    expect(written).toBe('zed-update');
  });

  it('on --resume skips actions recorded done and does again one with an intent and no outcome', async () => {
    const plan = planOf([
      phase('batch:1', 'batches', [[swapOf('cmp-0', 'nova-compute')], [swapOf('cmp-1', 'nova-compute')]]),
    ]);
    const file = journalFile();
    // A killed run: the first swap recorded done, the second only announced.
    const killed = journal(file, plan, RunMode.NEW);
    killed.phase('batch:1', 'start');
    const a0 = plan.phases[0]!.steps[0]!.actions[0]!;
    const a1 = plan.phases[0]!.steps[1]!.actions[0]!;
    const k0 = actionKey('batch:1', 0, a0.kind, subjectOf(a0));
    const k1 = actionKey('batch:1', 1, a1.kind, subjectOf(a1));
    killed.action(k0, 'intent');
    killed.action(k0, 'done', 'swapped');
    killed.action(k1, 'intent');

    const { handlers, calls } = recordingHandlers();
    const { ctx, events } = fakeContext(plan);
    const r = await runUpgrade(ctx, {
      handlers,
      journal: journal(file, plan, RunMode.RESUME),
      mode: RunMode.RESUME,
      setRelease: () => undefined,
    });
    expect(r.outcome).toBe(RunOutcome.DONE);
    expect(r.run).toBe(killed.run);
    expect(calls.map((c) => `${c.kind} ${c.subject}`)).toEqual(['ensure nova-compute@cmp-1']);
    expect(events).toContainEqual(
      expect.objectContaining({ kind: 'run.action', subject: 'nova-compute@cmp-0', state: 'skipped' }),
    );
  });

  describe('compute batches and their failure budget', () => {
    const evacuate = (nodes: string[]): UpgradeAction => ({
      kind: 'hook',
      hook: 'nova-evacuate',
      point: 'pre-batch',
      source: 'built-in',
      runOn: 'deploy-host',
      nodes,
    });
    const batches = (maxFail: number): UpgradePlan =>
      planOf(
        ['cmp-0', 'cmp-1', 'cmp-2'].map((n, i) =>
          phase(`batch:${i + 1}`, 'batches', [
            [evacuate([n])],
            [swapOf(n, 'nova-compute')],
            [{ kind: 'health', node: n, services: ['nova-compute'] }],
          ]),
        ),
        maxFail,
      );
    const failEvacuation = new Map([['hook nova-evacuate@pre-batch:cmp-0', undefined]]);

    it('does not swap a node whose pre-batch hook failed, and stops when the budget is exceeded', async () => {
      const plan = batches(0);
      const { handlers, calls } = recordingHandlers({ fail: failEvacuation });
      let written = '';
      const r = await runUpgrade(fakeContext(plan).ctx, {
        handlers,
        journal: journal(journalFile(), plan, RunMode.NEW),
        mode: RunMode.NEW,
        setRelease: (rel) => (written = rel),
      });
      expect(r.outcome).toBe(RunOutcome.FAILED);
      expect(calls.map((c) => `${c.kind} ${c.subject}`)).toEqual(['hook nova-evacuate@pre-batch:cmp-0']);
      expect(r.notSwapped).toEqual([
        { phase: 'batch:1', node: 'cmp-0', reason: 'hook nova-evacuate@pre-batch:cmp-0 failed (E_FAKE)' },
      ]);
      expect(r.budget).toEqual({ failedNodes: ['cmp-0'], batchNodes: 3, maxFailPercent: 0, exceeded: true });
      expect(r.phases.map((p) => p.state)).toEqual(['failed', 'not-run', 'not-run']);
      expect(r.failures[0]).toMatchObject({ code: 'E_FAKE', hint: 'fix the fake', log: 'last line of the log' });
      expect(written).toBe('');
    });

    it('goes on with the next batches within the budget, but does not name the target release', async () => {
      const plan = batches(34);
      const { handlers, calls } = recordingHandlers({ fail: failEvacuation });
      let written = '';
      const r = await runUpgrade(fakeContext(plan).ctx, {
        handlers,
        journal: journal(journalFile(), plan, RunMode.NEW),
        mode: RunMode.NEW,
        setRelease: (rel) => (written = rel),
      });
      expect(r.outcome).toBe(RunOutcome.FAILED);
      expect(r.budget).toMatchObject({ failedNodes: ['cmp-0'], exceeded: false });
      expect(calls.filter((c) => c.kind === 'ensure').map((c) => c.subject)).toEqual([
        'nova-compute@cmp-1',
        'nova-compute@cmp-2',
      ]);
      expect(r.phases.map((p) => p.state)).toEqual(['failed', 'done', 'done']);
      expect(written).toBe('');
    });

    it('leaves only the nodes a failed hook names out of the rest of the batch', async () => {
      const plan = planOf(
        [
          phase('batch:1', 'batches', [
            [evacuate(['cmp-0', 'cmp-1'])],
            [swapOf('cmp-0', 'nova-compute'), swapOf('cmp-1', 'nova-compute')],
          ]),
        ],
        50,
      );
      const { handlers, calls } = recordingHandlers({
        fail: new Map([['hook nova-evacuate@pre-batch:cmp-0,cmp-1', ['cmp-1']]]),
      });
      const r = await runUpgrade(fakeContext(plan).ctx, {
        handlers,
        journal: journal(journalFile(), plan, RunMode.NEW),
        mode: RunMode.NEW,
        setRelease: () => undefined,
      });
      expect(calls.filter((c) => c.kind === 'ensure').map((c) => c.subject)).toEqual(['nova-compute@cmp-0']);
      expect(r.notSwapped.map((n) => n.node)).toEqual(['cmp-1']);
      expect(r.budget).toMatchObject({ failedNodes: ['cmp-1'], batchNodes: 2, exceeded: false });
    });
  });

  describe('contract migrations', () => {
    const contract: UpgradeAction = {
      kind: 'migrate',
      stage: 'contract',
      service: 'glance',
      node: 'ctl-0',
      container: 'glance_api',
      image: 'r/glance_api:zed-2',
      command: ['glance-manage', 'db', 'contract'],
    };
    const targets = deployPlanOf(['ctl-0', 'ctl-1'].map((n) => work(n, 'glance', 'glance_api', 'r/glance_api:zed-2')));
    const cloudWith = (ctl1: string): FakeCloud =>
      new Map([
        ['ctl-0', new Map([['glance_api', { image: 'r/glance_api:zed-2', running: true }]])],
        ['ctl-1', new Map([['glance_api', { image: ctl1, running: true }]])],
      ]);

    it('is refused while a container of the service runs the old image', async () => {
      const plan = planOf([phase('control:glance', 'control', [[contract]])]);
      const { handlers, calls } = recordingHandlers();
      const { ctx } = fakeContext(plan, { cloud: cloudWith('r/glance_api:zed-1'), targetDeploy: targets });
      let ran = 0;
      const r = await runUpgrade(
        { ...ctx, oneOff: async () => (ran++, { code: 0, log: '' }) },
        {
          handlers: { ...handlers, migrate },
          journal: journal(journalFile(), plan, RunMode.NEW),
          mode: RunMode.NEW,
          setRelease: () => undefined,
        },
      );
      expect(calls).toEqual([]);
      expect(ran).toBe(0);
      expect(r.outcome).toBe(RunOutcome.FAILED);
      expect(r.failures[0]!.code).toBe('E_CONTRACT_REFUSED');
      expect(r.failures[0]!.message).toContain('ctl-1/glance_api (r/glance_api:zed-1)');
    });

    it('runs once every container runs the target image', async () => {
      const cloud = cloudWith('r/glance_api:zed-1');
      const plan = planOf([
        phase('control:glance', 'control', [[swapOf('ctl-1', 'glance', 'glance_api')], [contract]]),
      ]);
      const { handlers, calls } = recordingHandlers({ cloud });
      const { ctx } = fakeContext(plan, { cloud, targetDeploy: targets });
      let ran = 0;
      const r = await runUpgrade(
        {
          ...ctx,
          targetWork: (node, c) =>
            c === 'glance_api' ? targets.steps[0]!.nodes.find((n) => n.node === node)?.containers[0] : undefined,
          oneOff: async () => (ran++, { code: 0, log: '' }),
        },
        {
          handlers: { ...handlers, migrate },
          journal: journal(journalFile(), plan, RunMode.NEW),
          mode: RunMode.NEW,
          setRelease: () => undefined,
        },
      );
      expect(r.outcome).toBe(RunOutcome.DONE);
      expect(calls.map((c) => c.kind)).toEqual(['ensure']);
      expect(ran).toBe(1);
    });
  });

  it('stops between steps once the operator asked to stop, leaving the run open for --resume', async () => {
    const plan = planOf([
      phase('batch:1', 'batches', [[swapOf('cmp-0', 'nova-compute')], [swapOf('cmp-1', 'nova-compute')]]),
      phase('batch:2', 'batches', [[swapOf('cmp-2', 'nova-compute')]]),
    ]);
    const stop = new AbortController();
    const { handlers, calls } = recordingHandlers();
    const { ctx } = fakeContext(plan);
    const j = journal(journalFile(), plan, RunMode.NEW);
    const r = await runUpgrade(
      { ...ctx, signal: stop.signal },
      {
        handlers: { ...handlers, ensure: async (a, c, s) => (stop.abort(), handlers.ensure(a, c, s)) },
        journal: j,
        mode: RunMode.NEW,
        setRelease: () => undefined,
      },
    );
    expect(calls.map((c) => c.subject)).toEqual(['nova-compute@cmp-0']);
    expect(r.outcome).toBe(RunOutcome.FAILED);
    expect(r.failures.map((f) => f.code)).toEqual(['E_INTERRUPTED']);
    expect(r.phases.map((p) => p.state)).toEqual(['failed', 'not-run']);
    expect(JournalFile.last(j.file).ended).toBe(false);
  });

  it('reports the backups taken, from this run and from the run it continues', async () => {
    const plan = planOf([
      phase('control:glance', 'control', [
        [{ kind: 'backup', service: 'glance', node: 'ctl-0', databases: ['glance'] }],
      ]),
    ]);
    const { handlers } = recordingHandlers();
    const r = await runUpgrade(fakeContext(plan).ctx, {
      handlers,
      journal: journal(journalFile(), plan, RunMode.NEW),
      mode: RunMode.NEW,
      setRelease: () => undefined,
    });
    expect(r.backups).toEqual(['ctl-0:/var/lib/stackctl/backups/run/glance.sql.gz']);
  });
});

describe('an update that moves OVN', () => {
  const ovnUpdate = withNewOvnImages(zedUpdate);

  it('swaps every ovn-controller, then saves both OVN databases, then swaps ovn-central; the event log names the files and sizes', async () => {
    const text = generateInventoryYaml({ name: 'lab', controllers: 3, computes: 2, lab: true });
    const inventory = parseInventory('inv.yaml', text, { roles: catalog.roleInfo }).inventory;
    const plan = planUpgrade({
      inventory,
      catalog,
      current: zed,
      target: ovnUpdate,
      ...upgradeDeployPlans(text, zed, ovnUpdate),
      options: { batch: 1 },
    });
    const { handlers, calls } = recordingHandlers();
    const { ctx, events } = fakeContext(plan);
    // The real backup handler, on nodes whose shell reports each file's size.
    const sizes: Record<string, string> = { ovn_nb_db: '20480', ovn_sb_db: '7311' };
    const node = (name: string): NodeAccess => ({
      ...ctx.connect(name),
      exec: async (argv) => ({ code: 0, stdout: `${sizes[(argv as string[])[6]!]}\n`, stderr: '' }),
    });
    const run = { ...ctx, run: 'r1', backups: new Map<string, string>(), connect: node };
    const recordBackup = handlers.backup;
    const r = await runUpgrade(run, {
      handlers: {
        ...handlers,
        backup: async (a, c, scope) => {
          const faked = await recordBackup(a, c, scope);
          return a.commands ? backup(a, c, scope) : faked;
        },
      },
      journal: journal(journalFile(), plan, RunMode.NEW),
      mode: RunMode.NEW,
      setRelease: () => undefined,
    });
    expect(r.outcome, JSON.stringify(r.failures)).toBe(RunOutcome.DONE);
    const at = (pred: (c: (typeof calls)[number]) => boolean): number[] =>
      calls.flatMap((c, i) => (pred(c) ? [i] : []));
    const chassis = at((c) => c.kind === 'ensure' && c.subject.startsWith('ovn-controller@'));
    const saved = at((c) => c.kind === 'backup' && c.subject === 'ovn-central@ctl-0');
    const central = at((c) => c.kind === 'ensure' && c.subject.startsWith('ovn-central@'));
    expect(chassis).toHaveLength(5);
    expect(saved).toHaveLength(1);
    expect(central).toHaveLength(3);
    expect(Math.max(...chassis)).toBeLessThan(saved[0]!);
    expect(saved[0]!).toBeLessThan(Math.min(...central));
    const done = events.find(
      (e): e is Extract<StackctlEvent, { kind: 'run.action' }> =>
        e.kind === 'run.action' && e.action === 'backup' && e.subject === 'ovn-central@ctl-0' && e.state === 'done',
    );
    expect(done?.detail).toMatch(
      /^ctl-0:\/var\/lib\/stackctl\/backups\/r1\/ovn-central-\S+-ovnnb_db\.db \(20480 bytes\), ctl-0:\S+-ovnsb_db\.db \(7311 bytes\)$/,
    );
    expect(r.backups).toContain(done!.detail);
  });
});

describe('setInventoryRelease', () => {
  it('changes cloud.release only, keeping comments, order and mode', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'upgrade-inv-')), 'site.yaml');
    const text = [
      '# The lab cloud',
      'cloud:',
      '  name: lab # short',
      '  release: zed # what runs now',
      '',
      '  # networks follow',
      'networks: {}',
      '',
    ].join('\n');
    writeFileSync(file, text, { mode: 0o640 });
    setInventoryRelease(file, 'zed-update');
    expect(readFileSync(file, 'utf8')).toBe(text.replace('release: zed #', 'release: zed-update #'));
    expect(statSync(file).mode & 0o777).toBe(0o640);
  });
});
