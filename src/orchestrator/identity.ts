/**
 * Step 5's Keystone work: service users, catalog endpoints, and the starter
 * flavours and images. It runs as a Python program inside the bootstrap
 * node's keystone container (whose image carries the OpenStack client
 * libraries), fed on stdin together with its input: passwords never appear in
 * an argv, a log line or the journal. Every action is idempotent: existing
 * objects are compared and kept, so a re-run changes nothing.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RemoteError, StackctlError } from '../core/errors.js';
import { defaultRolesDir } from '../core/paths.js';
import { sha256 } from '../core/hash.js';
import type { Secret } from '../core/secret.js';
import type { ExecOptions, ExecResult, RemoteCommand } from '../remote/index.js';
import type { IdentityAccess, RunOnceWork } from './planner.js';

/** The interpreter that runs the program in the identity service's client container. */
export const IDENTITY_PYTHON = 'python3';

/** Deadline of one identity program run (image uploads included). */
const IDENTITY_TIMEOUT_MS = 5 * 60_000;

type IdentityWork = Extract<RunOnceWork, { kind: 'register' | 'resources' }>;

/** One line the program prints per object: never a secret. */
export interface IdentityAction {
  readonly object:
    'project' | 'user' | 'role' | 'service' | 'endpoint' | 'flavor' | 'image' | 'network' | 'subnet' | 'router';
  readonly name: string;
  readonly action: 'created' | 'updated' | 'unchanged' | 'differs';
  readonly detail?: string;
}

/** The run-once hash of a registration: its inputs' and its password's digest. */
export function identityHash(
  w: Extract<RunOnceWork, { kind: 'register' }>,
  secret: (name: string) => Secret | undefined,
): string {
  const pw = secret(w.passwordSecret);
  return pw ? sha256(`${w.hash}\n${sha256(pw.reveal())}`) : w.hash;
}

/**
 * A built guest image as step 5 uploads it (src/images/guest.ts reads and checks it on the deploy
 * host); the program checks the digests again on the node before it uploads anything.
 */
export interface GuestImageData {
  readonly kernel: Buffer;
  readonly initrd: Buffer;
  readonly kernelSha256: string;
  readonly initrdSha256: string;
  readonly kernelPackage: string;
  readonly kernelVersion: string;
  /** The kernel command line (image property os_command_line). */
  readonly cmdline: string;
  /** Size of the raw root disk (zeros) that names the kernel and initramfs. */
  readonly rootBytes: number;
}

/** The program (roles/programs/identity.py), read once. */
let program: string | undefined;
function identityProgram(): string {
  return (program ??= readFileSync(join(defaultRolesDir(), 'programs', 'identity.py'), 'utf8'));
}

/** What the executor hands over. */
export interface IdentityRunner {
  exec(command: RemoteCommand, opts: ExecOptions): Promise<ExecResult>;
  readonly node: string;
}

/** Build the program's input for one piece of work. */
function specOf(
  w: IdentityWork,
  identity: IdentityAccess,
  secret: (name: string) => Secret | undefined,
  guest: GuestImageData | undefined,
): { spec: unknown; secrets: string[] } {
  const need = (name: string, what: string): string => {
    const s = secret(name);
    if (!s) {
      throw new StackctlError('E_SECRET_MISSING', `secret '${name}' (${what}) is missing`, {
        hint: "Run 'stackctl secrets generate' for this inventory.",
      });
    }
    return s.reveal();
  };
  const adminPassword = need(identity.adminPasswordSecret, 'Keystone admin');
  const auth = {
    url: identity.authUrl,
    ...(identity.caFile ? { cafile: identity.caFile } : {}),
    user: 'admin',
    password: adminPassword,
    project: 'admin',
    region: identity.region,
  };
  if (w.kind === 'register') {
    const password = need(w.passwordSecret, `Keystone user ${w.name}`);
    return {
      spec: {
        auth,
        users: [{ name: w.name, password, project: 'service', roles: w.roles }],
        services: w.catalog.map((c) => ({ type: c.type, name: c.name, endpoints: c.endpoints })),
      },
      secrets: [adminPassword, password],
    };
  }
  const images = w.resources.images.map((i) => {
    if (!('build' in i)) return i;
    if (!guest) {
      throw new StackctlError(
        'E_GUEST_IMAGE_MISSING',
        `image ${i.name} is the guest image, which this deploy was not given`,
        {
          hint: 'Build it (stackctl images build guest) and give the deploy its folder (--guest-image DIR).',
        },
      );
    }
    return {
      ...i,
      kernel: guest.kernel.toString('base64'),
      initrd: guest.initrd.toString('base64'),
      kernel_sha256: guest.kernelSha256,
      initrd_sha256: guest.initrdSha256,
      kernel_package: guest.kernelPackage,
      kernel_version: guest.kernelVersion,
      cmdline: guest.cmdline,
      root_bytes: guest.rootBytes,
    };
  });
  const r = w.resources;
  return {
    spec: {
      auth,
      flavors: r.flavors,
      images,
      ...(r.external_network ? { external_network: r.external_network } : {}),
      ...(r.tenant_network ? { tenant_network: r.tenant_network } : {}),
    },
    secrets: [adminPassword],
  };
}

/** Parse the program's output lines (other lines are ignored). */
export function parseIdentityOutput(stdout: string): IdentityAction[] {
  const out: IdentityAction[] = [];
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      out.push(JSON.parse(line) as IdentityAction);
    } catch {
      /* not ours */
    }
  }
  return out;
}

/** Run one piece of step 5's identity work; returns what it did. */
export async function runIdentityWork(
  access: IdentityRunner,
  w: IdentityWork,
  identity: IdentityAccess | undefined,
  container: string,
  secret: (name: string) => Secret | undefined,
  guest?: GuestImageData,
): Promise<IdentityAction[]> {
  if (!identity) {
    throw new StackctlError('E_NO_IDENTITY', `${w.service}: registration needs Keystone, which this plan lacks`, {
      hint: 'Place the service that provides identity (provides.identity in its file) on a role of the inventory.',
    });
  }
  const { spec, secrets } = specOf(w, identity, secret, guest);
  // SPEC is defined before the program's first line: code and data travel on stdin together.
  const text = `SPEC = ${JSON.stringify(Buffer.from(JSON.stringify(spec)).toString('base64'))}\n${identityProgram()}`;
  const r = await access.exec(['docker', 'exec', '-i', container, IDENTITY_PYTHON, '-'], {
    timeoutMs: IDENTITY_TIMEOUT_MS,
    stdin: text,
  });
  let err = r.stderr;
  for (const s of secrets) err = err.split(s).join('<redacted>');
  if (r.code !== 0) {
    const last = err.trim().split('\n').slice(-8).join('\n');
    throw new RemoteError(
      'E_IDENTITY',
      `${access.node}: ${w.kind === 'register' ? `registering ${w.service} in Keystone` : 'creating the flavours, images and networks'} failed (exit ${r.code}): ${last}`,
      {
        hint: `Is the ${container} container on ${access.node} healthy, and the internal VIP answering? The deploy can be re-run: done objects are kept.`,
      },
    );
  }
  return parseIdentityOutput(r.stdout);
}
