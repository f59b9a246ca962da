/** The verdict, the exit status and the human output of `stackctl status`. */
import { describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/core/errors.js';
import { formatStatus } from '../../src/status/format.js';
import { SEVERITY_ORDER, Severity, type Finding, type StatusReport } from '../../src/status/model.js';
import { STATUS_EXIT, verdictOf } from '../../src/status/verdict.js';

const finding = (severity: Severity): Finding => ({ severity, node: 'ctl-0', subject: 'x', message: 'm' });

describe('verdict and exit status', () => {
  it('every verdict has its own exit status, none of them a failure code of another meaning', () => {
    const codes = Object.values(STATUS_EXIT);
    expect(new Set(codes).size).toBe(codes.length);
    expect(Object.keys(STATUS_EXIT).sort()).toEqual(['healthy', ...SEVERITY_ORDER].sort());
    expect(STATUS_EXIT).toEqual({ healthy: 0, drift: 9, unhealthy: 8, unreachable: ExitCode.REMOTE });
  });

  it.each([
    { findings: [], verdict: 'healthy' },
    { findings: [Severity.DRIFT], verdict: 'drift' },
    { findings: [Severity.DRIFT, Severity.UNHEALTHY, Severity.DRIFT], verdict: 'unhealthy' },
    { findings: [Severity.UNREACHABLE, Severity.UNHEALTHY], verdict: 'unreachable' },
  ])('$findings -> $verdict', ({ findings, verdict }) => {
    expect(verdictOf(findings.map(finding))).toBe(verdict);
  });
});

/** A report of the 1ctl-1comp lab: memcached stopped, cmp-0 powered off. */
const report: StatusReport = {
  version: 2,
  cloud: 'lab',
  time: '2026-11-22T17:00:00.000Z',
  services: ['mariadb', 'memcached', 'nova-api', 'nova-compute'],
  verdict: 'unreachable',
  exitCode: 5,
  nodes: [
    {
      name: 'ctl-0',
      role: 'Controller',
      address: '192.168.24.10',
      reachable: true,
      containers: [
        {
          name: 'mariadb',
          service: 'mariadb',
          state: 'running',
          health: 'healthy',
          restarts: { count: 2, lastStart: '2026-11-22T16:58:41.189546105Z' },
          image: {
            running: 'r/stackctl/mariadb:zed-1',
            runningTag: 'zed-1',
            wanted: 'r/stackctl/mariadb:zed-1',
            wantedTag: 'zed-1',
            matches: true,
          },
          config: { state: 'current', changed: [] },
        },
        {
          name: 'memcached',
          service: 'memcached',
          state: 'exited',
          health: 'none',
          exitCode: 0,
          image: {
            running: 'r/stackctl/memcached:zed-0',
            runningTag: 'zed-0',
            wanted: 'r/stackctl/memcached:zed-1',
            wantedTag: 'zed-1',
            matches: false,
          },
          config: { state: 'outdated', changed: ['image'] },
        },
      ],
      configFiles: { checked: 6, drift: [{ path: '/etc/stackctl/memcached/options', detail: 'content changed' }] },
      ms: 1234,
    },
    {
      name: 'cmp-0',
      role: 'Compute',
      address: '192.168.24.11',
      reachable: false,
      error: {
        code: 'E_SSH_CONNECT_TIMEOUT',
        message: 'cmp-0 (192.168.24.11:22): no SSH session within 10000 ms',
        hint: 'Is it on?',
      },
      containers: [],
      configFiles: { checked: 1, drift: [] },
      ms: 10001,
    },
  ],
  clusters: [
    {
      service: 'mariadb',
      kind: 'galera',
      state: 'ok',
      expected: 1,
      members: [{ node: 'ctl-0', wsrepOn: false, clusterSize: 0, clusterStatus: 'Disconnected' }],
    },
  ],
  openstack: {
    state: 'problem',
    via: 'ctl-0/keystone',
    computeServices: [
      { binary: 'nova-compute', host: 'cmp-0', zone: 'nova', status: 'enabled', state: 'down', updatedAt: null },
    ],
    hypervisors: [],
  },
  images: {
    state: 'problem',
    tags: [
      { ref: '192.168.24.1:5000/stackctl/mariadb:zed-1', pinned: `sha256:${'a'.repeat(64)}`, state: 'pinned' },
      {
        ref: '192.168.24.1:5000/stackctl/memcached:zed-1',
        pinned: `sha256:${'b'.repeat(64)}`,
        state: 'moved',
        current: `sha256:${'c'.repeat(64)}`,
      },
    ],
    unpinned: ['192.168.24.1:5000/stackctl/nova-api:zed-1'],
  },
  findings: [
    { severity: 'unreachable', node: 'cmp-0', subject: 'node', message: 'E_SSH_CONNECT_TIMEOUT: no SSH session' },
    { severity: 'unhealthy', node: 'ctl-0', subject: 'memcached', message: 'exited (exit code 0)' },
  ],
  ms: 10500,
};

describe('formatStatus', () => {
  const text = formatStatus(report);

  it('starts with the verdict and its exit status', () => {
    expect(text.split('\n')[0]).toBe(
      'cloud lab: UNREACHABLE (exit status 5); 2 node(s), 2 container(s) of 4 service(s), 10.5 s',
    );
  });

  it('shows a compact table per node: state (and restarts by Docker), health, image tag (and the wanted one), config verdict', () => {
    expect(text).toContain(
      [
        'ctl-0 (Controller, 192.168.24.10): reachable, 1.2 s',
        '  CONTAINER  STATE                                                        HEALTH   IMAGE               CONFIG',
        '  mariadb    running (2 restart(s) by Docker, last 2026-11-22T16:58:41Z)  healthy  zed-1               up to date',
        '  memcached  exited(0)                                                    none     zed-0 (want zed-1)  would be recreated: image',
        '  config files differing from the plan (1 of 6):',
        '    /etc/stackctl/memcached/options (content changed)',
      ].join('\n'),
    );
  });

  it('says which pinned tags moved in the registry, and which images have no pin', () => {
    expect(text).toContain(
      [
        'images: problem (1 of 2 tag(s) still name their pin)',
        `  192.168.24.1:5000/stackctl/memcached:zed-1: tag moved to sha256:cccccccccccc, pinned sha256:bbbbbbbbbbbb`,
        '  not pinned (the next deploy pins them): 192.168.24.1:5000/stackctl/nova-api:zed-1',
        '',
      ].join('\n'),
    );
  });

  it('names an unreachable node with the error and hint', () => {
    expect(text).toContain(
      'cmp-0 (Compute, 192.168.24.11): UNREACHABLE E_SSH_CONNECT_TIMEOUT: cmp-0 (192.168.24.11:22): no SSH session within 10000 ms\n  hint: Is it on?\n',
    );
  });

  it('gives the clusters and Nova their lines, and the findings last', () => {
    expect(text).toContain('mariadb (galera): ok (plan: 1 member(s))\n  ctl-0: standalone (wsrep off)\nopenstack: ');
    expect(text).toContain('openstack: problem (asked in ctl-0/keystone)\n');
    expect(text).toMatch(/^ {2}nova-compute\s+cmp-0\s+nova\s+enabled\s+down\s+-$/m);
    expect(text).toContain('  no hypervisors\n');
    expect(text).toMatch(/findings:\n {2}SEVERITY\s+NODE\s+SUBJECT\s+WHAT\n {2}unreachable\s+cmp-0\s+node\s+E_SSH/);
  });
});
