/**
 * The OpenStack client on the deploy host, for the lab tests: the release's openstack-base image,
 * host network, the openrc file mounted read-only and sourced (credentials never in argv).
 */
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { imageRef } from '../../src/roles/release.js';
import { release } from '../images/fixture.js';

/** The image the client runs from. */
export const CLIENT_IMAGE = imageRef(release, 'openstack-base')!;

/**
 * docker's argv for `openstack ARGS` with the openrc (and `mounts`, each `-v` read-only) on this
 * machine's network.
 */
export function clientArgv(openrc: string, args: string, mounts: readonly string[] = []): string[] {
  return [
    ...['run', '--rm', '--network', 'host', '-v', `${openrc}:/root/openrc:ro`],
    ...mounts.flatMap((m) => ['-v', `${m}:${m}:ro`]),
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
