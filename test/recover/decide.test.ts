/**
 * Galera recovery decisions, scenario by scenario: who restarts the cluster, and every refusal
 * (an unreadable member, two clusters, no data, an unknown position), including Launchpad bug
 * 1682153's trap: a member stopped cleanly long ago shows a positive seqno, the crashed ones -1.
 */
import { describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import { assess, choose, describeChoice, type AssessInput } from '../../src/recover/decide.js';
import { knownPosition, startPosition, type KnownPosition, type MemberState } from '../../src/recover/members.js';

const A = 'a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f';
const B = '0b1c2d3e-e8e3-11f1-a695-defe4cd7f62f';

/** A member whose server is down (container restarting), with data of cluster A at grastate seqno -1. */
function member(node: string, over: Partial<MemberState> = {}): MemberState {
  return {
    node,
    container: { status: 'restarting', restartCount: 3 },
    disk: {
      volume: true,
      grastate: { uuid: A, seqno: -1, safeToBootstrap: false },
      gvwstate: true,
      schemas: ['keystone'],
    },
    data: true,
    log: [],
    ...over,
  };
}
const empty = (node: string): MemberState =>
  member(node, {
    container: { status: 'running', restartCount: 0 },
    disk: { volume: true, gvwstate: false, schemas: ['mysql'] },
    data: false,
  });
const unreachable = (node: string): MemberState => ({
  node,
  error: `${node} (root@192.0.2.1): no SSH session within 10000 ms`,
  container: { status: 'missing', restartCount: 0 },
  data: false,
  log: [],
});
const primary = (node: string): MemberState =>
  member(node, {
    container: { status: 'running', restartCount: 0 },
    server: { clusterStatus: 'Primary', localState: 'Synced', clusterSize: 2, stateUuid: A, lastCommitted: 40 },
  });

const input = (members: MemberState[], over: Partial<AssessInput> = {}): AssessInput => ({
  members,
  bootstrapNode: 'ctl-0',
  without: new Set(),
  mayFound: false,
  recoverCommand: 'stackctl recover galera -i site.yaml',
  ...over,
});

/** The code of the error `f` throws. */
function codeOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    return e instanceof StackctlError ? `${e.code}: ${e.message} | ${e.hint ?? ''}` : String(e);
  }
  return 'no error';
}

describe('assess: what the members call for', () => {
  it('a primary component runs: the others only join it', () => {
    expect(assess(input([primary('ctl-0'), primary('ctl-1'), member('ctl-2')]))).toEqual({
      kind: 'primary',
      primary: ['ctl-0', 'ctl-1'],
      down: ['ctl-2'],
    });
  });

  it('a member that cannot be read is refused, named, with the --without command line', () => {
    const err = codeOf(() => assess(input([member('ctl-0'), member('ctl-1'), unreachable('ctl-2')])));
    expect(err).toMatch(/^E_GALERA_MEMBER_UNREACHABLE: .*ctl-2 could not be read: ctl-2 \(root@192.0.2.1\)/);
    expect(err).toContain("'stackctl recover galera -i site.yaml --without ctl-2'");
  });

  it('the same member named in --without: the others are recovered', () => {
    expect(
      assess(input([member('ctl-0'), member('ctl-1'), unreachable('ctl-2')], { without: new Set(['ctl-2']) })),
    ).toEqual({
      kind: 'recover',
      holders: ['ctl-0', 'ctl-1'],
      empty: [],
    });
  });

  it('an empty bootstrap node with the others unreadable founds nothing, even for a deploy', () => {
    const err = codeOf(() =>
      assess(input([empty('ctl-0'), unreachable('ctl-1'), unreachable('ctl-2')], { mayFound: true })),
    );
    expect(err).toMatch(/^E_GALERA_MEMBER_UNREACHABLE: .*ctl-1, ctl-2 could not be read/);
  });

  it('no member holds data and every one was read: a deploy founds on the bootstrap node', () => {
    expect(assess(input([empty('ctl-0'), empty('ctl-1'), empty('ctl-2')], { mayFound: true }))).toEqual({
      kind: 'found',
      node: 'ctl-0',
    });
  });

  it('no member holds data: `recover galera` refuses; so does a deploy told to leave a member out', () => {
    const all = [empty('ctl-0'), empty('ctl-1'), empty('ctl-2')];
    expect(codeOf(() => assess(input(all)))).toMatch(/^E_GALERA_NO_DATA: /);
    expect(codeOf(() => assess(input(all, { mayFound: true, without: new Set(['ctl-2']) })))).toMatch(
      /^E_GALERA_NO_DATA: .*ctl-2 left out/,
    );
  });

  it('data of two different clusters is refused', () => {
    const other = member('ctl-2', {
      disk: { volume: true, grastate: { uuid: B, seqno: 7 }, gvwstate: false, schemas: [] },
    });
    expect(codeOf(() => assess(input([member('ctl-0'), member('ctl-1'), other])))).toMatch(
      new RegExp(`^E_GALERA_UUID_MISMATCH: .*ctl-0, ctl-1 hold cluster ${A}; ctl-2 holds cluster ${B}`),
    );
  });

  it('a wiped member beside members with data: recover from them, the wiped one joins', () => {
    expect(assess(input([empty('ctl-0'), member('ctl-1'), member('ctl-2')], { mayFound: true }))).toEqual({
      kind: 'recover',
      holders: ['ctl-1', 'ctl-2'],
      empty: ['ctl-0'],
    });
  });
});

describe('choose: the most advanced member restarts the cluster', () => {
  const innodb = (seqno: number): KnownPosition => ({ uuid: A, seqno, source: 'innodb' });

  it("Launchpad bug 1682153: a member stopped cleanly long ago (seqno 100) loses to a crashed one's InnoDB position", () => {
    const old = member('ctl-0', {
      disk: { volume: true, grastate: { uuid: A, seqno: 100 }, gvwstate: false, schemas: [] },
    });
    const c = choose(
      input([old, member('ctl-1'), member('ctl-2')]),
      new Map([
        ['ctl-1', innodb(150)],
        ['ctl-2', innodb(149)],
      ]),
    );
    expect(describeChoice(c)).toBe('bootstrap ctl-1 (seqno 150), then join ctl-0, ctl-2');
  });

  it('ties go to Galera safe_to_bootstrap mark, then the bootstrap node, then plan order', () => {
    const safe = member('ctl-2', {
      disk: { volume: true, grastate: { uuid: A, seqno: 9, safeToBootstrap: true }, gvwstate: false, schemas: [] },
    });
    const same = new Map([
      ['ctl-0', innodb(9)],
      ['ctl-1', innodb(9)],
    ]);
    expect(choose(input([member('ctl-0'), member('ctl-1'), safe]), same).node).toBe('ctl-2');
    expect(choose(input([member('ctl-0'), member('ctl-1')], { bootstrapNode: 'ctl-1' }), same).node).toBe('ctl-1');
    expect(choose(input([member('ctl-1'), member('ctl-0')], { bootstrapNode: 'ctl-9' }), same).node).toBe('ctl-1');
  });

  it('an unknown position is refused: a crashed member is never guessed at', () => {
    expect(codeOf(() => choose(input([member('ctl-0'), member('ctl-1')]), new Map([['ctl-0', innodb(3)]])))).toMatch(
      /^E_GALERA_POSITION_UNKNOWN: the Galera position of ctl-1 is unknown/,
    );
  });

  it('members left out are neither chosen nor joined; members without data join', () => {
    const c = choose(
      input([member('ctl-0'), empty('ctl-1'), unreachable('ctl-2')], { without: new Set(['ctl-2']) }),
      new Map([['ctl-0', innodb(5)]]),
    );
    expect(describeChoice(c)).toBe('bootstrap ctl-0 (seqno 5), then join ctl-1');
  });
});

describe('knownPosition and startPosition', () => {
  it('a server waiting for a primary component is at the position its start logged', () => {
    const log = [
      `galera: starting from position ${A}:12 (grastate.dat)`,
      `galera: starting from position ${A}:17 (InnoDB, after a crash)`,
      `galera: joining cluster ${A} through 10.0.0.2 10.0.0.3`,
    ];
    expect(startPosition(log)).toEqual({ uuid: A, seqno: 17 });
    expect(knownPosition(member('ctl-0', { log }))).toEqual({ uuid: A, seqno: 17, source: 'start log' });
    // a later start that found no position: the older line does not stand for it
    expect(
      startPosition([...log, 'galera: crashed, and InnoDB holds no position (none): starting without one']),
    ).toBeUndefined();
    // a stopped container's old log says nothing about its files now
    expect(
      knownPosition(member('ctl-0', { log, container: { status: 'exited', restartCount: 0, exitCode: 137 } })),
    ).toBeUndefined();
  });

  it('grastate.dat after a clean shutdown, and an answering server outside a primary component', () => {
    expect(
      knownPosition(
        member('ctl-0', { disk: { volume: true, grastate: { uuid: A, seqno: 8 }, gvwstate: false, schemas: [] } }),
      ),
    ).toEqual({
      uuid: A,
      seqno: 8,
      source: 'grastate',
    });
    const waiting = member('ctl-0', {
      container: { status: 'running', restartCount: 0 },
      server: { clusterStatus: 'non-Primary', localState: 'Initialized', stateUuid: A, lastCommitted: 21 },
    });
    expect(knownPosition(waiting)).toEqual({ uuid: A, seqno: 21, source: 'server' });
  });
});
