import { describe, expect, it } from 'vitest';
import { CONTROL_CHARS } from '../../src/inventory/settings.js';
import {
  bareProblem,
  ESCAPERS,
  FORMATS,
  refusalOf,
  type EscaperName,
  type FormatName,
} from '../../src/roles/escape.js';
import {
  alembicRoundTrip,
  mariadbOptions,
  mariadbStringLiteral,
  osloValues,
  python,
  shVariable,
  sqlalchemyPasswords,
  transportHosts,
} from '../helpers/parsers.js';

/** Values an operator may choose as passwords: every character the formats treat specially. */
export const HOSTILE = [
  `p@ss w/rd'#%$x`,
  '${HOME} $$ $1 $ %41 %% %',
  `"double" 'single' \\back\\slash\\`,
  '  leading and trailing  ',
  "'quoted'",
  '"quoted"',
  '"',
  "'",
  '#start ;semi !bang',
  'a=b:c,d/e?f&g+h[i]{j}(k)*~`',
  'ünïcødé € 密码',
  '-dash',
  '\\',
  'plain',
] as const;

const escape = (name: EscaperName, v: string): string => ESCAPERS[name].escape(v);

describe('escapers, read back by the real parsers', () => {
  it('ini: oslo.config reads back every value (quotes, $ interpolation, surrounding spaces)', () => {
    const text =
      '[x]\n' + HOSTILE.map((v, i) => `k${i} = ${escape('ini', v)}\n`).join('') + 'empty = ' + escape('ini', '') + '\n';
    const read = osloValues(text, { x: [...HOSTILE.map((_, i) => `k${i}`), 'empty'] }).x!;
    HOSTILE.forEach((v, i) => expect(read[`k${i}`], JSON.stringify(v)).toBe(v));
    expect(read['empty']).toBe('');
  });

  it('url: a database URL in an oslo.config file gives SQLAlchemy the password back', () => {
    const text =
      '[database]\n' +
      HOSTILE.map((v, i) => `c${i} = mysql+pymysql://keystone:${escape('url', v)}@172.17.0.250/keystone\n`).join('');
    const read = osloValues(text, { database: HOSTILE.map((_, i) => `c${i}`) }).database!;
    const urls = HOSTILE.map((_, i) => read[`c${i}`]!);
    for (const u of urls)
      expect(u, 'the URL needs no oslo escaping').toMatch(/^mysql\+pymysql:\/\/keystone:[A-Za-z0-9._%-]*@/);
    expect(sqlalchemyPasswords(urls)).toEqual([...HOSTILE]);
  });

  it("url_plain: keystone's database URL survives oslo.config, alembic's ConfigParser and SQLAlchemy unencoded", () => {
    const ok = HOSTILE.filter((v) => !/[@%]/.test(v));
    expect(ok.length).toBeGreaterThan(8);
    const text =
      '[database]\n' +
      ok.map((v, i) => `c${i} = mysql+pymysql://keystone:${escape('url_plain', v)}@10.0.0.250/keystone\n`).join('');
    const read = osloValues(text, { database: ok.map((_, i) => `c${i}`) }).database!;
    const urls = ok.map((_, i) => read[`c${i}`]!);
    expect(alembicRoundTrip(urls)).toEqual(urls);
    expect(sqlalchemyPasswords(urls)).toEqual(ok);
    // why: the percent-encoded URL is what alembic refuses
    expect(alembicRoundTrip([`mysql+pymysql://keystone:${escape('url', 'a b')}@h/keystone`])).toEqual([
      'refused: ValueError',
    ]);
    for (const v of ['a@b', '50%']) expect(refusalOf('url_plain', v)?.list).toBe('@ %');
  });

  it("url_mq: RabbitMQ's password reaches kombu whole, except with a /, which url_mq refuses", () => {
    const urls = HOSTILE.map((v) => `rabbit://openstack:${escape('url_mq', v)}@172.17.0.10:5672/`);
    transportHosts(urls).forEach(([h], i) => {
      const v = HOSTILE[i]!;
      if (v.includes('/')) {
        expect(h!.kombuPassword, JSON.stringify(v)).not.toBe(v);
        expect(refusalOf('url_mq', v)?.list).toBe('/');
      } else {
        expect(h!.kombuPassword, JSON.stringify(v)).toBe(v);
        expect(refusalOf('url_mq', v)).toBeUndefined();
      }
    });
  });

  it("url: a transport URL of several hosts gives each host's credentials back", () => {
    const urls = HOSTILE.map(
      (v) => `rabbit://openstack:${escape('url', v)}@172.17.0.10:5672,openstack:${escape('url', v)}@172.17.0.11:5672/`,
    );
    expect(transportHosts(urls)).toEqual(
      HOSTILE.map((v) => [
        expect.objectContaining({ username: 'openstack', password: v, host: '172.17.0.10:5672' }),
        expect.objectContaining({ username: 'openstack', password: v, host: '172.17.0.11:5672' }),
      ]),
    );
    for (const v of HOSTILE) expect(decodeURIComponent(escape('url', v))).toBe(v);
  });

  it('sh: an environment file sourced by sh gives every value back, nothing expanded', () => {
    for (const v of [...HOSTILE, '']) expect(shVariable(`X=${escape('sh', v)}\n`, 'X'), JSON.stringify(v)).toBe(v);
  });

  it("cnf: MariaDB's option file reader gives every value back", () => {
    const text = '[client]\n' + HOSTILE.map((v) => `password = ${escape('cnf', v)}\n`).join('');
    expect(mariadbOptions(text, 'client')).toEqual(HOSTILE.map((v) => `--password=${v}`));
  });

  it('sql: a MariaDB string literal decodes back (backslash escapes on, the server default)', () => {
    for (const v of [...HOSTILE, '']) {
      const lit = escape('sql', v);
      expect(lit.startsWith("'") && lit.endsWith("'")).toBe(true);
      expect(mariadbStringLiteral(lit), JSON.stringify(v)).toBe(v);
    }
  });

  it('json: JSON parsers give every value back', () => {
    const doc = `[${HOSTILE.map((v) => escape('json', v)).join(', ')}]`;
    expect(JSON.parse(doc)).toEqual([...HOSTILE]);
    expect(JSON.parse(python('import json,sys; print(json.dumps(json.loads(sys.stdin.read())))', [], doc))).toEqual([
      ...HOSTILE,
    ]);
  });

  it('json: Python reads every value back as a string literal of its source (format python)', () => {
    const source = `[${HOSTILE.map((v) => escape('json', v)).join(', ')}]`;
    const back = python('import ast,json,sys; print(json.dumps(ast.literal_eval(sys.stdin.read())))', [], source);
    expect(JSON.parse(back)).toEqual([...HOSTILE]);
  });

  it('leaves values that need nothing as they are (configs of existing clouds render unchanged)', () => {
    for (const name of ['ini', 'cnf', 'sh', 'url', 'url_mq', 'url_plain'] as const)
      expect(escape(name, 'Abc123xyz')).toBe('Abc123xyz');
    expect(escape('sql', 'Abc123xyz')).toBe("'Abc123xyz'");
    expect(escape('json', 'Abc123xyz')).toBe('"Abc123xyz"');
  });
});

describe('formats', () => {
  it.each(Object.keys(FORMATS) as FormatName[])('%s: its escapers exist, its bare characters are safe', (name) => {
    const f = FORMATS[name];
    for (const e of f.escapers) expect(ESCAPERS[e]).toBeDefined();
    // letters and digits are bare everywhere; what every format quotes or cuts never is
    expect(bareProblem(name, 'abcXYZ019')).toBeUndefined();
    // NOTE: a PEM file's BEGIN/END lines hold spaces and its blocks are lines: pem takes both, nothing else
    const allowed = name === 'pem' ? [' ', '\n'] : [];
    for (const c of [' ', '"', "'", '#', '$', '\\', ';', '`', '!', '\n', '\t', '\u0000'])
      if (!allowed.includes(c)) expect(bareProblem(name, `a${c}b`), JSON.stringify(c)).toBeDefined();
    expect(f.description).toMatch(/^(an?|the|uwsgi's|keepalived's|HAProxy's|RabbitMQ's) /);
  });

  it('refuses a control character in any value of any format, and names a leading dash on a command line', () => {
    for (const name of Object.keys(FORMATS) as FormatName[])
      expect(bareProblem(name, 'a\u2028b')).toBe('a control character');
    expect(bareProblem('args', '-1')).toBe('a leading -');
    expect(bareProblem('sh', 'a b')).toBe('a space');
    expect(bareProblem('oslo-ini', 'a$b')).toBe("'$'");
    expect(CONTROL_CHARS.test('\u007f')).toBe(true);
  });
});
