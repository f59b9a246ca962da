/**
 * What the upgrade lab tests share (`npm run test:e2e:upgrade`, `npm run test:e2e:ha`): the
 * target images built and pushed to the lab's registry,
 * the probe (a Keystone token and Nova's server list through the VIP every 100 ms), the phases'
 * times from the events log, and the probe's figures against the plan's declared outages.
 */
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadAll } from '../../src/cli/context.js';
import { eventsFileFor } from '../../src/core/events.js';
import { defaultReleasesDir } from '../../src/core/paths.js';
import { buildImages } from '../../src/images/build.js';
import { LABEL } from '../../src/orchestrator/state.js';
import type { ContainerEngine } from '../../src/remote/index.js';
import { pushImages } from '../../src/images/registry.js';
import { loadRelease } from '../../src/roles/release.js';
import type { Release } from '../../src/roles/schema.js';
import type { UpgradePhase } from '../../src/upgrade/model.js';
import { runCli, tempDir } from '../helpers/cli.js';
import { dockerOrFail } from '../images/fixture.js';
import { CLIENT_IMAGE } from '../helpers/openstack.js';
import { CLOUD_IMAGES, root } from '../orchestrator/lab.js';

export const TARGET = loadRelease(defaultReleasesDir(), 'zed-update');

/** Build a target release's images (default zed-update; Docker's cache makes a second build quick) and push them to the lab's registry. */
export async function buildTargetImages(registryPort: number, target: Release = TARGET): Promise<number> {
  const engine = await dockerOrFail();
  const t0 = Date.now();
  await buildImages(engine, { release: target, only: [...CLOUD_IMAGES] });
  await pushImages(engine, target, `127.0.0.1:${registryPort}`, [...CLOUD_IMAGES], () => undefined);
  return (Date.now() - t0) / 1000;
}

/** The plan's phases (`upgrade --dry-run --json`) and the ids of those with an API outage by design. */
export async function upgradePlan(
  inventory: string,
  args: readonly string[],
): Promise<{ phases: UpgradePhase[]; declared: string[] }> {
  const planned = await runCli('upgrade', '-i', inventory, ...args, '--dry-run', '--json');
  if (planned.code !== 0) throw new Error(`upgrade --dry-run failed: ${planned.stderr}`);
  const phases = (JSON.parse(planned.stdout) as { phases: UpgradePhase[] }).phases;
  const declared = phases.filter((p) => p.availability !== undefined && p.availability !== 'rolling').map((p) => p.id);
  return { phases, declared };
}

/**
 * The probe's script: a token (password from a mounted file, never in argv) then the server
 * list, through a VIP (http://, or https:// checked against a CA), every 100 ms; one line `ok|fail <start ms> <end ms> <why>` per try.
 */
const probeScript = (vip: string, https: boolean): string => {
  const base = https ? `https://${vip}` : `http://${vip}`;
  const ca = https ? '--cacert /probe/ca.pem ' : '';
  return `
while :; do
  s=$(date +%s%3N)
  : > /tmp/b
  hdr=$(curl -s -m 5 ${ca}-o /tmp/b -D - -w 'code=%{http_code}\\n' -H 'Content-Type: application/json' -d @/probe/auth.json \\
        ${base}:5000/v3/auth/tokens); rc=$?
  tok=$(printf '%s\\n' "$hdr" | awk 'tolower($1)=="x-subject-token:" {print $2}' | tr -d '\\r')
  ok=fail
  if [ -n "$tok" ]; then
    printf 'X-Auth-Token: %s\\n' "$tok" > /tmp/h
    : > /tmp/b
    code=$(curl -s -m 5 ${ca}-o /tmp/b -w '%{http_code}' -H @/tmp/h ${base}:8774/v2.1/servers); rc=$?
    if [ "$code" = 200 ]; then ok=ok; why=-; else why="servers:curl$rc:http$code"; fi
  else
    why="token:curl$rc:$(printf '%s\\n' "$hdr" | sed -n 's/^code=//p')"
  fi
  # who answered a failed try: the first words of its body, tags left out (HAProxy's own page or the API's error)
  if [ $ok = fail ] && [ -s /tmp/b ]; then
    why="$why:$(head -c 2000 /tmp/b | tr '\\n' ' ' | sed 's/<[^>]*>/ /g' | tr -s ' ' | head -c 300 | tr -c 'A-Za-z0-9.' '_')"
  fi
  echo "$ok $s $(date +%s%3N) $why"
  sleep 0.1
done
`;
};

/** One try of the probe. */
export interface ProbeResult {
  readonly ok: boolean;
  /** When the try started and ended (epoch ms): a request in flight fails with what happens during it. */
  readonly at: number;
  readonly end: number;
  /**
   * Why a try failed: `token:curl<exit>:http<code>` or `servers:curl<exit>:http<code>` (curl 28: timed
   * out), then `:<the body's first 300 characters, HTML tags left out>` when there was one, blanks as `_`.
   */
  readonly why?: string;
}

/** A probe container on the deploy host; `stop()` removes it and returns its tries. */
export function startProbe(
  inventory: string,
  vip: string,
  name: string,
  temps: string[],
  /** Probe over https:// with this CA (PEM file) instead of http://. */
  caFile?: string,
): { stop: () => ProbeResult[] } {
  const dir = tempDir('stackctl-probe-');
  temps.push(dir);
  const password = loadAll({ inventory }).secrets!.services.get('keystone_admin_password')!;
  const auth = {
    auth: {
      identity: {
        methods: ['password'],
        password: { user: { name: 'admin', domain: { name: 'Default' }, password: password.reveal() } },
      },
      scope: { project: { name: 'admin', domain: { name: 'Default' } } },
    },
  };
  writeFileSync(join(dir, 'auth.json'), JSON.stringify(auth), { mode: 0o644 });
  writeFileSync(join(dir, 'probe.sh'), probeScript(vip, caFile !== undefined));
  if (caFile) writeFileSync(join(dir, 'ca.pem'), readFileSync(caFile), { mode: 0o644 });
  execFileSync('docker', ['rm', '-f', name], { stdio: 'ignore' });
  execFileSync('docker', [
    'run',
    '-d',
    '--name',
    name,
    '--network',
    'host',
    '-v',
    `${dir}:/probe:ro`,
    CLIENT_IMAGE,
    'sh',
    '/probe/probe.sh',
  ]);
  return {
    stop: () => {
      const out = execFileSync('docker', ['logs', name], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
      execFileSync('docker', ['rm', '-f', name], { stdio: 'ignore' });
      return out
        .split('\n')
        .map((l) => l.trim().split(' '))
        .filter((f) => f.length >= 3 && (f[0] === 'ok' || f[0] === 'fail'))
        .map(([s, t, e, why]) => ({
          ok: s === 'ok',
          at: Number(t),
          end: Number(e),
          ...(s === 'fail' && why ? { why } : {}),
        }));
    },
  };
}

/** The events log's records. */
export function events(inventory: string): { time: string; kind: string; [k: string]: unknown }[] {
  return readFileSync(eventsFileFor(inventory), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { time: string; kind: string });
}

/** Each phase's start and end since `since`; a phase cut by a kill lasted from its first start. */
export function phaseTimes(inventory: string, since: number): { phase: string; from: number; to: number }[] {
  const started = new Map<string, number>();
  const out: { phase: string; from: number; to: number }[] = [];
  for (const e of events(inventory) as { time: string; kind: string; phase?: string; state?: string }[]) {
    if (e.kind !== 'run.phase' || !e.phase || Date.parse(e.time) < since) continue;
    if (e.state === 'start' && !started.has(e.phase)) started.set(e.phase, Date.parse(e.time));
    if (e.state === 'done' || e.state === 'failed')
      out.push({ phase: e.phase, from: started.get(e.phase) ?? Date.parse(e.time), to: Date.parse(e.time) });
  }
  return out;
}

/**
 * Whether the probe watched all of [t0, t1]: a try started before t0 and one ended after t1, and
 * the longest hole between one try's end and the next one's start inside it (ms). Under load a
 * try takes longer and there are fewer of them; a hole means nobody was asking.
 */
export function probeCoverage(
  probes: readonly ProbeResult[],
  t0: number,
  t1: number,
): { covered: boolean; longestHoleMs: number } {
  const tries = [...probes].sort((a, b) => a.at - b.at);
  let longestHoleMs = 0;
  let reached = tries[0]?.at ?? Infinity;
  for (const p of tries) {
    if (p.at > reached && p.at > t0 && reached < t1)
      longestHoleMs = Math.max(longestHoleMs, p.at - Math.max(reached, t0));
    reached = Math.max(reached, p.end);
  }
  return { covered: (tries[0]?.at ?? Infinity) <= t0 && reached >= t1, longestHoleMs };
}

/** The probe against the declared outages: success share, longest gap, failures outside them; and a printout. */
export function probeFigures(
  probes: readonly ProbeResult[],
  phases: readonly { phase: string; from: number; to: number }[],
  declared: readonly string[],
): { okShare: number; longestGapMs: number; failedOutside: ProbeResult[]; text: string } {
  const windows = phases.filter((p) => declared.includes(p.phase));
  // A try fails with a window when the two overlap: a request still in flight (up to curl's 5 s) when a
  // window stops the old containers fails with it. A second of slack before a window, five after it
  // (HAProxy's health checks mark the backend up again).
  const inWindow = (p: ProbeResult): boolean => windows.some((w) => p.end >= w.from - 1000 && p.at <= w.to + 5000);
  const failedOutside = probes.filter((p) => !p.ok && !inWindow(p));
  let longestGapMs = 0;
  let lastOk = probes[0]?.at ?? 0;
  for (const p of probes) {
    if (p.ok) {
      longestGapMs = Math.max(longestGapMs, p.at - lastOk);
      lastOk = p.at;
    }
  }
  const okShare = probes.filter((p) => p.ok).length / Math.max(1, probes.length);
  // where and why the failures outside the declared outages happened: the phase under way, the cause
  const phaseAt = (t: number): string => phases.find((p) => t >= p.from && t <= p.to)?.phase ?? 'between phases';
  const outside = new Map<string, number>();
  for (const p of failedOutside) {
    const k = `${phaseAt(p.at)} ${p.why ?? '?'}`;
    outside.set(k, (outside.get(k) ?? 0) + 1);
  }
  const text =
    `probes ${probes.length}, success ${(okShare * 100).toFixed(1)} %, longest gap ${(longestGapMs / 1000).toFixed(1)} s, ` +
    `failed outside the declared outages ${failedOutside.length}\n` +
    phases
      .map(
        (p) =>
          `  ${p.phase.padEnd(40)} ${((p.to - p.from) / 1000).toFixed(1)} s${declared.includes(p.phase) ? ' (declared outage)' : ''}\n`,
      )
      .join('') +
    [...outside].map(([k, n]) => `  failed outside: ${n} x ${k}\n`).join('');
  return { okShare, longestGapMs, failedOutside, text };
}

/** What the tag check needs of a lab. */
interface LabNodes {
  nodes(): string[];
  remote(node: string): { docker: Pick<ContainerEngine, 'listContainers' | 'inspectContainer'> };
}

/**
 * The cloud's containers whose image is not the target's (`node/name image`). The lab's registry
 * stands in for the manifest's: namespace, key and tag are compared.
 */
export async function containersOffTarget(lab: LabNodes, cloud: string, target: Release = TARGET): Promise<string[]> {
  const off: string[] = [];
  for (const node of lab.nodes()) {
    const docker = lab.remote(node).docker;
    for (const c of await docker.listContainers({ labels: { [LABEL.cloud]: cloud } })) {
      const info = await docker.inspectContainer(c.name);
      const key = Object.keys(target.images).find((k) => info?.image.includes(`/${k}:`));
      if (!key) continue;
      // the nodes run pinned references: `…/key:tag@sha256:…`
      if (
        !new RegExp(`/${target.namespace}/${key}:${target.images[key]!.tag}(@sha256:[0-9a-f]{64})?$`).test(info!.image)
      )
        off.push(`${node}/${c.name} ${info!.image}`);
    }
  }
  return off;
}

/** A row of `server list --long` before the upgrade. */
export interface ServerBefore {
  readonly ID: string;
  readonly Name: string;
  readonly Host: string;
}

/** A row of Nova's migration records (microversion 2.59). */
export interface MigrationRecord {
  readonly 'Server UUID': string;
  readonly 'Source Compute': string;
  readonly Status: string;
  readonly Type: string;
  readonly 'Created At': string;
  readonly 'Updated At': string;
}

/** Nova's timestamps are UTC without a zone. */
const novaTime = (t: string): number => Date.parse(t.replace(' ', 'T') + 'Z');

/**
 * Where Nova's records say each server did not leave its compute (a completed live migration from
 * it) before that compute's nova_compute was replaced, or a live migration failed or was requested
 * twice: one line per fault, none when the evacuation did its job. Only migrations requested from
 * `since` (epoch ms, the upgrade's start) count: a test may have moved a server before.
 */
export async function evacuationFaults(
  lab: { remote(node: string): { docker: Pick<ContainerEngine, 'inspectContainer'> } },
  before: readonly ServerBefore[],
  migrations: readonly MigrationRecord[],
  since: number,
): Promise<string[]> {
  const faults: string[] = [];
  const live = migrations.filter((m) => m.Type === 'live-migration' && novaTime(m['Created At']) >= since);
  for (const m of live.filter((x) => x.Status !== 'completed'))
    faults.push(`${m['Server UUID']} from ${m['Source Compute']}: ${m.Status}`);
  const pairs = live.map((m) => `${m['Server UUID']} ${m['Source Compute']}`);
  for (const p of new Set(pairs.filter((x, i) => pairs.indexOf(x) !== i))) faults.push(`${p}: requested twice`);
  for (const row of before) {
    const info = await lab.remote(row.Host).docker.inspectContainer('nova_compute');
    const swappedAt = Date.parse(info!.state.startedAt);
    const left = live.filter(
      (m) => m['Server UUID'] === row.ID && m['Source Compute'] === row.Host && m.Status === 'completed',
    );
    if (!left.length) {
      faults.push(`${row.Name} never left ${row.Host}`);
      continue;
    }
    const leftAt = Math.min(...left.map((m) => novaTime(m['Updated At'])));
    if (leftAt >= swappedAt) faults.push(`${row.Name} left ${row.Host} after its nova_compute was replaced`);
  }
  return faults;
}

/**
 * Once the events logged after the first `seen` show a live migration started (or the run ended), wait
 * `afterMs` and SIGKILL the run; resolves with its exit code (null when the kill ended it).
 */
export async function killDuringMigration(
  inventory: string,
  run: ReturnType<typeof spawnUpgrade>,
  seen: number,
  afterMs = 3000,
): Promise<number | null> {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  for (let deadline = Date.now() + 1_800_000; Date.now() < deadline; await sleep(200)) {
    if (
      events(inventory)
        .slice(seen)
        .some((e) => e.kind === 'upgrade.migration' && e.state === 'started')
    )
      break;
    if ((await Promise.race([run.exited.then(() => true), sleep(0).then(() => false)])) === true) break;
  }
  await sleep(afterMs);
  run.child.kill('SIGKILL');
  return run.exited;
}

/** `stackctl upgrade -i INVENTORY ARGS` in a child process, to be killed with SIGKILL; its output and exit. */
export function spawnUpgrade(inventory: string, args: readonly string[]) {
  const child = spawn(
    join(root, 'node_modules', '.bin', 'vite-node'),
    [join(import.meta.dirname, 'upgrade-child.ts'), '--', '-i', inventory, ...args],
    { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return { child, exited, out: () => out };
}
