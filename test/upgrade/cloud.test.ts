/**
 * The upgrade's OpenStack client: run in keystone (else nova_api) on the
 * first controller that answers, the admin password only in the exec
 * environment, a failing command named with the end of its stderr.
 */
import { describe, expect, it } from 'vitest';
import { Secret } from '../../src/core/secret.js';
import type { NodeAccess } from '../../src/orchestrator/executor.js';
import type { ContainerWork, DeployPlan } from '../../src/orchestrator/planner.js';
import type { ContainerInfo, ContainerEngine, ExecResult } from '../../src/remote/index.js';
import { clientCandidates, cloudClient } from '../../src/upgrade/cloud.js';
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
