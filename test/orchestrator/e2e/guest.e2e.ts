/**
 * Real guests: a 1ctl-1comp container lab whose compute runs Nova's libvirt driver with QEMU's
 * emulation (TCG), deployed by `stackctl deploy` with the guest image stackctl builds as its
 * starter image. A server made with `openstack server create --nic none` goes ACTIVE, a real QEMU
 * runs it on cmp-0 with TCG's translation cache capped, and its console log (Nova's, read through
 * the API) shows the guest's ready line. Figures on stderr: deploy, ACTIVE and boot times, QEMU's
 * memory per guest (guest-image.e2e.ts, in the same script, measures it without the cap). `npm run test:e2e:guest`.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidFromName } from '../../../src/core/hash.js';
import { buildGuestImage, GUEST_KERNEL_PACKAGE, GUEST_READY_MARKER } from '../../../src/images/guest.js';
import { runCli } from '../../helpers/cli.js';
import { openstack, openstackJson } from '../../helpers/openstack.js';
import { CLOUD_IMAGES, deployLab } from '../lab.js';

const lab = deployLab('guest', '10.77', 900, { registryPort: 15121, bmcPort: 17030, compute: 'libvirt' });
/** The guest image, built once and kept between runs (cached by its inputs). */
const GUEST_DIR = join(tmpdir(), 'stackctl-test-guest');

const figures: [string, string][] = [];
const figure = (name: string, value: string): void => {
  figures.push([name, value]);
  process.stderr.write(`${name}: ${value}\n`);
};
const seconds = (t0: number): string => ((Date.now() - t0) / 1000).toFixed(1);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let openrc = '';
const os = (args: string): string => openstack(openrc, args, 300_000);
const osJson = <T>(args: string): T => openstackJson<T>(openrc, args, 300_000);

/** A shell script on cmp-0: its standard output (the test fails on a non-zero exit). */
async function onCompute(script: string): Promise<string> {
  const r = await lab.remote('cmp-0').exec(['sh', '-c', script], { timeoutMs: 120_000 });
  expect(r.code, `${script}\n${r.stderr}`).toBe(0);
  return r.stdout;
}

/** The QEMU processes on cmp-0 (they run in nova_libvirt's container, seen from the node): pid, RSS, argv. */
async function qemuProcesses(): Promise<{ pid: number; rssMiB: number; args: string; uuid: string }[]> {
  const out = await onCompute(
    'for p in $(pgrep -f qemu-system-x86_64.real || true); do ' +
      'printf "%s %s " "$p" "$(awk \'/^VmRSS/ {print $2}\' /proc/$p/status)"; tr "\\0" " " < /proc/$p/cmdline; echo; done',
  );
  return out
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [pid, rss, ...rest] = l.split(' ');
      const args = rest.join(' ');
      return {
        pid: Number(pid),
        rssMiB: Math.round(Number(rss) / 1024),
        args,
        uuid: /-uuid ([0-9a-f-]{36})/.exec(args)?.[1] ?? '',
      };
    });
}

/** Create a server and wait for ACTIVE; then wait for the guest's ready line in its console log. */
async function bootServer(name: string): Promise<{ id: string; activeS: number; readyS: number; guestS: number }> {
  const t0 = Date.now();
  const server = osJson<{ id: string; status: string }>(
    `--os-compute-api-version 2.37 server create --flavor m1.tiny --image lab-guest --nic none --wait ${name}`,
  );
  const activeS = Number(seconds(t0));
  expect(server.status).toBe('ACTIVE');
  let log = '';
  for (let i = 0; i < 120 && !log.includes(GUEST_READY_MARKER); i++) {
    await sleep(1000);
    log = os(`console log show ${server.id}`);
  }
  const readyS = Number(seconds(t0));
  expect(log, `the console log of ${name}`).toContain(GUEST_READY_MARKER);
  // the guest's own figure: seconds from its kernel's start to serving
  const guestS = Number(/stackctl-guest: ready boot_id=[0-9a-f-]+ after ([\d.]+) s/.exec(log)?.[1] ?? NaN);
  expect(log).toMatch(/stackctl-guest: virtio_net csum=N/);
  return { id: server.id, activeS, readyS, guestS };
}

describe('real guests: libvirt with QEMU TCG on a 1ctl-1comp lab', () => {
  beforeAll(async () => {
    mkdirSync(GUEST_DIR, { recursive: true });
    const t0 = Date.now();
    const guest = await buildGuestImage({ outDir: GUEST_DIR });
    figure(
      'guest image',
      `${guest.inputs.kernel.package} ${guest.inputs.kernel.version}, vmlinuz ${guest.kernel.size} B, ` +
        `initrd ${guest.initrd.size} B, ${guest.cached ? 'cached' : 'built'} in ${seconds(t0)} s`,
    );
    expect(guest.inputs.kernel.package).toBe(GUEST_KERNEL_PACKAGE);
    await lab.up(CLOUD_IMAGES);
  }, 1_800_000);
  afterAll(async () => {
    process.stderr.write(`\nFIGURES\n${figures.map(([k, v]) => `  ${k}: ${v}`).join('\n')}\n`);
    await lab.down();
  }, 180_000);

  it('deploys the whole cloud with libvirt on cmp-0 and the guest image as its starter image', async () => {
    const t0 = Date.now();
    const { report, text } = await lab.deploy({ guestImage: GUEST_DIR });
    figure('deploy (pulls included)', `${seconds(t0)} s`);
    expect(report?.ok, text).toBe(true);
    expect(text).toMatch(/resources nova-api\/flavors-images ran \(flavor m1.tiny created, image lab-guest created\)/);
    for (const c of ['nova_libvirt', 'nova_virtlogd', 'nova_compute'])
      expect((await lab.remote('cmp-0').docker.inspectContainer(c))?.state.running, c).toBe(true);
    // the node's own libvirt identity, derived from the cloud and node names
    const uuid = await onCompute(
      "docker exec nova_libvirt virsh -c qemu:///system capabilities | sed -n 's:.*<uuid>\\(.*\\)</uuid>.*:\\1:p' | head -1",
    );
    expect(uuid.trim()).toBe(uuidFromName('stackctl-node:guest/cmp-0'));
    openrc = join(lab.inventory, '..', 'guest.openrc');
    expect((await runCli('openrc', '-i', lab.inventory, '-o', openrc)).code).toBe(0);
    const hv = osJson<{ 'Hypervisor Type': string }[]>('hypervisor list --long');
    expect(hv.map((h) => h['Hypervisor Type'])).toEqual(['QEMU']);
  }, 1_800_000);

  it('openstack server create --nic none: ACTIVE, a real QEMU on cmp-0 with tb-size, the ready line in its console log', async () => {
    const s = await bootServer('guest-1');
    figure('server create --wait -> ACTIVE', `${s.activeS} s`);
    figure('server create -> ready line in console log', `${s.readyS} s (guest: kernel start -> ready ${s.guestS} s)`);
    const q = (await qemuProcesses()).find((p) => p.uuid === s.id);
    expect(q, 'a qemu-system-x86_64 process with the server uuid on cmp-0').toBeDefined();
    expect(q!.args).toMatch(/-accel tcg,tb-size=64/);
    await sleep(5000);
    const settled = (await qemuProcesses()).find((p) => p.uuid === s.id)!;
    figure('QEMU RSS per guest, tb-size 64 MiB (m1.tiny, 256 MiB RAM)', `${settled.rssMiB} MiB`);
    expect(settled.rssMiB).toBeLessThan(400);
    os(`server delete --wait ${s.id}`);
    expect((await qemuProcesses()).find((p) => p.uuid === s.id)).toBeUndefined();
  }, 900_000);

  it('nova_virt_type kvm on a compute without KVM: refused in host preparation, before step 1, naming cmp-0', async () => {
    const text = readFileSync(lab.inventory, 'utf8');
    writeFileSync(lab.inventory, text.replace('nova_virt_type: qemu', 'nova_virt_type: kvm'));
    try {
      const { report, text: out } = await lab.deploy({ guestImage: GUEST_DIR });
      expect(report?.ok, out).toBe(false);
      expect(report?.failures).toEqual([
        expect.objectContaining({
          node: 'cmp-0',
          path: 'step 4/cmp-0/host nova-compute',
          code: expect.stringMatching(/^E_HOST_(MODULE|DEVICE)$/),
        }),
      ]);
      expect(report?.steps).toEqual([]);
      expect(report?.changes).toBe(0);
    } finally {
      writeFileSync(lab.inventory, text);
      process.exitCode = undefined;
    }
  }, 600_000);
});
