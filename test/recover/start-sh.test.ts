/**
 * The mariadb container's start.sh (roles/templates/mariadb/start.sh.hbs), rendered for ctl-0 of three
 * controllers and run by sh with stand-ins for mariadbd and mariadb-admin, its paths moved into a
 * temporary folder: an empty datadir founds no cluster without stackctl's permit, and a permit left
 * from an earlier start never counts; a crashed member starts from the position InnoDB holds.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { tempDir } from '../helpers/cli.js';
import { planFromText } from '../helpers/plan.js';

const UUID = 'a9fd4cf2-e8e3-11f1-a695-defe4cd7f62f';
const rendered = planFromText(generateInventoryYaml({ controllers: 3, computes: 1 }))
  .rendered.get('ctl-0')!
  .get('/etc/stackctl/mariadb/start.sh')!;

const FAKES: Record<string, string> = {
  // install [-m M] [-o U] [-g G] SRC DEST: a copy
  install: 'for a; do s=$d; d=$a; done; cp "$s" "$d"',
  // the local ping (no --host) answers: the mariadb-upgrade loop ends; a peer answers only when told to
  'mariadb-admin': 'case "$*" in *--host=*) [ -f "$T/peer-up" ] ;; *) exit 0 ;; esac',
  'mariadb-upgrade': 'exit 0',
  mariadbd: [
    'case "$*" in',
    `*--wsrep-recover*) for a; do case "$a" in --log-error=*) echo "[Note] WSREP: Recovered position: ${UUID}:42" > "\${a#--log-error=}" ;; esac; done ;;`,
    '*) echo "$*" >> "$T/mariadbd.calls" ;;',
    'esac',
  ].join('\n'),
};

const running: ChildProcess[] = [];
afterEach(() => {
  for (const p of running.splice(0)) if (p.exitCode === null) process.kill(-p.pid!, 'SIGKILL');
});

/** A sandbox: the script with its paths moved, the stand-ins first on PATH; `grastate` written if given. */
function sandbox(grastate?: string) {
  const t = tempDir('stackctl-start-sh-');
  for (const d of ['conf', 'run', 'data', 'bin']) mkdirSync(join(t, d));
  for (const f of ['init.sql', '99-galera.cnf', 'client.cnf']) writeFileSync(join(t, 'conf', f), '');
  for (const [name, body] of Object.entries(FAKES)) {
    writeFileSync(join(t, 'bin', name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(t, 'bin', name), 0o755);
  }
  if (grastate) writeFileSync(join(t, 'data', 'grastate.dat'), grastate);
  const script = rendered
    .replaceAll('/etc/mysql/mariadb.conf.d/stackctl', join(t, 'conf'))
    .replaceAll('/run/mysqld', join(t, 'run'))
    .replaceAll('/var/lib/mysql', join(t, 'data'));
  writeFileSync(join(t, 'start.sh'), script);
  let log = '';
  const run = (...args: string[]): ChildProcess => {
    const p = spawn('sh', [join(t, 'start.sh'), ...args], {
      env: { PATH: `${join(t, 'bin')}:${process.env.PATH}`, T: t },
      detached: true,
    });
    p.stdout.on('data', (b: Buffer) => (log += b.toString()));
    p.stderr.on('data', (b: Buffer) => (log += b.toString()));
    running.push(p);
    return p;
  };
  const exited = (p: ChildProcess): Promise<number> =>
    new Promise((r) => (p.exitCode !== null ? r(p.exitCode) : p.on('exit', (c) => r(c ?? -1))));
  const calls = (): string =>
    existsSync(join(t, 'mariadbd.calls')) ? readFileSync(join(t, 'mariadbd.calls'), 'utf8') : '';
  return { t, run, exited, calls, log: () => log, done: () => rmSync(t, { recursive: true, force: true }) };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, f: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

describe('start.sh of a Galera member', () => {
  it('an empty datadir with no peer: waits, ignores a permit left from before, founds only on a new permit', async () => {
    const s = sandbox();
    try {
      writeFileSync(join(s.t, 'run', 'stackctl-found-cluster'), 'stale permit of an earlier start');
      const p = s.run();
      await until('the wait', () => s.log().includes('galera: waiting: no cluster state'));
      await sleep(2500); // a loop turn or more
      expect(s.calls()).toBe('');
      expect(p.exitCode).toBeNull();
      writeFileSync(join(s.t, 'run', 'stackctl-found-cluster'), 'deploy run r1: no member holds data');
      expect(await s.exited(p)).toBe(0);
      expect(s.calls()).toMatch(/--wsrep-new-cluster$/m);
      expect(s.log()).toContain('galera: founding a new cluster: deploy run r1: no member holds data');
      expect(existsSync(join(s.t, 'run', 'stackctl-found-cluster'))).toBe(false);
    } finally {
      s.done();
    }
  }, 30_000);

  it('an empty datadir joins the first peer that answers, never founding', async () => {
    const s = sandbox();
    try {
      const p = s.run();
      await until('the wait', () => s.log().includes('galera: waiting'));
      writeFileSync(join(s.t, 'peer-up'), '');
      expect(await s.exited(p)).toBe(0);
      expect(s.calls()).not.toContain('--wsrep-new-cluster');
      expect(s.log()).toMatch(/galera: MariaDB answers on \S+: joining its cluster/);
    } finally {
      s.done();
    }
  }, 30_000);

  it('a crashed member starts from the position InnoDB holds (--wsrep-start-position), joining through gcomm', async () => {
    const s = sandbox(`version: 2.1\nuuid:    ${UUID}\nseqno:   -1\nsafe_to_bootstrap: 0\n`);
    try {
      expect(await s.exited(s.run())).toBe(0);
      expect(s.calls()).toContain(`--wsrep-start-position=${UUID}:42`);
      expect(s.calls()).not.toContain('--wsrep-new-cluster');
      expect(s.log()).toContain(`galera: starting from position ${UUID}:42 (InnoDB, after a crash)`);
    } finally {
      s.done();
    }
  }, 30_000);

  it("Galera's safe_to_bootstrap mark restarts the cluster when no peer answers", async () => {
    const s = sandbox(`version: 2.1\nuuid:    ${UUID}\nseqno:   57\nsafe_to_bootstrap: 1\n`);
    try {
      expect(await s.exited(s.run())).toBe(0);
      expect(s.calls()).toMatch(/--wsrep-new-cluster$/m);
      expect(s.log()).toContain(`galera: starting from position ${UUID}:57 (grastate.dat)`);
    } finally {
      s.done();
    }
  }, 30_000);

  it('recover mode prints the position and starts nothing', async () => {
    const s = sandbox(`version: 2.1\nuuid:    ${UUID}\nseqno:   -1\nsafe_to_bootstrap: 0\n`);
    try {
      expect(await s.exited(s.run('recover'))).toBe(0);
      expect(s.log()).toContain(`galera: recovered position: ${UUID}:42`);
      expect(s.calls()).toBe('');
    } finally {
      s.done();
    }
  }, 30_000);
});
