/**
 * Run files for the report's tests, written by the real writers: the converge engine (runPhases)
 * with the real journal (JournalFile) and event log (JsonLinesLog), on a clock the handlers move
 * forward, so the journal and the events have the shape and order a real run gives them. The
 * handlers are the test's: they take time, emit what the evacuation hook and the watchers emit,
 * and fail where told to.
 */
import { join } from 'node:path';
import { StackctlError } from '../../src/core/errors.js';
import { JsonLinesLog, eventsFileFor, type StackctlEvent } from '../../src/core/events.js';
import { runPhases, type EngineBase, type Handlers, type Subjects } from '../../src/orchestrator/engine.js';
import { JournalFile, RunMode, journalFileFor } from '../../src/orchestrator/journal.js';
import type { Phase } from '../../src/orchestrator/model.js';

/** The test's actions: work on a node that takes `ms`, evacuate a node, fail, or never end. */
type Act =
  | { readonly kind: 'work'; readonly node: string; readonly ms: number }
  | { readonly kind: 'evacuate'; readonly node: string; readonly servers: readonly string[]; readonly to: string }
  | {
      readonly kind: 'fail';
      readonly node: string;
      readonly code: string;
      readonly message: string;
      readonly hint: string;
    }
  | { readonly kind: 'hang'; readonly node: string };

const subjects: Subjects<Act> = {
  work: (a) => a.node,
  evacuate: (a) => a.node,
  fail: (a) => a.node,
  hang: (a) => a.node,
};

/** A clock the handlers move forward. */
export class Clock {
  constructor(public t: number) {}
  readonly now = (): number => this.t;
  readonly date = (): Date => new Date(this.t);
  readonly sleep = async (ms: number): Promise<void> => void (this.t += ms);
}

/** A name built to break HTML that is not escaped. */
export const HOSTILE = `cmp-<script>alert("x")</script><img src=x onerror=alert(1)>&amp;'`;

const phase = (id: string, kind: string, title: string, steps: Act[][]): Phase<Act> => ({
  id,
  kind,
  title,
  services: [],
  onFailure: 'stop',
  steps: steps.map((actions, i) => ({ title: `step ${i + 1}`, actions })),
});

export interface RunFixture {
  readonly inventory: string;
  readonly run: string;
}

/**
 * An upgrade of 1 controller and 2 computes in batches of 1, the second batch failing on the
 * compute named `failNode` (HOSTILE by default), with the API probe's and a server's availability
 * records. `fail: false` gives a run that succeeds.
 */
export async function upgradeRun(
  dir: string,
  o: {
    readonly clock: Clock;
    readonly fail?: boolean;
    readonly failNode?: string;
    readonly name?: string;
    /** RunMode.RESUME goes on with the open run (and its batch 2 then succeeds). */
    readonly mode?: RunMode;
    /** Batch 2 never ends: the run is left as a killed process leaves it (no end, a phase open). */
    readonly kill?: boolean;
    /** Batch 2 waits behind a declared pause. */
    readonly pause?: boolean;
  },
): Promise<RunFixture> {
  const inventory = join(dir, o.name ?? 'site.yaml');
  const { clock } = o;
  const log = new JsonLinesLog(eventsFileFor(inventory), clock.date);
  const failNode = o.failNode ?? HOSTILE;
  // (the engine's run.failure events carry the thrown error's hint)
  const emit = (e: StackctlEvent): void => log.emit(e);
  const ctx: EngineBase = { emit, now: clock.now, sleep: clock.sleep };
  const handlers: Handlers<Act, EngineBase> = {
    work: async (a, c) => (await c.sleep(a.ms), `${a.node} ok`),
    evacuate: async (a, c) => {
      for (const server of a.servers) {
        const t0 = c.now();
        c.emit({ kind: 'upgrade.migration', server, from: a.node, to: '', state: 'started', ms: 0 });
        await c.sleep(6000);
        c.emit({ kind: 'upgrade.migration', server, from: a.node, to: a.to, state: 'completed', ms: c.now() - t0 });
      }
      return `${a.servers.length} server(s) moved`;
    },
    fail: async (a, c) => {
      await c.sleep(3000);
      throw new StackctlError(a.code, a.message, { hint: a.hint });
    },
    hang: async (_a, c) => {
      await c.sleep(4000);
      return new Promise<string>(() => undefined);
    },
  };
  const journal = new JournalFile(journalFileFor(inventory), {
    command: 'upgrade',
    mode: o.mode ?? RunMode.NEW,
    target: 'zed-update',
    options: { batch: 1 },
    inventory,
    now: clock.date,
  });
  const probeFrom = clock.t;
  const phases = [
    phase('precheck', 'precheck', 'prechecks', [[{ kind: 'work', node: 'ctl-0', ms: 2000 }]]),
    phase('control:keystone', 'control', 'keystone, node by node', [[{ kind: 'work', node: 'ctl-0', ms: 20000 }]]),
    phase('batch:1', 'batches', 'compute batches: batch 1/2', [
      [{ kind: 'evacuate', node: 'cmp-0', servers: ['web-1'], to: failNode }],
      [{ kind: 'work', node: 'cmp-0', ms: 15000 }],
    ]),
    phase('batch:2', 'batches', 'compute batches: batch 2/2', [
      [
        o.kill
          ? { kind: 'hang', node: failNode }
          : o.fail === false || o.mode === RunMode.RESUME
            ? { kind: 'work', node: failNode, ms: 15000 }
            : {
                kind: 'fail',
                node: failNode,
                code: 'E_HEALTH_TIMEOUT',
                message: `nova_compute on ${failNode} did not become healthy in 300 s`,
                hint: `Look at 'docker logs nova_compute' on ${failNode}; then run the upgrade again with --resume.`,
              },
      ],
    ]),
  ];
  if (o.pause) phases[3] = { ...phases[3]!, pauseBefore: { reason: 'batch 1 (cmp-0) done' } };
  const running = runPhases(phases, ctx, { handlers, subjects, journal, mode: o.mode ?? RunMode.NEW });
  if (o.kill) {
    // the engine has written what it writes before the hanging action; then the process "dies"
    await new Promise((r) => setTimeout(r, 20));
    return { inventory, run: journal.run };
  }
  const result = await running;
  if (result.ok) journal.end(true);
  // What the watchers wrote when the run ended: the API probe, and one server's ledger.
  const from = new Date(probeFrom).toISOString();
  const to = new Date(clock.t).toISOString();
  log.emit({
    kind: 'availability.gap',
    source: 'api',
    subject: 'keystone+nova via VIP',
    from: new Date(probeFrom + 9000).toISOString(),
    ms: 2500,
    lost: 25,
    detail: 'HTTP 503',
    during: 'control:keystone',
  });
  log.emit({
    kind: 'availability.window',
    source: 'api',
    subject: 'keystone+nova via VIP',
    from,
    to,
    tries: 400,
    ok: 375,
    longestGapMs: 2500,
  });
  log.emit({
    kind: 'availability.gap',
    source: 'workload',
    subject: 'web-1',
    from: new Date(probeFrom + 27500).toISOString(),
    ms: 1200,
    lost: 12,
    detail: 'ping lost',
    during: `web-1 cmp-0 -> ${failNode}`,
  });
  log.emit({
    kind: 'availability.window',
    source: 'workload',
    subject: 'web-1',
    from,
    to,
    tries: 400,
    ok: 388,
    longestGapMs: 1200,
  });
  return { inventory, run: journal.run };
}

/** A deploy that succeeds: two steps on one node. */
export async function deployRun(dir: string, clock: Clock): Promise<RunFixture> {
  const inventory = join(dir, 'site.yaml');
  const log = new JsonLinesLog(eventsFileFor(inventory), clock.date);
  const ctx: EngineBase = { emit: (e) => log.emit(e), now: clock.now, sleep: clock.sleep };
  const handlers: Handlers<Act, EngineBase> = {
    work: async (a, c) => (await c.sleep(a.ms), 'ok'),
    evacuate: async () => 'none',
    fail: async () => 'never',
    hang: async () => 'never',
  };
  const journal = new JournalFile(journalFileFor(inventory), {
    command: 'deploy',
    mode: RunMode.NEW,
    target: 'zed',
    inventory,
    now: clock.date,
  });
  await runPhases(
    [
      phase('step:1:apply', 'apply', 'step 1: load balancer', [[{ kind: 'work', node: 'ctl-0', ms: 4000 }]]),
      phase('step:2:apply', 'apply', 'step 2: database', [[{ kind: 'work', node: 'ctl-0', ms: 8000 }]]),
    ],
    ctx,
    { handlers, subjects, journal, mode: RunMode.NEW },
  );
  journal.end(true);
  return { inventory, run: journal.run };
}
