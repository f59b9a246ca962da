/**
 * The fault campaign (`npm run test:faults`): on a 1ctl-2comp container lab with the whole cloud,
 * `stackctl deploy` and `stackctl upgrade` are killed with SIGKILL at random moments, N times each
 * (STACKCTL_FAULTS_N, default 20; STACKCTL_FAULTS_SEED repeats a campaign), and resumed. After
 * each: the resumed run ends well, `stackctl status` is healthy, a dry run predicts no change, and
 * the journal shows no side effect done twice and no action (a migration above all) done twice.
 *
 * A deploy always has work: each round changes memcached's and Keystone's settings. An upgrade
 * always has work too: the rounds go back and forth between `zed` and `zed-faults`, a release that
 * is `zed` with Keystone and memcached under other tags (the same images, tagged again), so each
 * round runs Keystone's offline migration window and memcached's restart.
 */
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDeploy } from '../../src/cli/deploy.js';
import { runUpgrade } from '../../src/cli/upgrade.js';
import { defaultReleasesDir } from '../../src/core/paths.js';
import { effectKey, journalFileFor, parseJournal, type JournalRecord } from '../../src/orchestrator/journal.js';
import { imageRef, loadRelease } from '../../src/roles/release.js';
import type { StatusReport } from '../../src/status/model.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { CLOUD_IMAGES, deployLab, dueRows, keystoneState, root } from '../orchestrator/lab.js';

const N = Number(process.env.STACKCTL_FAULTS_N ?? 20);
const SEED = Number(process.env.STACKCTL_FAULTS_SEED ?? Math.floor(Math.random() * 1e6));
const REGISTRY_PORT = 15081;
const lab = deployLab('faults', '10.91', 70, { topology: '1ctl-2comp', registryPort: REGISTRY_PORT, bmcPort: 16530 });
/** The images the second release tags again, so that an upgrade between the two has work. */
const RETAGGED = ['keystone', 'memcached'] as const;
const FAULT_TAG = 'zed-f';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const results = { deploy: { ok: 0, killed: 0, runs: 0 }, upgrade: { ok: 0, killed: 0, runs: 0 } };
const timings: string[] = [];

/** mulberry32: a small seeded generator, so a campaign can be repeated. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = seeded(SEED);
const pick = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1));

let releases = '';

/** A child stackctl (deploy or upgrade) that can be killed. */
function child(script: string, args: readonly string[]) {
  const c = spawn(join(root, 'node_modules', '.bin', 'vite-node'), [script, '--', ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  c.stdout.on('data', (d: Buffer) => (out += d.toString()));
  c.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => c.on('exit', (code) => r(code)));
  return { c, exited, out: () => out };
}

const journal = (): JournalRecord[] => parseJournal(readFileSync(journalFileFor(lab.inventory), 'utf8'));

/**
 * Run a child, kill it once `count()` reaches `at` (unless it ended first); returns whether it was
 * killed and what it printed.
 */
async function killAt(
  run: ReturnType<typeof child>,
  count: () => number,
  at: number,
): Promise<{ killed: boolean; code: number | null }> {
  let done = false;
  void run.exited.then(() => (done = true));
  const deadline = Date.now() + 1_200_000;
  while (!done && Date.now() < deadline && count() < at) await sleep(20);
  if (done) return { killed: false, code: await run.exited };
  run.c.kill('SIGKILL');
  await run.exited;
  return { killed: true, code: null };
}

/** The records of the last run started afresh (and its resumptions). */
function lastRun(): JournalRecord[] {
  const all = journal();
  const start = all
    .map((r, i) => ({ r, i }))
    .filter(({ r }) => r.type === 'run.start' && r.mode === 'new')
    .at(-1);
  if (!start) return [];
  return all.slice(start.i).filter((r) => r.run === start.r.run);
}

/** NB_Global's nb_cfg, each Chassis_Private's, and the end of each compute's ovn-controller log. */
async function ovnLiveness(): Promise<string> {
  const ctl = lab.remote('ctl-0').docker;
  const run = (container: string, cmd: string[]) =>
    ctl.exec(container, cmd, { timeoutMs: 15_000 }).then(
      (r) => (r.stdout + r.stderr).trim(),
      (e: Error) => `not read: ${e.message}`,
    );
  const nb = await run('ovn_nb_db', [
    'ovn-nbctl',
    '--db=unix:/run/ovn/ovnnb_db.sock',
    'get',
    'NB_Global',
    '.',
    'nb_cfg',
  ]);
  const chassis = await run('ovn_sb_db', [
    'ovn-sbctl',
    '--db=unix:/run/ovn/ovnsb_db.sock',
    '--columns=name,nb_cfg,nb_cfg_timestamp',
    'list',
    'Chassis_Private',
  ]);
  const logs = await Promise.all(
    ['cmp-0', 'cmp-1'].map(async (n) => {
      const l = await lab
        .remote(n)
        .docker.logs('ovn_controller', { tail: 15 })
        .then(
          (x) => (x.stdout + x.stderr).trim(),
          (e: Error) => `no log: ${e.message}`,
        );
      return `${n} ovn_controller's last log lines:\n${l}`;
    }),
  );
  return [`NB_Global nb_cfg: ${nb}`, `Chassis_Private:\n${chassis}`, ...logs].join('\n');
}

/** What a round must leave: healthy, nothing left to do, nothing done twice. */
async function checkRound(what: string): Promise<string[]> {
  const problems: string[] = [];
  const st = await runCli('status', '-i', lab.inventory, '--releases', releases, '--json');
  if (st.code !== 0) {
    // what made it fail, so that a round's problem can be told from load (an unreachable node)
    let findings = st.stderr.trim().split('\n').slice(-2).join(' / ');
    try {
      const report = JSON.parse(st.stdout) as StatusReport;
      findings = report.findings.map((f) => `${f.severity} ${f.node} ${f.subject}: ${f.message}`).join('; ');
    } catch {
      // not JSON: the error lines above
    }
    // a client that did not answer (seen after upgrade rounds and in CI): what Keystone and the
    // database were doing then
    if (/did not finish/.test(findings)) findings += `\n${await keystoneState(lab.remote('ctl-0').docker)}`;
    // an OVN agent Neutron calls not alive: how far each chassis is behind NB_Global's nb_cfg (Zed
    // counts it alive up to one behind), and what its ovn-controller last logged
    if (/not alive/.test(findings)) findings += `\n${await ovnLiveness()}`;
    problems.push(`${what}: status exit ${st.code}: ${findings}`);
  }
  const dry = await runCli('deploy', '-i', lab.inventory, '--releases', releases, '--dry-run');
  const m = /dry run: (\d+) change\(s\) predicted/.exec(dry.stdout);
  if (!m || m[1] !== '0') {
    problems.push(`${what}: the dry run predicts ${m?.[1] ?? '?'} change(s): ${dueRows(dry.stdout).join(' | ')}`);
  }
  const run = lastRun();
  const effects = new Map<string, number>();
  const actions = new Map<string, number>();
  for (const r of run) {
    if (r.type === 'effect' && r.state === 'done' && !r.verified)
      effects.set(effectKey(r.effect), (effects.get(effectKey(r.effect)) ?? 0) + 1);
    if (r.type === 'action' && r.state === 'done') actions.set(r.key, (actions.get(r.key) ?? 0) + 1);
  }
  for (const [k, n] of effects) if (n > 1) problems.push(`${what}: effect '${k}' done ${n} times`);
  for (const [k, n] of actions) if (n > 1) problems.push(`${what}: action '${k}' done ${n} times`);
  return problems;
}

/** Runs, kills and rounds that ended well, of one kind. */
interface Tally {
  ok: number;
  killed: number;
  runs: number;
}

/** One round of a campaign: the child to kill, when, and how the work is finished in process. */
interface Round {
  /** Names the round in its problems, e.g. `deploy round 3`. */
  readonly what: string;
  /** Names it in the progress line (default `what`). */
  readonly line?: string;
  /** The child stackctl and its arguments. */
  readonly script: string;
  readonly args: readonly string[];
  /** The journal records counted for the kill: side effects (deploy) or actions (upgrade). */
  readonly counted: 'effect' | 'action';
  /** The child is killed at its `at`-th new record of that kind. */
  readonly at: number;
  readonly tally: Tally;
  /**
   * Finish the work in process after the child (killed or not); returns the problems of that run
   * (none when it ended well) and how it went on (`resumed`, `run again`) for the progress line.
   */
  readonly resume: (killed: boolean) => Promise<{ problems: string[]; how: string }>;
}

/**
 * Kill, resume, check: the child runs until its `at`-th new journal record (or its end), is
 * killed, the work is finished in process, and the round is judged: the resumed run's problems,
 * else what checkRound finds. Counts the round in its tally, prints its line, returns its problems.
 */
async function killResumeCheck(round: Round): Promise<string[]> {
  const before = journal().length;
  const run = child(round.script, round.args);
  const k = await killAt(
    run,
    () =>
      journal()
        .slice(before)
        .filter((r) => r.type === round.counted).length,
    round.at,
  );
  round.tally.runs++;
  if (k.killed) round.tally.killed++;
  const { problems, how } = await round.resume(k.killed);
  const here = problems.length ? problems : await checkRound(round.what);
  if (!here.length) round.tally.ok++;
  process.stderr.write(
    `${round.line ?? round.what}: ${k.killed ? `killed at ${round.counted} ${round.at}` : `ended before ${round.counted} ${round.at}`}, ${how}: ${here.length ? here.join('; ') : 'ok'}\n`,
  );
  return here;
}

describe(`fault campaign: SIGKILL of deploy and upgrade at random moments, ${N} times each (seed ${SEED})`, () => {
  beforeAll(async () => {
    await lab.up(CLOUD_IMAGES);
    // The second release: zed, with Keystone and memcached under other tags (the same images).
    releases = tempDir('stackctl-faults-releases-');
    for (const f of readdirSync(defaultReleasesDir())) copyFileSync(join(defaultReleasesDir(), f), join(releases, f));
    const zed = readFileSync(join(releases, 'zed.yaml'), 'utf8');
    let faults = zed.replace(/^name: zed$/m, 'name: zed-faults');
    for (const key of RETAGGED)
      faults = faults.replace(new RegExp(`^(  ${key}: \\{ tag: )zed-1`, 'm'), `$1${FAULT_TAG}`);
    writeFileSync(join(releases, 'zed-faults.yaml'), faults);
    const rel = loadRelease(releases, 'zed');
    for (const key of RETAGGED) {
      const from = imageRef(rel, key, `127.0.0.1:${REGISTRY_PORT}`)!;
      const to = from.replace(/:zed-1$/, `:${FAULT_TAG}`);
      execFileSync('docker', ['tag', from, to]);
      execFileSync('docker', ['push', to], { stdio: 'ignore' });
    }
    const t0 = Date.now();
    const { report, text } = await lab.deploy({ releases });
    expect(report?.ok, text).toBe(true);
    timings.push(`first deploy of the whole cloud ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }, 3_600_000);

  afterAll(async () => {
    process.stderr.write(
      `\nfault campaign (seed ${SEED}): deploy: ${results.deploy.ok}/${results.deploy.runs} ` +
        `(${results.deploy.killed} killed), upgrade: ${results.upgrade.ok}/${results.upgrade.runs} ` +
        `(${results.upgrade.killed} killed)\n${timings.join('\n')}\n`,
    );
    await lab.down();
  }, 600_000);

  it(`deploy: killed at a random side effect and resumed, ${N} times`, async () => {
    const t0 = Date.now();
    const problems: string[] = [];
    for (let i = 0; i < N; i++) {
      const text = readFileSync(lab.inventory, 'utf8').replace(
        /\n {4}nova_virt_type: qemu\n(?: {4}memcached_memory_mb: \d+\n {4}keystone_token_expiration_s: \d+\n)?/,
        `\n    nova_virt_type: qemu\n    memcached_memory_mb: ${32 + (i % 2) * 16}\n    keystone_token_expiration_s: ${3600 + i}\n`,
      );
      writeFileSync(lab.inventory, text);
      problems.push(
        ...(await killResumeCheck({
          what: `deploy round ${i + 1}`,
          script: join(root, 'test', 'orchestrator', 'deploy-child.ts'),
          args: ['-i', lab.inventory, '--releases', releases],
          counted: 'effect',
          at: pick(1, 8),
          tally: results.deploy,
          resume: async () => {
            let out = '';
            const report = await runDeploy(
              { inventory: lab.inventory, releases, resume: true },
              { write: (t) => void (out += t), tty: false },
            );
            process.exitCode = undefined;
            const failed = report?.ok
              ? []
              : [
                  `deploy round ${i + 1}: ${out
                    .split('\n')
                    .filter((l) => l.startsWith('FAILED'))
                    .join(' / ')}`,
                ];
            return { problems: failed, how: 'resumed' };
          },
        })),
      );
    }
    timings.push(`deploy campaign ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    expect(problems).toEqual([]);
  }, 3_600_000);

  it(`upgrade: killed at a random action and resumed, ${N} times (zed <-> zed-faults)`, async () => {
    const t0 = Date.now();
    const problems: string[] = [];
    for (let i = 0; i < N; i++) {
      const current = /^ {2}release: (\S+)$/m.exec(readFileSync(lab.inventory, 'utf8'))![1]!;
      const target = current === 'zed' ? 'zed-faults' : 'zed';
      problems.push(
        ...(await killResumeCheck({
          what: `upgrade round ${i + 1}`,
          line: `upgrade round ${i + 1} (${current} -> ${target})`,
          script: join(root, 'test', 'upgrade', 'upgrade-child.ts'),
          args: ['-i', lab.inventory, '--to', target, '--releases', releases],
          counted: 'action',
          at: pick(1, 40),
          tally: results.upgrade,
          resume: async (killed) => {
            let out = '';
            // Killed before it opened its run, or after it closed it: a new run; otherwise --resume.
            const open = lastRun();
            const resume =
              killed &&
              open.some((r) => r.type === 'run.start' && r.command === 'upgrade') &&
              !open.some((r) => r.type === 'run.end');
            const report = await runUpgrade(
              { inventory: lab.inventory, to: target, releases, ...(resume ? { resume: true } : {}) },
              { write: (t) => void (out += t), tty: false },
            );
            process.exitCode = undefined;
            const now = /^ {2}release: (\S+)$/m.exec(readFileSync(lab.inventory, 'utf8'))![1]!;
            const failed: string[] = [];
            if (report && report.outcome !== 'done')
              failed.push(
                `upgrade round ${i + 1}: ${report.outcome}: ${out
                  .split('\n')
                  .filter((l) => l.startsWith('FAILED'))
                  .join(' / ')}`,
              );
            if (now !== target) failed.push(`upgrade round ${i + 1}: the inventory names ${now}, not ${target}`);
            return { problems: failed, how: resume ? 'resumed' : 'run again' };
          },
        })),
      );
    }
    timings.push(`upgrade campaign ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    expect(problems).toEqual([]);
  }, 7_200_000);
});
