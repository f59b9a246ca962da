import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { copyInventory, runCli } from '../helpers/cli.js';

interface PlanJson {
  nodes: { name: string; addresses: Record<string, string> }[];
}

async function addresses(file: string): Promise<Record<string, Record<string, string>>> {
  const r = await runCli('plan', '-i', file, '--json');
  expect(r.code, r.stderr).toBe(0);
  const plan = JSON.parse(r.stdout) as PlanJson;
  return Object.fromEntries(plan.nodes.map((n) => [n.name, n.addresses]));
}

const extraCompute = (name: string, mac: string, port: number): string =>
  `  - name: ${name}\n    role: Compute\n    bmc: { address: 'ipmi://127.0.0.1:${port}', credentials: lab-bmc }\n    nics:\n      - { mac: '${mac}', network: provisioning }\n`;

describe('IPAM', () => {
  it('gives every node an address on each network of its role, fixed addresses first', async () => {
    const file = copyInventory('lab.yaml');
    const a = await addresses(file);
    expect(a['ctl-0']).toEqual({
      external: '10.0.0.10',
      internal_api: '172.17.0.11',
      provisioning: '192.168.24.10',
      tenant: '172.19.0.10',
    });
    expect(a['cmp-0']).toEqual({ internal_api: '172.17.0.10', provisioning: '192.168.24.11', tenant: '172.19.0.11' });
    expect(existsSync(file.replace('.yaml', '.ipam.json'))).toBe(true);
  });

  it('never renumbers a node on a re-run, and adding a node moves no other node', async () => {
    const file = copyInventory('lab.yaml');
    const first = await addresses(file);
    expect(await addresses(file)).toEqual(first);
    // Add a node at the top of the list: inventory order changes, addresses must not.
    const text = readFileSync(file, 'utf8').replace(
      'nodes:\n',
      'nodes:\n' + extraCompute('cmp-new', '52:54:00:00:30:01', 6299),
    );
    writeFileSync(file, text);
    const second = await addresses(file);
    for (const [node, addrs] of Object.entries(first)) expect(second[node]).toEqual(addrs);
    const taken = new Set(Object.values(first).flatMap((a) => Object.values(a)));
    for (const ip of Object.values(second['cmp-new']!)) expect(taken.has(ip)).toBe(false);
  });

  it("keeps a removed node's addresses reserved until released", async () => {
    const file = copyInventory('lab.yaml');
    const base = readFileSync(file, 'utf8');
    writeFileSync(file, base + extraCompute('cmp-1', '52:54:00:00:30:02', 6298));
    const withNode = await addresses(file);
    writeFileSync(file, base);
    const r = await runCli('plan', '-i', file, '--json');
    expect(r.stderr).toContain('W_IPAM_STALE');
    // A new node does not get cmp-1's old addresses while they are reserved.
    writeFileSync(file, base + extraCompute('cmp-2', '52:54:00:00:30:03', 6297));
    const a = await addresses(file);
    expect(a['cmp-2']!.provisioning).not.toBe(withNode['cmp-1']!.provisioning);
    // Releasing is explicit, and refused for a node still in the inventory.
    expect((await runCli('ipam', 'release', 'cmp-2', '-i', file)).code).toBe(2);
    const rel = await runCli('ipam', 'release', 'cmp-1', '-i', file);
    expect(rel.stdout).toContain(withNode['cmp-1']!.provisioning!);
    const show = await runCli('ipam', 'show', '-i', file, '--json');
    expect(show.stdout).not.toContain('cmp-1');
  });

  it('reports an exhausted pool with the network at fault', async () => {
    const file = copyInventory('lab.yaml');
    const text = readFileSync(file, 'utf8').replace(
      'allocation_range: [192.168.24.10, 192.168.24.99]',
      'allocation_range: [192.168.24.10, 192.168.24.10]',
    );
    writeFileSync(file, text);
    const r = await runCli('plan', '-i', file);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/E_IPAM_EXHAUSTED.*provisioning/);
    expect(existsSync(file.replace('.yaml', '.ipam.json'))).toBe(false);
  });

  it('refuses a saved address that the inventory now gives to another node', async () => {
    const file = copyInventory('lab.yaml');
    const a = await addresses(file);
    const cmpIp = a['cmp-0']!.internal_api!;
    writeFileSync(file, readFileSync(file, 'utf8').replace('internal_api: 172.17.0.11', `internal_api: ${cmpIp}`));
    const r = await runCli('plan', '-i', file);
    expect(r.stderr).toContain('E_IPAM_CONFLICT');
    expect(r.stderr).toContain('ipam release cmp-0 --network internal_api');
    expect(r.code).toBe(3);
  });
});
