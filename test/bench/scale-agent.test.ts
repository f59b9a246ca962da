/**
 * The simulated node of bench:scale reads what the real boot server writes:
 * the boot script's kernel arguments (src/pxe/ipxe.ts) and the agent's
 * command (renderAgentCommand), and posts bodies the agent API's schemas
 * accept. The inventory it generates passes the real loader.
 */
import { describe, expect, it } from 'vitest';
import { Value } from '@sinclair/typebox/value';
import { defaultRolesDir } from '../../src/core/paths.js';
import { parseInventory } from '../../src/inventory/load.js';
import { localBootScript, nodeScript } from '../../src/pxe/ipxe.js';
import { AgentResultSchema, IntrospectionSchema, renderAgentCommand } from '../../src/pxe/http.js';
import { loadCatalog } from '../../src/roles/catalog.js';
import {
  ed25519PublicLine,
  introspectionOf,
  parseBootScript,
  parseCommand,
  scaleInventory,
} from '../../bench/scale-agent.js';

const NODE = { name: 'cmp-7', mac: '52:54:00:00:00:0a', ip: '127.20.0.12' };

describe('parseBootScript', () => {
  it("reads node, API, token and purpose from a node's boot script", () => {
    const script = nodeScript({
      node: NODE.name,
      mac: NODE.mac,
      kernelUrl: 'http://127.20.0.1:21999/files/vmlinuz',
      initrdUrl: 'http://127.20.0.1:21999/files/initrd.img',
      apiUrl: 'http://127.20.0.1:21999',
      token: 'tok-EN_123',
      extraArgs: ['stackctl.purpose=deploy', 'quiet'],
    });
    expect(parseBootScript(script)).toEqual({
      node: NODE.name,
      api: 'http://127.20.0.1:21999',
      token: 'tok-EN_123',
      purpose: 'deploy',
    });
  });

  it('finds nothing in the script of a node that boots its disk', () => {
    expect(parseBootScript(localBootScript(NODE.name))).toBeUndefined();
  });
});

describe('parseCommand', () => {
  const sha = 'a'.repeat(64);
  it('reads the image, its checksum and size, and the host key comment of a deploy command', () => {
    const text = renderAgentCommand(
      {
        kind: 'deploy',
        image: 'host-aaaaaaaaaaaa.img.gz',
        sha256: sha,
        rawBytes: 4096,
        bytes: 1024,
        hints: { min_size_gb: 50 },
        hostKey: { type: 'ed25519', comment: 'root@cmp-7' },
        files: [{ path: '/etc/hostname', mode: 0o644, content: 'cmp-7\n' }],
      },
      'http://127.20.0.1:21999/files',
    );
    expect(parseCommand(text)).toEqual({
      kind: 'deploy',
      url: 'http://127.20.0.1:21999/files/host-aaaaaaaaaaaa.img.gz',
      sha256: sha,
      bytes: 1024,
      hostKeyComment: 'root@cmp-7',
    });
  });

  for (const kind of ['clean', 'poweroff'] as const) {
    it(`reads a ${kind} command`, () => {
      expect(parseCommand(renderAgentCommand({ kind }, 'http://x/files'))).toEqual({ kind });
    });
  }

  it('reads wait, and refuses an answer cut short', () => {
    expect(parseCommand('wait\nend\n')).toEqual({ kind: 'wait' });
    expect(parseCommand('deploy\nimage http://x/i ' + sha + ' 1 1\n')).toBeUndefined();
  });
});

describe('agent bodies', () => {
  it('the introspection report passes the agent API schema', () => {
    expect([...Value.Errors(IntrospectionSchema, introspectionOf(NODE))]).toEqual([]);
  });

  it('a deploy result with a fresh ed25519 host key passes the agent API schema', () => {
    const result = {
      status: 'ok',
      step: 'deploy',
      root_device: '/dev/sda',
      image_sha256: 'b'.repeat(64),
      host_key: ed25519PublicLine('root@cmp-7'),
    };
    expect([...Value.Errors(AgentResultSchema, result)]).toEqual([]);
    expect(ed25519PublicLine('c')).not.toBe(ed25519PublicLine('c'));
  });
});

describe('scaleInventory', () => {
  it('loads with the real loader: N nodes on a loopback provisioning network, IPMI and Redfish BMCs alternating', () => {
    const catalog = loadCatalog(defaultRolesDir());
    const loaded = parseInventory('scale.yaml', scaleInventory(10), { roles: catalog.roleInfo });
    const nodes = loaded.inventory.nodes;
    expect(nodes).toHaveLength(10);
    expect(loaded.inventory.networks.provisioning?.cidr).toBe('127.20.0.0/16');
    expect(nodes[0]?.bmc.address).toBe('ipmi://127.0.0.1:20000');
    expect(nodes[1]?.bmc.address).toBe('redfish+http://127.0.0.1:20001/redfish/v1/Systems/1');
    expect(new Set(nodes.map((n) => n.nics[0]?.mac)).size).toBe(10);
  });
});
