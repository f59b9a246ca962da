import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { StackctlEvent } from '../../src/core/events.js';
import { formatEvent } from '../../src/core/events.js';
import { StackctlError } from '../../src/core/errors.js';
import {
  InvalidTransition,
  MAX_HISTORY,
  NodeStateStore,
  applyEvent,
  eventsFrom,
  newRecord,
  nodesFileFor,
} from '../../src/provision/machine.js';
import {
  ALL_STATES,
  BUSY,
  FAILURE,
  NodeEvent,
  NodeState,
  OPERATOR_EVENTS,
  STABLE,
  TRANSITIONS,
  WAITING,
  type NodeState as State,
} from '../../src/provision/states.js';

/** States reachable from `start` by following the table. */
function reachable(start: State): Set<State> {
  const seen = new Set<State>([start]);
  const queue: State[] = [start];
  while (queue.length) {
    const s = queue.shift()!;
    for (const [from, , to] of TRANSITIONS) {
      if (from === s && !seen.has(to)) {
        seen.add(to);
        queue.push(to);
      }
    }
  }
  return seen;
}

describe('the transition table', () => {
  it('reaches every state from enroll', () => {
    expect([...reachable(NodeState.ENROLL)].sort()).toEqual([...ALL_STATES].sort());
  });

  it('has no duplicate (from, event) rows', () => {
    const keys = TRANSITIONS.map(([from, ev]) => `${from}|${ev}`);
    expect(keys.length).toBe(new Set(keys).size);
  });

  it('puts every state in exactly one group (stable, failure, waiting, busy)', () => {
    for (const s of ALL_STATES) {
      const groups = [STABLE, FAILURE, WAITING, BUSY].filter((g) => g.has(s));
      expect(groups.length, `state '${s}'`).toBe(1);
    }
  });

  it.each([...FAILURE])('gives the failure state %s an operator event that leads out of it', (s) => {
    const out = TRANSITIONS.filter(([from, ev, to]) => from === s && OPERATOR_EVENTS.has(ev) && to !== s);
    expect(out.length).toBeGreaterThan(0);
    // and from there a stable state can be reached again
    expect([...reachable(s)].some((r) => STABLE.has(r))).toBe(true);
  });

  it.each([...WAITING])('lets the waiting state %s end by done, fail or abort', (s) => {
    expect(eventsFrom(s).sort()).toEqual([NodeEvent.ABORT, NodeEvent.DONE, NodeEvent.FAIL]);
  });

  it.each([...BUSY])('lets the busy state %s end with done and fail', (s) => {
    expect(eventsFrom(s)).toEqual(expect.arrayContaining([NodeEvent.DONE, NodeEvent.FAIL]));
  });

  it('lists as stable exactly the states left only by operator events, failures excepted', () => {
    const operatorOnly = ALL_STATES.filter(
      (s) => !FAILURE.has(s) && eventsFrom(s).every((ev) => OPERATOR_EVENTS.has(ev) && ev !== NodeEvent.ABORT),
    );
    expect(operatorOnly.sort()).toEqual([...STABLE].sort());
  });

  it('can reach active from enroll and go back to available after undeploy', () => {
    const path: NodeEvent[] = ['manage', 'done', 'inspect', 'wait', 'done', 'provide', 'wait', 'done', 'deploy']
      .concat(['wait', 'done', 'undeploy', 'done', 'done'])
      .map((e) => e as NodeEvent);
    let rec = newRecord('n1');
    for (const ev of path) rec = applyEvent(rec, ev, '', new Date(0));
    expect(rec.state).toBe(NodeState.AVAILABLE);
    expect(rec.history.map((h) => h.to)).toContain(NodeState.ACTIVE);
  });
});

describe('applyEvent', () => {
  it('refuses an event the table does not allow, naming node, state and event', () => {
    const err = (() => {
      try {
        applyEvent(newRecord('ctl-0'), NodeEvent.DEPLOY, '', new Date(0));
      } catch (e) {
        return e;
      }
      throw new Error('expected a failure');
    })();
    expect(err).toBeInstanceOf(InvalidTransition);
    const e = err as StackctlError;
    expect(e.code).toBe('E_INVALID_TRANSITION');
    expect(e.message).toBe("node 'ctl-0' is in state 'enroll': event 'deploy' is not allowed there");
    expect(e.hint).toContain('allowed events are: manage');
    expect(e.details).toEqual({ node: 'ctl-0', state: 'enroll', event: 'deploy' });
  });

  it('keeps the history bounded', () => {
    let rec = newRecord('n');
    for (let i = 0; i < MAX_HISTORY + 10; i++) {
      rec = applyEvent(rec, i % 2 ? NodeEvent.FAIL : NodeEvent.MANAGE, `try ${i}`, new Date(0));
    }
    expect(rec.history.length).toBe(MAX_HISTORY);
    expect(rec.history.at(-1)!.reason).toBe(`try ${MAX_HISTORY + 9}`);
  });
});

describe('NodeStateStore', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('persists state and history next to the inventory and reads them back', () => {
    dir = mkdtempSync(join(tmpdir(), 'stackctl-nodes-'));
    const file = nodesFileFor(join(dir, 'site.yaml'));
    expect(file).toBe(join(dir, 'site.nodes.json'));
    const events: StackctlEvent[] = [];
    let t = 0;
    const store = NodeStateStore.open(file, {
      events: { emit: (e) => events.push(e) },
      now: () => new Date(Date.UTC(2024, 0, 1, 0, 0, t++)),
    });
    expect(store.get('ctl-0').state).toBe('enroll');
    store.apply('ctl-0', NodeEvent.MANAGE);
    store.apply('ctl-0', NodeEvent.DONE, 'BMC answered');
    store.apply('cmp-0', NodeEvent.MANAGE);
    store.apply('cmp-0', NodeEvent.FAIL, 'E_BMC_AUTH: credentials refused');

    const again = NodeStateStore.open(file);
    expect(again.get('ctl-0').state).toBe('manageable');
    expect(again.get('cmp-0').state).toBe('enroll');
    expect(again.get('cmp-0').history).toEqual([
      { event: 'manage', from: 'enroll', to: 'verifying', reason: '', time: '2024-01-01T00:00:02.000Z' },
      {
        event: 'fail',
        from: 'verifying',
        to: 'enroll',
        reason: 'E_BMC_AUTH: credentials refused',
        time: '2024-01-01T00:00:03.000Z',
      },
    ]);
    expect(again.list().map((r) => r.name)).toEqual(['cmp-0', 'ctl-0']);
    expect(events.map(formatEvent)).toEqual([
      'ctl-0: enroll --manage--> verifying',
      'ctl-0: verifying --done--> manageable',
      'cmp-0: enroll --manage--> verifying',
      'cmp-0: verifying --fail--> enroll',
    ]);
  });

  it('writes nothing and keeps the state when a transition is refused', () => {
    dir = mkdtempSync(join(tmpdir(), 'stackctl-nodes-'));
    const file = join(dir, 'x.nodes.json');
    const store = NodeStateStore.open(file);
    store.apply('n', NodeEvent.MANAGE);
    const before = readFileSync(store.journalFile, 'utf8');
    expect(() => store.apply('n', NodeEvent.DEPLOY)).toThrow(InvalidTransition);
    expect(readFileSync(store.journalFile, 'utf8')).toBe(before);
    expect(existsSync(file)).toBe(false);
    expect(store.get('n').state).toBe('verifying');
  });

  it("never overwrites another store's change: apply re-reads the file and applies to the node as it is there", () => {
    dir = mkdtempSync(join(tmpdir(), 'stackctl-nodes-'));
    const file = join(dir, 'site.nodes.json');
    // two stores of one file, both opened before either wrote (as a command's and a workflow's)
    const a = NodeStateStore.open(file);
    const b = NodeStateStore.open(file);
    a.apply('ctl-0', NodeEvent.MANAGE);
    b.apply('cmp-0', NodeEvent.MANAGE);
    a.apply('ctl-0', NodeEvent.DONE);
    expect(
      NodeStateStore.open(file)
        .list()
        .map((r) => [r.name, r.state]),
    ).toEqual([
      ['cmp-0', 'verifying'],
      ['ctl-0', 'manageable'],
    ]);
    // b's view of ctl-0 is stale (enroll); the event applies to the file's state or is refused by it
    expect(b.get('ctl-0').state).toBe('verifying');
    expect(() => b.apply('ctl-0', NodeEvent.MANAGE)).toThrow(InvalidTransition);
    expect(b.get('ctl-0').state).toBe('manageable');
    expect(b.apply('ctl-0', NodeEvent.INSPECT).history.map((h) => h.event)).toEqual(['manage', 'done', 'inspect']);
  });

  it('keeps every change of nodes worked on in parallel by one store', async () => {
    dir = mkdtempSync(join(tmpdir(), 'stackctl-nodes-'));
    const file = join(dir, 'site.nodes.json');
    const store = NodeStateStore.open(file);
    const names = Array.from({ length: 20 }, (_, i) => `n-${i}`);
    await Promise.all(
      names.map(async (n, i) => {
        store.apply(n, NodeEvent.MANAGE);
        await new Promise((r) => setTimeout(r, (i * 7) % 5));
        store.apply(n, NodeEvent.DONE);
      }),
    );
    const again = NodeStateStore.open(file);
    for (const n of names) expect(again.get(n).state).toBe('manageable');
  });

  it('keeps memory and file in step when the write fails', () => {
    const store = NodeStateStore.open('/nonexistent/dir/x.nodes.json');
    expect(() => store.apply('n', NodeEvent.MANAGE)).toThrow(/cannot write/);
    expect(store.get('n').state).toBe('enroll');
  });

  it.each([
    ['not JSON', '{', /not valid JSON/],
    ['a wrong version', '{"version": 2, "nodes": {}}', /unknown format/],
    ['an unknown state', '{"version": 1, "nodes": {"n": {"state": "flying", "history": []}}}', /no valid state/],
    [
      'an unknown event in the history',
      '{"version": 1, "nodes": {"n": {"state": "enroll", "history": [{"event": "x", "from": "enroll", "to": "enroll", "reason": "", "time": ""}]}}}',
      /malformed history/,
    ],
  ])('refuses a state file with %s', (_what, text, message) => {
    dir = mkdtempSync(join(tmpdir(), 'stackctl-nodes-'));
    const file = join(dir, 'x.nodes.json');
    writeFileSync(file, text);
    expect(() => NodeStateStore.open(file)).toThrow(message);
  });
});
