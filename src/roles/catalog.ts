import { readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Static, TSchema } from '@sinclair/typebox';
import { ValidationFailed, type Issue } from '../core/errors.js';
import { exists, readTextFile } from '../core/fs.js';
import { checkSchema } from '../core/schema.js';
import { parseYaml, type YamlSource } from '../core/yaml.js';
import type { RoleInfo } from '../inventory/semantic.js';
import type { SecretSpec } from '../inventory/secrets.js';
import type { SettingSpec } from '../inventory/settings.js';
import { RoleSchema, ServiceSchema, type Role, type Service, type ServiceFile } from './schema.js';
import { SINGLE_ROLES, serviceRoles, type ServiceRoles } from './service-roles.js';
import { settingSpecs } from './settings.js';
import { compileTemplate, type Template } from './templates.js';
import { cycleText, orderCycle } from './upgrade-order.js';

const MAX_FILE = 1024 * 1024;

/** Roles, services and compiled templates, checked against each other. */
export interface Catalog {
  readonly dir: string;
  readonly roles: ReadonlyMap<string, Role>;
  readonly services: ReadonlyMap<string, Service>;
  /** Every declared setting with its type, by name. */
  readonly settings: ReadonlyMap<string, SettingSpec>;
  /** Compiled config templates by path under roles/templates/. */
  readonly templates: ReadonlyMap<string, Template>;
  /** Role facts the inventory checks need. */
  readonly roleInfo: ReadonlyMap<string, RoleInfo>;
  /** What generic code knows of the services (their `provides`, `cluster_check`, `agent`). */
  readonly provides: ServiceRoles;
}

interface Loaded<T> {
  value: T;
  source: YamlSource;
}

function loadFile<T extends TSchema>(file: string, schema: T, issues: Issue[]): Loaded<Static<T>> | undefined {
  const source = parseYaml(file, readTextFile(file, MAX_FILE));
  issues.push(...source.issues);
  if (source.issues.some((i) => i.severity === 'error')) return undefined;
  const { value, issues: schemaIssues } = checkSchema(schema, source);
  issues.push(...schemaIssues);
  return value ? { value, source } : undefined;
}

/** Load every `<name>.yaml` of a folder with a schema; the `name` inside must equal the file name. */
function loadNamed<T extends TSchema>(
  dir: string,
  schema: T,
  kind: string,
  issues: Issue[],
): Map<string, Loaded<Static<T> & { name: string }>> {
  const out = new Map<string, Loaded<Static<T> & { name: string }>>();
  for (const file of yamlFiles(dir)) {
    const loaded = loadFile(file, schema, issues) as Loaded<Static<T> & { name: string }> | undefined;
    if (!loaded) continue;
    const expected = basename(file, '.yaml');
    if (loaded.value.name !== expected) {
      issues.push(
        issue(
          loaded.source,
          ['name'],
          'E_NAME_MISMATCH',
          `${kind} '${loaded.value.name}' is in file ${expected}.yaml`,
          `Name the file ${loaded.value.name}.yaml or fix the name.`,
        ),
      );
    }
    out.set(loaded.value.name, loaded);
  }
  return out;
}

function yamlFiles(dir: string): string[] {
  if (!exists(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((f) => join(dir, f));
}

/**
 * Load roles/<Role>.yaml, roles/services/*.yaml and roles/templates/, and
 * check them against each other (the lint of CONVENTIONS.md 14). Every fault
 * in every file is reported at once.
 */
export function loadCatalog(dir: string): Catalog {
  const issues: Issue[] = [];
  const templates = new Map<string, Template>();

  const services = loadNamed(join(dir, 'services'), ServiceSchema, 'service', issues);
  const roles = loadNamed(dir, RoleSchema, 'role', issues);
  const settings = settingSpecs(
    [...services.values()].map(({ value, source }) => ({ service: value, source })),
    issues,
  );

  // Cross-references.
  const declaredSecrets = new Set<string>();
  for (const { value } of services.values()) for (const s of value.secrets ?? []) declaredSecrets.add(s.name);
  for (const { value: svc, source } of services.values()) {
    for (const req of svc.requires ?? []) {
      if (!services.has(req))
        issues.push(
          issue(
            source,
            ['requires'],
            'E_UNKNOWN_SERVICE',
            `requires unknown service '${req}'`,
            'Add roles/services/' + req + '.yaml or fix the name.',
          ),
        );
    }
    const containerNames = new Set(svc.containers.map((c) => c.name));
    (svc.tasks ?? []).forEach((t, i) => {
      if (!containerNames.has(t.container))
        issues.push(
          issue(
            source,
            ['tasks', i, 'container'],
            'E_UNKNOWN_CONTAINER',
            `task ${t.name} uses unknown container '${t.container}'`,
            `Containers of ${svc.name}: ${[...containerNames].join(', ')}.`,
          ),
        );
      (t.reads ?? []).forEach((dest, j) => {
        if (!(svc.config ?? []).some((c) => c.dest === dest))
          issues.push(
            issue(
              source,
              ['tasks', i, 'reads', j],
              'E_UNKNOWN_CONFIG',
              `task ${t.name} reads '${dest}', which is not a config file of ${svc.name}`,
              `Config files of ${svc.name}: ${(svc.config ?? []).map((c) => c.dest).join(', ') || 'none'}.`,
            ),
          );
      });
    });
    (svc.config ?? []).forEach((c, i) => {
      const path = join(dir, 'templates', c.template);
      if (!exists(path)) {
        issues.push(
          issue(
            source,
            ['config', i, 'template'],
            'E_TEMPLATE_MISSING',
            `template ${c.template} does not exist`,
            `Create roles/templates/${c.template}.`,
          ),
        );
      } else if (!templates.has(c.template)) {
        try {
          templates.set(c.template, compileTemplate(`roles/templates/${c.template}`, readTextFile(path, MAX_FILE)));
        } catch (e) {
          issues.push(
            issue(source, ['config', i, 'template'], 'E_TEMPLATE', (e as Error).message, 'Fix the template syntax.'),
          );
        }
      }
      for (const cn of c.containers ?? []) {
        if (!containerNames.has(cn))
          issues.push(
            issue(
              source,
              ['config', i, 'containers'],
              'E_UNKNOWN_CONTAINER',
              `config ${c.dest} names unknown container '${cn}'`,
              `Containers of ${svc.name}: ${[...containerNames].join(', ')}.`,
            ),
          );
      }
    });
    const refs: [string, (string | number)[]][] = [];
    (svc.databases ?? []).forEach((d, i) => refs.push([d.password, ['databases', i, 'password']]));
    if (svc.service_user) refs.push([svc.service_user.password, ['service_user', 'password']]);
    for (const [name, path] of refs) {
      if (!declaredSecrets.has(name))
        issues.push(
          issue(
            source,
            path,
            'E_UNKNOWN_SECRET',
            `secret '${name}' is not declared by any service`,
            'Declare it under secrets: with a kind.',
          ),
        );
    }
  }
  // Each role of `provides` belongs to one service at most; the containers it names are the service's.
  const providers = new Map<string, string>();
  for (const { value: svc, source } of services.values()) {
    const containerNames = new Set(svc.containers.map((c) => c.name));
    for (const role of SINGLE_ROLES) {
      const entry = svc.provides?.[role];
      if (!entry) continue;
      const other = providers.get(role);
      if (other)
        issues.push(
          issue(
            source,
            ['provides', role],
            'E_PROVIDES_TWICE',
            `${svc.name} provides ${role}, which ${other} provides already`,
            `One service provides ${role}: remove it from one of roles/services/${svc.name}.yaml and ${other}.yaml.`,
          ),
        );
      providers.set(role, svc.name);
      const named = (entry as { container?: string }).container;
      if (named !== undefined && !containerNames.has(named))
        issues.push(
          issue(
            source,
            ['provides', role, 'container'],
            'E_UNKNOWN_CONTAINER',
            `provides.${role} names unknown container '${named}'`,
            `Containers of ${svc.name}: ${[...containerNames].join(', ')}.`,
          ),
        );
    }
    if (svc.cluster_check && !containerNames.has(svc.cluster_check.container))
      issues.push(
        issue(
          source,
          ['cluster_check', 'container'],
          'E_UNKNOWN_CONTAINER',
          `cluster_check names unknown container '${svc.cluster_check.container}'`,
          `Containers of ${svc.name}: ${[...containerNames].join(', ')}.`,
        ),
      );
  }
  issues.push(...upgradeSectionIssues(services));
  for (const { value: role, source } of roles.values()) {
    role.services.forEach((s, i) => {
      if (!services.has(s))
        issues.push(
          issue(
            source,
            ['services', i],
            'E_UNKNOWN_SERVICE',
            `role ${role.name} lists unknown service '${s}'`,
            'Add roles/services/' + s + '.yaml or fix the name.',
          ),
        );
    });
  }

  if (issues.some((i) => i.severity === 'error')) throw new ValidationFailed(dir, issues);

  const roleInfo = new Map<string, RoleInfo>();
  for (const { value: role } of roles.values()) {
    roleInfo.set(role.name, {
      networks: role.networks,
      quorumServices: role.services.filter((s) => services.get(s)?.value.cluster === 'quorum'),
      settings: new Map([...settings].filter(([, spec]) => role.services.includes(spec.service))),
    });
  }
  const typed = new Map([...services].map(([k, v]) => [k, withDefaults(v.value, settings)]));
  return {
    dir,
    roles: new Map([...roles].map(([k, v]) => [k, v.value])),
    services: typed,
    settings,
    templates,
    roleInfo,
    provides: serviceRoles(typed.values()),
  };
}

/**
 * The upgrade sections against the other files: `before` names known services and leaves the
 * upgrade order (with `requires`) without a cycle; each declared backup runs in a container of its
 * service, under a name of its own.
 */
function upgradeSectionIssues(services: ReadonlyMap<string, Loaded<ServiceFile>>): Issue[] {
  const issues: Issue[] = [];
  for (const { value: svc, source } of services.values()) {
    (svc.upgrade.before ?? []).forEach((b, i) => {
      if (!services.has(b))
        issues.push(
          issue(
            source,
            ['upgrade', 'before', i],
            'E_UNKNOWN_SERVICE',
            `upgrade.before names unknown service '${b}'`,
            `Add roles/services/${b}.yaml or fix the name in roles/services/${svc.name}.yaml.`,
          ),
        );
    });
    const containerNames = new Set(svc.containers.map((c) => c.name));
    const names = new Set<string>();
    (svc.upgrade.backup ?? []).forEach((b, i) => {
      if (!containerNames.has(b.container))
        issues.push(
          issue(
            source,
            ['upgrade', 'backup', i, 'container'],
            'E_UNKNOWN_CONTAINER',
            `upgrade.backup ${b.name} runs in unknown container '${b.container}'`,
            `Containers of ${svc.name}: ${[...containerNames].join(', ')}.`,
          ),
        );
      if (names.has(b.name))
        issues.push(
          issue(
            source,
            ['upgrade', 'backup', i, 'name'],
            'E_SERVICE_DEF',
            `upgrade.backup names ${b.name} twice: the second would overwrite the first`,
            `Give each backup of roles/services/${svc.name}.yaml a name of its own.`,
          ),
        );
      names.add(b.name);
    });
  }
  const cycle = orderCycle(new Map([...services].map(([k, v]) => [k, v.value])));
  if (cycle) {
    // Reported at each `before` of the cycle (the entry to drop is one of them); a cycle of
    // `requires` alone, at the requires of its last service.
    const befores = cycle.filter((e) => e.why === 'before');
    for (const at of befores.length ? befores : [cycle[cycle.length - 1]!]) {
      const file = at.why === 'before' ? at.first : at.then;
      const { value: svc, source } = services.get(file)!;
      issues.push(
        issue(
          source,
          at.why === 'before' ? ['upgrade', 'before', (svc.upgrade.before ?? []).indexOf(at.then)] : ['requires'],
          'E_UPGRADE_ORDER',
          `the upgrade order has a cycle: ${cycleText(cycle)}`,
          at.why === 'before'
            ? `roles/services/${file}.yaml moves ${file} before ${at.then}, yet ${at.then} moves first through the ` +
                `other services of the cycle: name those in its upgrade.before too, or drop '${at.then}' there.`
            : `Fix requires: in roles/services/${file}.yaml: services cannot require each other in a cycle.`,
        ),
      );
    }
  }
  return issues;
}

/** A service as the rest of stackctl reads it: each setting reduced to its default. */
function withDefaults(svc: ServiceFile, settings: ReadonlyMap<string, SettingSpec>): Service {
  if (!svc.settings) return svc as Service;
  const defaults = Object.fromEntries(
    Object.keys(svc.settings).map((name) => [name, settings.get(name)?.default ?? '']),
  );
  return { ...svc, settings: defaults };
}

/** Every secret the given services declare (what `secrets generate` creates). */
export function secretSpecs(catalog: Catalog, serviceNames: Iterable<string>): SecretSpec[] {
  const out = new Map<string, SecretSpec>();
  for (const name of serviceNames) for (const s of catalog.services.get(name)?.secrets ?? []) out.set(s.name, s);
  return [...out.values()].sort((a, b) => a.name.localeCompare(b.name));
}

function issue(source: YamlSource, path: (string | number)[], code: string, message: string, hint: string): Issue {
  return { severity: 'error', code, message, hint, location: source.locate(path) };
}
