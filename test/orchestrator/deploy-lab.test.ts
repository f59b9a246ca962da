import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeployOpts } from '../../src/cli/deploy.js';
import { effectKey, journalFileFor, parseJournal, type JournalRecord } from '../../src/orchestrator/journal.js';
import { LABEL } from '../../src/orchestrator/state.js';
import type { ContainerInfo } from '../../src/remote/index.js';
import { deployLab, root } from './lab.js';

const lab = deployLab('deploytest', '10.93', 0);
const PREFIX = lab.prefix;
const CTL_INTERNAL_API = `${PREFIX}.20.10`;
const IMAGE = `${PREFIX}.24.1:5000/stackctl/memcached:zed-1`;

/** memcached's answer to `stats` at host:port, from this machine over the lab network. */
function memcachedStats(host: string, port = 11211): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = createConnection({ host, port });
    let buf = '';
    sock.setTimeout(5000, () => sock.destroy(new Error('timeout')));
    sock.on('connect', () => sock.write('stats\r\nquit\r\n'));
    sock.on('data', (d: Buffer) => (buf += d.toString('latin1')));
    sock.on('close', () => resolve(buf));
    sock.on('error', reject);
  });
}

describe('stackctl deploy on lab container nodes (1ctl-1comp, memcached)', () => {
  const deploy = (extra: Partial<DeployOpts> = {}) => lab.deploy({ services: 'memcached', ...extra });
  const ctl = () => lab.ctl();
  const inspect = async (name = 'memcached'): Promise<ContainerInfo | undefined> => ctl().docker.inspectContainer(name);
  const journal = (): JournalRecord[] => lab.journal();

  beforeAll(() => lab.up(['memcached']), 600_000);
  afterAll(() => lab.down(), 120_000);

  it('deploys memcached on ctl-0: running with the hash label, answering on its internal_api address', async () => {
    const t0 = Date.now();
    const { report, text } = await deploy();
    process.stderr.write(`deploy memcached (pull included): ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(report?.ok, text).toBe(true);
    expect(text).toMatch(/step 2 ctl-0: container memcached created/);
    const c = await inspect();
    expect(c?.state.running).toBe(true);
    expect(c?.labels[LABEL.hash]).toMatch(/^[0-9a-f]{64}$/);
    expect(c?.labels[LABEL.service]).toBe('memcached');
    expect(c?.labels[LABEL.cloud]).toBe('deploytest');
    expect(await memcachedStats(CTL_INTERNAL_API)).toMatch(/STAT limit_maxbytes 67108864/); // 64 MB, the default
    // The config file went up with its mode.
    const st = await ctl().exec(['stat', '-c', '%a', '/etc/stackctl/memcached/options'], { timeoutMs: 10_000 });
    expect(st.stdout.trim()).toBe('644');
  }, 300_000);

  it('a second deploy restarts nothing and says so', async () => {
    const before = await inspect();
    const t0 = Date.now();
    const { report, text } = await deploy();
    process.stderr.write(`no-op redeploy: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    expect(report?.ok, text).toBe(true);
    expect(report?.changes).toBe(0);
    expect(text).toMatch(/container memcached unchanged/);
    expect((await inspect())?.state.startedAt).toBe(before?.state.startedAt);
  }, 120_000);

  it('a changed setting: --dry-run predicts the recreate naming the config file, deploy recreates only memcached', async () => {
    const before = await inspect();
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace('  settings:\n', '  settings:\n    memcached_memory_mb: 32\n'));
    const dry = await deploy({ dryRun: true });
    const rows = dry.text.split('\n').filter((l) => /^\d\s/.test(l));
    expect(rows.filter((l) => !/\b(unchanged|done)\b/.test(l)).map((l) => l.split(/\s+/).slice(0, 5))).toEqual([
      ['2', 'ctl-0', 'config', '/etc/stackctl/memcached/options', 'upload'],
      ['2', 'ctl-0', 'container', 'memcached', 'recreate'],
    ]);
    expect(dry.text).toMatch(/memcached\s+recreate\s+config \/etc\/stackctl\/memcached\/options/);
    expect((await inspect())?.id).toBe(before?.id); // a dry run changes nothing

    const { report, text: out } = await deploy();
    expect(report?.ok, out).toBe(true);
    expect(out).toMatch(/container memcached recreated \(config \/etc\/stackctl\/memcached\/options\)/);
    const after = await inspect();
    expect(after?.id).not.toBe(before?.id);
    expect(await memcachedStats(CTL_INTERNAL_API)).toMatch(/STAT limit_maxbytes 33554432/);
  }, 180_000);

  it('an image missing from the registry fails the step naming image and registry, with nothing stopped', async () => {
    const before = await inspect();
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace(`registry: ${PREFIX}.24.1:5000`, `registry: ${PREFIX}.24.1:5999`));
    try {
      const dry = await deploy({ dryRun: true });
      expect(dry.text).toMatch(/memcached\s+recreate\s+image/);
      const { report, text: out } = await deploy();
      expect(report?.ok).toBe(false);
      expect(report?.failures).toHaveLength(1);
      expect(report?.failures[0]).toMatchObject({ code: 'E_IMAGE_PULL', class: 'retryable' });
      expect(report?.failures[0]?.message).toContain(`${PREFIX}.24.1:5999/stackctl/memcached:zed-1`);
      expect(report?.failures[0]?.message).toContain(`registry ${PREFIX}.24.1:5999`);
      expect(out).toMatch(/aborted after step 2: failure budget exceeded by Controller \(1\/1\)/);
      const after = await inspect();
      expect([after?.id, after?.state.running, after?.state.startedAt]).toEqual([
        before?.id,
        true,
        before?.state.startedAt,
      ]);
    } finally {
      writeFileSync(lab.inventory, text);
      process.exitCode = undefined;
    }
  }, 120_000);

  it('a container that dies after start fails hard with the end of its log', async () => {
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace('memcached_memory_mb: 32', 'memcached_memory_mb: lots'));
    try {
      const { report, text: out } = await deploy();
      expect(report?.ok).toBe(false);
      expect(report?.failures[0]).toMatchObject({
        path: 'step 2/ctl-0/memcached/health',
        code: 'E_CONTAINER_EXITED',
        class: 'hard',
      });
      expect(report?.failures[0]?.log).toMatch(/Cannot set item size limit/);
      expect(out).toMatch(/last log lines:\n {4}\| .*Cannot set item size limit/);
      expect(out).toMatch(/failures: 1 hard/);
    } finally {
      writeFileSync(lab.inventory, text);
      process.exitCode = undefined;
    }
    const { report } = await deploy();
    expect(report?.ok).toBe(true);
    expect(await memcachedStats(CTL_INTERNAL_API)).toMatch(/STAT limit_maxbytes 33554432/);
  }, 120_000);

  it('resumes after SIGKILL without doing any side effect twice', async () => {
    // Give the run real work: no container, no image on the node, another setting.
    await ctl().docker.removeContainer('memcached', { force: true });
    await ctl().exec(['docker', 'rmi', '-f', IMAGE], { timeoutMs: 60_000 });
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace('memcached_memory_mb: 32', 'memcached_memory_mb: 48'));
    const journalFile = journalFileFor(lab.inventory);
    const start = journal().length;

    const child = spawn(
      join(root, 'node_modules', '.bin', 'vite-node'),
      [join(import.meta.dirname, 'deploy-child.ts'), '--', '-i', lab.inventory, '--services', 'memcached'],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let childOut = '';
    child.stdout.on('data', (d: Buffer) => (childOut += d.toString()));
    child.stderr.on('data', (d: Buffer) => (childOut += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    // Kill it right after its first side effect is journaled as done (the image pull).
    const deadline = Date.now() + 120_000;
    let killedAfter: JournalRecord | undefined;
    while (Date.now() < deadline && !killedAfter) {
      const recs = parseJournal(readFileSync(journalFile, 'utf8')).slice(start);
      killedAfter = recs.find((r) => r.type === 'done');
      if (!killedAfter) await new Promise((r) => setTimeout(r, 20));
    }
    expect(killedAfter, childOut).toBeDefined();
    child.kill('SIGKILL');
    expect(await exited).toBeNull(); // died of the signal

    const killedRun = journal().slice(start);
    expect(killedRun.some((r) => r.type === 'run.end')).toBe(false);
    const { report, text: out } = await deploy({ resume: true });
    expect(report?.ok, out).toBe(true);
    expect(out).toMatch(/resuming run [0-9a-f]+: \d+ side effect\(s\) done/);

    const run = journal().slice(start);
    const runId = (run[0] as { run: string }).run;
    expect(run.every((r) => r.run === runId)).toBe(true); // the resume continued the same run
    const performed = new Map<string, number>();
    for (const r of run) {
      if (r.type === 'done' && !r.verified)
        performed.set(effectKey(r.effect), (performed.get(effectKey(r.effect)) ?? 0) + 1);
    }
    process.stderr.write(
      `killed after '${killedAfter && 'effect' in killedAfter ? effectKey(killedAfter.effect) : ''}'; ` +
        `effects: ${[...performed].map(([k, n]) => `${k.split(' ').slice(0, 3).join(' ')} x${n}`).join('; ')}\n`,
    );
    expect([...performed.values()].every((n) => n === 1)).toBe(true);
    expect([...performed.keys()].map((k) => k.split(' ')[0])).toEqual(
      expect.arrayContaining(['pull', 'upload', 'create', 'start']),
    );
    expect((await inspect())?.state.running).toBe(true);
    expect(await memcachedStats(CTL_INTERNAL_API)).toMatch(/STAT limit_maxbytes 50331648/);
  }, 300_000);

  it('an effect announced but not recorded as done is checked on the node, not repeated', async () => {
    // What a kill between an upload and its `done` line leaves: the file is in place, the journal says intent.
    const upload = run0Upload();
    const before = await inspect();
    writeFileSync(
      journalFileFor(lab.inventory),
      readFileSync(journalFileFor(lab.inventory), 'utf8') +
        JSON.stringify({ time: '', run: 'cut0ff', type: 'run.start', resumed: false }) +
        '\n' +
        JSON.stringify({ time: '', run: 'cut0ff', type: 'intent', effect: upload }) +
        '\n',
    );
    const { report, text } = await deploy({ resume: true });
    expect(text).toMatch(/resuming run cut0ff: 0 side effect\(s\) done, 1 to re-check/);
    expect(report?.changes).toBe(0);
    const after = journal().filter((r) => r.run === 'cut0ff');
    expect(after.filter((r) => r.type === 'done')).toEqual([
      expect.objectContaining({ effect: upload, verified: true }),
    ]);
    expect((await inspect())?.state.startedAt).toBe(before?.state.startedAt);
  });

  /** The upload of memcached's options as the last run recorded it. */
  function run0Upload() {
    const done = journal().filter((r) => r.type === 'done' && 'effect' in r && r.effect.kind === 'upload');
    const last = done[done.length - 1];
    if (!last || !('effect' in last)) throw new Error('no upload in the journal');
    return last.effect;
  }
});
