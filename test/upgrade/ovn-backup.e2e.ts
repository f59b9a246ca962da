/**
 * ovn-central's declared backups (`upgrade.backup` of roles/services/ovn-central.yaml) against
 * real OVN: the zed ovn-central image serves a Northbound and a Southbound database the way
 * start-db.sh does (ovn-ctl, the same sockets), rows are written with ovn-nbctl / ovn-sbctl, the
 * upgrade's backup handler runs the declared commands, and the files it names must be whole OVSDB
 * databases holding those rows, of the sizes it reported. Docker, under the lab lock:
 * `npm run test:e2e:ovn-backup`.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultReleasesDir, defaultRolesDir } from '../../src/core/paths.js';
import { buildImages } from '../../src/images/build.js';
import { detachedScope } from '../../src/orchestrator/engine.js';
import { backup, HANDLER_DEFAULTS } from '../../src/orchestrator/handlers.js';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import type { RemoteCommand } from '../../src/remote/index.js';
import { loadCatalog } from '../../src/roles/catalog.js';
import { imageRef, loadRelease } from '../../src/roles/release.js';
import { tempDir } from '../helpers/cli.js';
import { dockerOrFail } from '../images/fixture.js';
import { fakeContext, planOf } from './fakes.js';

const catalog = loadCatalog(defaultRolesDir());
const zed = loadRelease(defaultReleasesDir(), 'zed');
const IMAGE = imageRef(zed, 'ovn-central')!;
/** Prefix of this test's containers: the declared container names map onto them. */
const PREFIX = `stackctl-ovnbackup-${process.pid}`;
const root = tempDir('stackctl-ovnbackup-');
const docker = (...args: string[]): string => execFileSync('docker', args, { encoding: 'utf8' });

/** One OVN database served as start-db.sh serves it (standalone: a one-controller cloud). */
function serve(which: 'nb' | 'sb'): void {
  const script = [
    'mkdir -p /run/ovn /var/lib/ovn /var/log/ovn',
    `exec /usr/share/ovn/scripts/ovn-ctl run_${which}_ovsdb --db-${which}-file=/var/lib/ovn/ovn${which}_db.db ` +
      `--db-${which}-sock=/run/ovn/ovn${which}_db.sock --db-${which}-pidfile=/run/ovn/ovn${which}_db.pid ` +
      `--ovn-${which}-logfile=/dev/null`,
  ].join('\n');
  docker('run', '-d', '--name', `${PREFIX}-ovn_${which}_db`, '--entrypoint', 'sh', IMAGE, '-c', script);
}

/** Wait until a command succeeds in a container (the database answers). */
async function until(container: string, argv: readonly string[]): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (spawnSync('docker', ['exec', container, ...argv]).status === 0) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${container}: ${argv.join(' ')} never succeeded`);
}

/**
 * This machine as the node: the handler's script runs here with `docker` naming this test's
 * containers, and its backup folder (HANDLER_DEFAULTS.backupDir on a node) under the temp folder.
 */
function localNode(): NodeAccess {
  const bin = join(root, 'bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(
    join(bin, 'docker'),
    `#!/bin/sh\n[ "$1" = exec ] || exit 99\nc=$2; shift 2\nexec /usr/bin/env PATH="${process.env.PATH ?? ''}" docker exec "${PREFIX}-$c" "$@"\n`,
  );
  chmodSync(join(bin, 'docker'), 0o755);
  const here = (s: string): string => s.replace(HANDLER_DEFAULTS.backupDir, join(root, 'backups'));
  const { ctx } = fakeContext(planOf([]));
  return {
    ...ctx.connect('ctl-0'),
    exec: async (command: RemoteCommand) => {
      const argv = (typeof command === 'string' ? ['sh', '-c', command] : [...command]).map(here);
      const r = spawnSync(argv[0]!, argv.slice(1), {
        encoding: 'utf8',
        env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ''}` },
      });
      return { code: r.status ?? 1, stdout: r.stdout, stderr: r.stderr };
    },
  };
}

describe("ovn-central's declared backups against real OVN databases", () => {
  beforeAll(async () => {
    const engine = await dockerOrFail();
    await buildImages(engine, { release: zed, only: ['ovn-central'] });
    serve('nb');
    serve('sb');
    await until(`${PREFIX}-ovn_nb_db`, ['ovsdb-client', '--timeout=5', 'list-dbs', 'unix:/run/ovn/ovnnb_db.sock']);
    await until(`${PREFIX}-ovn_sb_db`, ['ovsdb-client', '--timeout=5', 'list-dbs', 'unix:/run/ovn/ovnsb_db.sock']);
    docker('exec', `${PREFIX}-ovn_nb_db`, 'ovn-nbctl', '--db=unix:/run/ovn/ovnnb_db.sock', 'ls-add', 'sw-backup');
    docker(
      'exec',
      `${PREFIX}-ovn_sb_db`,
      'ovn-sbctl',
      '--db=unix:/run/ovn/ovnsb_db.sock',
      'chassis-add',
      'ch-backup',
      'geneve',
      '10.0.0.9',
    );
  }, 600_000);
  afterAll(() => {
    for (const w of ['nb', 'sb']) spawnSync('docker', ['rm', '-f', `${PREFIX}-ovn_${w}_db`]);
    spawnSync('rm', ['-rf', root]);
  });

  it('saves both databases, whole and with their rows, and names each file with its size', async () => {
    const node = localNode();
    const { ctx } = fakeContext(planOf([]));
    const commands = catalog.services.get('ovn-central')!.upgrade.backup!;
    const detail = await backup(
      { kind: 'backup', service: 'ovn-central', node: 'ctl-0', databases: [], commands },
      { ...ctx, run: 'r1', now: Date.now, connect: () => node },
      detachedScope(),
    );
    const files = [...detail.matchAll(/ctl-0:(\S+) \((\d+) bytes\)/g)].map((m) => ({
      path: m[1]!,
      size: Number(m[2]),
    }));
    expect(files.map((f) => f.path.replace(/.*-/, ''))).toEqual(['ovnnb_db.db', 'ovnsb_db.db']);
    const dir = join(root, 'backups', 'r1');
    for (const f of files) {
      const local = f.path.replace(HANDLER_DEFAULTS.backupDir, join(root, 'backups'));
      expect(statSync(local).size).toBe(f.size);
      expect(statSync(local).mode & 0o777).toBe(0o600);
    }
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    // Read back with the image's own ovsdb-tool: the right schema, the rows written before.
    const tool = (file: string, ...args: string[]): string =>
      docker(
        'run',
        '--rm',
        '-v',
        `${dir}:/b:ro`,
        '--entrypoint',
        'ovsdb-tool',
        IMAGE,
        ...args.map((a) => a.replace('FILE', `/b/${file}`)),
      );
    const [nb, sb] = files.map((f) => f.path.split('/').pop()!);
    expect(tool(nb!, 'db-name', 'FILE').trim()).toBe('OVN_Northbound');
    expect(tool(sb!, 'db-name', 'FILE').trim()).toBe('OVN_Southbound');
    expect(
      tool(nb!, 'query', 'FILE', '["OVN_Northbound",{"op":"select","table":"Logical_Switch","where":[]}]'),
    ).toContain('sw-backup');
    expect(tool(sb!, 'query', 'FILE', '["OVN_Southbound",{"op":"select","table":"Chassis","where":[]}]')).toContain(
      'ch-backup',
    );
    process.stderr.write(`ovn-central backups: ${detail}\n`);
  }, 300_000);
});
