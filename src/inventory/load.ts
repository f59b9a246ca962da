import { ValidationFailed, type Issue } from '../core/errors.js';
import { readTextFile } from '../core/fs.js';
import { checkSchema } from '../core/schema.js';
import { parseYaml, type YamlSource } from '../core/yaml.js';
import { InventorySchema, type Inventory } from './schema.js';
import { checkInventory, type ParsedNetwork, type SemanticContext } from './semantic.js';

/** Largest inventory file accepted (10,000 nodes take about 3 MiB). */
export const MAX_INVENTORY_BYTES = 32 * 1024 * 1024;

/** A loaded and checked inventory. */
export interface LoadedInventory {
  readonly file: string;
  readonly inventory: Inventory;
  readonly source: YamlSource;
  readonly networks: ReadonlyMap<string, ParsedNetwork>;
  /** Warnings (errors make loading throw). */
  readonly warnings: readonly Issue[];
}

/**
 * Parse, schema-check and semantically check an inventory from text. Every
 * fault is collected; if any is an error, throws ValidationFailed with all of
 * them (warnings included), so the operator fixes everything in one round.
 */
export function parseInventory(file: string, text: string, ctx: SemanticContext): LoadedInventory {
  const source = parseYaml(file, text);
  const issues: Issue[] = [...source.issues];
  if (source.data === undefined || hasErrors(issues)) throw new ValidationFailed(file, sortIssues(issues));
  const { value, issues: schemaIssues } = checkSchema(InventorySchema, source);
  issues.push(...schemaIssues);
  if (!value) throw new ValidationFailed(file, sortIssues(issues));
  const { issues: semantic, networks } = checkInventory(value, source, ctx);
  issues.push(...semantic);
  if (hasErrors(issues)) throw new ValidationFailed(file, sortIssues(issues));
  return { file, inventory: value, source, networks, warnings: sortIssues(issues) };
}

/** Read and check an inventory file. */
export function loadInventory(file: string, ctx: SemanticContext): LoadedInventory {
  return parseInventory(file, readTextFile(file, MAX_INVENTORY_BYTES), ctx);
}

function hasErrors(issues: readonly Issue[]): boolean {
  return issues.some((i) => i.severity === 'error');
}

/** Source order: line, then column; errors before warnings on the same spot. */
export function sortIssues(issues: readonly Issue[]): Issue[] {
  return [...issues].sort(
    (a, b) =>
      (a.location.line ?? 0) - (b.location.line ?? 0) ||
      (a.location.column ?? 0) - (b.location.column ?? 0) ||
      (a.severity === b.severity ? 0 : a.severity === 'error' ? -1 : 1),
  );
}
