import type { Command } from 'commander';
import { spawn } from 'node:child_process';
import { mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { isLoopbackHost, parseBmcAddress } from '../core/bmc-address.js';
import { createDriver } from '../bmc/registry.js';
import { mapLimit } from '../core/concurrency.js';
import { IoError, TimeoutError, messageOf } from '../core/errors.js';
import { JsonLinesLog, eventsFileFor } from '../core/events.js';
import { exists, writeFileAtomic } from '../core/fs.js';
import { labMachines } from '../lab/nodes/machines.js';
import { startFleet } from '../lab/vbmc/fleet.js';
import { loadAll, type Loaded } from './context.js';
import { RANGE, secondsOption } from './numbers.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { out, table } from './output.js';
import { bmcTargets } from './targets.js';
import { withRunLock } from './run-lock.js';

/** What `lab bmc start` records (no secrets: names, addresses and a PID). */
export interface VbmcState {
  readonly pid: number;
  readonly started: string;
  readonly bmcs: readonly { node: string; address: string; driver: string }[];
}

/** The lab's working folder of an inventory: `<inventory>.lab/`. */
export function labDir(all: Loaded): string {
  return all.inventoryFile.replace(/\.ya?ml$/, '') + '.lab';
}

const stateFile = (all: Loaded): string => join(labDir(all), 'vbmc.json');

function readState(all: Loaded): VbmcState | undefined {
  const f = stateFile(all);
  return exists(f) ? (JSON.parse(readFileSync(f, 'utf8')) as VbmcState) : undefined;
}

/** The running virtual BMC process of an inventory, or undefined. */
export function runningBmcs(all: Loaded): VbmcState | undefined {
  const st = readState(all);
  return st && alive(st.pid) ? st : undefined;
}

/** Options of startBmcs. */
export interface StartBmcsOptions {
  readonly timeoutS: number;
  readonly roles?: string | undefined;
  readonly releases?: string | undefined;
  /** The stackctl script the background process runs (default: this process's). */
  readonly bin?: string;
}

/**
 * Start `lab bmc serve` in the background and wait until it listens; does
 * nothing when it already runs. Resolves to its state and whether it was
 * already running.
 */
export async function startBmcs(
  all: Loaded,
  opts: StartBmcsOptions,
): Promise<{ state: VbmcState; already: boolean; logFile: string }> {
  const logFile = join(labDir(all), 'vbmc.log');
  const running = readState(all);
  if (running && alive(running.pid)) return { state: running, already: true, logFile };
  bmcTargets(all, labNodes(all)); // fail here, in the foreground, when credentials are missing
  mkdirSync(labDir(all), { recursive: true });
  rmSync(stateFile(all), { force: true });
  const fd = openSync(logFile, 'a', 0o600);
  const args = [
    opts.bin ?? process.argv[1]!,
    'lab',
    'bmc',
    'serve',
    '-i',
    all.inventoryFile,
    '--secrets',
    all.secretsFile,
  ];
  if (opts.roles) args.push('--roles', opts.roles);
  if (opts.releases) args.push('--releases', opts.releases);
  const child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', fd, fd] });
  child.unref();
  const deadline = Date.now() + opts.timeoutS * 1000;
  for (;;) {
    const st = readState(all);
    if (st && st.pid === child.pid) return { state: st, already: false, logFile };
    if (child.exitCode !== null || (child.pid !== undefined && !alive(child.pid))) {
      throw new IoError('E_VBMC_START', `the virtual BMC process exited before listening`, {
        hint: `See ${logFile} for the reason.`,
      });
    }
    if (Date.now() > deadline) {
      throw new TimeoutError('E_VBMC_START', `the virtual BMCs did not listen within ${opts.timeoutS} s`, {
        hint: `See ${logFile}.`,
      });
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Stop the background virtual BMC process; resolves to what ran, or undefined when nothing did. */
export async function stopBmcs(all: Loaded): Promise<VbmcState | undefined> {
  const st = readState(all);
  if (!st || !alive(st.pid)) {
    rmSync(stateFile(all), { force: true });
    return undefined;
  }
  process.kill(st.pid, 'SIGTERM');
  const deadline = Date.now() + 10_000;
  while (alive(st.pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  if (alive(st.pid)) process.kill(st.pid, 'SIGKILL');
  rmSync(stateFile(all), { force: true });
  return st;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Each node's power through its virtual BMC, all asked at once: 'no BMC
 * running' when the BMC process is not up (or there are no credentials),
 * `error: MESSAGE` for a BMC that does not answer.
 */
export async function labPowers(all: Loaded, nodes: readonly string[]): Promise<Map<string, string>> {
  const targets = all.secrets && runningBmcs(all) ? bmcTargets(all, nodes) : [];
  const powers = await mapLimit(nodes, RANGE.concurrency.max, async (node) => {
    const t = targets.find((x) => x.node === node);
    if (!t) return 'no BMC running';
    // the lab's BMCs speak plain HTTP on loopback by design: no warning here
    const d = createDriver(t, { redfish: { warn: () => undefined } });
    try {
      return await d.powerState();
    } catch (e) {
      return `error: ${messageOf(e)}`;
    } finally {
      await d.close();
    }
  });
  return new Map(nodes.map((n, i) => [n, powers[i]!]));
}

/** The inventory's nodes whose BMC is on loopback: those the lab serves. */
function labNodes(all: Loaded): string[] {
  return all.loaded.inventory.nodes
    .filter((n) => isLoopbackHost(parseBmcAddress(n.bmc.address).host))
    .map((n) => n.name);
}

/** `stackctl lab bmc start|stop|list|serve`: virtual BMCs for the lab's simulated machines. Returns `lab`. */
export function registerLab(program: Command): Command {
  const lab = program.command('lab').description('the simulated data centre on this machine');
  const bmc = lab
    .command('bmc')
    .description('virtual BMCs (IPMI LAN+ and Redfish) at the addresses the inventory names');

  inventoryOptions(bmc.command('serve'))
    .description('run the virtual BMCs in the foreground until interrupted (what `start` runs in the background)')
    // NOTE: no run lock: it serves for the lab's whole life, beside the deploys that need its BMCs,
    // and writes only its own vbmc.json (start and stop, which launch and end it, take the lock)
    .action(async (opts: CommonOpts) => {
      const all = loadAll(opts);
      const targets = bmcTargets(all, labNodes(all));
      // Nodes that `lab up --kind container` recorded are driven as containers; the others stay in memory.
      const machines = labMachines(labDir(all));
      const fleet = await startFleet(
        targets.map((t) => {
          const machine = machines.get(t.node);
          return {
            node: t.node,
            address: t.address,
            username: t.username,
            password: t.password,
            ...(machine ? { machine } : {}),
          };
        }),
      );
      mkdirSync(labDir(all), { recursive: true });
      const log = new JsonLinesLog(eventsFileFor(all.inventoryFile));
      for (const f of fleet) log.emit({ kind: 'vbmc.started', node: f.node, address: f.address });
      const state: VbmcState = {
        pid: process.pid,
        started: new Date().toISOString(),
        bmcs: fleet.map((f) => ({ node: f.node, address: f.address, driver: f.driver })),
      };
      writeFileAtomic(stateFile(all), JSON.stringify(state, null, 2) + '\n');
      process.stderr.write(`serving ${fleet.length} virtual BMC(s); stop with Ctrl-C or stackctl lab bmc stop\n`);
      await new Promise<void>((resolve) => {
        for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => resolve());
      });
      await Promise.allSettled(fleet.map((f) => f.close()));
      for (const f of fleet) log.emit({ kind: 'vbmc.stopped', node: f.node });
      const now = readState(all);
      if (now?.pid === process.pid) rmSync(stateFile(all), { force: true });
    });

  inventoryOptions(bmc.command('start'))
    .description('start the virtual BMCs of every loopback BMC address in the background')
    .addOption(secondsOption('--timeout', 'how long to wait for them to listen', RANGE.seconds, 20))
    .action((opts: CommonOpts & { timeout: number }) => withRunLock(opts.inventory, () => startCommand(opts)));

  inventoryOptions(bmc.command('stop'))
    .description('stop the virtual BMCs started by `lab bmc start`')
    .action((opts: CommonOpts) =>
      withRunLock(opts.inventory, async () => {
        const st = await stopBmcs(loadAll(opts));
        if (!st) out('no virtual BMCs running\n');
        else out(`stopped ${st.bmcs.length} virtual BMC(s) (pid ${st.pid})\n`);
      }),
    );

  inventoryOptions(bmc.command('list'))
    .description('list the virtual BMCs and whether they run')
    .option('--json', 'machine-readable output')
    .action((opts: CommonOpts & { json?: boolean }) => {
      const all = loadAll(opts);
      const st = readState(all);
      const pid = st !== undefined && alive(st.pid) ? st.pid : undefined;
      const served = new Map((pid !== undefined && st ? st.bmcs : []).map((b) => [b.node, b]));
      const rows = labNodes(all).map((name) => {
        const node = all.loaded.inventory.nodes.find((n) => n.name === name)!;
        return {
          node: name,
          address: node.bmc.address,
          driver: parseBmcAddress(node.bmc.address).driver,
          running: served.has(name),
        };
      });
      if (opts.json) out(JSON.stringify({ pid: pid ?? null, bmcs: rows }, null, 2) + '\n');
      else
        out(
          table(
            ['NODE', 'DRIVER', 'ADDRESS', 'STATE'],
            rows.map((r) => [r.node, r.driver, r.address, r.running ? `running (pid ${pid})` : 'stopped']),
          ),
        );
    });
  return lab;
}

/** `lab bmc start`, under the run lock. */
async function startCommand(opts: CommonOpts & { timeout: number }): Promise<void> {
  const all = loadAll(opts);
  const {
    state: st,
    already,
    logFile,
  } = await startBmcs(all, {
    timeoutS: opts.timeout,
    roles: opts.roles,
    releases: opts.releases,
  });
  if (already) {
    out(`virtual BMCs already running (pid ${st.pid}, ${st.bmcs.length} BMC(s))\n`);
    return;
  }
  out(
    table(
      ['NODE', 'DRIVER', 'ADDRESS'],
      st.bmcs.map((b) => [b.node, b.driver, b.address]),
    ),
  );
  out(`started ${st.bmcs.length} virtual BMC(s), pid ${st.pid}; log ${logFile}\n`);
}
