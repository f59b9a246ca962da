/**
 * The only module that imports `ajv` (CONVENTIONS.md 9). Compiles TypeBox
 * schemas in strict mode and turns validation errors into located Issues:
 * file, line, column, JSON path and a hint, never the offending value (it
 * could be a secret written in the wrong place).
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { TSchema, Static } from '@sinclair/typebox';
import type { Issue } from './errors.js';
import type { YamlSource } from './yaml.js';

const ajv = new Ajv({ strict: true, allErrors: true, verbose: true, allowUnionTypes: true, useDefaults: true });
const compiled = new WeakMap<TSchema, ValidateFunction>();

/** Keys that hold secrets; written inline in a file they are refused with their own code. */
export const INLINE_SECRET_KEY = /^(password|passwd|pass|secret|token|api_key|private_key)$/i;

/** Compile (once) and run a schema; returns the typed value and the issues found. */
export function checkSchema<T extends TSchema>(
  schema: T,
  source: YamlSource,
): { value: Static<T> | undefined; issues: Issue[] } {
  let validate: ValidateFunction | undefined = compiled.get(schema);
  if (validate === undefined) {
    validate = ajv.compile(schema);
    compiled.set(schema, validate);
  }
  if (validate(source.data)) return { value: source.data as Static<T>, issues: [] };
  const issues = pruneUnions(validate.errors ?? []).map((e) => toIssue(e, source));
  return { value: undefined, issues: dedupe(issues) };
}

/**
 * Of a failed anyOf, keep only the errors of the branches whose type the data has: a mapping
 * written where a scalar or a mapping may stand is told what is wrong with the mapping, not that it
 * is no string, number or boolean. When no branch has the data's type, every error stays.
 */
function pruneUnions(errors: readonly ErrorObject[]): ErrorObject[] {
  const branch = /^(.*\/anyOf)\/(\d+)(\/.*)?$/;
  const fitting = new Map<string, Set<string>>(); // anyOf schema path -> branches with more than a type error
  for (const e of errors) {
    const m = branch.exec(e.schemaPath);
    if (m && !(e.keyword === 'type' && m[3] === '/type')) {
      const set = fitting.get(m[1]!) ?? new Set<string>();
      set.add(m[2]!);
      fitting.set(m[1]!, set);
    }
  }
  return errors.filter((e) => {
    if (e.keyword === 'anyOf' && fitting.has(e.schemaPath)) return false;
    const m = branch.exec(e.schemaPath);
    return !m || !fitting.has(m[1]!) || fitting.get(m[1]!)!.has(m[2]!);
  });
}

function pathOf(instancePath: string): string[] {
  if (!instancePath) return [];
  return instancePath
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function typeName(data: unknown): string {
  if (data === null) return 'null';
  if (Array.isArray(data)) return 'a list';
  if (typeof data === 'object') return 'a mapping';
  if (typeof data === 'number') return Number.isInteger(data) ? 'an integer' : 'a number';
  return `a ${typeof data}`;
}

function toIssue(e: ErrorObject, source: YamlSource): Issue {
  const path = pathOf(e.instancePath);
  const parent = e.parentSchema as { description?: string; properties?: Record<string, unknown> } | undefined;
  switch (e.keyword) {
    case 'additionalProperties': {
      const key = String((e.params as { additionalProperty: string }).additionalProperty);
      const location = source.locate([...path, key], { key: true });
      if (INLINE_SECRET_KEY.test(key)) {
        return {
          severity: 'error',
          code: 'E_INLINE_SECRET',
          message: `a secret is written inline (key '${key}')`,
          hint: 'Secrets live in the secrets file (mode 0600), referenced by name: put the value there and refer to it, e.g. bmc.credentials: <name>.',
          location,
        };
      }
      const allowed = Object.keys(parent?.properties ?? {}).join(', ');
      return {
        severity: 'error',
        code: 'E_SCHEMA_UNKNOWN_KEY',
        message: `unknown key '${key}'`,
        hint: allowed ? `Allowed keys here: ${allowed}. Unknown keys are usually typos.` : 'Remove it.',
        location,
      };
    }
    case 'required': {
      const key = String((e.params as { missingProperty: string }).missingProperty);
      return {
        severity: 'error',
        code: 'E_SCHEMA_MISSING_KEY',
        message: `missing required key '${key}'`,
        hint: `Add '${key}' here; see docs/inventory.md for its meaning.`,
        location: source.locate(path),
      };
    }
    case 'type': {
      const expected = String((e.params as { type: string }).type);
      return {
        severity: 'error',
        code: 'E_SCHEMA_TYPE',
        message: `must be ${expected === 'object' ? 'a mapping' : expected === 'array' ? 'a list' : `a ${expected}`}, not ${typeName(e.data)}`,
        hint:
          expected === 'string'
            ? 'Quote the value in YAML so it stays text.'
            : (parent?.description ?? 'See docs/inventory.md for the expected type.'),
        location: source.locate(path),
      };
    }
    case 'pattern':
      return {
        severity: 'error',
        code: 'E_SCHEMA_FORMAT',
        message: 'has the wrong format',
        hint: `Expected: ${parent?.description ?? `text matching ${String((e.params as { pattern: string }).pattern)}`}.`,
        location: source.locate(path),
      };
    default:
      return {
        severity: 'error',
        code: 'E_SCHEMA',
        message: e.message ?? `fails the '${e.keyword}' rule`,
        hint: parent?.description ? `Expected: ${parent.description}.` : 'See the published schema in schemas/.',
        location: source.locate(path),
      };
  }
}

function dedupe(issues: Issue[]): Issue[] {
  const seen = new Set<string>();
  return issues.filter((i) => {
    const k = `${i.code}|${i.location.path}|${i.message}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}
