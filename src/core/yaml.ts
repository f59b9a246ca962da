/**
 * The only module that imports `yaml` (CONVENTIONS.md 9). Loads a YAML file
 * as YAML 1.2 (core schema) with line/column positions kept, limits on size
 * and alias expansion, and a check for "YAML 1.1 surprises": unquoted values
 * that tools still reading YAML 1.1 (PyYAML, Ansible) would turn into another
 * type, such as a MAC address read as a base-60 number or `no` read as false.
 */
import { isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, visit, type Node, type Scalar } from 'yaml';
import type { Issue, SourceLocation } from './errors.js';
import { loadFast } from './yaml-fast.js';

/** Limits applied to every YAML file stackctl reads. */
export interface YamlLimits {
  /** Largest number of alias nodes (`*ref`) resolved; guards against "billion laughs". */
  readonly maxAliasCount: number;
}

export const DEFAULT_YAML_LIMITS: YamlLimits = { maxAliasCount: 100 };

/** A parsed YAML document that can say where any JSON path sits in the source. */
export interface YamlSource {
  readonly file: string;
  /** Plain JS value of the document (undefined when it did not parse). */
  readonly data: unknown;
  /** Syntax errors and YAML 1.1 ambiguities, in source order. */
  readonly issues: Issue[];
  /** Location of the value at `path`; with `key`, of the mapping key naming it. Falls back to the nearest parent. */
  locate(path: readonly (string | number)[], opts?: { key?: boolean }): SourceLocation;
}

// Patterns of YAML 1.1 plain scalars that YAML 1.2's core schema reads differently.
const YAML11_BOOL = /^(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$/;
const YAML11_SEXAGESIMAL = /^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$/;
const YAML11_OCTAL = /^[-+]?0[0-7_]+$/;
const YAML11_BINARY = /^[-+]?0b[01_]+$/;
const YAML11_UNDERSCORE_NUMBER = /^[-+]?(0|[1-9][0-9_]*)(\.[0-9_]*)?$/;
const SECRETISH_KEY = /pass|secret|token|key/i;

/** What a YAML 1.1 reader would make of a plain scalar, when that differs from YAML 1.2. */
function yaml11Surprise(source: string, value: unknown): string | undefined {
  if (YAML11_BOOL.test(source)) return `the boolean ${/^(y|yes|on)$/i.test(source)}`;
  if (source.includes(':') && YAML11_SEXAGESIMAL.test(source)) return 'a base-60 number';
  if (YAML11_BINARY.test(source)) return 'a binary number';
  if (YAML11_OCTAL.test(source) && !/^[-+]?0+$/.test(source)) return 'an octal number';
  if (source.includes('_') && YAML11_UNDERSCORE_NUMBER.test(source) && typeof value === 'string') return 'a number';
  return undefined;
}

/**
 * Parse YAML text; never throws for bad input: faults come back as issues.
 * A clean document takes the fast loader and builds positions only when a
 * later check asks where something is; anything else takes the full parser.
 */
export function parseYaml(file: string, text: string, limits: YamlLimits = DEFAULT_YAML_LIMITS): YamlSource {
  const fast = loadFast(text);
  if (fast) {
    let full: YamlSource | undefined;
    return {
      file,
      data: fast.data,
      issues: [],
      locate: (path, opts) => (full ??= parseYamlFull(file, text, limits)).locate(path, opts),
    };
  }
  return parseYamlFull(file, text, limits);
}

/** The full parser: every syntax error and ambiguity, with positions. */
export function parseYamlFull(file: string, text: string, limits: YamlLimits = DEFAULT_YAML_LIMITS): YamlSource {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, {
    version: '1.2',
    schema: 'core',
    uniqueKeys: true,
    prettyErrors: true,
    lineCounter,
    keepSourceTokens: false,
  });
  const issues: Issue[] = [];
  const at = (offset: number, path?: string): SourceLocation => {
    const pos = lineCounter.linePos(offset);
    return { file, line: pos.line, column: pos.col, ...(path !== undefined ? { path } : {}) };
  };

  for (const err of [...doc.errors, ...doc.warnings]) {
    issues.push({
      severity: doc.errors.includes(err) ? 'error' : 'warning',
      code: 'E_YAML_SYNTAX',
      message: (err.message.split('\n')[0] ?? err.message).replace(/ at line \d+, column \d+:?$/, ''),
      hint: 'Fix the YAML syntax at this position (indentation, a missing colon or quote).',
      location: at(err.pos[0]),
    });
  }

  if (doc.errors.length === 0) {
    visit(doc, {
      Scalar(_key, node: Scalar, path) {
        if (node.type !== 'PLAIN' || node.source === undefined || !node.range) return;
        const surprise = yaml11Surprise(String(node.source), node.value);
        if (!surprise) return;
        const parent = path[path.length - 1];
        const keyName = isPair(parent) && isScalar(parent.key) ? String(parent.key.value) : '';
        const shown = SECRETISH_KEY.test(keyName) ? 'this value' : `"${String(node.source)}"`;
        issues.push({
          severity: 'error',
          code: 'E_YAML_AMBIGUOUS',
          message: `unquoted ${shown} is read as ${surprise} by YAML 1.1 tools`,
          hint: `Quote it (${shown === 'this value' ? "'…'" : `'${String(node.source)}'`}) so every reader sees the same text, or write true/false for a boolean.`,
          location: at(node.range[0]),
        });
      },
    });
  }

  let data: unknown;
  if (doc.errors.length === 0) {
    try {
      data = doc.toJS({ maxAliasCount: limits.maxAliasCount });
    } catch (err) {
      issues.push({
        severity: 'error',
        code: 'E_YAML_ALIAS_LIMIT',
        message: (err as Error).message,
        hint: `Aliases may expand to at most ${limits.maxAliasCount} nodes; write the values out instead.`,
        location: { file, line: 1, column: 1 },
      });
    }
  }

  const locate = (path: readonly (string | number)[], opts: { key?: boolean } = {}): SourceLocation => {
    const pointer = '/' + path.map((p) => String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('/');
    let node: unknown = doc.contents;
    let best: Node | undefined = doc.contents ?? undefined;
    for (let i = 0; i < path.length; i++) {
      const seg = path[i];
      const last = i === path.length - 1;
      if (isMap(node)) {
        const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === String(seg));
        if (!pair) break;
        if (last && opts.key && isScalar(pair.key)) {
          best = pair.key;
          break;
        }
        node = pair.value;
        if (isScalar(node) || isMap(node) || isSeq(node)) best = node;
        else if (isScalar(pair.key)) best = pair.key;
      } else if (isSeq(node)) {
        node = node.items[Number(seg)];
        if (isScalar(node) || isMap(node) || isSeq(node)) best = node;
        else break;
      } else break;
    }
    const offset = best?.range?.[0] ?? 0;
    return at(offset, path.length ? pointer : '');
  };

  return { file, data, issues, locate };
}

/** Serialise a plain value as YAML (block style). */
export { stringify as toYaml } from 'yaml';
