/**
 * The OpenStack client on the deploy host, for the lab tests: the release's openstack-base image,
 * host network, the openrc file mounted read-only and sourced (credentials never in argv).
 */
import { execFile, execFileSync, spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { imageRef } from '../../src/roles/release.js';
import { release } from '../images/fixture.js';

/** The image the client runs from. */
export const CLIENT_IMAGE = imageRef(release, 'openstack-base')!;

/** The CA file an openrc names (`export OS_CACERT='…'`, a cloud with TLS on), if any. */
export function openrcCaFile(openrc: string): string | undefined {
  return /^export OS_CACERT='([^']+)'$/m.exec(readFileSync(openrc, 'utf8'))?.[1];
}

/**
 * docker's argv for `openstack ARGS` with the openrc (and `mounts`, each `-v` read-only) on this
 * machine's network. The CA file the openrc names is mounted at its path, so https:// works.
 */
export function clientArgv(openrc: string, args: string, mounts: readonly string[] = []): string[] {
  const ca = openrcCaFile(openrc);
  return [
    ...['run', '--rm', '--network', 'host', '-v', `${openrc}:/root/openrc:ro`],
    ...[...mounts, ...(ca && !mounts.includes(ca) ? [ca] : [])].flatMap((m) => ['-v', `${m}:${m}:ro`]),
    ...[CLIENT_IMAGE, 'sh', '-c', `. /root/openrc && openstack ${args}`],
  ];
}

/** `openstack ARGS` with the openrc sourced: its standard output. */
export function openstack(openrc: string, args: string, timeoutMs = 300_000): string {
  return execFileSync('docker', clientArgv(openrc, args), { encoding: 'utf8', timeout: timeoutMs });
}

/**
 * `openstack ARGS` as openstack() runs it, without blocking the event loop: what a test watches
 * meanwhile (timers, fetch) keeps running.
 */
export async function openstackAsync(openrc: string, args: string, timeoutMs = 300_000): Promise<string> {
  const { stdout } = await promisify(execFile)('docker', clientArgv(openrc, args), {
    encoding: 'utf8',
    timeout: timeoutMs,
  });
  return stdout;
}

/** `openstack ARGS -f json`, parsed. */
export function openstackJson<T>(openrc: string, args: string, timeoutMs = 300_000): T {
  return JSON.parse(openstack(openrc, `${args} -f json`, timeoutMs)) as T;
}

/** The lines of the client's `--debug` output that name a request or an answer, never a body or header. */
const TRACE_LINE =
  /^(REQ: curl -g -i -X \S+ \S+|RESP: \[\d+\]|Starting new HTTPS? connection.*|.*"[A-Z]+ \S+ HTTP\/1\.1" \d{3}.*)/;

/**
 * `openstack ARGS` as openstackAsync() runs it, with `--debug`: on a failure or after `timeoutMs`
 * the container is removed (a killed `docker run` leaves it running) and the error lists the
 * requests the client sent and the answers it got, each with the second it arrived at, so a hang
 * names the request that hung. Bodies and headers are left out: credentials never reach an error.
 */
export async function openstackTraced(openrc: string, args: string, timeoutMs = 300_000): Promise<string> {
  const name = `stackctl-client-${process.pid}-${Date.now()}`;
  const argv = clientArgv(openrc, `--debug ${args}`);
  argv.splice(1, 0, '--name', name);
  const t0 = Date.now();
  const trace: string[] = [];
  let stdout = '';
  let partial = '';
  let cleanUp = '';
  let lastPlain = '';
  const child = spawn('docker', argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => {
    const lines = (partial + d.toString('utf8')).split('\n');
    partial = lines.pop()!;
    const at = ((Date.now() - t0) / 1000).toFixed(1);
    for (const l of lines) {
      // the client's own error line (`clean_up Cmd: reason`) rather than its `END return value: N`
      if (/^clean_up \S+: /.test(l)) cleanUp = l.replace(/^clean_up \S+: /, '');
      else if (l.trim() && !/^(END return value|\s)/.test(l)) lastPlain = l.trim();
      const m = TRACE_LINE.exec(l);
      if (m) trace.push(`+${at}s ${m[1]!.slice(0, 200)}`);
    }
  });
  const outcome = await new Promise<string | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(`no answer within ${timeoutMs / 1000} s`), timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve(code === 0 ? undefined : `exit ${code} (${(cleanUp || lastPlain || partial).slice(0, 300)})`);
    });
  });
  if (outcome === undefined) return stdout;
  child.kill('SIGKILL');
  spawnSync('docker', ['rm', '-f', name], { timeout: 30_000 });
  throw new Error(
    `openstack ${args}: ${outcome} after ${((Date.now() - t0) / 1000).toFixed(1)} s; ` +
      `its requests:\n${trace.join('\n') || '(none sent)'}`,
  );
}
