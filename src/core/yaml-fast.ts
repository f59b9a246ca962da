/**
 * The only module that imports `js-yaml` (CONVENTIONS.md 9): a fast loader
 * for the common case, an alias-free document without faults. It reads YAML
 * 1.2's core schema like core/yaml.ts does, and marks every plain scalar that
 * YAML 1.1 tools would read as another type, so the caller can fall back to
 * the full parser, which locates each fault by line and column. It is about
 * ten times faster than the full parser on a 10,000-node inventory.
 */
import jsyaml from 'js-yaml';

/** Marks a plain scalar that YAML 1.1 reads differently; never reaches callers. */
class Ambiguous {
  constructor(readonly source: string) {}
  toString(): string {
    return AMBIGUOUS_KEY_PREFIX + this.source;
  }
}
const AMBIGUOUS_KEY_PREFIX = '\u0000ambiguous:';

/** Patterns of plain scalars whose YAML 1.1 reading differs from YAML 1.2's (as in core/yaml.ts). */
export const YAML11_PATTERNS: readonly RegExp[] = [
  /^(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$/,
  /^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$/,
  /^[-+]?0b[01_]+$/,
  /^[-+]?0[0-7_]*[1-7][0-7_]*$/,
  /^[-+]?(0|[1-9][0-9]*)?_[0-9_]*(\.[0-9_]*)?$|^[-+]?[1-9][0-9_]*_[0-9_]*(\.[0-9_]*)?$/,
];

const ambiguousTypes = YAML11_PATTERNS.map(
  (re, i) =>
    new jsyaml.Type(`tag:stackctl,2026:yaml11-${i}`, {
      kind: 'scalar',
      resolve: (data: unknown) => typeof data === 'string' && re.test(data),
      construct: (data: string) => new Ambiguous(data),
    }),
);

// js-yaml exports its built-in types, but its type declarations do not list them.
const builtin = (
  jsyaml as unknown as { types: Record<'null' | 'bool' | 'int' | 'float' | 'str' | 'seq' | 'map', jsyaml.Type> }
).types;

// Our markers first, so that they win over the core types for the same text.
const schema = new jsyaml.Schema({
  implicit: [...ambiguousTypes, builtin.null, builtin.bool, builtin.int, builtin.float],
  explicit: [builtin.str, builtin.seq, builtin.map],
});

/** Anchors or aliases make the fast path step aside (alias expansion is limited by the full parser). */
const ANCHOR_OR_ALIAS = /(^|[\s[{,:-])[&*][A-Za-z0-9_-]/m;

/**
 * Load a document quickly. Returns undefined when the document needs the full
 * parser: anchors or aliases, a syntax error, a duplicate key, a tag, or a
 * YAML 1.1 ambiguity somewhere.
 */
export function loadFast(text: string): { data: unknown } | undefined {
  if (ANCHOR_OR_ALIAS.test(text) || text.includes('!')) return undefined;
  let data: unknown;
  try {
    data = jsyaml.load(text, { schema, json: false });
  } catch {
    return undefined;
  }
  return hasAmbiguity(data) ? undefined : { data };
}

function hasAmbiguity(value: unknown): boolean {
  if (value instanceof Ambiguous) return true;
  if (Array.isArray(value)) return value.some(hasAmbiguity);
  if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      // js-yaml turns an object key into '[object Object]' rather than calling toString().
      if (k.startsWith(AMBIGUOUS_KEY_PREFIX) || k === '[object Object]' || hasAmbiguity(v)) return true;
    }
  }
  return false;
}
