/**
 * Step 5's starter images as they reach the identity program: a `build: guest` image travels with
 * the guest's kernel and initramfs and the digests their build recorded (on stdin, with the
 * program), and a deploy that was given no guest image is refused before the program runs.
 */
import { describe, expect, it } from 'vitest';
import { sha256 } from '../../src/core/hash.js';
import { Secret } from '../../src/core/secret.js';
import { runIdentityWork, type GuestImageData } from '../../src/orchestrator/identity.js';
import type { IdentityAccess, RunOnceWork } from '../../src/orchestrator/planner.js';
import type { RemoteCommand } from '../../src/remote/index.js';

const work = {
  kind: 'resources',
  node: 'ctl-0',
  service: 'nova-api',
  name: 'flavors-images',
  hash: 'h',
  resources: {
    flavors: [{ name: 'm1.tiny', vcpus: 1, ram_mb: 256, disk_gb: 1 }],
    images: [
      { name: 'lab-tiny', size_kb: 1024 },
      { name: 'lab-guest', build: 'guest' },
    ],
  },
} as unknown as Extract<RunOnceWork, { kind: 'resources' }>;

const identity: IdentityAccess = {
  authUrl: 'http://vip:5000/v3',
  region: 'RegionOne',
  adminPasswordSecret: 'keystone_admin_password',
};
const secret = (n: string) => (n === 'keystone_admin_password' ? new Secret('pw') : undefined);

const kernel = Buffer.from('kernel bytes');
const initrd = Buffer.from('initramfs bytes');
const guest: GuestImageData = {
  kernel,
  initrd,
  kernelSha256: sha256(kernel),
  initrdSha256: sha256(initrd),
  kernelPackage: 'linux-image-6.1.0-56-amd64',
  kernelVersion: '6.1.192-2',
  cmdline: 'console=ttyS0 quiet',
  rootBytes: 1048576,
};

/** A node that runs nothing, keeping what it was asked to run. */
function fakeNode() {
  const calls: { command: RemoteCommand; stdin: string }[] = [];
  return {
    calls,
    access: {
      node: 'ctl-0',
      exec: (command: RemoteCommand, opts: { stdin?: string | Buffer }) => {
        calls.push({ command, stdin: String(opts.stdin ?? '') });
        return Promise.resolve({
          code: 0,
          stdout: '{"object": "image", "name": "lab-guest", "action": "created", "detail": ""}\n',
          stderr: '',
        });
      },
    },
  };
}

describe('starter images for the identity program', () => {
  it('sends the guest image with its digests on stdin, never in the argv', async () => {
    const node = fakeNode();
    const done = await runIdentityWork(node.access as never, work, identity, 'keystone', secret, guest);
    expect(done).toEqual([{ object: 'image', name: 'lab-guest', action: 'created', detail: '' }]);
    expect(node.calls).toHaveLength(1);
    const { command, stdin } = node.calls[0]!;
    expect(command).toEqual(['docker', 'exec', '-i', 'keystone', 'python3', '-']);
    const spec = JSON.parse(
      Buffer.from(JSON.parse(/^SPEC = (".*")$/m.exec(stdin)![1]!) as string, 'base64').toString(),
    ) as { images: Record<string, unknown>[] };
    expect(spec.images[0]).toEqual({ name: 'lab-tiny', size_kb: 1024 });
    expect(spec.images[1]).toEqual({
      name: 'lab-guest',
      build: 'guest',
      kernel: kernel.toString('base64'),
      initrd: initrd.toString('base64'),
      kernel_sha256: sha256(kernel),
      initrd_sha256: sha256(initrd),
      kernel_package: 'linux-image-6.1.0-56-amd64',
      kernel_version: '6.1.192-2',
      cmdline: 'console=ttyS0 quiet',
      root_bytes: 1048576,
    });
  });

  it('refuses a guest starter image when the deploy was given no guest image, before the program runs', async () => {
    const node = fakeNode();
    await expect(runIdentityWork(node.access as never, work, identity, 'keystone', secret)).rejects.toMatchObject({
      code: 'E_GUEST_IMAGE_MISSING',
    });
    expect(node.calls).toEqual([]);
  });
});
