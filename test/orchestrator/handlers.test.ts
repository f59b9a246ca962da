import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';
import { Secret } from '../../src/core/secret.js';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import { detachedScope } from '../../src/orchestrator/engine.js';
import {
  COMMAND_BACKUP_SCRIPT,
  backup,
  drain,
  ensure,
  migrate,
  oneOffRunner,
  runOnce,
  serverStatusOf,
  sessionsOf,
  stop,
} from '../../src/orchestrator/handlers.js';
import type { ContainerWork, DeployPlan } from '../../src/orchestrator/planner.js';
import { LABEL } from '../../src/orchestrator/state.js';
import type { RemoteCommand } from '../../src/remote/index.js';
import type { UpgradeContext } from '../../src/upgrade/context.js';
import { tempDir } from '../helpers/cli.js';
import { mariadbStringLiteral } from '../helpers/parsers.js';
import { catalog } from '../helpers/plan.js';
import { deployPlanOf, fakeContext, planOf, work } from '../upgrade/fakes.js';

const scope = detachedScope();
const LB = catalog.provides.loadBalancer!;

/** A node that records what it is asked and answers from small tables. */
function recordingNode(
  node: string,
  opts: {
    containers?: Set<string>;
    socket?: (line: string) => string;
    exec?: (argv: readonly string[]) => { code: number; stdout: string; stderr: string };
    exitCode?: number;
    /** A container a killed run left: running for `polls` inspections, then `status` (default exited) with `exitCode`. */
    leftover?: { name: string; labels: Record<string, string>; polls: number; status?: string; exitCode?: number };
    /** A volume whose removal fails as Docker's does while a container uses it. */
    volumeBusy?: string;
  } = {},
) {
  const log: string[] = [];
  const containers = opts.containers ?? new Set<string>();
  let leftover = opts.leftover;
  if (leftover) containers.add(leftover.name);
  const access: NodeAccess = {
    node,
    exec: async (command: RemoteCommand) => {
      const argv = typeof command === 'string' ? [command] : command;
      log.push(`exec ${argv.join(' ')}`);
      return opts.exec?.(argv) ?? { code: 0, stdout: '', stderr: '' };
    },
    files: { upload: async () => 0 },
    docker: {
      inspectContainer: async (name: string) => {
        const l = leftover?.name === name ? leftover : undefined;
        const running = l !== undefined && l.polls-- > 0;
        return containers.has(name)
          ? {
              id: name,
              name,
              image: 'img',
              imageId: '',
              labels: l?.labels ?? {},
              state: {
                status: running ? 'running' : (l?.status ?? 'exited'),
                running,
                exitCode: l?.exitCode ?? opts.exitCode ?? 0,
                startedAt: '',
                finishedAt: '',
                oomKilled: false,
              },
              restartCount: 0,
            }
          : undefined;
      },
      stopContainer: async (name: string) => void log.push(`stop ${name}`),
      removeContainer: async (name: string) => {
        log.push(`remove ${name}`);
        containers.delete(name);
        if (leftover?.name === name) leftover = undefined;
      },
      removeVolume: async (name: string) => {
        if (opts.volumeBusy === name) throw new Error(`volume is in use - [${name}]`);
        log.push(`volume rm ${name}`);
      },
      createContainer: async (spec: { name: string; image: string; command?: readonly string[]; restart?: string }) => {
        log.push(`create ${spec.name} ${spec.image} ${spec.command?.join(' ')} restart=${spec.restart}`);
        containers.add(spec.name);
        return spec.name;
      },
      startContainer: async (name: string) => void log.push(`start ${name}`),
      // only the current release's images are on the node
      imageExists: async (image: string) => image.endsWith(':zed-1'),
      pullImage: async (image: string) => void log.push(`pull ${image}`),
      logs: async () => ({ stdout: 'migrating...\nERROR: table locked\n', stderr: '' }),
      exec: async (name: string, argv: readonly string[]) => {
        log.push(`docker-exec ${name} ${argv.join(' ')}`);
        const line = argv[argv.length - 1] ?? '';
        return { code: 0, stdout: opts.socket?.(line) ?? '', stderr: '' };
      },
    } as unknown as NodeAccess['docker'],
  };
  return { access, log, containers };
}

/** A context whose nodes are the given recording nodes. */
function contextOver(nodes: Record<string, NodeAccess>, over: Partial<UpgradeContext> = {}): UpgradeContext {
  const { ctx } = fakeContext(planOf([]));
  return { ...ctx, services: catalog.provides, connect: (n) => nodes[n]!, ...over };
}

describe("the engine's node actions", () => {
  it("creates a database and its user over the database client's stdin, the password an escaped SQL literal", async () => {
    const password = `db p@ss/w#rd 'sq' "dq" %41 $HOME \\ \\' ,;:=`;
    const work = {
      kind: 'database' as const,
      node: 'ctl-0',
      service: 'glance',
      name: 'glance',
      user: 'glance',
      passwordSecret: 'glance_db_password',
      hash: 'h',
    };
    const targetDeploy: DeployPlan = {
      cloud: 'lab',
      steps: [{ step: 3, title: 't', nodes: [], runOnce: [work] }],
      unsupported: [],
    };
    const calls: { argv: readonly string[]; stdin?: string }[] = [];
    const access: NodeAccess = {
      ...recordingNode('ctl-0').access,
      exec: async (command: RemoteCommand, o?: { stdin?: string | Buffer }) => {
        const argv = typeof command === 'string' ? [command] : command;
        calls.push({ argv, ...(o?.stdin !== undefined ? { stdin: String(o.stdin) } : {}) });
        return { code: argv[0] === 'cat' ? 1 : 0, stdout: '', stderr: '' };
      },
    };
    const ctx = contextOver(
      { 'ctl-0': access },
      { targetDeploy, secret: (n) => (n === 'glance_db_password' ? new Secret(password) : undefined) },
    );
    const action = { kind: 'run-once', node: 'ctl-0', service: 'glance', work: 'database', name: 'glance' } as const;
    await runOnce(action, ctx, scope);
    const client = calls.find((c) => c.argv.slice(0, 3).join(' ') === 'docker exec -i')!;
    expect(client.argv).not.toContain(password); // never in an argv
    const literals = [...client.stdin!.matchAll(/IDENTIFIED BY ('(?:[^'\\]|\\.|'')*');/g)].map((m) => m[1]!);
    expect(literals).toHaveLength(2);
    for (const lit of literals) expect(mariadbStringLiteral(lit)).toBe(password);
  });

  it("reads current sessions per backend/server from HAProxy's show stat", () => {
    const csv = '# pxname,svname,qcur,qmax,scur,smax\nglance_api,FRONTEND,,,3,5\nglance_api,ctl-0,0,0,2,4\n';
    expect(sessionsOf(csv)).toEqual(
      new Map([
        ['glance_api/FRONTEND', 3],
        ['glance_api/ctl-0', 2],
      ]),
    );
  });

  it("reads each server's check status from HAProxy's show stat (column 18)", () => {
    const row = (px: string, sv: string, status: string) =>
      [px, sv, ...Array.from({ length: 15 }, () => '0'), status, '1'].join(',');
    const csv = ['# pxname,svname,...', row('nova_api', 'ctl-0', 'UP'), row('nova_api', 'ctl-1', 'DOWN 1/2')].join(
      '\n',
    );
    expect(serverStatusOf(csv)).toEqual(
      new Map([
        ['nova_api/ctl-0', 'UP'],
        ['nova_api/ctl-1', 'DOWN 1/2'],
      ]),
    );
  });

  it('drains a node on every HAProxy node, waits for its sessions, and says when a backend is missing', async () => {
    let sessions = 2;
    const lb = (name: string) =>
      recordingNode(name, {
        socket: (line) =>
          line === 'show stat'
            ? `# pxname,svname,qcur,qmax,scur\nglance_api,ctl-1,0,0,${name === 'ctl-0' ? sessions-- : 0}\n`
            : name === 'ctl-1'
              ? 'No such backend.\n'
              : '\n',
      });
    const n0 = lb('ctl-0');
    const n1 = lb('ctl-1');
    const ctx = contextOver(
      { 'ctl-0': n0.access, 'ctl-1': n1.access },
      { currentDeploy: deployPlanOf(['ctl-0', 'ctl-1'].map((n) => work(n, LB.service, 'haproxy', 'h'))) },
    );
    const detail = await drain({ kind: 'drain', node: 'ctl-1', frontends: ['glance_api'] }, ctx, scope);
    expect(n0.log[0]).toContain('set server glance_api/ctl-1 state drain');
    expect(n0.log[0]).toContain(`socat stdio unix-connect:"$0" ${LB.adminSocket}`);
    expect(n0.log.filter((l) => l.includes('show stat')).length).toBe(3); // 2, 1, then 0 sessions
    expect(detail).toContain('drained on 2 load balancer node(s)');
    expect(detail).toContain('ctl-1: No such backend.');
  });

  it('stops and removes containers, and is done when they are already gone', async () => {
    const n = recordingNode('ctl-0', { containers: new Set(['keystone']) });
    const ctx = contextOver({ 'ctl-0': n.access });
    const a = { kind: 'stop', service: 'keystone', node: 'ctl-0', containers: ['keystone', 'keystone_ssh'] } as const;
    expect(await stop(a, ctx, scope)).toBe('1 stopped and removed, 1 already gone');
    expect(n.log).toEqual(['stop keystone', 'remove keystone']);
    expect(await stop(a, ctx, scope)).toBe('0 stopped and removed, 2 already gone');
  });

  it('empties the volumes a distribution change resets once the containers are gone, and says which failed', async () => {
    const n = recordingNode('ctl-0', { containers: new Set(['rabbitmq']) });
    const ctx = contextOver({ 'ctl-0': n.access });
    const a = {
      kind: 'stop',
      service: 'rabbitmq',
      node: 'ctl-0',
      containers: ['rabbitmq'],
      resetVolumes: ['rabbitmq_data'],
    } as const;
    expect(await stop(a, ctx, scope)).toBe('1 stopped and removed, 0 already gone; volume(s) rabbitmq_data emptied');
    expect(n.log).toEqual(['stop rabbitmq', 'remove rabbitmq', 'volume rm rabbitmq_data']);
    const busy = recordingNode('ctl-1', { volumeBusy: 'rabbitmq_data' });
    await expect(stop({ ...a, node: 'ctl-1' }, contextOver({ 'ctl-1': busy.access }), scope)).rejects.toMatchObject({
      code: 'E_VOLUME_RESET',
      message: expect.stringContaining('ctl-1: cannot empty volume rabbitmq_data of rabbitmq: volume is in use'),
    });
  });

  it('backs up through the client config on the node, atomically, and never puts a password in argv', async () => {
    const n = recordingNode('ctl-0');
    const backups = new Map<string, string>();
    const ctx = contextOver(
      { 'ctl-0': n.access },
      { run: 'r1', backups, now: () => Date.UTC(2026, 10, 22, 21, 30, 0), secret: () => new Secret('hunter2') },
    );
    const where = await backup({ kind: 'backup', service: 'glance', node: 'ctl-0', databases: ['glance'] }, ctx, scope);
    expect(where).toBe('ctl-0:/var/lib/stackctl/backups/r1/glance-20261122T213000Z.sql.gz');
    expect(backups.get('glance')).toBe(where);
    const cmd = n.log[0]!;
    expect(cmd).toContain('mariadb-dump --defaults-extra-file=/etc/mysql/mariadb.conf.d/stackctl/client.cnf');
    expect(cmd).toContain('--single-transaction --databases glance');
    expect(cmd).toContain('mv "$out.tmp" "$out"');
    expect(cmd).not.toContain('hunter2');
    expect(cmd).not.toMatch(/--password|-p\S/);
  });

  it('fails a backup whose dump failed, saying nothing was migrated', async () => {
    const n = recordingNode('ctl-0', { exec: () => ({ code: 2, stdout: '', stderr: 'Access denied' }) });
    const err = await backup(
      { kind: 'backup', service: 'glance', node: 'ctl-0', databases: ['glance'] },
      contextOver({ 'ctl-0': n.access }),
      scope,
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StackctlError);
    expect((err as StackctlError).code).toBe('E_BACKUP_FAILED');
    expect((err as StackctlError).hint).toContain('Nothing of glance was migrated');
  });

  it("saves a service's declared backups in its running containers, each file named with its size", async () => {
    const sizes: Record<string, string> = { ovn_nb_db: '20480\n', ovn_sb_db: '7311\n' };
    const n = recordingNode('ctl-0', {
      exec: (argv) => ({ code: 0, stdout: sizes[argv[6]!] ?? '', stderr: '' }),
    });
    const backups = new Map<string, string>();
    const ctx = contextOver(
      { 'ctl-0': n.access },
      { run: 'r1', backups, now: () => Date.UTC(2026, 10, 26, 13, 0, 0), secret: () => new Secret('hunter2') },
    );
    const commands = catalog.services.get('ovn-central')!.upgrade.backup!;
    const detail = await backup(
      { kind: 'backup', service: 'ovn-central', node: 'ctl-0', databases: [], commands },
      ctx,
      scope,
    );
    expect(detail).toBe(
      'ctl-0:/var/lib/stackctl/backups/r1/ovn-central-20261126T130000Z-ovnnb_db.db (20480 bytes), ' +
        'ctl-0:/var/lib/stackctl/backups/r1/ovn-central-20261126T130000Z-ovnsb_db.db (7311 bytes)',
    );
    expect(backups.get('ovn-central')).toBe(detail);
    // One exec per file: the command's stdout into a temporary file, refused when empty, then renamed.
    expect(n.log).toHaveLength(2);
    expect(n.log[0]).toContain(
      'sh /var/lib/stackctl/backups/r1 /var/lib/stackctl/backups/r1/ovn-central-20261126T130000Z-ovnnb_db.db ' +
        'ovn_nb_db ovsdb-client --timeout=120 --no-leader-only backup unix:/run/ovn/ovnnb_db.sock OVN_Northbound',
    );
    expect(n.log[0]).toContain('docker exec "$@" > "$out.tmp"');
    expect(n.log[0]).toContain('mv "$out.tmp" "$out"');
    expect(n.log[1]).toContain(
      'ovn_sb_db ovsdb-client --timeout=120 --no-leader-only backup unix:/run/ovn/ovnsb_db.sock',
    );
    expect(n.log.join('\n')).not.toMatch(/mariadb|gzip|hunter2/);
  });

  it('fails a declared backup that exits non-zero or reports no size, naming what was saved before it', async () => {
    const commands = catalog.services.get('ovn-central')!.upgrade.backup!;
    const a = { kind: 'backup' as const, service: 'ovn-central', node: 'ctl-0', databases: [], commands };
    const failing = recordingNode('ctl-0', {
      exec: (argv) =>
        argv[6] === 'ovn_sb_db'
          ? { code: 1, stdout: '', stderr: 'ovsdb-client: failed to connect to "unix:/run/ovn/ovnsb_db.sock"' }
          : { code: 0, stdout: '512\n', stderr: '' },
    });
    const err = await backup(a, contextOver({ 'ctl-0': failing.access }, { run: 'r1' }), scope).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({
      code: 'E_BACKUP_FAILED',
      message: expect.stringContaining('ctl-0: backup ovnsb_db.db of ovn-central'),
    });
    expect((err as StackctlError).message).toContain('failed to connect');
    expect((err as StackctlError).hint).toMatch(
      /Nothing of ovn-central was moved \(saved so far: ctl-0:\S+ovnnb_db\.db \(512 bytes\)\)/,
    );
    const silent = recordingNode('ctl-0', { exec: () => ({ code: 0, stdout: '', stderr: '' }) });
    await expect(backup(a, contextOver({ 'ctl-0': silent.access }), scope)).rejects.toMatchObject({
      code: 'E_BACKUP_FAILED',
      message: expect.stringContaining('no size reported'),
    });
  });

  it('runs a migration in a one-off container of the target image, removed afterwards', async () => {
    const n = recordingNode('ctl-0');
    const w = {
      ...work('ctl-0', 'keystone', 'keystone', 'r/keystone:zed-1'),
      definition: { name: 'keystone', image: 'keystone', volumes: [], healthcheck: { test: ['true'] } },
      inputs: { image: 'r/keystone:zed-1', options: '', configs: {} },
    } as unknown as Parameters<UpgradeContext['oneOff']>[1];
    const oneOff = oneOffRunner({ cloud: 'lab', connect: () => n.access, now: () => 0, sleep: async () => undefined });
    const r = await oneOff('ctl-0', w, 'r/keystone:zed-2', ['keystone-manage', 'db_sync'], {
      name: 'keystone-offline',
    });
    expect(r.code).toBe(0);
    // a target image not on the node yet (prechecks run before the pull phase) is pulled first
    expect(n.log.indexOf('pull r/keystone:zed-2')).toBeGreaterThan(-1);
    expect(n.log.indexOf('pull r/keystone:zed-2')).toBeLessThan(
      n.log.indexOf('create stackctl-upgrade-keystone-offline r/keystone:zed-2 keystone-manage db_sync restart=no'),
    );
    expect(n.log).toContain(
      'create stackctl-upgrade-keystone-offline r/keystone:zed-2 keystone-manage db_sync restart=no',
    );
    expect(n.log[n.log.length - 1]).toBe('remove stackctl-upgrade-keystone-offline');
  });

  it('finds the migration this run started before a kill: waits for it running, takes it finished well, else runs it afresh', async () => {
    const w = {
      ...work('ctl-0', 'keystone', 'keystone', 'r/keystone:zed-1'),
      definition: { name: 'keystone', image: 'keystone', volumes: [], healthcheck: { test: ['true'] } },
      inputs: { image: 'r/keystone:zed-1', options: '', configs: {} },
    } as unknown as Parameters<UpgradeContext['oneOff']>[1];
    const name = 'stackctl-upgrade-keystone-offline';
    const argv = ['keystone-manage', 'db_sync'];
    // the label a run puts on it: found on a first run, read back here
    const first = recordingNode('ctl-0');
    const labels: Record<string, string> = {};
    const recording = {
      ...first.access,
      docker: {
        ...first.access.docker,
        createContainer: async (spec: { name: string; labels?: Record<string, string> }) => {
          Object.assign(labels, spec.labels);
          return first.access.docker.createContainer(spec as never);
        },
      },
    } as NodeAccess;
    const deps = { cloud: 'lab', now: () => 0, sleep: async () => undefined };
    await oneOffRunner({ ...deps, connect: () => recording })('ctl-0', w, 'r/keystone:zed-2', argv, {
      name: 'keystone-offline',
    });
    expect(Object.keys(labels)).toContain('org.stackctl.one-off');

    const deps2 = { ...deps, run: 'r1' };
    const rerun = (n: ReturnType<typeof recordingNode>, image = 'r/keystone:zed-2') =>
      oneOffRunner({ ...deps2, connect: () => n.access })('ctl-0', w, image, argv, { name: 'keystone-offline' });
    // the labels this run (r1) puts on it
    const mine = recordingNode('ctl-0');
    const ours: Record<string, string> = {};
    await oneOffRunner({
      ...deps2,
      connect: () =>
        ({
          ...mine.access,
          docker: {
            ...mine.access.docker,
            createContainer: async (spec: { labels?: Record<string, string> }) => {
              Object.assign(ours, spec.labels);
              return mine.access.docker.createContainer(spec as never);
            },
          },
        }) as NodeAccess,
    })('ctl-0', w, 'r/keystone:zed-2', argv, { name: 'keystone-offline' });
    expect(ours['org.stackctl.one-off']).not.toBe(labels['org.stackctl.one-off']); // the run is part of it

    // still running: waited for, not started again
    const running = recordingNode('ctl-0', { leftover: { name, labels: ours, polls: 3 } });
    expect(await rerun(running)).toMatchObject({ code: 0, adopted: 'running' });
    expect(running.log.filter((l) => l.startsWith('create') || l.startsWith('start'))).toEqual([]);
    expect(running.log.at(-1)).toBe(`remove ${name}`);

    // ended well after the kill: done, not run again
    const finished = recordingNode('ctl-0', { leftover: { name, labels: ours, polls: 0 } });
    expect(await rerun(finished)).toMatchObject({ code: 0, adopted: 'finished' });
    expect(finished.log.filter((l) => l.startsWith('create') || l.startsWith('start'))).toEqual([]);

    // failed, never started, another run's, another target's: removed and run afresh
    for (const leftover of [
      { name, labels: ours, polls: 0, exitCode: 1 },
      { name, labels: ours, polls: 0, status: 'created' },
      { name, labels, polls: 1 },
    ]) {
      const n = recordingNode('ctl-0', { leftover });
      const r = await rerun(n);
      expect(r.adopted, JSON.stringify(leftover)).toBeUndefined();
      expect(n.log[0]).toBe(`remove ${name}`);
      expect(n.log).toContain(`create ${name} r/keystone:zed-2 keystone-manage db_sync restart=no`);
    }
    const other = recordingNode('ctl-0', { leftover: { name, labels: ours, polls: 1 } });
    expect((await rerun(other, 'r/keystone:zed-3')).adopted).toBeUndefined();
    expect(other.log).toContain(`create ${name} r/keystone:zed-3 keystone-manage db_sync restart=no`);
  });

  it('fails a migration that exits non-zero with its log, the state of the service and the backup', async () => {
    const n = recordingNode('ctl-0');
    const w = work('ctl-0', 'keystone', 'keystone', 'r/keystone:zed-2');
    const ctx = contextOver(
      { 'ctl-0': n.access },
      {
        targetWork: () => w,
        currentWork: () => work('ctl-0', 'keystone', 'keystone', 'r/keystone:zed-1'),
        targetDeploy: deployPlanOf([w]),
        oneOff: async () => ({ code: 1, log: 'ERROR: table locked' }),
        backups: new Map([['keystone', 'ctl-0:/var/lib/stackctl/backups/r1/keystone.sql.gz']]),
      },
    );
    const err = (await migrate(
      {
        kind: 'migrate',
        stage: 'offline',
        service: 'keystone',
        node: 'ctl-0',
        container: 'keystone',
        image: 'r/keystone:zed-2',
        command: ['keystone-manage', 'db_sync'],
      },
      ctx,
      scope,
    ).catch((e: unknown) => e)) as StackctlError;
    expect(err.code).toBe('E_MIGRATION_FAILED');
    expect(err.message).toContain('offline migration of keystone (keystone-manage db_sync) exited with 1');
    // stopped for the window: which release's image it ran, and the target's
    expect(err.message).toContain('ctl-0/keystone absent (current release r/keystone:zed-1, target r/keystone:zed-2)');
    expect(err.hint).toContain('ctl-0:/var/lib/stackctl/backups/r1/keystone.sql.gz');
    expect(err.details['log']).toBe('ERROR: table locked');
  });

  it('converges a node for the named services only: their differing configs, then the container its hash says', async () => {
    const keystone: ContainerWork = {
      ...work('ctl-0', 'keystone', 'keystone', 'r/keystone:zed-2'),
      hash: 'new',
      inputs: { image: 'r/keystone:zed-2', options: 'o', configs: {} },
      definition: { name: 'keystone', image: 'keystone' },
    } as unknown as ContainerWork;
    const glance = work('ctl-0', 'glance', 'glance_api', 'r/glance_api:zed-2');
    const base = deployPlanOf([keystone, glance]);
    const step = base.steps[0]!;
    const target: DeployPlan = {
      ...base,
      steps: [
        {
          ...step,
          nodes: step.nodes.map((nw) => ({
            ...nw,
            configs: [
              {
                node: 'ctl-0',
                service: 'keystone',
                dest: '/etc/stackctl/keystone/a.conf',
                mode: '0640',
                sha256: 'a'.repeat(64),
              },
              {
                node: 'ctl-0',
                service: 'keystone',
                dest: '/etc/stackctl/keystone/b.conf',
                mode: '0600',
                sha256: 'b'.repeat(64),
              },
              {
                node: 'ctl-0',
                service: 'glance',
                dest: '/etc/stackctl/glance/g.conf',
                mode: '0640',
                sha256: 'c'.repeat(64),
              },
            ],
          })),
        },
      ],
    };
    const uploads: string[] = [];
    const n = recordingNode('ctl-0', {
      containers: new Set(['keystone']),
      // a.conf is in place, b.conf differs; the glance file is never asked for
      exec: (argv) =>
        argv[0] === 'sha256sum'
          ? {
              code: 1,
              stdout: `${'a'.repeat(64)}  /etc/stackctl/keystone/a.conf\n${'0'.repeat(64)}  /etc/stackctl/keystone/b.conf\n`,
              stderr: '',
            }
          : { code: 0, stdout: '', stderr: '' },
    });
    const access: NodeAccess = {
      ...n.access,
      files: { upload: async (_s, dest, o) => (uploads.push(`${dest} ${o?.mode?.toString(8)}`), 1) },
      docker: {
        ...n.access.docker,
        // the running keystone carries another hash: it is recreated
        inspectContainer: async (name: string) => {
          const info = await n.access.docker.inspectContainer(name);
          const started = n.log.includes('start keystone');
          return (
            info && {
              ...info,
              labels: { [LABEL.hash]: started ? 'new' : 'old' },
              state: { ...info.state, status: 'running', running: true },
            }
          );
        },
      },
    } as NodeAccess;
    const ctx = contextOver(
      { 'ctl-0': access },
      {
        targetDeploy: target,
        targetRendered: new Map([['ctl-0', new Map([['/etc/stackctl/keystone/b.conf', 'b']])]]),
        targetWork: (node, c) => (node === 'ctl-0' && c === 'keystone' ? keystone : undefined),
      },
    );
    const containers = [{ name: 'keystone', service: 'keystone', image: 'r/keystone:zed-2', hash: 'new' }];
    const detail = await ensure(
      { kind: 'ensure', node: 'ctl-0', services: ['keystone'], containers, frontendGate: false },
      ctx,
      scope,
    );
    expect(detail).toBe('2 change(s)');
    expect(uploads).toEqual(['/etc/stackctl/keystone/b.conf 600']);
    expect(n.log.filter((l) => !l.startsWith('exec'))).toEqual([
      'pull r/keystone:zed-2',
      'stop keystone',
      'remove keystone',
      'create keystone r/keystone:zed-2 undefined restart=unless-stopped',
      'start keystone',
    ]);
    // a container the target plan does not hold (or holds with another hash) is a bug, refused before anything
    await expect(
      ensure(
        {
          kind: 'ensure',
          node: 'ctl-0',
          services: ['keystone'],
          containers: [{ ...containers[0]!, hash: 'other' }],
          frontendGate: false,
        },
        ctx,
        scope,
      ),
    ).rejects.toMatchObject({ code: 'E_TARGET_MISSING' });
  });

  it('holds an unchanged container a killed run started to its health gate, and passes a healthy one at once', async () => {
    const memcached: ContainerWork = {
      ...work('ctl-0', 'memcached', 'memcached', 'r/memcached:zed-1'),
      hash: 'same',
      definition: { name: 'memcached', image: 'memcached', healthcheck: { test: ['check'] } },
    } as unknown as ContainerWork;
    const target = deployPlanOf([memcached]);
    /**
     * ensure() on a node whose memcached runs the target hash with Docker's health `health`, its
     * check command failing `failures` times before it passes.
     */
    const converge = async (health: string, failures: number) => {
      const n = recordingNode('ctl-0', { containers: new Set(['memcached']) });
      let checks = 0;
      const access = {
        ...n.access,
        docker: {
          ...n.access.docker,
          inspectContainer: async (name: string) => {
            const info = await n.access.docker.inspectContainer(name);
            const state = { ...info!.state, status: 'running', running: true, health };
            return info && { ...info, labels: { [LABEL.hash]: 'same' }, state };
          },
          exec: async (_name: string, argv: readonly string[]) => {
            if (argv[0] === 'check') checks++;
            return { code: checks > failures ? 0 : 1, stdout: '', stderr: '' };
          },
        },
      } as NodeAccess;
      const ctx = contextOver(
        { 'ctl-0': access },
        {
          targetDeploy: target,
          targetWork: (node, c) => (node === 'ctl-0' && c === 'memcached' ? memcached : undefined),
        },
      );
      const detail = await ensure(
        {
          kind: 'ensure',
          node: 'ctl-0',
          services: ['memcached'],
          containers: [{ name: 'memcached', service: 'memcached', image: 'r/memcached:zed-1', hash: 'same' }],
          frontendGate: false,
        },
        ctx,
        scope,
      );
      return { detail, checks, touched: n.log.filter((l) => /^(create|start|stop|remove|pull) /.test(l)) };
    };
    // started, not yet healthy (the run that started it was killed): checked until it passes, nothing redone
    expect(await converge('starting', 2)).toEqual({ detail: 'unchanged', checks: 3, touched: [] });
    // healthy: not checked again
    expect(await converge('healthy', 2)).toEqual({ detail: 'unchanged', checks: 0, touched: [] });
  });

  it('a running container that re-reads an uploaded file is waited for until its check says it serves it, never recreated; one that does not fails with its log', async () => {
    const CFG = '/etc/stackctl/haproxy/haproxy.cfg';
    const haproxy: ContainerWork = {
      ...work('ctl-0', 'haproxy', 'haproxy', 'r/haproxy:zed-1'),
      hash: 'same',
      inputs: { image: 'r/haproxy:zed-1', options: 'o', configs: {} },
      reloads: { [CFG]: 'a'.repeat(64) },
      definition: { name: 'haproxy', image: 'haproxy', healthcheck: { test: ['check'] } },
    } as unknown as ContainerWork;
    const base = deployPlanOf([haproxy]);
    const target: DeployPlan = {
      ...base,
      steps: base.steps.map((st) => ({
        ...st,
        nodes: st.nodes.map((nw) => ({
          ...nw,
          configs: [{ node: 'ctl-0', service: 'haproxy', dest: CFG, mode: '0640', sha256: 'a'.repeat(64) }],
        })),
      })),
    };
    /** ensure() after a change of haproxy.cfg, the container's check failing `failures` times first. */
    const converge = async (failures: number) => {
      const n = recordingNode('ctl-0', {
        containers: new Set(['haproxy']),
        exec: (argv) =>
          argv[0] === 'sha256sum'
            ? { code: 0, stdout: `${'0'.repeat(64)}  ${CFG}\n`, stderr: '' }
            : { code: 0, stdout: '', stderr: '' },
      });
      let checks = 0;
      const uploads: string[] = [];
      const access = {
        ...n.access,
        files: { upload: async (_s: unknown, dest: string) => (uploads.push(dest), 1) },
        docker: {
          ...n.access.docker,
          inspectContainer: async (name: string) => {
            const info = await n.access.docker.inspectContainer(name);
            const state = { ...info!.state, status: 'running', running: true, health: 'healthy' };
            return info && { ...info, labels: { [LABEL.hash]: 'same' }, state };
          },
          exec: async (_name: string, argv: readonly string[]) => {
            if (argv[0] === 'check') checks++;
            return { code: checks > failures ? 0 : 1, stdout: '', stderr: '' };
          },
        },
      } as unknown as NodeAccess;
      const ctx = contextOver(
        { 'ctl-0': access },
        {
          targetDeploy: target,
          targetRendered: new Map([['ctl-0', new Map([[CFG, 'global\n']])]]),
          targetWork: (node, c) => (node === 'ctl-0' && c === 'haproxy' ? haproxy : undefined),
        },
      );
      const changes: string[] = [];
      const run = {
        ...scope,
        change: (c: { name: string; action: string; detail?: string }) =>
          void changes.push(`${c.name} ${c.action} ${c.detail ?? ''}`),
      };
      const outcome = await ensure(
        { kind: 'ensure', node: 'ctl-0', services: ['haproxy'], containers: [], frontendGate: false },
        ctx,
        run as typeof scope,
      ).then(
        (detail) => ({ detail }),
        (err: { code?: string; cause?: { code?: string; message?: string }; log?: string }) => ({
          code: err.cause?.code ?? err.code,
          message: err.cause?.message,
        }),
      );
      return {
        outcome,
        checks,
        uploads,
        changes,
        touched: n.log.filter((l) => /^(create|start|stop|remove|pull) /.test(l)),
      };
    };
    const reloaded = await converge(3);
    expect(reloaded).toMatchObject({ outcome: { detail: '1 change(s)' }, checks: 4, uploads: [CFG], touched: [] });
    expect(reloaded.changes).toContain(`haproxy reloaded ${CFG}`);
    const refused = await converge(Infinity);
    expect(refused.touched).toEqual([]);
    expect(refused.outcome).toMatchObject({
      code: 'E_RELOAD_TIMEOUT',
      message: expect.stringMatching(
        /^ctl-0: container haproxy \(haproxy\) does not serve the new \/etc\/stackctl\/haproxy\/haproxy.cfg within 60 s \(its health check exits 1\)$/,
      ),
    });
  });

  it('waits for a run-once task a killed run left running, instead of removing it and starting another', async () => {
    const container = {
      ...work('ctl-0', 'keystone', 'keystone', 'r/keystone:zed-1'),
      definition: { name: 'keystone', image: 'keystone' },
      inputs: { image: 'r/keystone:zed-1', options: '', configs: {} },
    } as unknown as ContainerWork;
    const task = {
      kind: 'task' as const,
      node: 'ctl-0',
      service: 'keystone',
      name: 'db-sync',
      container,
      command: ['keystone-manage', 'db_sync'],
      hash: 'task-hash',
    };
    const target: DeployPlan = {
      cloud: 'lab',
      steps: [{ step: 3, title: 't', nodes: [], runOnce: [task] }],
      unsupported: [],
    };
    const name = 'stackctl-keystone-db-sync';
    const action = { kind: 'run-once', node: 'ctl-0', service: 'keystone', work: 'task', name: 'db-sync' } as const;
    // this very task (its hash), still running: waited for
    const left = recordingNode('ctl-0', {
      leftover: { name, labels: { [LABEL.hash]: 'task-hash' }, polls: 3 },
      exec: (argv) => ({ code: argv[0] === 'cat' ? 1 : 0, stdout: '', stderr: '' }),
    });
    const detail = await migrateFree(left.access, target, action);
    expect(detail).toMatch(/started before a kill: waited for/);
    expect(left.log.filter((l) => l.startsWith('create') || l.startsWith('start'))).toEqual([]);
    expect(left.log.some((l) => l.includes('/var/lib/stackctl/done/keystone.task.db-sync'))).toBe(true);
    // another task's leftover (another hash): removed, and the task runs afresh
    const other = recordingNode('ctl-0', {
      leftover: { name, labels: { [LABEL.hash]: 'older' }, polls: 1 },
      exec: (argv) => ({ code: argv[0] === 'cat' ? 1 : 0, stdout: '', stderr: '' }),
    });
    await migrateFree(other.access, target, action);
    expect(other.log.filter((l) => !l.startsWith('exec'))[0]).toBe(`remove ${name}`);
    expect(other.log).toContain(`create ${name} r/keystone:zed-1 keystone-manage db_sync restart=no`);

    async function migrateFree(access: NodeAccess, targetDeploy: DeployPlan, a: typeof action): Promise<string> {
      return runOnce(a, contextOver({ 'ctl-0': access }, { targetDeploy }), scope);
    }
  });
});

describe("a declared backup's node-side script, run by sh", () => {
  // The node's `docker exec CONTAINER CMD...` stands in as a script that runs CMD here: what is under
  // test is the script's own handling of the output (folder, temporary file, size, refusal, exit).
  const roots: string[] = [];
  afterAll(() => roots.forEach((d) => rmSync(d, { recursive: true, force: true })));
  function runScript(command: readonly string[]) {
    const root = tempDir('stackctl-backup-script-');
    roots.push(root);
    const bin = join(root, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'docker'), '#!/bin/sh\n[ "$1" = exec ] || exit 99\nshift 2\nexec "$@"\n');
    chmodSync(join(bin, 'docker'), 0o755);
    const dir = join(root, 'backups', 'r1');
    const out = join(dir, 'ovn-central-20261126T130000Z-ovnnb_db.db');
    const r = spawnSync('sh', ['-c', COMMAND_BACKUP_SCRIPT, 'sh', dir, out, 'ovn_nb_db', ...command], {
      encoding: 'utf8',
      env: { PATH: `${bin}:${process.env.PATH ?? ''}` },
    });
    return { ...r, dir, out };
  }

  it('writes the standard output to a root-only file and prints its size', () => {
    const r = runScript(['printf', '%s', '{"name":"OVN_Northbound"}\nrecord 1\n']);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(String('{"name":"OVN_Northbound"}\nrecord 1\n'.length));
    expect(readFileSync(r.out, 'utf8')).toBe('{"name":"OVN_Northbound"}\nrecord 1\n');
    expect(statSync(r.dir).mode & 0o777).toBe(0o700);
    expect(statSync(r.out).mode & 0o777).toBe(0o600);
    expect(readdirSync(r.dir)).toEqual(['ovn-central-20261126T130000Z-ovnnb_db.db']);
  });

  it('refuses an empty output and passes on a failed exit, leaving no file behind', () => {
    const empty = runScript(['true']);
    expect(empty.status).toBe(3);
    expect(empty.stderr).toContain('the command wrote nothing');
    expect(readdirSync(empty.dir)).toEqual([]);
    const failed = runScript(['sh', '-c', 'echo partial; echo "cannot connect" >&2; exit 4']);
    expect(failed.status).toBe(4);
    expect(failed.stderr).toContain('cannot connect');
    expect(existsSync(failed.out) || existsSync(`${failed.out}.tmp`)).toBe(false);
  });
});
