/**
 * The peers of `bench:bmc`: how ipmitool and FreeIPMI's ipmipower are started
 * against the virtual BMCs, how their answers are checked, and how the CPU
 * of the processes they run is read (the rusage of waited-for children, from
 * /proc/self/stat). Kept apart from the benchmark's loop so that it can be
 * tested.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The peers' commands and the Debian package of each. */
export const PEER_PACKAGES = {
  ipmitool: 'ipmitool',
  ipmipower: 'freeipmi-tools',
} as const;

/** A peer's command, checked: throws naming the Debian package to install when it is missing. */
export function requirePeer(command: keyof typeof PEER_PACKAGES, lookup = whichCommand): string {
  const path = lookup(command);
  if (!path) {
    throw new Error(
      `${command} is not installed: bench:bmc compares with it. Install Debian's ${PEER_PACKAGES[command]} ` +
        `(apt-get install -y ${PEER_PACKAGES[command]}).`,
    );
  }
  return path;
}

function whichCommand(command: string): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v "$1"', 'sh', command], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/**
 * A FreeIPMI configuration file (freeipmi.conf(5)) holding the user name and
 * password, in a private folder (0700, file 0600): ipmipower reads it with
 * `--config-file`, so the password is in neither its argv nor its
 * environment. `remove` deletes the folder.
 */
export function freeipmiCredentials(username: string, password: string): { file: string; remove: () => void } {
  // the format has no quoting: one value per line, up to the end of the line
  for (const [what, v] of [
    ['user name', username],
    ['password', password],
  ] as const) {
    if (!/^[\x21-\x7e]+$/.test(v)) throw new Error(`the ${what} cannot be written to a FreeIPMI configuration file`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'stackctl-bench-freeipmi-'));
  const file = join(dir, 'freeipmi.conf');
  writeFileSync(file, `username ${username}\npassword ${password}\n`, { mode: 0o600 });
  return { file, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * ipmipower's arguments for one `--stat` sweep over BMCs on `host` at
 * `ports`: IPMI 2.0 (driver LAN_2_0), cipher suite `suite`, the credentials
 * from `configFile`, one `host:port` per BMC in a comma-separated list,
 * `fanout` operations in parallel.
 */
export function ipmipowerArgs(o: {
  readonly configFile: string;
  readonly host: string;
  readonly ports: readonly number[];
  readonly suite: number;
  readonly fanout: number;
}): string[] {
  return [
    '--config-file',
    o.configFile,
    '--driver-type',
    'LAN_2_0',
    '--cipher-suite-id',
    String(o.suite),
    '--fanout',
    String(o.fanout),
    '--always-prefix',
    '--hostname',
    o.ports.map((p) => `${o.host}:${p}`).join(','),
    '--stat',
  ];
}

/** What one ipmipower sweep answered: hosts on, off, and the lines that were neither. */
export interface PowerSweep {
  readonly on: number;
  readonly off: number;
  readonly other: readonly string[];
}

/** Read ipmipower's `--stat` output ("host: on", "host: off", or "host: <error>" per host). */
export function parseIpmipowerStat(stdout: string): PowerSweep {
  let on = 0;
  let off = 0;
  const other: string[] = [];
  for (const line of stdout.split('\n')) {
    if (!line.trim()) continue;
    const m = /: (on|off)$/.exec(line.trim());
    if (m?.[1] === 'on') on += 1;
    else if (m?.[1] === 'off') off += 1;
    else other.push(line);
  }
  return { on, off, other };
}

/** Linux's clock ticks per second for the CPU times of /proc (USER_HZ: 100 on every Linux port). */
export const USER_HZ = 100;

/**
 * CPU time (ms, user + system) of this process's children that have been
 * waited for: fields 16 and 17 (cutime, cstime) of /proc/self/stat, what
 * getrusage(RUSAGE_CHILDREN) sums. A child still running is not in it.
 */
export function childrenCpuMs(stat: string = readFileSync('/proc/self/stat', 'utf8')): number {
  // the command name (field 2) may hold spaces and parentheses: count fields after its last ')'
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state), so field n is rest[n - 3]
  const cutime = Number(rest[13]);
  const cstime = Number(rest[14]);
  if (!Number.isFinite(cutime) || !Number.isFinite(cstime)) throw new Error('unexpected /proc/self/stat format');
  return ((cutime + cstime) * 1000) / USER_HZ;
}

/** This process's own CPU time (ms, user + system) since `start` (a process.cpuUsage() reading). */
export function ownCpuMs(start: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(start);
  return (d.user + d.system) / 1000;
}
