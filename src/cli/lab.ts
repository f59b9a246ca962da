import type { Command } from 'commander';
import { spawn } from 'node:child_process';
import { mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { isLoopbackHost, parseBmcAddress } from '../core/bmc-address.js';
import { IoError, TimeoutError } from '../core/errors.js';
import { JsonLinesLog } from '../core/events.js';
import { exists, writeFileAtomic } from '../core/fs.js';
import { startFleet } from '../lab/vbmc/fleet.js';
import { loadAll, type Loaded } from './context.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { out, table } from './output.js';
import { bmcTargets } from './targets.js';

/** What `lab bmc start` records (no secrets: names, addresses and a PID). */
interface VbmcState {
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

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The inventory's nodes whose BMC is on loopback: those the lab serves. */
function labNodes(all: Loaded): string[] {
  return all.loaded.inventory.nodes
    .filter((n) => isLoopbackHost(parseBmcAddress(n.bmc.address).host))
    .map((n) => n.name);
}

/** `stackctl lab bmc start|stop|list|serve`: virtual BMCs for the lab's simulated machines. */
export function registerLab(program: Command): void {
  const lab = program.command('lab').description('the simulated data centre on this machine');
  const bmc = lab
    .command('bmc')
    .description('virtual BMCs (IPMI LAN+ and Redfish) at the addresses the inventory names');

  inventoryOptions(bmc.command('serve'))
    .description('run the virtual BMCs in the foreground until interrupted (what `start` runs in the background)')
    .action(async (opts: CommonOpts) => {
      const all = loadAll(opts);
      const targets = bmcTargets(all, labNodes(all));
      const fleet = await startFleet(
        targets.map((t) => ({ node: t.node, address: t.address, username: t.username, password: t.password })),
      );
      mkdirSync(labDir(all), { recursive: true });
      const log = new JsonLinesLog(all.inventoryFile.replace(/\.ya?ml$/, '') + '.events.jsonl');
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
    .option('--timeout <seconds>', 'how long to wait for them to listen', '20')
    .action(async (opts: CommonOpts & { timeout: string }) => {
      const all = loadAll(opts);
      const running = readState(all);
      if (running && alive(running.pid)) {
        out(`virtual BMCs already running (pid ${running.pid}, ${running.bmcs.length} BMC(s))\n`);
        return;
      }
      bmcTargets(all, labNodes(all)); // fail here, in the foreground, when credentials are missing
      mkdirSync(labDir(all), { recursive: true });
      rmSync(stateFile(all), { force: true });
      const logFile = join(labDir(all), 'vbmc.log');
      const fd = openSync(logFile, 'a', 0o600);
      const args = [process.argv[1]!, 'lab', 'bmc', 'serve', '-i', all.inventoryFile, '--secrets', all.secretsFile];
      if (opts.roles) args.push('--roles', opts.roles);
      if (opts.releases) args.push('--releases', opts.releases);
      const child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', fd, fd] });
      child.unref();
      const deadline = Date.now() + Number(opts.timeout) * 1000;
      for (;;) {
        const st = readState(all);
        if (st && st.pid === child.pid) {
          out(
            table(
              ['NODE', 'DRIVER', 'ADDRESS'],
              st.bmcs.map((b) => [b.node, b.driver, b.address]),
            ),
          );
          out(`started ${st.bmcs.length} virtual BMC(s), pid ${st.pid}; log ${logFile}\n`);
          return;
        }
        if (child.exitCode !== null || (child.pid !== undefined && !alive(child.pid))) {
          throw new IoError('E_VBMC_START', `the virtual BMC process exited before listening`, {
            hint: `See ${logFile} for the reason.`,
          });
        }
        if (Date.now() > deadline) {
          throw new TimeoutError('E_VBMC_START', `the virtual BMCs did not listen within ${opts.timeout} s`, {
            hint: `See ${logFile}.`,
          });
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    });

  inventoryOptions(bmc.command('stop'))
    .description('stop the virtual BMCs started by `lab bmc start`')
    .action(async (opts: CommonOpts) => {
      const all = loadAll(opts);
      const st = readState(all);
      if (!st || !alive(st.pid)) {
        rmSync(stateFile(all), { force: true });
        out('no virtual BMCs running\n');
        return;
      }
      process.kill(st.pid, 'SIGTERM');
      const deadline = Date.now() + 10_000;
      while (alive(st.pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      if (alive(st.pid)) process.kill(st.pid, 'SIGKILL');
      rmSync(stateFile(all), { force: true });
      out(`stopped ${st.bmcs.length} virtual BMC(s) (pid ${st.pid})\n`);
    });

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
}
