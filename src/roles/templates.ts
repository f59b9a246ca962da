/**
 * The only module that imports `handlebars` (CONVENTIONS.md 9). Config
 * templates live under roles/templates/ and render in strict mode: a
 * variable the context lacks is an error naming the template and line, never
 * an empty string in a config file.
 *
 * Values never reach a file unescaped. Each template declares its format on
 * a line of its own, `{{!-- format: NAME --}}` (src/roles/escape.ts FORMATS);
 * a template without one does not load. Every `{{...}}` is rewritten at
 * compile time to pass its value through one output check: a value written
 * plainly (`{{x}}`) must consist of the format's bare characters, or the
 * rendering is refused with the template's line; a value that needs more
 * goes through one of the format's escapers (`{{ini x}}`, `{{sh x}}`,
 * `{{url x}}`, `{{sql x}}`, `{{cnf x}}`, `{{json x}}`). So a new template that
 * forgets an escaper fails safe: it refuses the value, it never writes it raw.
 *
 * Secrets are SecretRef objects in the context: a template cannot read them,
 * only write them, and what it writes is a placeholder that records how the
 * value is to be escaped. The plan substitutes the real values afterwards
 * (revealSecrets), so one rendering serves both the printable plan (it
 * hashes the placeholders: the same on every machine) and the real files.
 */
import Handlebars from 'handlebars';
import { InputError } from '../core/errors.js';
import { describeControl } from '../inventory/settings.js';
import { bareProblem, ESCAPERS, FORMATS, isBare, refusalOf, type EscaperName, type FormatName } from './escape.js';

/** A secret in a template context. It can be written (escaped or plainly), never read. */
export class SecretRef {
  /** `chain`: the escapers applied so far, in order. */
  constructor(
    readonly name: string,
    readonly chain: readonly EscaperName[] = [],
  ) {}
  toString(): string {
    throw new ValueError(`secret '${this.name}' can only be written with {{...}}, not passed to a helper`);
  }
}

/** A value an escaper produced: written as is. */
class Escaped {
  constructor(readonly text: string) {}
  toString(): string {
    throw new ValueError('an escaped value can only be written, not passed to another helper than an escaper');
  }
}

/** A fault of a value met while rendering; the helper that meets it adds its line, templateError the template. */
class ValueError extends Error {
  line?: number;
  column?: number;
  constructor(
    message: string,
    readonly hint?: string,
  ) {
    super(message);
  }
}

/** The helper every `{{...}}` is rewritten to; templates may not name it. */
const OUT = 'stackctl_out';

/** Stands for a secret in rendered text: NUL-delimited, so no value can forge one (values with control characters are refused). */
// eslint-disable-next-line no-control-regex -- the placeholder is delimited by NULs, which no value can hold
const PLACEHOLDER = /\u0000secret:([a-z][a-z0-9_]*):([a-z0-9_,-]+):(\d+)\u0000/g;
const placeholder = (name: string, chain: string, line: number): string =>
  `\u0000secret:${name}:${chain}:${line}\u0000`;

const hb = Handlebars.create();

type HelperOptions = { loc?: { start?: { line?: number; column?: number } } };

/** Give a ValueError the line of the helper call that met it. */
function located(e: unknown, options: HelperOptions | undefined): unknown {
  const start = options?.loc?.start;
  if (e instanceof ValueError && e.line === undefined && start?.line !== undefined) {
    e.line = start.line;
    e.column = (start.column ?? 0) + 1;
  }
  return e;
}

/** Register a helper whose ValueErrors carry the line of the call (Handlebars passes its options last). */
function helper(name: string, fn: (...args: never[]) => unknown): void {
  hb.registerHelper(name, (...args: unknown[]) => {
    try {
      return (fn as (...a: unknown[]) => unknown)(...args);
    } catch (e) {
      throw located(e, args[args.length - 1] as HelperOptions | undefined);
    }
  });
}

/** The text of a scalar; anything else is refused with `what` named. */
function scalarText(value: unknown, what: string): string {
  if (typeof value === 'string') return value;
  if (value instanceof SecretRef || value instanceof Escaped) return value.toString();
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (value === undefined || value === null) throw new ValueError(`${what} has no value`);
  throw new ValueError(
    `${what} is ${Array.isArray(value) ? 'a list' : 'not a single value'}`,
    Array.isArray(value) ? 'Write a list with {{join LIST "SEPARATOR"}}.' : undefined,
  );
}

helper('join', (list: unknown, sep: unknown) => {
  if (!Array.isArray(list)) throw new ValueError('join needs a list');
  return list.map((x, i) => scalarText(x, `item ${i} of the list`)).join(typeof sep === 'string' ? sep : ',');
});
helper('eq', (a: unknown, b: unknown) => a === b);
/** Whether any of its values is set: `{{#if (or tls.public tls.internal)}}`. */
helper('or', (...args: unknown[]) => args.slice(0, -1).some(Boolean));
/** Every occurrence of `from` in `text` replaced, e.g. an address as an Erlang tuple: `{{replace ip "." ","}}`. */
helper('replace', (text: unknown, from: unknown, to: unknown) =>
  scalarText(text, 'the text of replace').split(String(from)).join(String(to)),
);
/** The items of `list` other than `item` (a node's peers). */
helper('without', (list: unknown, item: unknown) => {
  if (!Array.isArray(list)) throw new ValueError('without needs a list');
  return list.filter((x) => x !== item);
});

for (const [name, { escape }] of Object.entries(ESCAPERS) as [EscaperName, (typeof ESCAPERS)[EscaperName]][]) {
  helper(name, (value: unknown, options: unknown) => {
    if (options === undefined) throw new ValueError(`${name} takes one value`);
    if (value instanceof SecretRef) return new SecretRef(value.name, [...value.chain, name]);
    const text = value instanceof Escaped ? value.text : scalarText(value, `the value of ${name}`);
    const control = describeControl(text);
    if (control) throw new ValueError(`the value of ${name} contains ${control}`, controlHint);
    const refused = refusalOf(name, text);
    if (refused)
      throw new ValueError(
        `the value of ${name} holds a character that ${refused.why}`,
        `Choose a value without ${refused.list}.`,
      );
    return new Escaped(escape(text));
  });
}

const controlHint = 'No value may hold a control character: fix the setting or secret.';

/**
 * The output check of every `{{...}}`: (format, expression as written, value). Registered directly,
 * with its fast path first: it runs for every value of every file of every node.
 */
hb.registerHelper(OUT, (format: FormatName, expr: string, value: unknown, options: HelperOptions) => {
  if (typeof value === 'string' && isBare(format, value)) return value;
  try {
    return output(format, expr, value, options);
  } catch (e) {
    throw located(e, options);
  }
});

function output(format: FormatName, expr: string, value: unknown, options: HelperOptions): string {
  if (value instanceof Escaped) return value.text;
  if (value instanceof SecretRef)
    return placeholder(
      value.name,
      value.chain.length ? value.chain.join(',') : `bare-${format}`,
      options.loc?.start?.line ?? 0,
    );
  const text = scalarText(value, expr);
  const problem = bareProblem(format, text);
  if (problem) {
    const f = FORMATS[format];
    throw new ValueError(
      `the value of ${expr} contains ${problem}, which ${f.description} cannot hold written plainly`,
      `A value written plainly here may hold ${f.bareText}. Fix the value (its setting's type says what it takes)` +
        (f.escapers.length
          ? `, or write it through one of this format's escapers: ${f.escapers.map((e) => `{{${e} ${expr}}}`).join(', ')}.`
          : '.'),
    );
  }
  return text;
}

/** A compiled template: the rendered text, secrets as placeholders (see revealSecrets and printableText). */
export type Template = (context: object) => string;

/** Compile template text; `name` is used in error messages. */
export function compileTemplate(name: string, text: string): Template {
  let fn: HandlebarsTemplateDelegate;
  try {
    const ast = Handlebars.parseWithoutProcessing(text);
    const format = declaredFormat(name, ast);
    guard(name, ast, format);
    fn = hb.compile(ast, { strict: true, noEscape: true });
  } catch (e) {
    throw templateError(name, e);
  }
  return (context: object) => {
    try {
      return fn(context);
    } catch (e) {
      throw templateError(name, e);
    }
  };
}

/** The format a template declares in its first `{{!-- format: NAME --}}` comment. */
function declaredFormat(name: string, ast: hbs.AST.Program): FormatName {
  const known = Object.keys(FORMATS).join(', ');
  for (const s of ast.body) {
    if (s.type !== 'CommentStatement') continue;
    const m = /^\s*format:\s*(\S+)\s*$/.exec((s as hbs.AST.CommentStatement).value);
    if (!m) continue;
    if (!(m[1]! in FORMATS))
      throw formatError(name, `declares unknown format '${m[1]}'`, `Known formats: ${known}.`, s.loc);
    return m[1] as FormatName;
  }
  throw formatError(
    name,
    'declares no format',
    `Put {{!-- format: NAME --}} on a line of its own near the top (formats: ${known}); it says how values are escaped.`,
  );
}

/**
 * Rewrite every `{{expr}}` to `{{stackctl_out FORMAT "expr" (expr)}}`, checking on the way that
 * the escapers used belong to the format and that value-place escapers (ini, cnf) are the whole
 * value of their line. Partials and decorators are refused: their output would escape the check.
 */
function guard(name: string, program: hbs.AST.Program, format: FormatName): void {
  const allowed: readonly string[] = FORMATS[format].escapers;
  const body = program.body;
  body.forEach((s, i) => {
    switch (s.type) {
      case 'MustacheStatement': {
        const m = s as hbs.AST.MustacheStatement;
        const helper = m.path.type === 'PathExpression' ? (m.path as hbs.AST.PathExpression).original : undefined;
        checkExpression(name, m, allowed, true);
        if (helper && helper in ESCAPERS && ESCAPERS[helper as EscaperName].place === 'value')
          checkValuePlace(name, helper, body[i - 1], body[i + 1], m.loc);
        const isCall = m.params.length > 0 || m.hash !== undefined || (helper !== undefined && helper in hb.helpers);
        const expr: hbs.AST.Expression = isCall
          ? ({
              type: 'SubExpression',
              path: m.path,
              params: m.params,
              hash: m.hash,
              loc: m.loc,
            } as hbs.AST.SubExpression)
          : m.path;
        const literal = (value: string): hbs.AST.StringLiteral => ({
          type: 'StringLiteral',
          value,
          original: value,
          loc: m.loc,
        });
        body[i] = {
          type: 'MustacheStatement',
          path: { type: 'PathExpression', data: false, depth: 0, parts: [OUT], original: OUT, loc: m.loc },
          params: [literal(format), literal(sourceOf(m)), expr],
          escaped: m.escaped,
          strip: m.strip,
          loc: m.loc,
        } as hbs.AST.MustacheStatement;
        break;
      }
      case 'BlockStatement': {
        const b = s as hbs.AST.BlockStatement;
        checkExpression(name, b, allowed, false);
        if (b.program) guard(name, b.program, format);
        if (b.inverse) guard(name, b.inverse, format);
        break;
      }
      case 'ContentStatement':
      case 'CommentStatement':
        break;
      default:
        throw formatError(name, `uses a ${s.type}`, 'Templates use values, helpers and blocks only.', s.loc);
    }
  });
}

/** The escapers in an expression and its subexpressions belong to the format; value-place ones stand alone. */
function checkExpression(
  name: string,
  node: {
    path: hbs.AST.PathExpression | hbs.AST.Expression;
    params: hbs.AST.Expression[];
    loc: hbs.AST.SourceLocation;
  },
  allowed: readonly string[],
  top: boolean,
): void {
  const helper = node.path.type === 'PathExpression' ? (node.path as hbs.AST.PathExpression).original : undefined;
  if (helper === OUT) throw formatError(name, `names the reserved helper ${OUT}`, 'Write {{value}} instead.', node.loc);
  if (helper && helper in ESCAPERS) {
    if (!allowed.includes(helper))
      throw formatError(
        name,
        `uses the escaper ${helper}, which does not belong to its format`,
        `This format's escapers: ${allowed.join(', ') || '(none: values are written plainly, and refused when they do not fit)'}.`,
        node.loc,
      );
    if (!top && ESCAPERS[helper as EscaperName].place === 'value')
      throw formatError(
        name,
        `uses ${helper} inside another expression`,
        `Write {{${helper} VALUE}} as the whole value of its line.`,
        node.loc,
      );
  }
  for (const p of node.params)
    if (p.type === 'SubExpression') checkExpression(name, p as hbs.AST.SubExpression, allowed, false);
}

/** `key = {{ini x}}` and nothing else on the line. */
function checkValuePlace(
  name: string,
  helper: string,
  before: hbs.AST.Statement | undefined,
  after: hbs.AST.Statement | undefined,
  loc: hbs.AST.SourceLocation,
): void {
  const textOf = (s: hbs.AST.Statement | undefined): string | undefined =>
    s?.type === 'ContentStatement' ? (s as hbs.AST.ContentStatement).value : undefined;
  const prev = textOf(before);
  const next = textOf(after);
  const line = prev?.split('\n').pop();
  if (line === undefined || !/^[ \t]*[A-Za-z0-9_.-]+[ \t]*=[ \t]*$/.test(line) || (after && !next?.startsWith('\n')))
    throw formatError(
      name,
      `writes {{${helper} ...}} where it is not the whole value of a line`,
      `${helper} quotes the whole value: write it as 'key = {{${helper} VALUE}}' with nothing after it on the line.`,
      loc,
    );
}

/** The expression of a mustache as written, for messages. */
function sourceOf(m: hbs.AST.MustacheStatement): string {
  const expr = (e: hbs.AST.Expression): string => {
    switch (e.type) {
      case 'PathExpression':
        return (e as hbs.AST.PathExpression).original;
      case 'SubExpression': {
        const s = e as hbs.AST.SubExpression;
        return `(${[expr(s.path), ...s.params.map(expr)].join(' ')})`;
      }
      case 'StringLiteral':
        return JSON.stringify((e as hbs.AST.StringLiteral).value);
      default:
        return String((e as hbs.AST.Literal & { original?: unknown }).original ?? e.type);
    }
  };
  return [expr(m.path), ...m.params.map(expr)].join(' ');
}

/**
 * The rendered text with each secret placeholder replaced by the secret's value, escaped as the
 * template asked (or checked against the format's bare characters when written plainly). Throws
 * when a secret is missing or cannot be written where the template puts it; messages name the
 * secret and the template line, never the value.
 */
export function revealSecrets(tagged: string, value: (name: string) => string | undefined, template: string): string {
  if (!tagged.includes('\u0000')) return tagged;
  return tagged.replace(PLACEHOLDER, (_, name: string, chain: string, line: string) => {
    const v = value(name);
    const location = { file: template, line: Number(line) };
    if (v === undefined)
      throw new InputError(
        'E_SECRET_MISSING',
        `secret '${name}' (${template} line ${line}) is missing from the secrets file`,
        {
          hint: "Run 'stackctl secrets generate' to add missing service secrets; a secret a setting names is written by you.",
          location,
        },
      );
    let text = v;
    for (const step of chain.split(',')) {
      if (step.startsWith('bare-')) {
        const format = step.slice(5) as FormatName;
        if (bareProblem(format, text) !== undefined) {
          const f = FORMATS[format];
          throw new InputError(
            'E_TEMPLATE_VALUE',
            `secret '${name}' cannot be written in ${template} line ${line}: ${f.description} holds only ${f.bareText} there (the value is not shown)`,
            {
              hint: `Change the secret in the secrets file to such characters${f.escapers.length ? `, or have the template escape it (${f.escapers.join(', ')})` : ''}.`,
              location,
            },
          );
        }
        continue;
      }
      const control = describeControl(text);
      if (control)
        throw new InputError(
          'E_TEMPLATE_VALUE',
          `secret '${name}' (${template} line ${line}) contains ${control} (the value is not shown)`,
          { hint: controlHint, location },
        );
      const refused = refusalOf(step as EscaperName, text);
      if (refused)
        throw new InputError(
          'E_TEMPLATE_VALUE',
          `secret '${name}' cannot be written in ${template} line ${line}: it holds a character that ${refused.why} (the value is not shown)`,
          { hint: `Choose a value without ${refused.list} for ${name} in the secrets file.`, location },
        );
      text = ESCAPERS[step as EscaperName].escape(text);
    }
    return text;
  });
}

/**
 * The rendered text as it would be if each secret's value were `<secret:NAME>`: the files of a plan
 * without a secrets file, still files of their format (a JSON string stays one).
 */
export function printableText(tagged: string): string {
  if (!tagged.includes('\u0000')) return tagged;
  return tagged.replace(PLACEHOLDER, (_, name: string, chain: string) => {
    const key = `${name}:${chain}`;
    let text = printable.get(key);
    if (text === undefined) {
      text = `<secret:${name}>`;
      if (!chain.startsWith('bare-'))
        for (const step of chain.split(',')) text = ESCAPERS[step as EscaperName].escape(text);
      printable.set(key, text);
    }
    return text;
  });
}
/** Printable forms by name and escapers: the same few, on every node. */
const printable = new Map<string, string>();

function formatError(name: string, what: string, hint: string, loc?: hbs.AST.SourceLocation): InputError {
  return new InputError('E_TEMPLATE_FORMAT', `template ${name} ${what}`, {
    hint,
    location: { file: name, ...(loc ? { line: loc.start.line, column: loc.start.column + 1 } : {}) },
  });
}

function templateError(name: string, e: unknown): InputError {
  if (e instanceof InputError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  // Handlebars appends " - line:column" to strict-mode lookups.
  const pos = / - (\d+):(\d+)$/.exec(msg);
  if (e instanceof ValueError) {
    return new InputError(
      'E_TEMPLATE_VALUE',
      `template ${name}${e.line !== undefined ? ` line ${e.line}` : ''}: ${msg}`,
      {
        hint: e.hint ?? 'Fix the value in the inventory or the template.',
        location: { file: name, ...(e.line !== undefined ? { line: e.line, column: e.column ?? 1 } : {}) },
      },
    );
  }
  return new InputError(
    'E_TEMPLATE',
    `template ${name}: ${msg.replace(/ - \d+:\d+$/, '').replace(/ in \[object Object\]/, '')}`,
    {
      hint: 'The template uses a value the plan does not provide; fix the name or add it to the inventory settings.',
      location: { file: name, ...(pos ? { line: Number(pos[1]), column: Number(pos[2]) + 1 } : {}) },
    },
  );
}
