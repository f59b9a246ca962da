import type { Command } from 'commander';
import { UsageError } from '../core/errors.js';
import { InventorySchema } from '../inventory/schema.js';
import { SecretsFileSchema } from '../inventory/secrets.js';
import { ReleaseSchema, RoleSchema, ServiceSchema } from '../roles/schema.js';

/** The published JSON Schemas, by name (schemas/<name>.schema.json in the repository). */
export const PUBLISHED_SCHEMAS = {
  inventory: InventorySchema,
  secrets: SecretsFileSchema,
  role: RoleSchema,
  service: ServiceSchema,
  release: ReleaseSchema,
} as const;

/** JSON text of a published schema (what the repository's schemas/ folder holds). */
export function schemaJson(name: keyof typeof PUBLISHED_SCHEMAS): string {
  return (
    JSON.stringify({ $schema: 'http://json-schema.org/draft-07/schema#', ...PUBLISHED_SCHEMAS[name] }, null, 2) + '\n'
  );
}

/** `stackctl schema NAME`: print a JSON Schema, e.g. for editor completion. */
export function registerSchema(program: Command): void {
  program
    .command('schema')
    .description(`print a JSON Schema (${Object.keys(PUBLISHED_SCHEMAS).join(', ')})`)
    .argument('<name>', 'schema name')
    .action((name: string) => {
      if (!(name in PUBLISHED_SCHEMAS)) {
        throw new UsageError('E_UNKNOWN_SCHEMA', `no schema named '${name}'`, {
          hint: `Known: ${Object.keys(PUBLISHED_SCHEMAS).join(', ')}.`,
        });
      }
      process.stdout.write(schemaJson(name as keyof typeof PUBLISHED_SCHEMAS));
    });
}
