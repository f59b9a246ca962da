/**
 * The only module that imports `ajv` (CONVENTIONS.md 9). Compiles TypeBox
 * schemas in strict mode and turns validation errors into located Issues:
 * file, line, column, JSON path and a hint, never the offending value (it
 * could be a secret written in the wrong place).
 *
 * Compiling the published schemas takes a good share of a command's start-up
 * (the service schema alone is ~220 KB of generated code), so `npm run build`
 * also writes their validators as code (precompiledSource, into
 * validators.cjs beside this file) and checkSchema uses one when it was built
 * from exactly the schema it is given; otherwise (running from the sources,
 * or a schema without a precompiled validator) it compiles, once per run.
 * Both are the same Ajv code with the same options: same results, same errors.
 */
import { createRequire } from 'node:module';
import type { Ajv as AjvInstance, ErrorObject, ValidateFunction } from 'ajv';
import type { TSchema, Static } from '@sinclair/typebox';
import type { Issue } from './errors.js';
import type { YamlSource } from './yaml.js';

const require = createRequire(import.meta.url);

/** Ajv's options, for compiled and precompiled validators alike. */
const AJV_OPTIONS = { strict: true, allErrors: true, verbose: true, allowUnionTypes: true, useDefaults: true } as const;

/** The file `npm run build` writes beside this module (scripts/precompile-schemas.mjs). */
const PRECOMPILED_FILE = './validators.cjs';

/** What validators.cjs exports: by schema $id, the schema's JSON text and its validator. */
type Precompiled = Readonly<Record<string, { readonly schema: string; readonly validate: ValidateFunction }>>;

let ajv: AjvInstance | undefined;
let precompiled: Precompiled | null | undefined;
const compiled = new WeakMap<TSchema, ValidateFunction>();

/** Ajv itself, loaded when a schema has to be compiled. */
function compiler(options: object = {}): AjvInstance {
  const { Ajv } = require('ajv') as typeof import('ajv');
  return new Ajv({ ...AJV_OPTIONS, ...options });
}

/** The precompiled validator of `schema`, when one was built from this very schema. */
function precompiledFor(schema: TSchema): ValidateFunction | undefined {
  if (precompiled === undefined) {
    try {
      precompiled = require(PRECOMPILED_FILE) as Precompiled;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw e;
      precompiled = null; // running from the sources, or built without the precompile step
    }
  }
  const entry = typeof schema.$id === 'string' ? precompiled?.[schema.$id] : undefined;
  return entry && entry.schema === JSON.stringify(schema) ? entry.validate : undefined;
}

/** The validator of a schema: precompiled, or compiled once per run. */
function validatorOf(schema: TSchema): ValidateFunction {
  let validate = compiled.get(schema);
  if (validate === undefined) {
    validate = precompiledFor(schema) ?? (ajv ??= compiler()).compile(schema);
    compiled.set(schema, validate);
  }
  return validate;
}

/**
 * CommonJS source of standalone validators for `schemas` (each with a `$id`), in the form
 * checkSchema loads from validators.cjs. Used by the build (scripts/precompile-schemas.mjs).
 */
export function precompiledSource(schemas: readonly TSchema[]): string {
  const generator = compiler({ code: { source: true } });
  const names: Record<string, string> = {};
  schemas.forEach((schema, i) => {
    if (typeof schema.$id !== 'string') throw new Error(`schema ${i} has no $id to precompile it by`);
    generator.addSchema(schema);
    names[`v${i}`] = schema.$id;
  });
  const standalone = require('ajv/dist/standalone') as { default: (ajv: AjvInstance, refs: object) => string };
  const entries = schemas.map(
    (schema, i) =>
      `  ${JSON.stringify(schema.$id)}: { schema: ${JSON.stringify(JSON.stringify(schema))}, validate: exports.v${i} },`,
  );
  return `${standalone.default(generator, names)}\nmodule.exports = {\n${entries.join('\n')}\n};\n`;
}

/** Keys that hold secrets; written inline in a file they are refused with their own code. */
export const INLINE_SECRET_KEY = /^(password|passwd|pass|secret|token|api_key|private_key)$/i;

/** Compile (once) and run a schema; returns the typed value and the issues found. */
export function checkSchema<T extends TSchema>(
  schema: T,
  source: YamlSource,
): { value: Static<T> | undefined; issues: Issue[] } {
  const validate = validatorOf(schema);
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
