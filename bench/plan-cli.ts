/**
 * Benchmark: `stackctl plan` and `stackctl inventory validate` as a user runs them, timed from
 * process start, on generated inventories of 100, 1,000 and 10,000 nodes, beside
 * `ansible-inventory --list` on the same hosts written as an Ansible YAML inventory (same groups,
 * same per-host values). Optionally a second build of stackctl (`--before DIR`, a package root
 * with its dist/) runs in the same loop, so a change is compared with what it replaces under the
 * same load; the bench then checks that both print the same plan, byte for byte.
 *
 * Each run is one process started under GNU time (`/usr/bin/time -f`, Debian package `time`),
 * which reports the child's user and system CPU and its peak resident set size (wait4's
 * rusage); the wall time is taken here, from spawn to exit. Output goes to a file, as when a
 * user redirects it (through a pipe, builds before the fix in src/cli/bin.ts lost what was still
 * queued when they exited). The figure is the median of BENCH_RUNS runs (default 5) per tool and size,
 * the tools taking turns within each round. The load average is printed with every size.
 *
 *   npm run bench:plan                                   (in-process bench, then this one)
 *   node dist/bench/plan-cli.js [--before DIR] [--skip-ansible] [sizes...]
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { packageRoot } from '../src/core/paths.js';
import { toYaml } from '../src/core/yaml.js';
import { generateInventoryYaml } from '../src/inventory/generate.js';
import { parseInventory } from '../src/inventory/load.js';
import type { Inventory } from '../src/inventory/schema.js';
import { loadCatalog } from '../src/roles/catalog.js';

const TIME = '/usr/bin/time';

interface Options {
  sizes: number[];
  before?: string;
  skipAnsible: boolean;
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = { sizes: [], skipAnsible: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--before') o.before = resolve(argv[++i] ?? '');
    else if (a === '--skip-ansible') o.skipAnsible = true;
    else if (Number(a) > 0) o.sizes.push(Number(a));
    else throw new Error(`unknown argument ${a}; usage: plan-cli.js [--before DIR] [--skip-ansible] [sizes...]`);
  }
  if (!o.sizes.length) o.sizes = [100, 1_000, 10_000];
  return o;
}

/** One timed process: wall (ms, from spawn to exit), CPU (ms, user + system), peak RSS (MiB). */
interface Sample {
  wall: number;
  cpu: number;
  rss: number;
}

/** Run argv under GNU time with stdout to `outFile` (a file, not a pipe); fails loudly when the command fails. */
function timed(argv: readonly string[], outFile: string, env: NodeJS.ProcessEnv = process.env): Promise<Sample> {
  const report = outFile + '.time';
  const out = openSync(outFile, 'w');
  return new Promise<Sample>((done, fail) => {
    const t0 = performance.now();
    const child = spawn(TIME, ['-o', report, '-f', '%U %S %M', ...argv], { env, stdio: ['ignore', out, 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', fail);
    child.on('close', (code) => {
      const wall = performance.now() - t0;
      if (code !== 0) return fail(new Error(`${argv.join(' ')} exited with ${code}:\n${stderr.slice(-2000)}`));
      const [user, sys, maxKb] = readFileSync(report, 'utf8').trim().split('\n').pop()!.split(' ').map(Number);
      done({ wall, cpu: (user! + sys!) * 1000, rss: maxKb! / 1024 });
    });
  }).finally(() => closeSync(out));
}

/** The same hosts as an Ansible YAML inventory: a group per role, the node's fields as host vars. */
/** Writes an empty file and returns its path. */
function emptyFile(path: string): string {
  writeFileSync(path, '');
  return path;
}

function ansibleInventory(inv: Inventory): string {
  const groups: Record<string, { hosts: Record<string, unknown> }> = {};
  for (const { name, role, ...vars } of inv.nodes) {
    (groups[role] ??= { hosts: {} }).hosts[name] = vars;
  }
  return toYaml({ all: { vars: { cloud: inv.cloud, networks: inv.networks }, children: groups } });
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function which(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

interface Tool {
  readonly label: string;
  /** argv for an inventory file (stackctl's) and its Ansible twin. */
  readonly argv: (inventory: string, ansible: string) => string[];
  readonly env?: NodeJS.ProcessEnv;
  /** Output compared between the two builds (plan text). */
  readonly compare?: string;
}

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const runs = Number(process.env.BENCH_RUNS ?? 5);
  if (!which(TIME)) {
    console.error(`${TIME} is missing: install Debian's 'time' package (apt-get install time).`);
    process.exit(2);
  }
  const builds: [string, string][] = [['', packageRoot()]];
  if (opts.before) builds.unshift([' (before)', opts.before]);
  const tools: Tool[] = [];
  for (const [suffix, root] of builds) {
    const bin = join(root, 'dist', 'src', 'cli', 'bin.js');
    tools.push(
      {
        label: `stackctl plan${suffix}`,
        argv: (inv) => [process.execPath, bin, 'plan', '--no-save', '-i', inv],
        compare: 'plan',
      },
      {
        label: `stackctl inventory validate${suffix}`,
        argv: (inv) => [process.execPath, bin, 'inventory', 'validate', '-i', inv],
      },
    );
  }
  if (opts.skipAnsible) console.log('ansible-inventory: skipped (--skip-ansible)');
  else if (!which('ansible-inventory'))
    console.log('ansible-inventory: not installed, not measured (Debian: apt-get install ansible-core)');
  else {
    const ansibleTmp = mkdtempSync(join(tmpdir(), 'bench-plan-ansible-'));
    tools.push({
      label: 'ansible-inventory --list',
      argv: (_inv, ans) => ['ansible-inventory', '-i', ans, '--list'],
      // its own temporary and cache folders, and an empty ansible.cfg instead of any of the user's
      // (Ansible refuses a config path without the .cfg extension, /dev/null included)
      env: {
        ...process.env,
        ANSIBLE_HOME: ansibleTmp,
        ANSIBLE_LOCAL_TEMP: ansibleTmp,
        ANSIBLE_CONFIG: emptyFile(join(ansibleTmp, 'ansible.cfg')),
      },
    });
  }

  const catalog = loadCatalog(join(packageRoot(), 'roles'));
  const dir = mkdtempSync(join(tmpdir(), 'bench-plan-cli-'));
  console.log(
    `from process start: median of ${runs} runs; wall ms, CPU ms (user+sys), peak RSS MiB; node ${process.version}`,
  );
  console.log(
    `${'nodes'.padStart(6)}  ${'command'.padEnd(40)} ${'wall'.padStart(8)} ${'cpu'.padStart(8)} ${'rss'.padStart(7)}  load average before -> after`,
  );
  try {
    for (const n of opts.sizes) {
      const text = generateInventoryYaml({ controllers: 3, computes: n - 3 });
      const inv = join(dir, `gen-${n}.yaml`);
      const ans = join(dir, `gen-${n}.ansible.yaml`);
      writeFileSync(inv, text);
      writeFileSync(ans, ansibleInventory(parseInventory(inv, text, { roles: catalog.roleInfo }).inventory));
      const loadBefore = loadavg()[0]!.toFixed(2);
      const samples = new Map<string, Sample[]>(tools.map((t) => [t.label, []]));
      for (let r = 0; r < runs + 1; r++) {
        // round 0 warms the page cache and is not counted; the order rotates every round
        for (let k = 0; k < tools.length; k++) {
          const t = tools[(k + r) % tools.length]!;
          const s = await timed(t.argv(inv, ans), join(dir, `${t.label.replace(/\W+/g, '-')}-${n}.out`), t.env);
          if (r > 0) samples.get(t.label)!.push(s);
        }
      }
      const loadAfter = loadavg()[0]!.toFixed(2);
      for (const t of tools) {
        const ss = samples.get(t.label)!;
        console.log(
          `${String(n).padStart(6)}  ${t.label.padEnd(40)} ${median(ss.map((s) => s.wall))
            .toFixed(0)
            .padStart(8)} ${median(ss.map((s) => s.cpu))
            .toFixed(0)
            .padStart(8)} ${median(ss.map((s) => s.rss))
            .toFixed(0)
            .padStart(7)}  ${loadBefore} -> ${loadAfter}`,
        );
      }
      if (opts.before) {
        const outs = tools
          .filter((t) => t.compare === 'plan')
          .map((t) => join(dir, `${t.label.replace(/\W+/g, '-')}-${n}.out`));
        const same = readFileSync(outs[0]!).equals(readFileSync(outs[1]!));
        console.log(`${String(n).padStart(6)}  plan output of both builds: ${same ? 'byte-identical' : 'DIFFERENT'}`);
        if (!same) process.exitCode = 1;
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const last = opts.sizes[opts.sizes.length - 1];
  if (last && last >= 10_000)
    console.log('goal at 10,000 nodes from process start: wall <= 1000 ms, peak RSS <= 200 MiB');
}

await main();
