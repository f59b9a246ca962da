/**
 * Every error and warning code the source can produce is described in
 * docs/cli.md, and docs/cli.md describes no code the source no longer has.
 *
 * The rule, which this test applies:
 *
 * - A code is a string literal of src/**\/*.ts whose whole text is `E_` or
 *   `W_` and capitals, digits and underscores (`'E_LOCKED'`, `code:
 *   'W_NO_SECRETS'`), wherever it stands: thrown, returned in an answer,
 *   compared. A literal that is the argument of `.startsWith()` tests a
 *   family and is not a code.
 * - A family is a code built at run time from a prefix: a template
 *   (`` `E_IPMI_${name}` ``) or a concatenation (`'E_AGENT_' + step`). It is
 *   described by its prefix and a placeholder, `E_AGENT_<STEP>`; codes of the
 *   source that share the prefix are still described one by one.
 * - A code is described when docs/cli.md names it in backticks (`` `E_X` ``),
 *   or when a line of docs/cli.md names its family as `` `PREFIX*` `` and
 *   links to another page of docs/ that names the code in backticks (one
 *   list per family, on its own page: `E_REDFISH_*` and bmc-redfish.md).
 * - Every code docs/cli.md names in backticks is one of the source, or of a
 *   family the source builds at run time (`E_AGENT_SELECT_DISK`).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/core/paths.js';

const ROOT = packageRoot();
const CODE = /^[EW]_[A-Z0-9]+(_[A-Z0-9]+)*$/;
const PREFIX = /^[EW]_([A-Z0-9]+_)+$/;

/** The codes and the run-time family prefixes of the source, each with where it first appears. */
function sourceCodes(): { codes: Map<string, string>; families: Map<string, string> } {
  const codes = new Map<string, string>();
  const families = new Map<string, string>();
  const files = (readdirSync(join(ROOT, 'src'), { recursive: true }) as string[]).filter((f) => f.endsWith('.ts'));
  for (const f of files) {
    const file = join('src', f);
    const src = ts.createSourceFile(file, readFileSync(join(ROOT, file), 'utf8'), ts.ScriptTarget.ES2022, true);
    const at = (n: ts.Node): string => `${file}:${src.getLineAndCharacterOfPosition(n.getStart()).line + 1}`;
    const visit = (n: ts.Node): void => {
      if (ts.isStringLiteral(n) || ts.isNoSubstitutionTemplateLiteral(n)) {
        const p = n.parent;
        const startsWith =
          ts.isCallExpression(p) &&
          ts.isPropertyAccessExpression(p.expression) &&
          p.expression.name.text === 'startsWith';
        if (CODE.test(n.text) && !startsWith && !codes.has(n.text)) codes.set(n.text, at(n));
        const concatenated =
          ts.isBinaryExpression(p) && p.operatorToken.kind === ts.SyntaxKind.PlusToken && p.left === n;
        if (PREFIX.test(n.text) && concatenated && !families.has(n.text)) families.set(n.text, at(n));
      }
      if (ts.isTemplateExpression(n) && PREFIX.test(n.head.text) && !families.has(n.head.text))
        families.set(n.head.text, at(n));
      ts.forEachChild(n, visit);
    };
    visit(src);
  }
  return { codes, families };
}

const page = (name: string): string => readFileSync(join(ROOT, 'docs', name), 'utf8');
const CLI = page('cli.md');
/** Codes named in backticks on a page. */
const named = (text: string): Set<string> => new Set([...text.matchAll(/`([EW]_[A-Z0-9_]+)`/g)].map((m) => m[1]!));

/** `PREFIX*` families of docs/cli.md with the pages their line links to. */
function linkedFamilies(): { prefix: string; pages: string[] }[] {
  return CLI.split('\n').flatMap((line) =>
    [...line.matchAll(/`([EW]_(?:[A-Z0-9]+_)+)\*`/g)].map((m) => ({
      prefix: m[1]!,
      pages: [...line.matchAll(/\]\(([a-z0-9-]+\.md)(#[^)]*)?\)/g)].map((l) => l[1]!),
    })),
  );
}

describe('error codes in docs/cli.md', () => {
  const { codes, families } = sourceCodes();
  const described = named(CLI);

  it('finds the codes of the source (the scan itself works)', () => {
    expect(codes.size).toBeGreaterThan(250);
    expect(codes.get('E_LOCKED')).toMatch(/^src\/core\/lock\.ts:\d+$/);
    expect(codes.has('W_NO_SECRETS')).toBe(true);
    // a prefix tested with startsWith is not a code; the families built at run time are known
    expect(codes.has('E_HOST_KEY')).toBe(false);
    expect([...families.keys()].sort()).toEqual(['E_AGENT_', 'E_IPMI_', 'E_TEMPEST_NO_']);
  });

  it('describes every code the source can produce', () => {
    const viaLink = new Set<string>();
    for (const f of linkedFamilies()) {
      const listed = new Set(f.pages.flatMap((p) => [...named(page(p))]));
      for (const c of codes.keys()) if (c.startsWith(f.prefix) && listed.has(c)) viaLink.add(c);
    }
    const missing = [...codes].filter(([c]) => !described.has(c) && !viaLink.has(c)).map(([c, at]) => `${c} (${at})`);
    expect(missing, 'codes docs/cli.md does not describe').toEqual([]);
  });

  it('describes every family the source builds at run time, with a placeholder', () => {
    const missing = [...families]
      .filter(([prefix]) => !new RegExp('`' + prefix + '<[A-Z_]+>`').test(CLI))
      .map(([prefix, at]) => `${prefix}<...> (${at})`);
    expect(missing).toEqual([]);
  });

  it('links every PREFIX* family to a page that lists its codes', () => {
    const families = linkedFamilies();
    for (const f of families) {
      expect(f.pages, `${f.prefix}* links to no page`).not.toEqual([]);
      for (const p of f.pages) expect(() => page(p), p).not.toThrow();
    }
  });

  it('names no code the source does not produce', () => {
    const stale = [...described].filter((c) => !codes.has(c) && ![...families.keys()].some((p) => c.startsWith(p)));
    expect(stale, 'codes docs/cli.md names that no source file has').toEqual([]);
  });
});
