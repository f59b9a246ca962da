/**
 * Parsing what the clustered services answer, from recorded samples of the
 * real formats (test/status/samples/README.md says where each comes from).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { evaluateGalera, galeraMember, parseVariables } from '../../src/status/galera.js';
import { evaluateOpenStack, novaExpectation } from '../../src/status/openstack.js';
import { parseComputeServices, parseHypervisors } from '../../src/status/openstack-client.js';
import { evaluateRabbit, rabbitMember } from '../../src/status/rabbitmq.js';
import { evaluateOvsdb, ovsdbMember } from '../../src/status/ovsdb.js';

import { catalog } from '../helpers/plan.js';
const sample = (name: string): string => readFileSync(join(import.meta.dirname, 'samples', name), 'utf8');

/** `mariadb -N` output of a member of a healthy three-node cluster (the HA lab's values). */
const SYNCED_OF_3 =
  'wsrep_on\t1\nwsrep_cluster_size\t3\nwsrep_cluster_status\tPrimary\nwsrep_local_state_comment\tSynced\nwsrep_ready\tON\n';

describe('Galera', () => {
  it('reads a single server without replication (recorded: wsrep_on=0 has no local state at all)', () => {
    const m = galeraMember('ctl-0', sample('galera-wsrep-off.tsv'));
    expect(m).toEqual({ node: 'ctl-0', wsrepOn: false, clusterSize: 0, clusterStatus: 'Disconnected' });
    expect(evaluateGalera(1, [m])).toEqual({
      view: { state: 'ok', expected: 1, members: [m] },
      findings: [],
    });
  });

  it('calls replication off a problem when the plan has several servers', () => {
    const m = galeraMember('ctl-0', sample('galera-wsrep-off.tsv'));
    const { view, findings } = evaluateGalera(3, [m]);
    expect(view.state).toBe('problem');
    expect(findings).toEqual([
      {
        severity: 'unhealthy',
        node: 'ctl-0',
        subject: 'cluster',
        message: 'replication is off (wsrep_on=0) in a cluster of 3',
      },
    ]);
  });

  it.each([
    { scenario: 'all Synced in a primary component of 3', text: SYNCED_OF_3, expected: 3, problems: [] },
    {
      scenario: 'a donor in a cluster of 2 after a member left',
      text: SYNCED_OF_3.replace('\t3', '\t2').replace('Synced', 'Donor/Desynced'),
      expected: 3,
      problems: ['local state Donor/Desynced, not Synced', 'cluster size 2, the plan has 3'],
    },
    {
      scenario: 'a member cut off from the primary component',
      text: SYNCED_OF_3.replace('Primary', 'non-Primary').replace('\t3', '\t1').replace('Synced', 'Initialized'),
      expected: 3,
      problems: [
        'local state Initialized, not Synced',
        'cluster status non-Primary, not Primary',
        'cluster size 1, the plan has 3',
      ],
    },
  ])('$scenario', ({ text, expected, problems }) => {
    const { findings } = evaluateGalera(expected, [galeraMember('ctl-1', text)]);
    expect(findings.map((f) => f.message)).toEqual(problems);
  });

  it('is unknown when no member answered, not deployed without MariaDB', () => {
    expect(evaluateGalera(1, [{ node: 'ctl-0', error: 'node unreachable' }]).view.state).toBe('unknown');
    expect(evaluateGalera(0, []).view.state).toBe('not deployed');
    expect(parseVariables('garbage\n\tno name\n')).toEqual(new Map());
  });
});

describe('RabbitMQ', () => {
  const recorded = sample('rabbitmq-cluster-status-3.10.json');

  it('reads rabbitmqctl cluster_status --formatter json (recorded from RabbitMQ 3.10.8)', () => {
    const m = rabbitMember('ctl-0', recorded);
    expect(m).toEqual({
      node: 'ctl-0',
      clusterName: 'rabbit@ctl-0',
      diskNodes: ['rabbit@ctl-0'],
      runningNodes: ['rabbit@ctl-0'],
      partitions: [],
      alarms: [],
    });
    expect(evaluateRabbit(1, [m]).findings).toEqual([]);
  });

  it('names the members that are down, partitions and alarms', () => {
    const j = JSON.parse(recorded) as Record<string, unknown>;
    j.disk_nodes = ['rabbit@ctl-0', 'rabbit@ctl-1', 'rabbit@ctl-2'];
    j.running_nodes = ['rabbit@ctl-0', 'rabbit@ctl-1'];
    j.partitions = { 'rabbit@ctl-0': ['rabbit@ctl-2'] };
    j.alarms = [{ resource_limit: 'memory', node: 'rabbit@ctl-1' }];
    const { view, findings } = evaluateRabbit(3, [rabbitMember('ctl-0', JSON.stringify(j))]);
    expect(view.state).toBe('problem');
    expect(findings.map((f) => f.message)).toEqual([
      '2 running node(s), the plan has 3',
      'cluster members not running: rabbit@ctl-2',
      'network partition with rabbit@ctl-2',
      'alarms: {"resource_limit":"memory","node":"rabbit@ctl-1"}',
    ]);
  });

  it('turns output that is not its JSON into a member error', () => {
    expect(rabbitMember('ctl-0', 'Error: unable to perform an operation on node').error).toMatch(/^unreadable/);
    expect(rabbitMember('ctl-0', '{"cluster_name":"x"}').error).toBe('rabbitmqctl output has no running_nodes');
  });
});

describe('OpenStack (python-openstackclient 6.0.0 JSON)', () => {
  const services = parseComputeServices(sample('openstack-compute-service-list.json'));
  const hypervisors = parseHypervisors(sample('openstack-hypervisor-list.json'));
  const want = novaExpectation(
    new Map([
      ['nova-api', ['ctl-0']],
      ['nova-conductor', ['ctl-0']],
      ['nova-scheduler', ['ctl-0']],
      ['nova-compute', ['cmp-0']],
      ['keystone', ['ctl-0']],
    ]),
    catalog.provides.agents,
  );

  it('parses compute service list and hypervisor list rows', () => {
    expect(services).toHaveLength(3);
    expect(services[2]).toEqual({
      binary: 'nova-compute',
      host: 'cmp-0',
      zone: 'nova',
      status: 'enabled',
      state: 'up',
      updatedAt: '2026-11-22T17:40:05.000000',
    });
    expect(hypervisors).toEqual([{ hostname: 'cmp-0', type: 'fake', hostIp: '10.86.20.11', state: 'up' }]);
  });

  it('expects every planned agent on its hosts and a hypervisor per compute node', () => {
    expect(want).toEqual({
      agents: [
        { binary: 'nova-compute', host: 'cmp-0' },
        { binary: 'nova-conductor', host: 'ctl-0' },
        { binary: 'nova-scheduler', host: 'ctl-0' },
      ],
      hypervisorNodes: ['cmp-0'],
    });
    // one row per agent the service files declare
    expect([...catalog.provides.agents.values()].map((a) => a.binary).sort()).toEqual(
      want.agents.map((a) => a.binary).sort(),
    );
    expect(evaluateOpenStack(want, services, hypervisors)).toEqual([]);
  });

  it('finds a compute agent down, one disabled, a missing scheduler and a hypervisor down', () => {
    const down = services
      .filter((s) => s.binary !== 'nova-scheduler')
      .map((s) => (s.binary === 'nova-compute' ? { ...s, state: 'down' } : { ...s, status: 'disabled' }));
    const hyp = hypervisors.map((h) => ({ ...h, hostname: 'cmp-0.example.org', state: 'down' }));
    expect(evaluateOpenStack(want, down, hyp)).toEqual([
      { severity: 'unhealthy', node: 'cmp-0', subject: 'nova-compute', message: 'compute service down' },
      { severity: 'drift', node: 'ctl-0', subject: 'nova-conductor', message: 'compute service disabled' },
      {
        severity: 'unhealthy',
        node: 'ctl-0',
        subject: 'nova-scheduler',
        message: 'not registered in compute service list',
      },
      { severity: 'unhealthy', node: 'cmp-0', subject: 'hypervisor', message: 'hypervisor cmp-0.example.org down' },
    ]);
  });

  it('refuses output that is not a JSON list', () => {
    expect(() => parseComputeServices('Missing value auth-url required for auth plugin password')).toThrow(/not JSON/);
    expect(() => parseHypervisors('{}')).toThrow(/expected a JSON list/);
  });
});

describe('OVN databases', () => {
  const standalone = sample('ovsdb-standalone.txt');

  it("reads ovn-central's cluster_check on a standalone member (recorded from OVN 23.03)", () => {
    const m = ovsdbMember('ctl-0', standalone);
    expect(m).toEqual({
      node: 'ctl-0',
      databases: [
        { name: 'OVN_Northbound', clustered: false },
        { name: 'OVN_Southbound', clustered: false },
      ],
    });
    const { view, findings } = evaluateOvsdb(1, [m]);
    expect(view.state).toBe('ok');
    expect(findings).toEqual([]);
  });

  it('wants a RAFT cluster where the plan has several members, and both databases served', () => {
    const three = evaluateOvsdb(3, [ovsdbMember('ctl-0', standalone)]);
    expect(three.view.state).toBe('problem');
    expect(three.findings.map((f) => f.message)).toEqual([
      'OVN_Northbound is standalone, the plan has a cluster of 3',
      'OVN_Southbound is standalone, the plan has a cluster of 3',
    ]);
    const noSb = ovsdbMember('ctl-0', standalone.replace(/^OVN_Southbound$/m, ''));
    expect(evaluateOvsdb(1, [noSb]).findings.map((f) => f.message)).toEqual(['OVN_Southbound: not served']);
    expect(ovsdbMember('ctl-0', 'ovs-appctl: cannot connect').error).toMatch(/^unreadable/);
    expect(evaluateOvsdb(0, []).view.state).toBe('not deployed');
  });
});
