/**
 * The OpenStack client adapter. The upgrade's client: run in keystone (else
 * nova_api) on the first controller that answers, the admin password only in
 * the exec environment, a failing command named with the end of its stderr.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Secret } from '../../src/core/secret.js';
import type { NodeAccess } from '../../src/orchestrator/executor.js';
import type { ContainerWork, DeployPlan } from '../../src/orchestrator/planner.js';
import type { ContainerInfo, ContainerEngine, ExecResult } from '../../src/remote/index.js';
import {
  clientCandidates,
  cloudClient,
  containerClient,
  jsonObject,
  jsonRows,
  listComputeServices,
  listHypervisors,
  parseMigrations,
  parseServerShow,
  parseServers,
} from '../../src/status/openstack-client.js';
import { rejection } from '../helpers/errors.js';

const PASSWORD = 'S3cret-admin-pw';
const credentials = { OS_AUTH_URL: 'http://10.0.0.5:5000/v3', OS_USERNAME: 'admin', OS_PASSWORD: new Secret(PASSWORD) };

/** Three controllers; ctl-2 runs nova_api only. */
const plan = {
  cloud: 'lab',
  unsupported: [],
  steps: [3, 4].map((step) => ({
    step,
    title: `step ${step}`,
    runOnce: [],
    nodes: ['ctl-0', 'ctl-1', 'ctl-2'].map((node) => ({
      node,
      role: 'Controller',
      configs: [],
      images: [],
      containers: (step === 3 ? (node === 'ctl-2' ? [] : ['keystone']) : ['nova_api', 'glance_api']).map(
        (name) => ({ name, node }) as ContainerWork,
      ),
    })),
  })),
} as unknown as DeployPlan;

interface Call {
  node: string;
  container: string;
  argv: readonly string[];
  env: unknown;
}

function nodes(spec: Record<string, { down?: boolean; stopped?: string[]; answer?: ExecResult }>) {
  const calls: Call[] = [];
  const connect = (node: string): NodeAccess => {
    const s = spec[node] ?? {};
    if (s.down) throw new Error(`connect ETIMEDOUT ${node}:22`);
    const docker: Partial<ContainerEngine> = {
      inspectContainer: async (name) =>
        ({
          name,
          state: { running: !s.stopped?.includes(name), status: s.stopped?.includes(name) ? 'exited' : 'running' },
        }) as ContainerInfo,
      exec: async (container, argv, opts) => {
        calls.push({ node, container, argv, env: opts?.env });
        return s.answer ?? { code: 0, stdout: '[]', stderr: '' };
      },
    };
    return {
      node,
      docker: docker as ContainerEngine,
      exec: async () => ({ code: 0, stdout: '', stderr: '' }),
      files: { upload: async () => 0 },
    };
  };
  return { connect, calls };
}

/** The client containers the shipped service files declare (identity, then compute API). */
const CONTAINERS = ['keystone', 'nova_api'];

describe('cloudClient', () => {
  it('prefers keystone, then nova_api, node by node in plan order', () => {
    expect(clientCandidates(plan, CONTAINERS)).toEqual([
      { node: 'ctl-0', container: 'keystone' },
      { node: 'ctl-0', container: 'nova_api' },
      { node: 'ctl-1', container: 'keystone' },
      { node: 'ctl-1', container: 'nova_api' },
      { node: 'ctl-2', container: 'nova_api' },
    ]);
  });

  it('runs in keystone with the credentials in the exec environment only', async () => {
    const n = nodes({});
    const out = await cloudClient({ connect: n.connect, plan, credentials, containers: CONTAINERS }).openstack([
      'server',
      'list',
      '-f',
      'json',
    ]);
    expect(out).toBe('[]');
    expect(n.calls).toHaveLength(1);
    expect(n.calls[0]).toMatchObject({
      node: 'ctl-0',
      container: 'keystone',
      argv: ['openstack', 'server', 'list', '-f', 'json'],
    });
    expect(n.calls[0]!.env).toBe(credentials);
    expect(n.calls[0]!.argv.join(' ')).not.toContain(PASSWORD);
  });

  it('skips a node that does not answer and a stopped keystone, and keeps the one that answered', async () => {
    const n = nodes({ 'ctl-0': { down: true }, 'ctl-1': { stopped: ['keystone'] } });
    const client = cloudClient({ connect: n.connect, plan, credentials, containers: CONTAINERS });
    await client.openstack(['flavor', 'list']);
    await client.openstack(['hypervisor', 'list']);
    expect(n.calls.map((c) => `${c.node}/${c.container}`)).toEqual(['ctl-1/nova_api', 'ctl-1/nova_api']);
  });

  it('rejects a failing command naming it and the end of stderr, never the password', async () => {
    const n = nodes({
      'ctl-0': { answer: { code: 1, stdout: '', stderr: 'No server with a name or ID of vm-9 exists.' } },
    });
    const err = await rejection(
      cloudClient({ connect: n.connect, plan, credentials, containers: CONTAINERS }).openstack([
        'server',
        'show',
        'vm-9',
      ]),
    );
    expect(err.code).toBe('E_OPENSTACK_CLIENT');
    expect(err.message).toBe(
      'openstack server show vm-9 failed on ctl-0/keystone (exit 1): No server with a name or ID of vm-9 exists.',
    );
    expect(JSON.stringify(err.toJSON())).not.toContain(PASSWORD);
    // Another controller would say the same: not retried elsewhere.
    expect(n.calls).toHaveLength(1);
  });

  it('says why no controller could run it', async () => {
    const n = nodes({ 'ctl-0': { down: true }, 'ctl-1': { down: true }, 'ctl-2': { stopped: ['nova_api'] } });
    const err = await rejection(
      cloudClient({ connect: n.connect, plan, credentials, containers: CONTAINERS }).openstack(['flavor', 'list']),
    );
    expect(err.code).toBe('E_OPENSTACK_CLIENT');
    expect(err.message).toMatch(
      /no controller could run the client .*ctl-0\/keystone: connect ETIMEDOUT.*ctl-2\/nova_api: exited/,
    );
  });
});

describe('containerClient', () => {
  it('runs in the given container, the credentials in the exec environment only', async () => {
    const n = nodes({ 'ctl-1': { answer: { code: 0, stdout: '[{"Binary": "nova-compute"}]', stderr: '' } } });
    const client = containerClient({
      docker: n.connect('ctl-1').docker,
      node: 'ctl-1',
      container: 'nova_api',
      credentials,
    });
    expect(await listComputeServices(client, 'nova-compute')).toEqual([
      { binary: 'nova-compute', host: '', zone: '', status: '', state: '', updatedAt: null },
    ]);
    expect(n.calls).toEqual([
      {
        node: 'ctl-1',
        container: 'nova_api',
        argv: ['openstack', 'compute', 'service', 'list', '--service', 'nova-compute', '-f', 'json'],
        env: credentials,
      },
    ]);
  });

  it('names the command, node and container of a failure', async () => {
    const n = nodes({ 'ctl-0': { answer: { code: 2, stdout: '', stderr: 'Missing value auth-url' } } });
    const client = containerClient({
      docker: n.connect('ctl-0').docker,
      node: 'ctl-0',
      container: 'keystone',
      credentials,
    });
    const err = await rejection(listHypervisors(client));
    expect(err).toMatchObject({ code: 'E_OPENSTACK_CLIENT', exitCode: 5 });
    expect(err.message).toBe(
      'openstack hypervisor list -f json failed on ctl-0/keystone (exit 2): Missing value auth-url',
    );
    expect(JSON.stringify(err.toJSON())).not.toContain(PASSWORD);
  });
});

describe('reading the client', () => {
  it.each([
    {
      scenario: 'a message instead of JSON',
      text: 'Missing value auth-url required',
      says: /server list: not JSON: Missing/,
    },
    { scenario: 'an object instead of a list', text: '{"ID": "x"}', says: /server list: expected a JSON list/ },
  ])('refuses $scenario with E_OPENSTACK_CLIENT', ({ text, says }) => {
    expect(() => jsonRows(text, 'server list')).toThrow(expect.objectContaining({ code: 'E_OPENSTACK_CLIENT' }));
    expect(() => jsonRows(text, 'server list')).toThrow(says);
  });

  it('refuses a list where one object is expected', () => {
    expect(() => jsonObject('[]', 'server show')).toThrow(/server show: expected a JSON object/);
    expect(() => parseServerShow('[]')).toThrow(expect.objectContaining({ code: 'E_OPENSTACK_CLIENT' }));
  });

  it.each([
    {
      scenario: 'the admin columns of Zed (OS-EXT-SRV-ATTR:host, OS-EXT-STS:task_state)',
      row: { status: 'MIGRATING', 'OS-EXT-SRV-ATTR:host': 'cmp-0', 'OS-EXT-STS:task_state': 'migrating' },
    },
    {
      scenario: 'the names of newer clients',
      row: { Status: 'MIGRATING', compute_host: 'cmp-0', task_state: 'migrating' },
    },
  ])('reads server show with $scenario', ({ row }) => {
    expect(parseServerShow(JSON.stringify(row))).toEqual({
      status: 'MIGRATING',
      host: 'cmp-0',
      taskState: 'migrating',
    });
  });

  it('reads server list --long (host and flavour columns of either client) and migration records', () => {
    const rows = [
      { ID: 'i-1', Name: 'vm-1', Status: 'ACTIVE', Host: 'cmp-0', 'Flavor ID': 'f-1', 'Flavor Name': 'm1.tiny' },
      { ID: 'i-2', Name: 'vm-2', Status: 'SHUTOFF', 'OS-EXT-SRV-ATTR:host': 'cmp-1', Flavor: 'm1.small' },
    ];
    expect(parseServers(JSON.stringify(rows))).toEqual([
      {
        id: 'i-1',
        name: 'vm-1',
        status: 'ACTIVE',
        host: 'cmp-0',
        flavorId: 'f-1',
        flavorName: 'm1.tiny',
        addresses: [],
      },
      {
        id: 'i-2',
        name: 'vm-2',
        status: 'SHUTOFF',
        host: 'cmp-1',
        flavorId: '',
        flavorName: 'm1.small',
        addresses: [],
      },
    ]);
    expect(
      parseMigrations(JSON.stringify([{ Id: 7, Status: 'Running' }, { id: '8', status: 'completed' }, { Id: null }])),
    ).toEqual([
      { id: '7', status: 'running' },
      { id: '8', status: 'completed' },
      { id: '', status: '' },
    ]);
  });

  it('is the only module that runs the client or reads its output', () => {
    const root = join(import.meta.dirname, '..', '..', 'src');
    const files = (readdirSync(root, { recursive: true }) as string[]).filter((f) => f.endsWith('.ts'));
    const runs = files.filter((f) => /\[\s*'openstack'\s*,/.test(readFileSync(join(root, f), 'utf8')));
    expect(runs).toEqual([join('status', 'openstack-client.ts')]);
    // the commands' JSON is decoded here; the modules that ask Nova use the readers
    for (const f of ['status/collect.ts', 'upgrade/prechecks.ts', 'upgrade/evacuate.ts'])
      expect(readFileSync(join(root, f), 'utf8'), f).not.toContain('JSON.parse');
  });
});
