import { readFileSync, writeFileSync, existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { copyInventory, runCli } from '../helpers/cli.js';

/** 1-based line of the n-th occurrence of `needle` in `text`. */
function lineOf(text: string, needle: string, occurrence = 1): number {
  let at = -1;
  for (let i = 0; i < occurrence; i++) at = text.indexOf(needle, at + 1);
  if (at < 0) throw new Error(`mutation target not found: ${needle}`);
  return text.slice(0, at).split('\n').length;
}

interface Mutation {
  scenario: string;
  inventory: string;
  from: string;
  to: string;
  code: string;
  /** Text of the faulty line after the mutation (default: `to`). */
  at?: string;
  /** Which occurrence of `at` is the faulty one (default: the first). */
  occurrence?: number;
}

const LAB = 'lab.yaml';
const MULTI = 'example-multinode.yaml';

const mutations: Mutation[] = [
  {
    scenario: 'a duplicate MAC',
    inventory: LAB,
    from: "'52:54:00:00:20:01'",
    to: "'52:54:00:00:10:01'",
    code: 'E_DUPLICATE_MAC',
    at: "'52:54:00:00:10:01'",
    occurrence: 2,
  },
  {
    scenario: 'an IP outside its CIDR',
    inventory: LAB,
    from: 'internal_api: 172.17.0.11',
    to: 'internal_api: 172.18.0.11',
    code: 'E_IP_OUTSIDE_CIDR',
  },
  {
    scenario: 'an IP equal to the gateway',
    inventory: MULTI,
    from: 'external: 10.0.0.11',
    to: 'external: 10.0.0.1',
    code: 'E_IP_IS_GATEWAY',
    at: 'external: 10.0.0.1 }',
  },
  {
    scenario: 'an IP inside the DHCP range',
    inventory: LAB,
    from: 'ips: { internal_api: 172.17.0.11 }',
    to: 'ips: { provisioning: 192.168.24.150 }',
    code: 'E_IP_IN_DHCP_RANGE',
  },
  { scenario: 'an unknown role', inventory: LAB, from: 'role: Compute', to: 'role: Computer', code: 'E_UNKNOWN_ROLE' },
  {
    scenario: 'an unknown key',
    inventory: LAB,
    from: 'root_device: { min_size_gb: 8 }\n    ips',
    to: 'root_devcie: { min_size_gb: 8 }\n    ips',
    code: 'E_SCHEMA_UNKNOWN_KEY',
    at: 'root_devcie',
  },
  {
    scenario: 'a YAML syntax error',
    inventory: LAB,
    from: '  internal_api:\n',
    to: '  internal_api\n',
    code: 'E_YAML_SYNTAX',
    at: '  internal_api\n',
  },
  {
    scenario: 'an unquoted MAC',
    inventory: LAB,
    from: "mac: '52:54:00:00:10:01'",
    to: 'mac: 52:54:00:00:10:01',
    code: 'E_YAML_AMBIGUOUS',
  },
  {
    scenario: 'two controllers',
    inventory: LAB,
    from: 'role: Compute',
    to: 'role: Controller',
    code: 'E_QUORUM',
    at: "role: Controller\n    bmc: { address: 'redfish",
  },
  {
    scenario: 'a duplicate node name',
    inventory: MULTI,
    from: 'name: cmp-1\n',
    to: 'name: cmp-0\n',
    code: 'E_DUPLICATE_NODE',
    at: 'name: cmp-0\n',
    occurrence: 2,
  },
  {
    scenario: 'a duplicate BMC address',
    inventory: MULTI,
    from: 'ipmi://10.1.0.12:623',
    to: 'ipmi://10.1.0.11',
    code: 'E_DUPLICATE_BMC',
    at: "'ipmi://10.1.0.11'",
  },
  {
    scenario: 'a duplicate IP',
    inventory: MULTI,
    from: 'internal_api: 172.17.0.12',
    to: 'internal_api: 172.17.0.11',
    code: 'E_DUPLICATE_IP',
    at: 'internal_api: 172.17.0.11, external: 10.0.0.12',
  },
  {
    scenario: 'overlapping networks',
    inventory: LAB,
    from: 'cidr: 172.19.0.0/24',
    to: 'cidr: 172.17.0.0/23',
    code: 'E_NETWORK_OVERLAP',
  },
  {
    scenario: 'a VIP that collides with a node',
    inventory: LAB,
    from: 'internal_api: 172.17.0.11',
    to: 'internal_api: 172.17.0.250',
    code: 'E_VIP_COLLISION',
  },
  {
    scenario: 'a node without a provisioning NIC',
    inventory: LAB,
    from: "'52:54:00:00:20:01', network: provisioning",
    to: "'52:54:00:00:20:01', network: tenant",
    code: 'E_NO_PROVISIONING_NIC',
    at: "- { mac: '52:54:00:00:20:01', network: tenant",
  },
  {
    scenario: 'a password written inline',
    inventory: LAB,
    from: "credentials: lab-bmc }\n    nics:\n      - { mac: '52:54:00:00:10:01'",
    to: "credentials: lab-bmc, password: hunter2 }\n    nics:\n      - { mac: '52:54:00:00:10:01'",
    code: 'E_INLINE_SECRET',
    at: 'password: hunter2',
  },
  {
    scenario: 'an unknown BMC scheme',
    inventory: LAB,
    from: 'ipmi://127.0.0.1:6230',
    to: 'idrac://127.0.0.1:6230',
    code: 'E_BMC_SCHEME',
  },
  {
    scenario: 'plain-HTTP Redfish off loopback without insecure_http',
    inventory: MULTI,
    from: "'redfish+https://10.1.1.22/",
    to: "'redfish+http://10.1.1.22/",
    code: 'E_BMC_PLAIN_HTTP',
  },
  { scenario: 'a wrong type', inventory: LAB, from: 'vlan: 20', to: 'vlan: twenty', code: 'E_SCHEMA_TYPE' },
  {
    scenario: 'a setting out of its range (VRRP router ids are 1-255)',
    inventory: LAB,
    from: '    nova_virt_type: qemu\n',
    to: '    nova_virt_type: qemu\n    keepalived_router_id: 300\n',
    code: 'E_SETTING_VALUE',
    at: 'keepalived_router_id: 300',
  },
  {
    scenario: 'a newline in a setting',
    inventory: LAB,
    from: '    nova_virt_type: qemu\n',
    to: '    nova_virt_type: qemu\n    nova_fake_driver_class: "fake.FakeDriver\\nrpc_backend = x"\n',
    code: 'E_SETTING_VALUE',
    at: 'nova_fake_driver_class',
  },
  {
    scenario: 'a setting that is not one of its values',
    inventory: LAB,
    from: 'nova_virt_type: qemu',
    to: 'nova_virt_type: xen',
    code: 'E_SETTING_VALUE',
  },
  {
    scenario: 'a setting of the wrong type',
    inventory: LAB,
    from: '    nova_virt_type: qemu\n',
    to: '    nova_virt_type: qemu\n    memcached_memory_mb: lots\n',
    code: 'E_SETTING_VALUE',
    at: 'memcached_memory_mb: lots',
  },
  {
    scenario: 'an unknown setting (a typo)',
    inventory: LAB,
    from: 'nova_virt_type: qemu',
    to: 'nova_virt_typ: qemu',
    code: 'E_UNKNOWN_SETTING',
  },
  {
    scenario: 'a secret reference in a field that holds no secret',
    inventory: LAB,
    from: 'root_device: { min_size_gb: 8 }',
    to: "root_device: { min_size_gb: 8, serial: '<secret:keystone_admin_password>' }",
    code: 'E_SECRET_REF_NOT_ALLOWED',
  },
  {
    scenario: 'a secret reference in a setting that is not of type secret',
    inventory: LAB,
    from: '    nova_virt_type: qemu\n',
    to: "    nova_virt_type: qemu\n    nova_fake_driver_class: '<secret:keystone_admin_password>'\n",
    code: 'E_SECRET_REF_NOT_ALLOWED',
    at: 'nova_fake_driver_class',
  },
  {
    scenario: 'a region with a space (Keystone region ids here have none)',
    inventory: LAB,
    from: '  release: zed\n',
    to: '  release: zed\n  region: Region One\n',
    code: 'E_SCHEMA_FORMAT',
    at: 'region: Region One',
  },
  {
    scenario: 'a plain-HTTP registry declared otherwise',
    inventory: MULTI,
    from: 'registry_insecure: true',
    to: 'registry_insecure: false',
    code: 'E_REGISTRY_PLAIN_HTTP',
  },
];

describe('stackctl inventory validate', () => {
  it.each([LAB, MULTI])('accepts the shipped %s and writes nothing', async (name) => {
    const file = copyInventory(name);
    const before = readdirSync(dirname(file));
    const r = await runCli('inventory', 'validate', '-i', file);
    expect(r.stderr.replace(/.*W_NO_SECRETS.*\n.*\n/g, '')).toBe('');
    expect(r.stdout).toContain('valid');
    expect(r.code).toBe(0);
    expect(readdirSync(dirname(file))).toEqual(before);
  });

  it('accepts registry_insecure false once a tls section makes the registry serve TLS', async () => {
    const file = copyInventory(MULTI);
    const text = readFileSync(file, 'utf8');
    expect(text).toContain('registry_insecure: true');
    writeFileSync(file, text.replace('registry_insecure: true', 'registry_insecure: false') + '\ntls: {}\n');
    const r = await runCli('inventory', 'validate', '-i', file);
    expect(r.stderr).not.toContain('E_REGISTRY_PLAIN_HTTP');
    expect(r.code, r.stderr).toBe(0);
  });

  it.each(mutations)('refuses $scenario ($code), naming file, line and column', async (m) => {
    const file = copyInventory(m.inventory);
    const text = readFileSync(file, 'utf8');
    expect(text, 'mutation target').toContain(m.from);
    const mutated = text.replace(m.from, m.to);
    writeFileSync(file, mutated);
    const r = await runCli('inventory', 'validate', '-i', file);
    expect(r.code).toBe(3);
    const line = lineOf(mutated, m.at ?? m.to, m.occurrence);
    const expected = new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:${line}:\\d+: error ${m.code}`, 'm');
    expect(r.stderr).toMatch(expected);
    expect(r.stderr).toContain('hint:');
    expect(r.stderr).not.toContain('hunter2');
    expect(existsSync(file.replace(/\.yaml$/, '.ipam.json'))).toBe(false);
  });

  it('names what a setting takes in the hint: its range, its values, its nearest name', async () => {
    const file = copyInventory(LAB);
    const text = readFileSync(file, 'utf8').replace(
      '    nova_virt_type: qemu\n',
      '    nova_virt_type: kvm2\n    keepalived_router_id: 0\n    memcached_memory_mbb: 64\n    nova_cpu_allocation_ratio: 1.5\n',
    );
    writeFileSync(file, text);
    const r = await runCli('inventory', 'validate', '-i', file, '--json');
    const body = JSON.parse(r.stdout) as { issues: { code: string; message: string; hint: string }[] };
    expect(body.issues.map((i) => [i.code, i.message, i.hint])).toEqual([
      [
        'E_SETTING_VALUE',
        'cloud.settings.nova_virt_type is not one of the allowed values',
        'nova_virt_type (service nova-api) takes one of kvm, qemu.',
      ],
      [
        'E_SETTING_VALUE',
        'cloud.settings.keepalived_router_id is 0, below the minimum 1',
        expect.stringContaining('keepalived_router_id (service keepalived) takes an integer from 1 to 255'),
      ],
      [
        'E_UNKNOWN_SETTING',
        'cloud.settings.memcached_memory_mbb is not a setting of any service this cloud runs',
        'Did you mean memcached_memory_mb? Settings are listed in docs/roles.md.',
      ],
    ]); // a ratio is a number: 1.5 is fine
    expect(r.code).toBe(3);
  });

  it('says when a setting belongs to a service no node of the inventory runs', async () => {
    const file = copyInventory(LAB);
    // only the compute: no node runs keepalived
    const text = readFileSync(file, 'utf8')
      .replace(/ {2}- name: ctl-0\n[\s\S]*?(?= {2}- name: cmp-0)/, '')
      .replace('    nova_virt_type: qemu\n', '    nova_virt_type: qemu\n    keepalived_router_id: 52\n');
    writeFileSync(file, text);
    const r = await runCli('inventory', 'validate', '-i', file);
    expect(r.stderr).toMatch(
      /:\d+:\d+: error E_UNKNOWN_SETTING at \/cloud\/settings\/keepalived_router_id: cloud.settings.keepalived_router_id belongs to service keepalived, which no node of this inventory runs/,
    );
  });

  it('refuses a plain-HTTP registry the inventory does not declare, saying what the setting means', async () => {
    const file = copyInventory(LAB);
    const text = readFileSync(file, 'utf8');
    writeFileSync(file, text.replace(/\n.*\n {2}registry_insecure: true\n/, '\n'));
    const r = await runCli('inventory', 'validate', '-i', file);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/lab\.yaml:\d+:\d+: error E_REGISTRY_PLAIN_HTTP at \/cloud:/);
    expect(r.stderr).toContain(
      'the registry 192.168.24.1:5000 would speak plain HTTP (no tls section), and cloud.registry_insecure is not true',
    );
    expect(r.stderr).toContain('set cloud.registry_insecure: true');
    expect(r.stderr).toContain('Add a tls: section');
  });

  it('reports every fault at once', async () => {
    const file = copyInventory(LAB);
    let text = readFileSync(file, 'utf8');
    for (const m of mutations.filter((x) =>
      ['E_DUPLICATE_MAC', 'E_UNKNOWN_ROLE', 'E_IP_OUTSIDE_CIDR'].includes(x.code),
    ))
      text = text.replace(m.from, m.to);
    writeFileSync(file, text);
    const r = await runCli('inventory', 'validate', '-i', file);
    for (const code of ['E_DUPLICATE_MAC', 'E_UNKNOWN_ROLE', 'E_IP_OUTSIDE_CIDR']) expect(r.stderr).toContain(code);
  });

  it('warns on an even number of quorum members, and on plain-HTTP Redfish off loopback that insecure_http allows', async () => {
    const file = copyInventory(MULTI);
    let text = readFileSync(file, 'utf8');
    text = text.replace(/(name: cmp-0\n {4}role: )Compute/, '$1Controller');
    text = text.replace(
      "'redfish+https://10.1.1.22/redfish/v1/Systems/1'\n",
      "'redfish+http://10.1.1.22/redfish/v1/Systems/1'\n      insecure_http: true\n",
    );
    writeFileSync(file, text);
    expect(text).toContain('insecure_http: true');
    const r = await runCli('inventory', 'validate', '-i', file);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain('W_QUORUM_EVEN');
    expect(r.stderr).toContain('W_BMC_PLAINTEXT');
    expect(r.stderr).not.toContain('E_BMC_PLAIN_HTTP');
  });

  it('warns when insecure_http is set on a BMC it does not concern', async () => {
    const file = copyInventory(MULTI);
    const text = readFileSync(file, 'utf8').replace(
      "'redfish+https://10.1.1.22/redfish/v1/Systems/1'\n",
      "'redfish+https://10.1.1.22/redfish/v1/Systems/1'\n      insecure_http: true\n",
    );
    writeFileSync(file, text);
    const r = await runCli('inventory', 'validate', '-i', file);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`:${lineOf(text, 'insecure_http')}:\\d+: warning W_BMC_INSECURE_HTTP_UNUSED`));
  });

  it('gives machine-readable results with --json', async () => {
    const file = copyInventory(LAB);
    writeFileSync(file, readFileSync(file, 'utf8').replace('role: Compute', 'role: Computer'));
    const r = await runCli('inventory', 'validate', '-i', file, '--json');
    const body = JSON.parse(r.stdout) as {
      valid: boolean;
      issues: { code: string; location: { line: number; path: string } }[];
    };
    expect(body.valid).toBe(false);
    expect(body.issues[0]).toMatchObject({ code: 'E_UNKNOWN_ROLE', location: { path: '/nodes/1/role' } });
    expect(r.code).toBe(3);
  });

  it('refuses a file over the size limit without reading it', async () => {
    const file = join(dirname(copyInventory(LAB)), 'huge.yaml');
    writeFileSync(file, '#'.repeat(33 * 1024 * 1024));
    const r = await runCli('inventory', 'validate', '-i', file);
    expect(r.stderr).toContain('E_FILE_TOO_LARGE');
    expect(r.code).toBe(3);
  });

  it('names a missing file', async () => {
    const r = await runCli('inventory', 'validate', '-i', '/nonexistent/site.yaml');
    expect(r.stderr).toContain('/nonexistent/site.yaml');
    expect(r.code).toBe(4);
  });
});
