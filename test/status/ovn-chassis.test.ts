/**
 * OVN's chassis and Neutron's agents against the plan. The inputs are written by hand in the shapes
 * of `ovn-sbctl --format=json` (OVSDB JSON: a map column is ["map", [[key, value], ...]]) and of
 * python-openstackclient's `network agent list -f json`; they are not recordings yet.
 */
import { describe, expect, it } from 'vitest';
import {
  AGENT_CONTROLLER,
  AGENT_GATEWAY,
  AGENT_METADATA,
  evaluateChassis,
  parseChassisJson,
  parseNetworkAgents,
  type ChassisRow,
} from '../../src/status/ovn-chassis.js';

const CHASSIS_JSON = JSON.stringify({
  data: [
    ['cmp-0', 'cmp-0', ['map', []]],
    [
      'ctl-0',
      'ctl-0',
      [
        'map',
        [
          ['ovn-bridge-mappings', 'physnet1:br-ex'],
          ['ovn-cms-options', 'enable-chassis-as-gw'],
        ],
      ],
    ],
    ['cmp-1', 'cmp-1', ['map', []]],
  ],
  headings: ['name', 'hostname', 'external_ids'],
});
const AGENTS_JSON = JSON.stringify(
  [
    ['cmp-0', 'OVN Controller agent'],
    ['cmp-1', 'OVN Controller agent'],
    ['ctl-0', 'OVN Controller Gateway agent'],
  ].map(([host, type], i) => ({
    ID: `id-${i}`,
    'Agent Type': type,
    Host: host,
    'Availability Zone': '',
    Alive: true,
    State: true,
    Binary: 'ovn-controller',
  })),
);
const WANT = { chassis: ['cmp-0', 'cmp-1', 'ctl-0'], gateways: ['ctl-0'], metadata: [] as string[] };

describe('OVN chassis against the plan', () => {
  const rows = parseChassisJson(CHASSIS_JSON);
  const agents = parseNetworkAgents(AGENTS_JSON);

  it('reads the Southbound rows: names, hostnames and the gateway flag in external_ids', () => {
    expect(rows.map((r) => r.name).sort()).toEqual(WANT.chassis);
    const ctl = rows.find((r) => r.name === 'ctl-0')!;
    expect(ctl.hostname).toBe('ctl-0');
    expect(ctl.externalIds['ovn-cms-options']).toBe('enable-chassis-as-gw');
    expect(ctl.externalIds['ovn-bridge-mappings']).toBe('physnet1:br-ex');
    expect(rows.find((r) => r.name === 'cmp-0')!.externalIds).toEqual({});
  });

  it("reads Neutron's agents: one per chassis, the gateway's of its own type, all alive", () => {
    expect(agents.filter((a) => a.type === AGENT_GATEWAY).map((a) => a.host)).toEqual(['ctl-0']);
    expect(
      agents
        .filter((a) => a.type === AGENT_CONTROLLER)
        .map((a) => a.host)
        .sort(),
    ).toEqual(['cmp-0', 'cmp-1']);
    expect(agents.every((a) => a.alive)).toBe(true);
  });

  it('finds a healthy 1ctl-2comp cloud healthy', () => {
    expect(evaluateChassis(WANT, rows, agents)).toEqual([]);
  });

  it('names the node: a missing chassis, a gateway without its flag (Neutron 21 reads external_ids), a dead or missing agent', () => {
    const withoutFlag: ChassisRow[] = rows
      .filter((r) => r.name !== 'cmp-1')
      .map((r) => (r.name === 'ctl-0' ? { ...r, externalIds: {} } : r));
    const deadAgents = agents
      .filter((a) => a.host !== 'cmp-0')
      .map((a) => (a.host === 'ctl-0' ? { ...a, alive: false } : a));
    const findings = evaluateChassis({ ...WANT, metadata: ['cmp-1'] }, withoutFlag, deadAgents);
    expect(findings).toEqual([
      expect.objectContaining({ severity: 'unhealthy', node: 'cmp-1', subject: 'ovn-chassis' }),
      expect.objectContaining({
        severity: 'unhealthy',
        node: 'ctl-0',
        subject: 'ovn-chassis',
        message: expect.stringContaining('enable-chassis-as-gw'),
      }),
      expect.objectContaining({ severity: 'unhealthy', node: 'cmp-0', subject: AGENT_CONTROLLER }),
      expect.objectContaining({ severity: 'unhealthy', node: 'ctl-0', subject: AGENT_GATEWAY }),
      expect.objectContaining({ severity: 'unhealthy', node: 'cmp-1', subject: AGENT_METADATA }),
    ]);
  });

  it('calls a compute flagged as a gateway, and a chassis the plan lacks, drift', () => {
    const extra: ChassisRow[] = [
      ...rows.map((r) =>
        r.name === 'cmp-0' ? { ...r, externalIds: { 'ovn-cms-options': 'enable-chassis-as-gw' } } : r,
      ),
      { name: 'old-node', hostname: 'old-node', externalIds: {} },
    ];
    expect(evaluateChassis(WANT, extra, undefined)).toEqual([
      expect.objectContaining({ severity: 'drift', node: 'cmp-0' }),
      expect.objectContaining({ severity: 'drift', node: 'old-node' }),
    ]);
  });
});
