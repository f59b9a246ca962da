/**
 * The engine's own rules, with handlers of the test's: gates within a step (a cluster's bootstrap
 * node first), the failure budget per group of nodes, the side effects it journals for handlers,
 * and a phase that stops at its first failure.
 */
import { describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import {
  ActionFailed,
  RunOutcome,
  runPhases,
  type EngineBase,
  type Handlers,
  type Subjects,
} from '../../src/orchestrator/engine.js';
import { FailureClass } from '../../src/orchestrator/failures.js';
import { EffectKind, EMPTY_REPLAY, MemoryJournal, RunMode, type Effect } from '../../src/orchestrator/journal.js';
import type { Phase } from '../../src/orchestrator/model.js';

/** A small action set: work on a node, optionally a container another waits for. */
type Act =
  | {
      readonly kind: 'ensure';
      readonly node: string;
      readonly containers: readonly { name: string }[];
      readonly after?: string;
    }
  | { readonly kind: 'other'; readonly node: string };

const subjects: Subjects<Act> = { ensure: (a) => a.node, other: (a) => a.node };
const ctx: EngineBase = { emit: () => undefined, now: () => 0, sleep: async () => undefined };
const phase = (id: string, onFailure: 'stop' | 'budget', steps: Act[][]): Phase<Act> => ({
  id,
  kind: id,
  title: id,
  services: [],
  onFailure,
  steps: steps.map((actions, i) => ({ title: `s${i}`, actions })),
});

describe('the converge engine', () => {
  it('opens a gate when the action holding its container ends: the joiners wait for the bootstrap node', async () => {
    const order: string[] = [];
    let release!: () => void;
    const slow = new Promise<void>((r) => (release = r));
    const handlers: Handlers<Act, EngineBase> = {
      ensure: async (a, _c, run) => {
        if (a.after) {
          order.push(`${a.node} waits`);
          await run.gate(a.after, a.containers[0]!.name)?.opened;
        } else {
          setTimeout(release, 20);
          await slow;
        }
        order.push(`${a.node} done`);
        return 'ok';
      },
      other: async (a) => (order.push(`${a.node} other`), 'ok'),
    };
    const db = [{ name: 'db' }];
    const r = await runPhases(
      [
        phase('apply', 'budget', [
          [
            { kind: 'ensure', node: 'ctl-0', containers: db },
            { kind: 'other', node: 'ctl-0' },
            { kind: 'ensure', node: 'ctl-1', containers: db, after: 'ctl-0' },
            { kind: 'ensure', node: 'ctl-2', containers: db, after: 'ctl-0' },
          ],
        ]),
      ],
      ctx,
      { handlers, subjects, journal: new MemoryJournal(), mode: RunMode.NEW },
    );
    expect(r.ok).toBe(true);
    expect(order.indexOf('ctl-0 done')).toBeLessThan(order.indexOf('ctl-1 done'));
    expect(order.indexOf('ctl-0 done')).toBeLessThan(order.indexOf('ctl-2 done'));
    // the gate opened when ctl-0's ensure ended, not when its whole lane did
    expect(order.indexOf('ctl-1 done')).toBeLessThan(order.length);
  });

  it('leaves a failed node out in a budget phase, and stops once a group exceeds its share', async () => {
    const failing = new Set(['cmp-1']);
    const handlers: Handlers<Act, EngineBase> = {
      ensure: async (a) => {
        if (failing.has(a.node))
          throw new ActionFailed(new StackctlError('E_X', `${a.node} broke`), FailureClass.RETRYABLE);
        return 'ok';
      },
      other: async () => 'ok',
    };
    const nodes = ['ctl-0', 'cmp-0', 'cmp-1'];
    const groupOf = new Map(nodes.map((n) => [n, n.startsWith('ctl') ? 'Controller' : 'Compute']));
    const phases = [
      phase('a', 'budget', [nodes.map((node) => ({ kind: 'ensure', node, containers: [] }) as Act)]),
      phase('b', 'budget', [nodes.map((node) => ({ kind: 'other', node }) as Act)]),
    ];
    const within = await runPhases(phases, ctx, {
      handlers,
      subjects,
      journal: new MemoryJournal(),
      mode: RunMode.NEW,
      budget: { percent: 50, groupOf },
    });
    expect(within.outcome).toBe(RunOutcome.FAILED); // a failure is a failure, even within the budget
    expect(within.phases.map((p) => p.state)).toEqual(['failed', 'done']);
    expect(within.leftOut).toEqual([{ phase: 'a', node: 'cmp-1', reason: 'ensure cmp-1 failed (E_X)' }]);
    expect(within.failures[0]).toMatchObject({ class: 'retryable', code: 'E_X' });
    const over = await runPhases(phases, ctx, {
      handlers,
      subjects,
      journal: new MemoryJournal(),
      mode: RunMode.NEW,
      budget: { percent: 49, groupOf },
    });
    expect(over.phases.map((p) => p.state)).toEqual(['failed', 'not-run']);
    expect(over.overBudget).toEqual({ phase: 'a', groups: [{ group: 'Compute', nodes: 2, failed: 1 }] });
  });

  it('stops a stop phase at its first failed step', async () => {
    const seen: string[] = [];
    const handlers: Handlers<Act, EngineBase> = {
      ensure: async (a) => {
        seen.push(a.node);
        if (a.node === 'ctl-0') throw new StackctlError('E_X', 'no');
        return 'ok';
      },
      other: async () => 'ok',
    };
    const r = await runPhases(
      [
        phase('roll', 'stop', [
          [{ kind: 'ensure', node: 'ctl-0', containers: [] }],
          [{ kind: 'ensure', node: 'ctl-1', containers: [] }],
        ]),
      ],
      ctx,
      { handlers, subjects, journal: new MemoryJournal(), mode: RunMode.NEW },
    );
    expect(seen).toEqual(['ctl-0']);
    expect(r.failures[0]).toMatchObject({ class: 'hard', code: 'E_X' });
  });

  it("journals a handler's side effects and records one a killed run announced as verified, once", async () => {
    const upload: Effect = { kind: EffectKind.UPLOAD, node: 'ctl-0', target: '/etc/x', hash: 'h' };
    const create: Effect = { kind: EffectKind.CREATE, node: 'ctl-0', target: 'c', hash: 'h' };
    const journal = new MemoryJournal({ ...EMPTY_REPLAY, run: 'r', ended: false, effectsPending: [upload] }, 'r');
    const handlers: Handlers<Act, EngineBase> = {
      ensure: async (_a, _c, run) => {
        run.verify(upload);
        run.verify(upload); // a second look changes nothing
        run.verify(create); // not pending: nothing recorded
        await run.effect(create, async () => undefined);
        return 'ok';
      },
      other: async () => 'ok',
    };
    const r = await runPhases([phase('a', 'budget', [[{ kind: 'ensure', node: 'ctl-0', containers: [] }]])], ctx, {
      handlers,
      subjects,
      journal,
      mode: RunMode.RESUME,
    });
    expect(r.changes).toBe(1);
    const effects = journal.records.filter((x) => x.type === 'effect');
    expect(effects).toEqual([
      expect.objectContaining({ state: 'done', effect: upload, verified: true }),
      expect.objectContaining({ state: 'intent', effect: create }),
      expect.objectContaining({ state: 'done', effect: create }),
    ]);
  });
});
