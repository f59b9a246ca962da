/**
 * Host preparation (a service file's `host`): what a node's own OS must
 * provide before the service's containers start. For libvirt on hardware:
 * the KVM module of the CPU loaded now and at every boot, /dev/kvm present,
 * and the host's own libvirtd stopped and masked, since the containerised
 * one owns /run/libvirt. And, for every node when stackctl's registry serves
 * TLS, the node's dockerd trusting it (the cloud CA under certs.d, the
 * registry out of insecure-registries).
 *
 * Re-entrant (CONVENTIONS.md 6): every item is read from the node first and
 * changed only when it is not in place, so a second run changes nothing and
 * a killed run is finished by the next. Modules load first (they make the
 * devices); the boot-time module list is written only once the devices are
 * there, and host units are stopped last.
 */
import { RemoteError } from '../core/errors.js';
import type { ExecOptions, ExecResult, RemoteCommand, UploadOptions, UploadSource } from '../remote/index.js';
import type { HostWork } from './planner.js';

/** What host preparation needs of a node: a root shell and file upload. */
export interface HostAccess {
  readonly node: string;
  exec(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
  readonly files: { upload(source: UploadSource, dest: string, opts?: UploadOptions): Promise<number> };
}

/** One change host preparation made (nothing when all was in place). */
export interface HostChange {
  readonly object: 'module' | 'file' | 'unit';
  readonly name: string;
  readonly action: string;
}

/** Where the modules of a service are listed for systemd-modules-load at boot. */
export const modulesLoadFile = (service: string): string => `/etc/modules-load.d/stackctl-${service}.conf`;

/** Deadline of each command of the preparation (modprobe can take a moment on a loaded host). */
const COMMAND_TIMEOUT_MS = 60_000;

/** What is read of a host unit (`systemctl show` prints `Name=value` lines, in its own order). */
const UNIT_PROPERTIES = ['LoadState', 'ActiveState', 'UnitFileState'] as const;

function parseProperties(text: string): Partial<Record<(typeof UNIT_PROPERTIES)[number], string>> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return out;
}

/** The text of the modules-load.d file for these modules. */
export function modulesLoadText(service: string, modules: readonly string[]): string {
  return `# Written by stackctl for ${service}: loaded at every boot. Changes are overwritten.\n${modules.join('\n')}\n`;
}

/** One line naming what a preparation ensures: `modules kvm_intel|kvm_amd; devices /dev/kvm; stop libvirtd.service`. */
export function hostSummary(w: Pick<HostWork, 'modules' | 'devices' | 'stopUnits' | 'registryTrust'>): string {
  return [
    w.registryTrust ? `trust the cloud CA for ${w.registryTrust.registry}` : '',
    w.modules.length ? `modules ${w.modules.map((m) => m.join('|')).join(', ')}` : '',
    w.devices.length ? `devices ${w.devices.join(', ')}` : '',
    w.stopUnits.length ? `stop ${w.stopUnits.join(', ')}` : '',
  ]
    .filter(Boolean)
    .join('; ');
}

const hostError = (w: HostWork, code: string, message: string, hint: string): RemoteError =>
  new RemoteError(code, `${w.node}: ${w.service} needs ${message}`, {
    hint: `${w.hint ? `${w.hint} ` : ''}${hint} Nothing of ${w.service} was started on ${w.node}.`,
  });

/** Prepare the node's OS for one service; throws RemoteError naming the node and what is missing. */
export async function prepareHost(access: HostAccess, w: HostWork): Promise<HostChange[]> {
  const run = (command: RemoteCommand): Promise<ExecResult> => access.exec(command, { timeoutMs: COMMAND_TIMEOUT_MS });
  const changes: HostChange[] = [];

  // Modules: an entry is met by the first of its names that is loaded (or built in), else loads.
  const chosen: string[] = [];
  for (const names of w.modules) {
    let found: string | undefined;
    for (const m of names) if (!found && (await run(['test', '-d', `/sys/module/${m}`])).code === 0) found = m;
    const errors: string[] = [];
    for (const m of names) {
      if (found) break;
      const r = await run(['modprobe', m]);
      if (r.code === 0) {
        found = m;
        changes.push({ object: 'module', name: m, action: 'loaded' });
      } else errors.push((r.stderr.trim() || r.stdout.trim() || `modprobe exited ${r.code}`).split('\n')[0]!);
    }
    if (!found) {
      throw hostError(
        w,
        'E_HOST_MODULE',
        `the kernel module ${names.join(' or ')}, which does not load: ${errors.join('; ')}`,
        'Check the kernel has it (modinfo) and that the hardware supports it.',
      );
    }
    chosen.push(found);
  }
  for (const dev of w.devices) {
    if ((await run(['test', '-e', dev])).code !== 0) {
      throw hostError(
        w,
        'E_HOST_DEVICE',
        `${dev}, which does not exist${chosen.length ? ` with ${chosen.join(', ')} loaded` : ''}`,
        'Check the kernel log (dmesg) for why the driver made no device.',
      );
    }
  }

  // recorded for the next boot only once the node proved it has what the service needs
  if (chosen.length) {
    const path = modulesLoadFile(w.service);
    const want = modulesLoadText(w.service, chosen);
    const have = await run(['cat', path]);
    if (have.code !== 0 || have.stdout !== want) {
      await access.files.upload({ data: want }, path, { mode: 0o644 });
      changes.push({ object: 'file', name: path, action: 'written' });
    }
  }

  if (w.stopUnits.length && (await run(['sh', '-c', 'command -v systemctl >/dev/null'])).code === 0) {
    for (const unit of w.stopUnits) {
      const r = await run(['systemctl', 'show', ...UNIT_PROPERTIES.map((p) => `--property=${p}`), unit]);
      const { LoadState: load, ActiveState: active, UnitFileState: file } = parseProperties(r.stdout);
      if (r.code !== 0 || load === 'not-found') continue;
      if (load === 'masked' && active !== 'active' && active !== 'activating') continue;
      const stop = await run(['systemctl', 'disable', '--now', unit]);
      const mask = stop.code === 0 ? await run(['systemctl', 'mask', unit]) : stop;
      if (mask.code !== 0) {
        throw hostError(
          w,
          'E_HOST_UNIT',
          `the host's ${unit} stopped and masked, which failed: ${(mask.stderr.trim() || mask.stdout.trim()).split('\n')[0]}`,
          `Stop it by hand (systemctl disable --now ${unit}; systemctl mask ${unit}) and deploy again.`,
        );
      }
      changes.push({ object: 'unit', name: unit, action: `stopped and masked (was ${active}, ${file || 'static'})` });
    }
  }
  if (w.registryTrust) changes.push(...(await trustRegistry(run, access, w.registryTrust)));
  return changes;
}

/** Where a node's dockerd finds the CA of a registry served over TLS. */
export const registryCaFile = (registry: string): string => `/etc/docker/certs.d/${registry}/ca.crt`;
const DAEMON_JSON = '/etc/docker/daemon.json';

/**
 * The node's dockerd trusts `registry` with the CA and no longer pulls from it without verifying:
 * the CA file written when it differs; the registry taken out of daemon.json's insecure-registries
 * (its other settings kept) and dockerd told to reload it (SIGHUP, as `systemctl reload docker` does;
 * certs.d is read at each pull). A daemon.json that is not JSON is left alone and refused.
 */
async function trustRegistry(
  run: (command: RemoteCommand) => Promise<ExecResult>,
  access: HostAccess,
  trust: NonNullable<HostWork['registryTrust']>,
): Promise<HostChange[]> {
  const changes: HostChange[] = [];
  const caPath = registryCaFile(trust.registry);
  const have = await run(['cat', caPath]);
  if (have.code !== 0 || have.stdout !== trust.ca) {
    await access.files.upload({ data: trust.ca }, caPath, { mode: 0o644 });
    changes.push({ object: 'file', name: caPath, action: 'written' });
  }
  const daemon = await run(['cat', DAEMON_JSON]);
  if (daemon.code !== 0) return changes; // no daemon.json: nothing lists the registry as insecure
  let conf: Record<string, unknown>;
  try {
    conf = JSON.parse(daemon.stdout) as Record<string, unknown>;
    if (typeof conf !== 'object' || conf === null || Array.isArray(conf)) throw new Error('not an object');
  } catch (e) {
    throw new RemoteError(
      'E_HOST_DOCKER_CONFIG',
      `${access.node}: ${DAEMON_JSON} is not a JSON object (${String(e)})`,
      {
        hint: `Repair it by hand (dockerd refuses to start with it too), then deploy again. Nothing else was changed.`,
      },
    );
  }
  const insecure = conf['insecure-registries'];
  if (!Array.isArray(insecure) || !insecure.includes(trust.registry)) return changes;
  const next = { ...conf, 'insecure-registries': insecure.filter((r) => r !== trust.registry) };
  await access.files.upload({ data: JSON.stringify(next, null, 2) + '\n' }, DAEMON_JSON, { mode: 0o644 });
  changes.push({ object: 'file', name: DAEMON_JSON, action: `written (${trust.registry} no longer insecure)` });
  const hup = await run(['pkill', '-HUP', '-x', 'dockerd']);
  // pkill: 1 = no such process (a stopped dockerd reads the file when it starts)
  if (hup.code > 1) {
    throw new RemoteError(
      'E_HOST_UNIT',
      `${access.node}: dockerd could not be told to reload ${DAEMON_JSON}: ${hup.stderr.trim()}`,
      {
        hint: 'Run `systemctl reload docker` on the node by hand, then deploy again.',
      },
    );
  }
  if (hup.code === 0) changes.push({ object: 'unit', name: 'dockerd', action: 'reloaded (SIGHUP)' });
  return changes;
}
