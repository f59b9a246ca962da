import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadAll, planOf } from '../../src/cli/context.js';
import { defaultRolesDir } from '../../src/core/paths.js';
import type { Issue } from '../../src/core/errors.js';
import { describeSetting, settingProblem, type SettingSpec } from '../../src/inventory/settings.js';
import { loadCatalog } from '../../src/roles/catalog.js';
import { copyInventory, runCli, tempDir } from '../helpers/cli.js';
import { osloValues } from '../helpers/parsers.js';
import { catalog } from '../helpers/plan.js';

/** A copy of the shipped roles with some files edited: path under roles/ -> edit of its text. */
function rolesWith(edits: Record<string, (text: string) => string>): string {
  const dir = join(tempDir('stackctl-roles-'), 'roles');
  cpSync(defaultRolesDir(), dir, { recursive: true });
  for (const [path, edit] of Object.entries(edits)) {
    const file = join(dir, path);
    const text = readFileSync(file, 'utf8');
    const changed = edit(text);
    expect(changed, path).not.toBe(text);
    writeFileSync(file, changed);
  }
  return dir;
}

const lintOf = (dir: string): Issue[] => {
  try {
    loadCatalog(dir);
  } catch (e) {
    return (e as { issues: Issue[] }).issues;
  }
  return [];
};

describe('settings: every one has a type', () => {
  it('the short form infers it; the long form declares ranges, values and patterns', () => {
    const s = catalog.settings;
    expect(s.get('keepalived_router_id')).toMatchObject({
      type: 'integer',
      min: 1,
      max: 255,
      default: 51,
      service: 'keepalived',
    });
    expect(s.get('nova_cpu_allocation_ratio')).toMatchObject({ type: 'number', default: 4 });
    expect(s.get('nova_virt_type')).toMatchObject({ type: 'enum', values: ['kvm', 'qemu'] });
    expect(s.get('rabbitmq_mirror_queues')).toMatchObject({ type: 'boolean', default: true });
    expect(s.get('neutron_tenant_network_types')).toMatchObject({ type: 'string', default: 'geneve' });
    expect(s.get('ovs_datapath_type')).toMatchObject({ type: 'enum', values: ['system', 'netdev'], default: 'system' });
    // services still read their defaults as plain values
    expect(catalog.services.get('keepalived')!.settings).toEqual({ keepalived_router_id: 51 });
    for (const spec of s.values()) expect(settingProblem(spec, spec.default), spec.name).toBeUndefined();
  });

  it.each([
    ['keepalived_router_id', 300, 'is 300, above the maximum 255'],
    ['keepalived_router_id', 1.5, 'must be an integer, not the number 1.5'],
    ['nova_cpu_allocation_ratio', 0, 'is 0, below the minimum 0.1'],
    ['nova_virt_type', 'xen', 'is not one of the allowed values'],
    ['rabbitmq_mirror_queues', 'yes', 'must be true or false, not text'],
    ['neutron_type_drivers', 'flat, vlan', 'has characters or a form the setting does not allow'],
    ['nova_fake_driver_class', 'fake.FakeDriver\nx', 'contains a newline; no setting may hold control characters'],
    ['memcached_memory_mb', '64', 'must be an integer, not text'],
  ])('%s: %j %s', (name, value, problem) => {
    expect(settingProblem(catalog.settings.get(name)!, value)).toBe(problem);
  });

  it('a string without a pattern gets the conservative default: no spaces, quotes, $, #, %, leading dashes', () => {
    const spec: SettingSpec = { name: 's', service: 'x', type: 'string', default: 'a' };
    for (const ok of ['fake.FakeDriver', 'http://10.0.0.1:5000/v3', 'a_b-c+d'])
      expect(settingProblem(spec, ok), ok).toBeUndefined();
    for (const bad of ['a b', "it's", 'a$b', 'a#b', '50%', '-x', '', 'a,b', 'a=b', 'x'.repeat(256)])
      expect(settingProblem(spec, bad), bad).toBeDefined();
    expect(describeSetting(spec)).toContain('letters, digits and _ . : / + -');
  });

  it('the lint refuses a default outside its type, keys of another type, a second declaration, a condition it cannot meet', () => {
    const dir = rolesWith({
      'services/keepalived.yaml': (t) =>
        t.replace(
          '{ default: 51, type: integer, min: 1, max: 255 }',
          '{ default: 300, type: integer, min: 1, max: 255 }',
        ),
      'services/memcached.yaml': (t) =>
        t.replace(
          '{ default: 64, type: integer, min: 16, max: 1048576 }',
          '{ default: 64, type: integer, values: [64] }\n  mariadb_buffer_pool_mb: 64',
        ),
      'services/nova-compute.yaml': (t) => t.replace(/in: \[libvirt\.LibvirtDriver\]/, 'in: [libvirt.LibvirtDrivr]'),
      'services/rabbitmq.yaml': (t) =>
        t.replace('  rabbitmq_mirror_queues: true\n', "  rabbitmq_mirror_queues: true\n  rabbitmq_tag: 'two words'\n"),
    });
    const all = lintOf(dir);
    expect(all.find((i) => i.message.includes('rabbitmq_tag'))).toMatchObject({
      code: 'E_SETTING_DEFAULT',
      hint: expect.stringContaining('declare its type in the long form'),
    });
    const issues = all.map((i) => [i.code, i.location.file.replace(`${dir}/`, ''), i.message]);
    expect(issues).toEqual(
      expect.arrayContaining([
        [
          'E_SETTING_DEFAULT',
          'services/keepalived.yaml',
          'the default of setting keepalived_router_id is 300, above the maximum 255',
        ],
        [
          'E_SETTING_DECLARATION',
          'services/memcached.yaml',
          "setting memcached_memory_mb: 'values' does not apply to type integer",
        ],
        [
          'E_SETTING_DUPLICATE',
          'services/memcached.yaml',
          'setting mariadb_buffer_pool_mb is also declared by roles/services/mariadb.yaml',
        ],
        [
          'E_SETTING_VALUE',
          'services/nova-compute.yaml',
          'condition value of setting nova_compute_driver is not one of the allowed values',
        ],
      ]),
    );
  });

  it("the lint refuses an upgrade's fast-forward setting that no service declares, or of another type", () => {
    const ff = (value: string) =>
      rolesWith({
        'services/nova-api.yaml': (t) =>
          t.replace('{ nova_disable_compute_service_check_for_ffu: true }', `{ ${value} }`),
      });
    const line = (dir: string) =>
      readFileSync(join(dir, 'services/nova-api.yaml'), 'utf8')
        .split('\n')
        .findIndex((l) => l.includes('fast_forward_settings:')) + 1;
    const wrongType = ff("nova_disable_compute_service_check_for_ffu: 'yes'");
    expect(lintOf(wrongType)).toEqual([
      expect.objectContaining({
        code: 'E_SETTING_VALUE',
        message: 'fast_forward_settings.nova_disable_compute_service_check_for_ffu must be true or false, not text',
        location: expect.objectContaining({ file: join(wrongType, 'services/nova-api.yaml'), line: line(wrongType) }),
      }),
    ]);
    const unknown = ff('nova_disable_compute_service_check: true');
    expect(lintOf(unknown)).toEqual([
      expect.objectContaining({
        code: 'E_UNKNOWN_SETTING',
        message: 'fast_forward_settings.nova_disable_compute_service_check is not a setting any service declares',
      }),
    ]);
  });
});

describe('a setting of type secret: the one place an inventory may name a secret', () => {
  // A service with a secret setting and a template that writes it (an LDAP bind password, say).
  const roles = () =>
    rolesWith({
      'services/keystone.yaml': (t) =>
        t.replace(
          /\nsettings:\n/,
          "\nsettings:\n  ldap_bind_password: { default: '<secret:keystone_admin_password>', type: secret }\n",
        ),
      'templates/keystone/keystone.conf.hbs': (t) =>
        `${t}\n[ldap]\npassword = {{ini cloud.settings.ldap_bind_password}}\n`,
    });

  async function labWith(settingsLine: string, extraSecret?: [string, string]) {
    const dir = roles();
    const inv = copyInventory('lab.yaml');
    const g = await runCli('secrets', 'generate', '-i', inv, '--roles', dir);
    expect(g.code, g.stderr).toBe(0);
    writeFileSync(
      inv,
      readFileSync(inv, 'utf8').replace('    nova_virt_type: qemu\n', `    nova_virt_type: qemu\n${settingsLine}\n`),
    );
    if (extraSecret) {
      const file = inv.replace(/\.yaml$/, '.secrets.yaml');
      const text = readFileSync(file, 'utf8').replace(
        'services:\n',
        `services:\n  ${extraSecret[0]}: ${JSON.stringify(extraSecret[1])}\n`,
      );
      writeFileSync(file, text, { mode: 0o600 });
    }
    return { dir, inv };
  }

  it('renders the secret it names, escaped for its file', async () => {
    const pw = `bind pw: it's $x #1`;
    const { dir, inv } = await labWith("    ldap_bind_password: '<secret:ldap_password>'", ['ldap_password', pw]);
    const v = await runCli('inventory', 'validate', '-i', inv, '--roles', dir);
    expect(v.code, v.stderr).toBe(0);
    const { rendered, plan } = planOf(loadAll({ inventory: inv, roles: dir }));
    const conf = rendered.get('ctl-0')!.get('/etc/stackctl/keystone/keystone.conf')!;
    expect(osloValues(conf, { ldap: ['password'] }).ldap!['password']).toBe(pw);
    expect(JSON.stringify(plan)).not.toContain(pw);
  });

  it('refuses a name the secrets file does not hold, and a value that is no reference', async () => {
    const missing = await labWith("    ldap_bind_password: '<secret:ldap_pasword>'");
    const r = await runCli('inventory', 'validate', '-i', missing.inv, '--roles', missing.dir);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(
      /lab\.yaml:\d+:\d+: error E_SECRET_REF_UNKNOWN at \/cloud\/settings\/ldap_bind_password: cloud\.settings\.ldap_bind_password names secret 'ldap_pasword'/,
    );
    const inline = await labWith('    ldap_bind_password: hunter2');
    const r2 = await runCli('inventory', 'validate', '-i', inline.inv, '--roles', inline.dir);
    expect(r2.stderr).toMatch(
      /error E_SETTING_VALUE at \/cloud\/settings\/ldap_bind_password: cloud\.settings\.ldap_bind_password must be exactly <secret:NAME>/,
    );
    expect(r2.stderr).not.toContain('hunter2');
  });
});
