/**
 * The precompiled validators (`npm run build` writes them; src/core/schema.ts) give what compiling
 * the schema gives: the same verdict, the same errors, the same defaults filled in.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import { describe, expect, it } from 'vitest';
import { PUBLISHED_SCHEMAS } from '../../src/cli/schema.js';
import { packageRoot } from '../../src/core/paths.js';
import { precompiledSource } from '../../src/core/schema.js';
import { parseYaml } from '../../src/core/yaml.js';

type Precompiled = Record<string, { schema: string; validate: ValidateFunction }>;

/** Load the generated CommonJS source as validators.cjs would be loaded (its requires resolve from here). */
function load(source: string): Precompiled {
  const module = { exports: {} as unknown };
  new Function('require', 'module', 'exports', source)(createRequire(import.meta.url), module, module.exports);
  return module.exports as Precompiled;
}

const root = packageRoot();
const yamlFiles = (dir: string): string[] =>
  readdirSync(join(root, dir))
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => join(root, dir, f));
const read = (file: string): unknown => parseYaml(file, readFileSync(file, 'utf8')).data;

/** Documents of each schema: the files that ship, and broken ones that exercise the error paths. */
const BROKEN: unknown[] = [
  {},
  [],
  'text',
  null,
  { cloud: { name: 'Bad Name!', release: 7 }, networks: [], nodes: [{ name: 1, password: 'x' }], extra: true },
  { name: 'x', services: 'all', unknown: { deep: [1, 2] } },
];
const DOCUMENTS: Record<keyof typeof PUBLISHED_SCHEMAS, unknown[]> = {
  inventory: [...yamlFiles('inventories').map(read), ...BROKEN],
  secrets: [{ bmc: {}, services: {} }, { bmc: { x: { username: 'u' } }, services: { a: 1 } }, ...BROKEN],
  role: [...yamlFiles('roles').map(read), ...BROKEN],
  service: [...yamlFiles('roles/services').map(read), ...BROKEN],
  release: [...yamlFiles('images/releases').map(read), ...BROKEN],
};

describe('precompiled validators', () => {
  const precompiled = load(precompiledSource(Object.values(PUBLISHED_SCHEMAS)));

  it.each(Object.entries(PUBLISHED_SCHEMAS).map(([name, schema]) => ({ scenario: name, name, schema })))(
    '$scenario: same verdict, errors and defaults as the compiled schema',
    ({ name, schema }) => {
      const entry = precompiled[schema.$id!]!;
      expect(entry.schema).toBe(JSON.stringify(schema));
      const ajv = new Ajv({ strict: true, allErrors: true, verbose: true, allowUnionTypes: true, useDefaults: true });
      const compiled = ajv.compile(schema);
      const docs = DOCUMENTS[name as keyof typeof PUBLISHED_SCHEMAS];
      expect(docs.length).toBeGreaterThan(BROKEN.length - 1);
      for (const doc of docs) {
        const [a, b] = [structuredClone(doc), structuredClone(doc)];
        const verdict = compiled(a);
        expect(entry.validate(b)).toBe(verdict);
        expect(b).toEqual(a);
        // parentSchema and schema: the precompiled ones are JSON copies (TypeBox's symbol keys dropped)
        expect(JSON.parse(JSON.stringify(entry.validate.errors ?? null))).toEqual(
          JSON.parse(JSON.stringify(compiled.errors ?? null)),
        );
      }
    },
  );
});
