/**
 * The only module that imports `handlebars` (CONVENTIONS.md 9). Config
 * templates live under roles/templates/ and render in strict mode: a
 * variable the context lacks is an error naming the template and line, never
 * an empty string in a config file. No HTML escaping: these are config files.
 */
import Handlebars from 'handlebars';
import { InputError } from '../core/errors.js';

const hb = Handlebars.create();
hb.registerHelper('join', (list: unknown, sep: unknown) =>
  Array.isArray(list) ? list.join(typeof sep === 'string' ? sep : ',') : '',
);
hb.registerHelper('eq', (a: unknown, b: unknown) => a === b);
/** Every occurrence of `from` in `text` replaced, e.g. an address as an Erlang tuple: `{{replace ip "." ","}}`. */
hb.registerHelper('replace', (text: unknown, from: unknown, to: unknown) =>
  String(text).split(String(from)).join(String(to)),
);
/** The items of `list` other than `item` (a node's peers). */
hb.registerHelper('without', (list: unknown, item: unknown) =>
  Array.isArray(list) ? list.filter((x) => x !== item) : [],
);

/** A compiled template. */
export type Template = (context: object) => string;

/** Compile template text; `name` is used in error messages. */
export function compileTemplate(name: string, text: string): Template {
  let fn: HandlebarsTemplateDelegate;
  try {
    fn = hb.compile(text, { strict: true, noEscape: true });
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

function templateError(name: string, e: unknown): InputError {
  const msg = e instanceof Error ? e.message : String(e);
  // Handlebars appends " - line:column" to strict-mode lookups.
  const pos = / - (\d+):(\d+)$/.exec(msg);
  return new InputError(
    'E_TEMPLATE',
    `template ${name}: ${msg.replace(/ - \d+:\d+$/, '').replace(/ in \[object Object\]/, '')}`,
    {
      hint: 'The template uses a value the plan does not provide; fix the name or add it to the inventory settings.',
      location: { file: name, ...(pos ? { line: Number(pos[1]), column: Number(pos[2]) + 1 } : {}) },
    },
  );
}
