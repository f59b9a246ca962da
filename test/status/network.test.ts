/**
 * The dataplane against the plan: the expectation from the service files (`network_agent`) and the
 * inventory (who is on the external network), the chassis list and Neutron's agents as recorded on a
 * 1ctl-1comp lab (samples/README.md), and the findings when they differ.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseNetworkAgents } from '../../src/status/openstack-client.js';
import { networkExpectation } from '../../src/roles/network-agents.js';
import { evaluateNetwork, parseChassisJson } from '../../src/status/network.js';
import type { ChassisRow } from '../../src/status/model.js';
import { catalog } from '../helpers/plan.js';
import { labPlan } from './fixture.js';

const sample = (name: string): string => readFileSync(join(import.meta.dirname, 'samples', name), 'utf8');
const CONTROLLER = 'OVN Controller agent';
const GATEWAY = 'OVN Controller Gateway agent';
const METADATA = 'OVN Metadata agent';

describe('the dataplane against the plan', () => {
  const { plan } = labPlan();
  const services = new Map(plan.services.map((s) => [s.name, s.nodes]));
  const want = networkExpectation(
    (n) => plan.nodes.find((x) => x.name === n)?.addresses,
    services,
    catalog.provides.networkAgents,
  );
  const rows = parseChassisJson(sample('ovn-sbctl-chassis.json'));
  const agents = parseNetworkAgents(sample('openstack-network-agent-list.json'));

  it('expects what the service files declare: chassis on ovn-controller nodes, gateways on the external network, metadata agents on computes', () => {
    expect(want.chassis).toEqual(['cmp-0', 'ctl-0']);
    expect(want.gateways).toEqual(['ctl-0']);
    expect(want.agents.map((a) => `${a.host} ${a.type}`).sort()).toEqual([
      `cmp-0 ${CONTROLLER}`,
      `cmp-0 ${METADATA}`,
      `ctl-0 ${GATEWAY}`,
    ]);
  });

  it('reads the recorded Southbound rows (names, hostnames, the gateway keys in external_ids) and agents', () => {
    expect(rows.map((r) => r.name).sort()).toEqual(['cmp-0', 'ctl-0']);
    const ctl = rows.find((r) => r.name === 'ctl-0')!;
    expect(ctl.externalIds['ovn-cms-options']).toBe('enable-chassis-as-gw');
    expect(ctl.externalIds['ovn-bridge-mappings']).toMatch(/^physnet1:br-ex$/);
    expect(rows.find((r) => r.name === 'cmp-0')!.externalIds['ovn-cms-options']).toBeUndefined();
    expect(agents.map((a) => `${a.host} ${a.type} ${a.alive}`).sort()).toEqual([
      `cmp-0 ${CONTROLLER} true`,
      `cmp-0 ${METADATA} true`,
      `ctl-0 ${GATEWAY} true`,
    ]);
  });

  it('finds the recorded lab healthy', () => {
    expect(evaluateNetwork(want, rows, agents)).toEqual([]);
  });

  it('names the node: a missing chassis, a gateway without its flag (Neutron 21 reads external_ids), a dead or missing agent', () => {
    const broken: ChassisRow[] = rows
      .filter((r) => r.name !== 'cmp-0')
      .map((r) => (r.name === 'ctl-0' ? { ...r, externalIds: {} } : r));
    const deadAgents = agents
      .filter((a) => a.type !== METADATA)
      .map((a) => (a.host === 'ctl-0' ? { ...a, alive: false } : a));
    expect(evaluateNetwork(want, broken, deadAgents)).toEqual([
      expect.objectContaining({ severity: 'unhealthy', node: 'cmp-0', subject: 'chassis' }),
      expect.objectContaining({
        severity: 'unhealthy',
        node: 'ctl-0',
        subject: 'chassis',
        message: expect.stringContaining('enable-chassis-as-gw'),
      }),
      expect.objectContaining({ severity: 'unhealthy', node: 'cmp-0', subject: METADATA }),
      expect.objectContaining({
        severity: 'unhealthy',
        node: 'ctl-0',
        subject: GATEWAY,
        message: expect.stringMatching(/not alive/),
      }),
    ]);
  });

  it('says which agent a node has instead (a gateway registered as a plain chassis)', () => {
    const plain = agents.map((a) => (a.host === 'ctl-0' ? { ...a, type: CONTROLLER } : a));
    expect(evaluateNetwork(want, rows, plain)).toEqual([
      expect.objectContaining({
        node: 'ctl-0',
        subject: GATEWAY,
        message: `not in Neutron's agent list (the node has an ${CONTROLLER} instead)`,
      }),
    ]);
  });

  it('calls a compute flagged as a gateway, an unplanned chassis and a dead unplanned agent drift', () => {
    const extra: ChassisRow[] = [
      ...rows.map((r) =>
        r.name === 'cmp-0' ? { ...r, externalIds: { 'ovn-cms-options': 'enable-chassis-as-gw' } } : r,
      ),
      { name: 'old-node', hostname: 'old-node', externalIds: {} },
    ];
    const gone = [...agents, { type: CONTROLLER, host: 'old-node', alive: false }];
    expect(evaluateNetwork(want, extra, gone)).toEqual([
      expect.objectContaining({ severity: 'drift', node: 'cmp-0', subject: 'chassis' }),
      expect.objectContaining({ severity: 'drift', node: 'old-node', subject: 'chassis' }),
      expect.objectContaining({ severity: 'drift', node: 'old-node', subject: CONTROLLER }),
    ]);
  });

  it('asks nothing of what was not read, and refuses output of another shape with what it got', () => {
    expect(evaluateNetwork(want, undefined, undefined)).toEqual([]);
    expect(() => parseChassisJson('ovn-sbctl: unix:/run/ovn/ovnsb_db.sock: database connection failed')).toThrow(
      /chassis list: not JSON: ovn-sbctl: unix/,
    );
    expect(() => parseChassisJson('{"data": []}')).toThrow(/not an OVSDB JSON table/);
  });
});
