/**
 * The real parsers of the files stackctl renders, run on this machine, so a
 * test reads a rendered value back the way the service will: oslo.config and
 * SQLAlchemy (Debian's python3-oslo.config and python3-sqlalchemy, the
 * versions the service images carry), MariaDB's option file reader
 * (my_print_defaults, Debian's mariadb-client-core), and sh (dash).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Debian's interpreter: the one whose dist-packages hold oslo.config and SQLAlchemy. */
const PYTHON = '/usr/bin/python3';
const PACKAGES = 'python3-oslo.config python3-sqlalchemy mariadb-client-core (scripts/host-setup.sh installs them)';

function run(cmd: string, args: string[], input?: string): string {
  const r = spawnSync(cmd, args, { input, encoding: 'utf8' });
  if (r.error) throw new Error(`${cmd} cannot run (${r.error.message}): install ${PACKAGES}`);
  if (r.status !== 0) {
    const missing = /ModuleNotFoundError|No such file/.test(r.stderr) ? ` (install ${PACKAGES})` : '';
    throw new Error(`${cmd} ${args.slice(0, 1).join(' ')} failed${missing}: ${r.stderr}`);
  }
  return r.stdout;
}

/** A file in a fresh temporary folder. */
export function tempFile(name: string, text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'stackctl-parse-')), name);
  writeFileSync(file, text);
  return file;
}

/** Values of options of an INI file as oslo.config gives them to a service: {group: {option: value}}. */
export function osloValues(
  iniText: string,
  options: Record<string, readonly string[]>,
): Record<string, Record<string, string>> {
  const file = tempFile('service.conf', iniText);
  const program = String.raw`
import json, sys
from oslo_config import cfg
spec = json.loads(sys.stdin.read())
conf = cfg.ConfigOpts()
for group, names in spec.items():
    for n in names:
        conf.register_opt(cfg.StrOpt(n, secret=True), group=None if group == "DEFAULT" else group)
conf(["--config-file", sys.argv[1]], project="stackctl-test", default_config_files=[], default_config_dirs=[])
section = lambda g: conf if g == "DEFAULT" else getattr(conf, g)
print(json.dumps({g: {n: getattr(section(g), n) for n in names} for g, names in spec.items()}))
`;
  return JSON.parse(run(PYTHON, ['-c', program, file], JSON.stringify(options))) as Record<
    string,
    Record<string, string>
  >;
}

/** The passwords of database URLs as SQLAlchemy's make_url reads them (what oslo.db connects with). */
export function sqlalchemyPasswords(urls: readonly string[]): string[] {
  const program = String.raw`
import json, sys
from sqlalchemy.engine import url
print(json.dumps([url.make_url(u).password for u in json.loads(sys.stdin.read())]))
`;
  return JSON.parse(run(PYTHON, ['-c', program], JSON.stringify(urls))) as string[];
}

/**
 * The hosts of transport URLs as oslo.messaging reads them (TransportURL.parse: the netloc split at
 * ',', each host at its last '@', the credentials at the first ':', both percent-decoded), and the
 * password kombu ends up with: oslo.messaging's RabbitMQ driver quotes it again with quote(), which
 * leaves '/' as is, and kombu parses that URL with urlparse (undefined when it cannot).
 * Transcribed from oslo.messaging and kombu (not on this machine); the lab deploy runs the real ones.
 */
export function transportHosts(
  urls: readonly string[],
): { username: string; password: string; host: string; kombuPassword?: string }[][] {
  const program = String.raw`
import json, sys
from urllib import parse
result = []
for u in json.loads(sys.stdin.read()):
    url = parse.urlparse(u)
    out = []
    for host in url.netloc.split(","):
        username, hostname = host.rsplit("@", 1)
        username, password = username.split(":", 1)
        username, password = parse.unquote(username), parse.unquote(password)
        kombu_url = "amqp://%s:%s@%s/" % (parse.quote(username), parse.quote(password), hostname)
        try:
            parts = parse.urlparse("http://" + kombu_url[len("amqp://"):])
            parts.port
            kombu = parse.unquote(parts.password or "")
        except ValueError:
            kombu = None
        h = {"username": username, "password": password, "host": hostname}
        if kombu is not None:
            h["kombuPassword"] = kombu
        out.append(h)
    result.append(out)
print(json.dumps(result))
`;
  return JSON.parse(run(PYTHON, ['-c', program], JSON.stringify(urls))) as {
    username: string;
    password: string;
    host: string;
    kombuPassword?: string;
  }[][];
}

/**
 * What alembic's Config gives back after `set_main_option('sqlalchemy.url', url)`: Python's
 * ConfigParser with its % interpolation (an error text when it refuses the value).
 */
export function alembicRoundTrip(urls: readonly string[]): string[] {
  const program = String.raw`
import configparser, json, sys
out = []
for u in json.loads(sys.stdin.read()):
    cp = configparser.ConfigParser()
    cp.add_section("alembic")
    try:
        cp.set("alembic", "sqlalchemy.url", u)
        out.append(cp.get("alembic", "sqlalchemy.url"))
    except ValueError as e:
        out.append("refused: %s" % type(e).__name__)
print(json.dumps(out))
`;
  return JSON.parse(run(PYTHON, ['-c', program], JSON.stringify(urls))) as string[];
}

/** The options of a group of a MariaDB option file as the server and its clients read them. */
export function mariadbOptions(cnfText: string, group: string): string[] {
  const file = tempFile('client.cnf', cnfText);
  return run('my_print_defaults', [`--defaults-file=${file}`, group])
    .split('\n')
    .filter((l) => l !== '');
}

/** The value of a variable after `sh` sources an environment file (as `set -a && . FILE` does). */
export function shVariable(envText: string, name: string): string {
  const file = tempFile('vars.env', envText);
  return run('sh', ['-c', `set -a && . "$1" && printf %s "$${name}"`, 'sh', file]);
}

/** Run a Python program with Debian's interpreter; returns its stdout. */
export function python(program: string, args: string[] = [], input?: string): string {
  return run(PYTHON, ['-c', program, ...args], input);
}

/**
 * A MariaDB string literal read as the server's lexer does with its default sql_mode (the escape
 * table of the MariaDB manual, "String Literals"): no server runs on this machine; the lab deploy
 * runs the real one.
 */
export function mariadbStringLiteral(lit: string): string {
  const q = lit[0]!;
  let out = '';
  for (let i = 1; i < lit.length - 1; i++) {
    const c = lit[i]!;
    if (c === '\\') {
      const n = lit[++i]!;
      const table: Record<string, string> = {
        '0': '\0',
        b: '\b',
        n: '\n',
        r: '\r',
        t: '\t',
        Z: '\x1a',
        '%': '\\%',
        _: '\\_',
      };
      out += table[n] ?? n;
    } else if (c === q) {
      if (lit[i + 1] !== q) throw new Error(`literal ends early at ${i}`);
      out += q;
      i++;
    } else out += c;
  }
  return out;
}
