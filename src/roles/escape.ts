/**
 * How a value is written into each kind of config file stackctl renders.
 * Every template declares its format (`{{!-- format: NAME --}}`); a value
 * written plainly (`{{x}}`) must consist of the format's bare characters, or
 * the rendering is refused; anything else goes through one of the format's
 * escapers (`{{ini x}}`, `{{sh x}}`, ...), which write any value the format
 * can hold. No value, escaped or not, may hold a control character
 * (CONTROL_CHARS), but for the newlines of a PEM file (format `pem`). Pure functions; src/roles/templates.ts wires them into
 * Handlebars.
 */
import { CONTROL_CHARS } from '../inventory/settings.js';

/** An escaper: the text that stands for `value` in its place of the file. */
export type Escape = (value: string) => string;

/** Characters a consumer of an escaper's output cannot take however they are written, and why. */
export interface Refusal {
  /** Matches any one refused character. */
  readonly chars: RegExp;
  /** The characters, for messages. */
  readonly list: string;
  /** Completes "... a character that ...". */
  readonly why: string;
}

/** Where an escaper's output may stand. */
export type EscaperPlace =
  /** the whole value of a `key = value` line: nothing before it but `key =`, nothing after it on the line */
  | 'value'
  /** anywhere: the output is a self-contained token or component */
  | 'anywhere';

/** The escapers, each with the rule it follows (tested against the real parsers in test/roles/escape.test.ts). */
export const ESCAPERS = {
  /**
   * An oslo.config value (the INI files of the OpenStack services). oslo.config's parser takes the
   * text after the first `=`, strips surrounding whitespace, and removes one pair of quotes when the
   * value starts and ends with the same quote character; it has no escapes and no inline comments.
   * Every string option is then interpolated: `$name` and `${name}` are other options, `$$` is `$`.
   * So: `$` is written `$$`, and the value is wrapped in double quotes when it is empty-looking to
   * the parser (leading or trailing whitespace) or starts and ends with the same quote character.
   */
  ini: {
    place: 'value',
    escape: (v: string): string => {
      const s = v.replace(/\$/g, () => '$$');
      const quote = /^\s|\s$/.test(s) || (s.length > 0 && (s[0] === '"' || s[0] === "'") && s[0] === s[s.length - 1]);
      return quote ? `"${s}"` : s;
    },
  },
  /**
   * A MariaDB/MySQL option file value (my.cnf). The parser strips whitespace, cuts a `#` comment
   * outside quotes, removes one pair of surrounding quotes and then reads the escapes \\ \" \' \n
   * \t \r \b \s. So: double quotes, with `\` written `\\` and `"` written `\"`; a non-empty value of
   * letters, digits and `. _ , : / @ + = -` only stays unquoted.
   */
  cnf: {
    place: 'value',
    escape: (v: string): string =>
      /^[A-Za-z0-9._,:/@+=-]+$/.test(v) ? v : `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`,
  },
  /**
   * A POSIX shell word: in single quotes, a `'` written `'\''`; nothing is expanded inside. A
   * non-empty value of letters, digits and `. _ , : / @ % + = -` only stays unquoted.
   */
  sh: {
    place: 'anywhere',
    escape: (v: string): string => (/^[A-Za-z0-9._,:/@%+=-]+$/.test(v) ? v : `'${v.replace(/'/g, `'\\''`)}'`),
  },
  /**
   * A URL component (the user name or password of mysql+pymysql://user:PASS@host/db or
   * rabbit://user:PASS@host:5672/): every byte but ASCII letters, digits, `.`, `_` and `-`
   * percent-encoded (UTF-8). SQLAlchemy and oslo.messaging decode the user and password; the output
   * holds no `$`, space, quote or `#`, so it can stand in an oslo.config value or a shell word as is.
   */
  url: {
    place: 'anywhere',
    escape: (v: string): string => percentEncode(v),
  },
  /**
   * The password of an oslo.messaging transport URL: percent-encoded as url, and `/` refused.
   * oslo.messaging (Zed) decodes the password, then quotes it again for kombu with Python's
   * `quote()`, which leaves `/` as is: kombu then reads the rest of the password as the URL's path.
   */
  url_mq: {
    place: 'anywhere',
    escape: (v: string): string => percentEncode(v),
    refuse: {
      chars: /\//,
      list: '/',
      why: "oslo.messaging's RabbitMQ driver cannot pass on (it re-quotes the password leaving / as is)",
    },
  },
  /**
   * The password of a database URL written without percent-encoding, in an oslo.config value, for
   * a URL that also reaches alembic's ConfigParser, where `%` starts an interpolation (Zed's
   * keystone-manage db_sync hands [database]/connection to it as is). SQLAlchemy reads every
   * character of a password as is except `@` (which ends it) and `%` (which it decodes): those are
   * refused; `$` is written `$$` for oslo.config.
   */
  url_plain: {
    place: 'anywhere',
    escape: (v: string): string => v.replace(/\$/g, () => '$$'),
    refuse: {
      chars: /[@%]/,
      list: '@ %',
      why: 'a database URL read by alembic (keystone-manage db_sync) cannot hold: SQLAlchemy needs it percent-encoded, and alembic refuses %',
    },
  },
  /**
   * A MariaDB string literal in single quotes, for the server's default sql_mode (backslash
   * escapes on: stackctl never sets NO_BACKSLASH_ESCAPES): `\` is written `\\`, `'` is written `''`.
   */
  sql: {
    place: 'anywhere',
    escape: (v: string): string => `'${v.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`,
  },
  /**
   * A JSON string literal (RabbitMQ's definitions). Also a Python 3 string literal: JSON's escapes
   * (\\ \" \b \f \n \r \t \uXXXX) mean the same in Python, and other characters stand as themselves
   * in a UTF-8 source file.
   */
  json: {
    place: 'anywhere',
    escape: (v: string): string => JSON.stringify(v),
  },
} as const satisfies Record<string, { place: EscaperPlace; escape: Escape; refuse?: Refusal }>;
export type EscaperName = keyof typeof ESCAPERS;

/** Every byte but ASCII letters, digits, `.`, `_` and `-` percent-encoded (UTF-8). */
function percentEncode(v: string): string {
  return encodeURIComponent(v).replace(/[!'()*~]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** The refusal of an escaper that `text` meets, if any. */
export function refusalOf(name: EscaperName, text: string): Refusal | undefined {
  const r = (ESCAPERS[name] as { refuse?: Refusal }).refuse;
  return r && r.chars.test(text) ? r : undefined;
}

/** A config file format: what a plain `{{x}}` may write, and which escapers exist for it. */
export interface Format {
  readonly description: string;
  /** The characters a value written plainly may hold (one character class). */
  readonly chars: RegExp;
  /** A character it may not start with. */
  readonly notFirst?: string;
  /** The same, for messages. */
  readonly bareText: string;
  readonly escapers: readonly EscaperName[];
}

/** The formats of the templates under roles/templates/, by the name a template declares. */
export const FORMATS = {
  'oslo-ini': {
    description: 'an oslo.config INI file of an OpenStack service',
    chars: /[A-Za-z0-9._,:/@+=-]/,
    bareText: 'letters, digits and . _ , : / @ + = -',
    escapers: ['ini', 'url', 'url_mq', 'url_plain'],
  },
  'uwsgi-ini': {
    // uwsgi expands %(...), %x and $(...) in its INI files: no % or $ at all
    description: "uwsgi's INI file",
    chars: /[A-Za-z0-9._:/-]/,
    bareText: 'letters, digits and . _ : / -',
    escapers: [],
  },
  'mysql-cnf': {
    description: 'a MariaDB option file',
    chars: /[A-Za-z0-9._,:/@+=-]/,
    bareText: 'letters, digits and . _ , : / @ + = -',
    escapers: ['cnf'],
  },
  sql: {
    description: 'an SQL script run by MariaDB',
    chars: /[A-Za-z0-9._,:/@+=-]/,
    bareText: 'letters, digits and . _ , : / @ + = -',
    escapers: ['sql'],
  },
  sh: {
    description: 'a shell script or environment file read by sh',
    chars: /[A-Za-z0-9._,:/@%+=-]/,
    bareText: 'letters, digits and . _ , : / @ % + = -',
    escapers: ['sh', 'url'],
  },
  keepalived: {
    // keepalived cuts comments at # and !, splits at blanks, and has no quoting for auth_pass
    description: "keepalived's configuration",
    chars: /[A-Za-z0-9._:/@+=-]/,
    bareText: 'letters, digits and . _ : / @ + = -',
    escapers: [],
  },
  haproxy: {
    description: "HAProxy's configuration",
    chars: /[A-Za-z0-9._:/@+=-]/,
    bareText: 'letters, digits and . _ : / @ + = -',
    escapers: [],
  },
  json: {
    description: 'a JSON document',
    chars: /[A-Za-z0-9._,:/@+=-]/,
    bareText: 'letters, digits and . _ , : / @ + = -',
    escapers: ['json'],
  },
  erlang: {
    description: 'an Erlang terms file',
    chars: /[A-Za-z0-9._,-]/,
    bareText: 'letters, digits and . _ , -',
    escapers: [],
  },
  'rabbitmq-conf': {
    description: "RabbitMQ's rabbitmq.conf (sysctl format)",
    chars: /[A-Za-z0-9._:/@-]/,
    bareText: 'letters, digits and . _ : / @ -',
    escapers: [],
  },
  python: {
    description: 'a Python program',
    chars: /[A-Za-z0-9._-]/,
    bareText: 'letters, digits and . _ -',
    escapers: ['json'],
  },
  args: {
    // one command-line option per line: a value starting with - would be another option
    description: 'a file of command-line options',
    chars: /[A-Za-z0-9._:/-]/,
    notFirst: '-',
    bareText: 'letters, digits and . _ : / -, not starting with -',
    escapers: [],
  },
  'libvirt-conf': {
    // libvirt's own format: `key = "string"` with C-like escapes; values are written bare inside quotes
    description: "a libvirt daemon's configuration (libvirtd.conf)",
    chars: /[A-Za-z0-9._:/-]/,
    bareText: 'letters, digits and . _ : / -',
    escapers: [],
  },
  pem: {
    // PEM blocks only (base64 lines between BEGIN/END lines): its lines are its format, so this is
    // the one format whose values may hold a newline and a space (and no other control character).
    description: 'a PEM file (certificates and a private key)',
    chars: /[A-Za-z0-9+/=\n -]/,
    bareText: 'PEM blocks: letters, digits, + / = -, spaces and newlines',
    escapers: [],
  },
  key: {
    description: 'a key file (a Fernet key or an Erlang cookie, or a key list of INDEX KEY lines)',
    chars: /[A-Za-z0-9+/=_-]/,
    bareText: 'letters, digits and + / = _ -',
    escapers: [],
  },
} as const satisfies Record<string, Format>;
export type FormatName = keyof typeof FORMATS;

/** Each format's bare characters as one anchored test of a whole value (the fast path of bareProblem). */
const BARE = new Map(
  Object.entries(FORMATS).map(([name, f]: [string, Format]) => [
    name,
    new RegExp(`^${f.notFirst !== undefined ? `(?!${f.notFirst})` : ''}${f.chars.source}*$`),
  ]),
);

/** Whether `text` can be written plainly in `format`. */
export function isBare(format: FormatName, text: string): boolean {
  return BARE.get(format)!.test(text);
}

/** Why `text` cannot be written plainly in `format`, or undefined when it can. */
export function bareProblem(format: FormatName, text: string): string | undefined {
  if (isBare(format, text)) return undefined;
  if (CONTROL_CHARS.test(text)) return 'a control character';
  const f: Format = FORMATS[format];
  const bad = [...text].find((c) => !f.chars.test(c));
  if (bad !== undefined) return bad === ' ' ? 'a space' : `'${bad}'`;
  if (f.notFirst !== undefined && text.startsWith(f.notFirst)) return `a leading ${f.notFirst}`;
  return undefined;
}
