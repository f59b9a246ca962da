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
