/** A planned container against Docker's inspect result: state, health, image tag and config hash. */
import { describe, expect, it } from 'vitest';
import { LABEL } from '../../src/orchestrator/state.js';
import { checkNow, configDrift, containerFindings, containerStatus, tagOf } from '../../src/status/containers.js';
import { deployed, labPlan, workOn } from './fixture.js';

const { deployPlan } = labPlan(['memcached', 'mariadb']);
const memcached = workOn(deployPlan, 'ctl-0').find((w) => w.name === 'memcached')!;
const cloud = deployPlan.cloud;

describe('containerStatus', () => {
  it.each([
    ['192.168.24.1:5000/stackctl/memcached:zed-1', 'zed-1'],
    ['localhost:5000/memcached', 'latest'],
    ['memcached:1.6', '1.6'],
    ['reg/x@sha256:abc', 'sha256:abc'],
    [`192.168.24.1:5000/stackctl/memcached:zed-1@sha256:${'a'.repeat(64)}`, 'zed-1@sha256:aaaaaaaaaaaa'],
  ])('tag of %s is %s', (ref, tag) => expect(tagOf(ref)).toBe(tag));

  describe('a pinned image', () => {
    const PIN = `sha256:${'a'.repeat(64)}`;
    const pinned = workOn(labPlan(['memcached'], PIN).deployPlan, 'ctl-0').find((w) => w.name === 'memcached')!;
    const repo = '192.168.24.1:5000/stackctl/memcached';

    it("runs by digest, and what runs is compared with the pin through the image's RepoDigests", () => {
      expect(pinned.image).toBe(`${repo}:zed-1@${PIN}`);
      const s = containerStatus(pinned, deployed(cloud, pinned), [`${repo}@${PIN}`]);
      expect(s.image).toEqual({
        running: pinned.image,
        runningTag: 'zed-1@sha256:aaaaaaaaaaaa',
        wanted: pinned.image,
        wantedTag: 'zed-1@sha256:aaaaaaaaaaaa',
        matches: true,
        digest: { pinned: PIN, running: [PIN], matches: true },
      });
      expect(containerFindings('ctl-0', s)).toEqual([]);
    });

    it('an image under the pinned reference whose registry digest is another one: drift', () => {
      const other = `sha256:${'b'.repeat(64)}`;
      const s = containerStatus(pinned, deployed(cloud, pinned), [`${repo}@${other}`]);
      expect(s.image.digest).toEqual({ pinned: PIN, running: [other], matches: false });
      expect(containerFindings('ctl-0', s)).toEqual([
        {
          severity: 'drift',
          node: 'ctl-0',
          subject: 'memcached',
          message: 'runs an image with sha256:bbbbbbbbbbbb, not the pinned sha256:aaaaaaaaaaaa',
        },
      ]);
    });

    it('a container still running the tag: drift, and a deploy would recreate it for its image', () => {
      const s = containerStatus(pinned, { ...deployed(cloud, memcached) });
      expect(s.image.matches).toBe(false);
      expect(s.config).toEqual({ state: 'outdated', changed: ['image'] });
      expect(containerFindings('ctl-0', s).map((f) => f.message)).toEqual([
        `runs ${memcached.image}, the plan wants ${pinned.image}`,
        'a deploy would recreate it (image)',
      ]);
    });
  });

  it('a container deployed as planned: running, healthy, the planned tag, up to date, no finding', () => {
    const s = containerStatus(memcached, deployed(cloud, memcached));
    expect(s).toEqual({
      name: 'memcached',
      service: 'memcached',
      state: 'running',
      health: 'healthy',
      image: {
        running: memcached.image,
        runningTag: 'zed-1',
        wanted: memcached.image,
        wantedTag: 'zed-1',
        matches: true,
      },
      config: { state: 'current', changed: [] },
    });
    expect(containerFindings('ctl-0', s)).toEqual([]);
  });

  it.each([
    {
      scenario: 'stopped',
      info: () => deployed(cloud, memcached, { status: 'exited', running: false, exitCode: 137 }),
      state: 'exited',
      health: 'none',
      findings: [['unhealthy', 'exited (exit code 137)']],
    },
    {
      scenario: 'running but unhealthy',
      info: () => deployed(cloud, memcached, { health: 'unhealthy' }),
      state: 'running',
      health: 'unhealthy',
      findings: [['unhealthy', 'running but unhealthy']],
    },
    {
      scenario: 'still starting',
      info: () => deployed(cloud, memcached, { health: 'starting' }),
      state: 'running',
      health: 'starting',
      findings: [['unhealthy', 'running but starting']],
    },
    {
      scenario: 'missing',
      info: () => undefined,
      state: 'missing',
      health: 'none',
      findings: [['unhealthy', 'missing (a deploy would create it)']],
    },
  ])('$scenario', ({ info, state, health, findings }) => {
    const s = containerStatus(memcached, info());
    expect([s.state, s.health]).toEqual([state, health]);
    expect(containerFindings('ctl-0', s).map((f) => [f.severity, f.message])).toEqual(findings);
  });

  it('names the restarts Docker made by its restart policy (a crash), with the last start; not a finding', () => {
    const crashed = { ...deployed(cloud, memcached), restartCount: 3 };
    const s = containerStatus(memcached, crashed);
    expect(s.restarts).toEqual({ count: 3, lastStart: crashed.state.startedAt });
    expect(containerFindings('ctl-0', s)).toEqual([]);
    expect(containerStatus(memcached, deployed(cloud, memcached)).restarts).toBeUndefined();
  });

  describe("Docker's health still starting: status runs the healthcheck itself, as the deploy's gate does", () => {
    /** A node whose exec answers with `code` (undefined: the call fails, as past its deadline). */
    const access = (code: number | undefined, calls: unknown[][] = []) => ({
      docker: {
        exec: (name: string, cmd: readonly string[], o: { timeoutMs: number }) => {
          calls.push([name, cmd, o.timeoutMs]);
          return code === undefined
            ? Promise.reject(new Error('timed out'))
            : Promise.resolve({ code, stdout: '', stderr: '' });
        },
      },
    });

    it("runs the container's own test with its timeout; a pass makes it healthy, with no finding", async () => {
      const calls: unknown[][] = [];
      const info = deployed(cloud, memcached, { health: 'starting' });
      const now = await checkNow(access(0, calls), memcached, info);
      expect(calls).toEqual([
        [
          'memcached',
          memcached.definition.healthcheck!.test,
          (memcached.definition.healthcheck!.timeout_s ?? 5) * 1000,
        ],
      ]);
      const s = containerStatus(memcached, info, undefined, now);
      expect([s.health, s.checkedNow]).toEqual(['healthy', { passed: true, exitCode: 0 }]);
      expect(containerFindings('ctl-0', s)).toEqual([]);
    });

    it('a failing or unfinished check leaves it starting, and the finding says what the check did', async () => {
      const info = deployed(cloud, memcached, { health: 'starting' });
      for (const [code, message] of [
        [1, 'running but starting (its check, run now, exits 1)'],
        [undefined, 'running but starting (its check, run now, did not finish)'],
      ] as const) {
        const s = containerStatus(memcached, info, undefined, await checkNow(access(code), memcached, info));
        expect(s.health).toBe('starting');
        expect(containerFindings('ctl-0', s).map((f) => [f.severity, f.message])).toEqual([['unhealthy', message]]);
      }
    });

    it('nothing is run when Docker has a verdict, the container is not running, or it has no check', async () => {
      const calls: unknown[][] = [];
      const a = access(0, calls);
      expect(await checkNow(a, memcached, deployed(cloud, memcached, { health: 'unhealthy' }))).toBeUndefined();
      expect(await checkNow(a, memcached, deployed(cloud, memcached, { health: 'healthy' }))).toBeUndefined();
      expect(
        await checkNow(a, memcached, deployed(cloud, memcached, { status: 'exited', running: false, exitCode: 1 })),
      ).toBeUndefined();
      expect(await checkNow(a, memcached, undefined)).toBeUndefined();
      const bare = { ...memcached, definition: { ...memcached.definition, healthcheck: undefined } };
      expect(await checkNow(a, bare, deployed(cloud, memcached, { health: 'starting' }))).toBeUndefined();
      expect(calls).toEqual([]);
      // an unhealthy verdict is Docker's: a passing check run by hand does not overrule it
      const s = containerStatus(memcached, deployed(cloud, memcached, { health: 'unhealthy' }), undefined, {
        passed: true,
        exitCode: 0,
      });
      expect(s.health).toBe('unhealthy');
    });
  });

  it('another image tag and changed inputs: drift, naming both tags and what the deploy would recreate it for', () => {
    const old = memcached.image.replace(':zed-1', ':zed-0');
    const info = deployed(cloud, {
      ...memcached,
      image: old,
      inputs: { ...memcached.inputs, image: old },
      hash: 'f'.repeat(64),
    });
    const s = containerStatus(memcached, { ...info, image: old });
    expect(s.image).toMatchObject({ runningTag: 'zed-0', wantedTag: 'zed-1', matches: false });
    expect(s.config).toEqual({ state: 'outdated', changed: ['image'] });
    expect(containerFindings('ctl-0', s)).toEqual([
      {
        severity: 'drift',
        node: 'ctl-0',
        subject: 'memcached',
        message: `runs ${old}, the plan wants ${memcached.image}`,
      },
      { severity: 'drift', node: 'ctl-0', subject: 'memcached', message: 'a deploy would recreate it (image)' },
    ]);
  });

  it('a container not made by stackctl says so (the deploy decision, reused)', () => {
    const info = deployed(cloud, memcached);
    const s = containerStatus(memcached, { ...info, labels: { [LABEL.cloud]: cloud } });
    expect(s.config).toEqual({ state: 'outdated', changed: ['not deployed by stackctl'] });
  });
});

describe('configDrift', () => {
  it('lists missing and changed config files from sha256sum output', () => {
    const configs = deployPlan.steps
      .flatMap((s) => s.nodes.flatMap((n) => n.configs))
      .filter((c) => c.node === 'ctl-0');
    expect(configs.length).toBeGreaterThan(2);
    const [a, b, ...rest] = configs;
    const out = [
      `${a!.sha256}  ${a!.dest}`,
      `${'0'.repeat(64)}  ${b!.dest}`,
      ...rest.map((c) => `${c.sha256}  ${c.dest}`),
    ];
    expect(configDrift(configs, out.join('\n'))).toEqual([{ path: b!.dest, detail: 'content changed' }]);
    expect(configDrift(configs, out.slice(1).join('\n'))).toEqual([
      { path: a!.dest, detail: 'missing' },
      { path: b!.dest, detail: 'content changed' },
    ]);
  });
});
