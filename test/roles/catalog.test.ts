import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultRolesDir, packageRoot } from '../../src/core/paths.js';
import { ValidationFailed } from '../../src/core/errors.js';
import { loadCatalog } from '../../src/roles/catalog.js';
import { PUBLISHED_SCHEMAS, schemaJson } from '../../src/cli/schema.js';
import { tempDir } from '../helpers/cli.js';

const REQUIRED_SERVICES = [
  'haproxy',
  'keepalived',
  'mariadb',
  'rabbitmq',
  'memcached',
  'keystone',
  'glance',
  'placement',
  'nova-api',
  'nova-conductor',
  'nova-scheduler',
  'nova-compute',
];

function copyRoles(): string {
  const dir = join(tempDir(), 'roles');
  cpSync(defaultRolesDir(), dir, { recursive: true });
  return dir;
}

function faults(dir: string): ValidationFailed {
  try {
    loadCatalog(dir);
  } catch (e) {
    if (e instanceof ValidationFailed) return e;
    throw e;
  }
  throw new Error('the catalog loaded without faults');
}

describe('roles and services', () => {
  const catalog = loadCatalog(defaultRolesDir());

  it('validates every shipped role and service file', () => {
    expect([...catalog.roles.keys()].sort()).toEqual(['AllInOne', 'Compute', 'Controller']);
    for (const s of REQUIRED_SERVICES) expect(catalog.services.has(s), s).toBe(true);
  });

  it('declares for each service its step, containers, upgrade section, and the secrets its references need', () => {
    for (const svc of catalog.services.values()) {
      expect(svc.step).toBeGreaterThanOrEqual(1);
      expect(svc.containers.length).toBeGreaterThan(0);
      expect(['none', 'online', 'offline']).toContain(svc.upgrade.migration);
      if (svc.upgrade.migration === 'offline') expect(svc.upgrade.offline?.length, svc.name).toBeGreaterThan(0);
      if (svc.upgrade.migration === 'online') expect(svc.upgrade.expand?.length, svc.name).toBeGreaterThan(0);
      if (svc.databases?.length) expect(svc.upgrade.backup_database, svc.name).toBe(true);
    }
    expect(catalog.services.get('nova-compute')!.upgrade.hooks?.pre_batch).toContain('nova-evacuate');
    expect(catalog.services.get('mariadb')!.cluster).toBe('quorum');
    expect(catalog.services.get('rabbitmq')!.cluster).toBe('quorum');
    expect(catalog.roleInfo.get('Controller')!.quorumServices).toEqual(['mariadb', 'rabbitmq', 'ovn-central']);
  });

  it('fills in defaults from the schema', () => {
    const c = catalog.services.get('keystone')!.containers[0]!;
    expect(c.network_mode).toBe('host');
    expect(c.restart).toBe('unless-stopped');
  });

  it.each([
    {
      scenario: 'an unknown key',
      file: 'services/keystone.yaml',
      from: 'cluster: none',
      to: 'clustre: none',
      code: 'E_SCHEMA_UNKNOWN_KEY',
    },
    {
      scenario: 'a step out of range',
      file: 'services/keystone.yaml',
      from: 'step: 3\n',
      to: 'step: 6\n',
      code: 'E_SCHEMA',
    },
    {
      scenario: 'a role naming an unknown service',
      file: 'Compute.yaml',
      from: '- nova-compute',
      to: '- nova-compuet',
      code: 'E_UNKNOWN_SERVICE',
    },
    {
      scenario: 'a missing template',
      file: 'services/memcached.yaml',
      from: 'memcached/options.hbs',
      to: 'memcached/opts.hbs',
      code: 'E_TEMPLATE_MISSING',
    },
    {
      scenario: 'a task on an unknown container',
      file: 'services/glance.yaml',
      from: 'container: glance_api',
      to: 'container: glance',
      code: 'E_UNKNOWN_CONTAINER',
    },
    {
      scenario: 'an upgrade.before naming an unknown service',
      file: 'services/ovn-controller.yaml',
      from: 'before: [ovn-central]',
      to: 'before: [ovn-centrale]',
      code: 'E_UNKNOWN_SERVICE',
    },
    {
      scenario: 'a declared backup in an unknown container',
      file: 'services/ovn-central.yaml',
      from: 'container: ovn_sb_db\n',
      to: 'container: ovn_sb\n',
      code: 'E_UNKNOWN_CONTAINER',
    },
    {
      scenario: 'two declared backups under one name',
      file: 'services/ovn-central.yaml',
      from: '- name: ovnsb_db.db',
      to: '- name: ovnnb_db.db',
      code: 'E_SERVICE_DEF',
    },
    {
      scenario: 'a file named after another service',
      file: 'services/memcached.yaml',
      from: 'name: memcached',
      to: 'name: memcache',
      code: 'E_NAME_MISMATCH',
    },
  ])('refuses $scenario with file and line', ({ file, from, to, code }) => {
    const dir = copyRoles();
    const path = join(dir, file);
    const text = readFileSync(path, 'utf8');
    expect(text).toContain(from);
    writeFileSync(path, text.replace(from, to));
    const err = faults(dir);
    const issue = err.issues.find((i) => i.code === code);
    expect(issue, JSON.stringify(err.issues)).toBeDefined();
    expect(issue!.location.file).toBe(path);
    expect(issue!.location.line).toBeGreaterThan(0);
  });

  it('refuses an upgrade.before that makes a cycle with requires, at each before of the cycle, naming the files', () => {
    // neutron-server requires ovn-central, which moves after ovn-controller (its upgrade.before):
    // neutron-server before ovn-controller closes the loop.
    const dir = copyRoles();
    const path = join(dir, 'services/neutron-server.yaml');
    const text = readFileSync(path, 'utf8');
    expect(text).toMatch(/^upgrade:\n/m);
    writeFileSync(path, text.replace(/^upgrade:\n/m, 'upgrade:\n  before: [ovn-controller]\n'));
    const found = faults(dir).issues.filter((i) => i.code === 'E_UPGRADE_ORDER');
    expect(found.map((i) => i.location.file).sort()).toEqual([path, join(dir, 'services/ovn-controller.yaml')]);
    for (const i of found) {
      expect(i.message).toMatch(/cycle: .*neutron-server -\(before\)-> ovn-controller/);
      expect(i.message).toMatch(/ovn-controller -\(before\)-> ovn-central -\(requires\)-> neutron-server/);
      expect(i.hint).toMatch(/roles\/services\/(neutron-server|ovn-controller)\.yaml moves/);
      expect(i.location.line).toBeGreaterThan(0);
    }
  });

  it('publishes schemas identical to the ones the code checks with', () => {
    for (const name of Object.keys(PUBLISHED_SCHEMAS) as (keyof typeof PUBLISHED_SCHEMAS)[]) {
      const published = readFileSync(join(packageRoot(), 'schemas', `${name}.schema.json`), 'utf8');
      expect(published, `schemas/${name}.schema.json is stale: run npm run schemas`).toBe(schemaJson(name));
    }
  });
});
