import type { Issue } from '../core/errors.js';
import type { YamlSource } from '../core/yaml.js';
import {
  DEFAULT_STRING_PATTERN,
  describeSetting,
  settingProblem,
  type SettingSpec,
  type SettingType,
  type SettingValue,
} from '../inventory/settings.js';
import type { ServiceFile, SettingDeclaration } from './schema.js';

/**
 * The settings of the service files, each with its type: the short form
 * `name: value` infers it from the value, the long form declares it. The
 * lint of CONVENTIONS.md 14 for settings: a default that does not fit its own
 * type, keys that do not belong to the type, a setting declared by two
 * services, a `when` condition or an `upgrade.fast_forward_settings` entry on an
 * undeclared setting or with a value the setting cannot take.
 */

/** Which keys of the long form each type takes besides default, type and description. */
const TYPE_KEYS: Readonly<Record<SettingType, readonly ('min' | 'max' | 'values' | 'pattern')[]>> = {
  integer: ['min', 'max'],
  number: ['min', 'max'],
  boolean: [],
  string: ['pattern'],
  enum: ['values'],
  secret: [],
  network: [],
};

/** The type the short form `name: value` gives a setting. */
export function inferredType(value: SettingValue): SettingType {
  if (typeof value === 'boolean') return 'boolean';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return 'string';
}

/** Normalize and check the settings of every service file; faults go to `issues`. */
export function settingSpecs(
  services: readonly { service: ServiceFile; source: YamlSource }[],
  issues: Issue[],
): Map<string, SettingSpec> {
  const out = new Map<string, SettingSpec>();
  const where = new Map<string, string>(); // name -> file that declares it
  for (const { service, source } of services) {
    const at = (path: (string | number)[], code: string, message: string, hint: string): void => {
      issues.push({ severity: 'error', code, message, hint, location: source.locate(path) });
    };
    for (const [name, decl] of Object.entries(service.settings ?? {})) {
      const path = ['settings', name];
      const spec =
        typeof decl === 'object' ? longForm(name, service.name, decl, path, at) : shortForm(name, service.name, decl);
      if (!spec) continue;
      const problem = settingProblem(spec, spec.default);
      if (problem) {
        at(
          typeof decl === 'object' ? [...path, 'default'] : path,
          'E_SETTING_DEFAULT',
          `the default of setting ${name} ${problem}`,
          typeof decl === 'object'
            ? `Setting ${name} takes ${describeSetting(spec)}.`
            : `The short form gives setting ${name} ${describeSetting(spec)}: declare its type in the long form, e.g. { default: ..., type: string, pattern: '^...$' }.`,
        );
        continue;
      }
      const other = where.get(name);
      if (other) {
        at(
          path,
          'E_SETTING_DUPLICATE',
          `setting ${name} is also declared by ${other}`,
          'A setting belongs to one service: keep one declaration (the other service reads it all the same).',
        );
        continue;
      }
      where.set(name, `roles/services/${service.name}.yaml`);
      out.set(name, spec);
    }
  }
  // `when` conditions name a declared setting and values it can take.
  for (const { service, source } of services) {
    const conditions: { when: NonNullable<ServiceFile['host']>['when']; path: (string | number)[] }[] = [
      ...service.containers.map((c, i) => ({ when: c.when, path: ['containers', i, 'when'] })),
      { when: service.host?.when, path: ['host', 'when'] },
      ...(service.host?.modules ?? []).map((m, i) => ({
        when: typeof m === 'string' ? undefined : m.when,
        path: ['host', 'modules', i, 'when'],
      })),
      ...(service.host?.devices ?? []).map((d, i) => ({
        when: typeof d === 'string' ? undefined : d.when,
        path: ['host', 'devices', i, 'when'],
      })),
    ];
    for (const { when, path } of conditions) {
      if (!when) continue;
      const spec = out.get(when.setting);
      if (!spec) {
        // the plan names it when the service runs (a setting may come from a service of another role)
        if (!services.some(({ service: s }) => s.settings?.[when.setting] !== undefined))
          issues.push({
            severity: 'error',
            code: 'E_UNKNOWN_SETTING',
            message: `condition on setting '${when.setting}', which no service declares`,
            hint: 'Declare it under settings: in a service file, or fix the name.',
            location: source.locate([...path, 'setting']),
          });
        continue;
      }
      when.in.forEach((v, i) => {
        const problem = settingProblem(spec, v);
        if (problem)
          issues.push({
            severity: 'error',
            code: 'E_SETTING_VALUE',
            message: `condition value of setting ${when.setting} ${problem}`,
            hint: `Setting ${when.setting} takes ${describeSetting(spec)}.`,
            location: source.locate([...path, 'in', i]),
          });
      });
    }
  }
  // `upgrade.fast_forward_settings` name a declared setting and give it a value of its type.
  for (const { service, source } of services) {
    for (const [name, value] of Object.entries(service.upgrade.fast_forward_settings ?? {})) {
      const path = ['upgrade', 'fast_forward_settings', name];
      const spec = out.get(name);
      if (!spec) {
        if (!services.some(({ service: s }) => s.settings?.[name] !== undefined))
          issues.push({
            severity: 'error',
            code: 'E_UNKNOWN_SETTING',
            message: `fast_forward_settings.${name} is not a setting any service declares`,
            hint: 'Declare it under settings: in a service file, or fix the name.',
            location: source.locate(path),
          });
        continue;
      }
      const problem = settingProblem(spec, value);
      if (problem)
        issues.push({
          severity: 'error',
          code: 'E_SETTING_VALUE',
          message: `fast_forward_settings.${name} ${problem}`,
          hint: `Setting ${name} takes ${describeSetting(spec)}.`,
          location: source.locate(path),
        });
    }
  }
  return out;
}

function shortForm(name: string, service: string, value: SettingValue): SettingSpec {
  const type = inferredType(value);
  return { name, service, type, default: value, ...(type === 'string' ? { pattern: DEFAULT_STRING_PATTERN } : {}) };
}

function longForm(
  name: string,
  service: string,
  decl: SettingDeclaration,
  path: (string | number)[],
  at: (path: (string | number)[], code: string, message: string, hint: string) => void,
): SettingSpec | undefined {
  const type = decl.type as SettingType;
  let ok = true;
  for (const key of ['min', 'max', 'values', 'pattern'] as const) {
    if (decl[key] !== undefined && !TYPE_KEYS[type].includes(key)) {
      at(
        [...path, key],
        'E_SETTING_DECLARATION',
        `setting ${name}: '${key}' does not apply to type ${type}`,
        `Type ${type} takes: ${['default', 'type', 'description', ...TYPE_KEYS[type]].join(', ')}.`,
      );
      ok = false;
    }
  }
  if (type === 'enum' && decl.values === undefined) {
    at(path, 'E_SETTING_DECLARATION', `setting ${name} is an enum without values`, 'List the values allowed.');
    ok = false;
  }
  if (decl.min !== undefined && decl.max !== undefined && decl.min > decl.max) {
    at([...path, 'min'], 'E_SETTING_DECLARATION', `setting ${name}: min is above max`, 'Write min <= max.');
    ok = false;
  }
  if (decl.pattern !== undefined) {
    try {
      new RegExp(decl.pattern, 'u');
    } catch (e) {
      at(
        [...path, 'pattern'],
        'E_SETTING_DECLARATION',
        `setting ${name}: the pattern does not compile (${(e as Error).message})`,
        'Write a JavaScript regular expression, anchored with ^ and $.',
      );
      ok = false;
    }
  }
  if (!ok) return undefined;
  return {
    name,
    service,
    type,
    default: decl.default,
    ...(decl.min !== undefined ? { min: decl.min } : {}),
    ...(decl.max !== undefined ? { max: decl.max } : {}),
    ...(decl.values !== undefined ? { values: decl.values } : {}),
    ...(type === 'string' ? { pattern: decl.pattern ?? DEFAULT_STRING_PATTERN } : {}),
    ...(decl.description !== undefined ? { description: decl.description } : {}),
  };
}
