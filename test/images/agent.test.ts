/**
 * The deploy agent's own logic, run by the same busybox (Debian
 * busybox-static) the ramdisk carries, against a sysfs tree made here and
 * files standing in for disks: root device hints, the checked image write
 * (through RAM, or streamed), the partition stretch, the cleaning wipe, the
 * SSH host key made with the deployed system's own ssh-keygen (here a small
 * root file system holding this machine's ssh-keygen and its libraries), and
 * the command loop's answer to a refused or cut-short command. The whole
 * chain in a VM is in test/provision/deploy-e2e.test.ts.
 */
import { createHash, randomBytes } from 'node:crypto';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Secret } from '../../src/core/secret.js';
import { BootServer, type AgentReport } from '../../src/pxe/http.js';
import { defaultRamdiskSourceDir } from '../../src/images/ramdisk.js';
import { parsePublicKey } from '../../src/remote/keys.js';

const BUSYBOX = '/bin/busybox';
const GiB = 1024 ** 3;

let dir: string;
let server: BootServer;
const reports: AgentReport[] = [];
let token = '';
const raw = Buffer.concat([Buffer.alloc(512), randomBytes(3 * 1024 * 1024)]);
// an MBR partition entry: start 2048, 4096 sectors
raw.writeUInt32LE(2048, 454);
raw.writeUInt32LE(4096, 458);
const gz = gzipSync(raw);
const sum = createHash('sha256').update(gz).digest('hex');

/**
 * Run `script` in busybox ash after sourcing the agent's functions.
 * NOTE: asynchronous: the boot server it talks to runs in this process.
 */
async function agent(
  script: string,
  env: Record<string, string> = {},
): Promise<{ code: number; out: string; err: string }> {
  const child = spawn(BUSYBOX, ['sh', '-c', `. "$AGENT"; ${script}`], {
    env: {
      PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
      AGENT: join(defaultRamdiskSourceDir(), 'agent.sh'),
      STACKCTL_AGENT_LIB: '1',
      STACKCTL_SYSFS: join(dir, 'sys'),
      STACKCTL_DEVDIR: join(dir, 'dev'),
      STACKCTL_WORK: join(dir, 'work'),
      ...env,
    },
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number>((resolve) => child.on('close', (c) => resolve(c ?? -1)));
  return { code, out: out.trim(), err: err.trim() };
}

/** A disk in the fake sysfs. */
function disk(name: string, bytes: number, attrs: { serial?: string; model?: string; rotational?: 0 | 1 } = {}): void {
  const d = join(dir, 'sys', 'block', name);
  mkdirSync(join(d, 'device'), { recursive: true });
  mkdirSync(join(d, 'queue'), { recursive: true });
  writeFileSync(join(d, 'size'), `${bytes / 512}\n`);
  if (attrs.serial) writeFileSync(join(d, 'serial'), `${attrs.serial}\n`);
  if (attrs.model) writeFileSync(join(d, 'device', 'model'), `${attrs.model}  \n`);
  writeFileSync(join(d, 'queue', 'rotational'), `${attrs.rotational ?? 0}\n`);
}

function hints(lines: string[]): string {
  const f = join(dir, 'work', 'hints.test');
  writeFileSync(f, lines.map((l) => l + '\n').join(''));
  return f;
}

beforeAll(async () => {
  const r = spawnSync(BUSYBOX, ['true']);
  if (r.status !== 0) throw new Error(`${BUSYBOX} is missing: run "apt-get install busybox-static"`);
  dir = mkdtempSync(join(tmpdir(), 'stackctl-agent-'));
  mkdirSync(join(dir, 'work'), { recursive: true });
  mkdirSync(join(dir, 'dev'), { recursive: true });
  disk('vda', 8 * GiB, { serial: 'OS-DISK', model: 'QEMU HARDDISK', rotational: 0 });
  disk('vdb', 20 * GiB, { serial: 'DATA-1', model: 'QEMU HARDDISK', rotational: 1 });
  disk('loop0', 1 * GiB);
  mkdirSync(join(dir, 'files'));
  writeFileSync(join(dir, 'files', 'host.img.gz'), gz);
  server = await BootServer.start({
    host: '127.0.0.1',
    port: 0,
    filesDir: join(dir, 'files'),
    kernel: 'vmlinuz',
    initrd: 'initrd.gz',
    // the agent runs on this machine: the node's lease address is loopback here
    nodes: [{ name: 'n1', mac: '52:54:00:00:00:01', ip: '127.0.0.1' }],
    onReport: (r) => void reports.push(r),
    newToken: () => (token = randomBytes(32).toString('base64url')),
  });
});

afterAll(async () => {
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('root device hints', () => {
  it('picks the one disk the hints match', async () => {
    const r = await agent(`select_root_disk "${hints(['serial DATA-1'])}" 1000000`);
    expect(r).toMatchObject({ code: 0, out: '/dev/vdb' });
    expect((await agent(`select_root_disk "${hints(['model HARDDISK', 'rotational 0'])}" 1000`)).out).toBe('/dev/vda');
    expect((await agent(`select_root_disk "${hints(['min_size_gb 10'])}" 1000`)).out).toBe('/dev/vdb');
    expect((await agent(`select_root_disk "${hints(['size_gb 8'])}" 1000`)).out).toBe('/dev/vda');
  });

  it('without hints, takes the smallest disk the image fits on (loop devices are not disks)', async () => {
    expect((await agent(`select_root_disk "${hints([])}" 1000`)).out).toBe('/dev/vda');
    expect((await agent(`select_root_disk "${hints([])}" ${10 * GiB}`)).out).toBe('/dev/vdb');
  });

  it('refuses hints that match no disk, listing the disks seen', async () => {
    const r = await agent(`select_root_disk "${hints(['serial NOPE'])}" 1000`);
    expect(r.code).toBe(1);
    expect(r.out).toBe(
      'root device hints (serial NOPE) match 0 disks; disks seen: ' +
        `/dev/vda ${8 * GiB} bytes serial OS-DISK model QEMU HARDDISK; /dev/vdb ${20 * GiB} bytes serial DATA-1 model QEMU HARDDISK`,
    );
  });

  it('refuses hints that match several disks, naming them', async () => {
    const r = await agent(`select_root_disk "${hints(['model QEMU'])}" 1000`);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/^root device hints \(model QEMU\) match 2 disks \(vda vdb\); disks seen: \/dev\/vda/);
  });

  it('refuses a disk smaller than the image', async () => {
    const r = await agent(`select_root_disk "${hints(['serial OS-DISK'])}" ${9 * GiB}`);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/^\/dev\/vda \(8589934592 bytes\) is smaller than the 9663676416-byte image; disks seen:/);
  });
});

describe('image write', () => {
  it('downloads the image into RAM, checks it, then writes it', async () => {
    const target = join(dir, 'dev', 'vda');
    writeFileSync(target, Buffer.alloc(raw.length + 1024 * 1024, 0xee));
    const r = await agent(`write_image "${server.url}/files/host.img.gz" ${sum} "${target}" ${gz.length}`);
    expect(r).toMatchObject({ code: 0 });
    expect(readFileSync(target).subarray(0, raw.length).equals(raw)).toBe(true);
    expect(readFileSync(join(dir, 'work', 'timings'), 'utf8')).toMatch(
      /^,"image-transfer":[\d.]+,"verify-image":[\d.]+,"write-image":[\d.]+$/,
    );
  });

  it('refuses an image whose checksum differs before writing anything', async () => {
    const target = join(dir, 'dev', 'vda');
    writeFileSync(target, Buffer.alloc(raw.length, 0xee));
    const wrong = 'f'.repeat(64);
    const r = await agent(`write_image "${server.url}/files/host.img.gz" ${wrong} "${target}" ${gz.length}`);
    expect(r.code).toBe(1);
    expect(r.out).toBe(`image sha256 mismatch: expected ${wrong}, downloaded ${sum} (nothing written to ${target})`);
    expect(readFileSync(target).every((b) => b === 0xee)).toBe(true);
  });

  it('streams, checks and writes in one pass when the size is unknown or too big for RAM', async () => {
    const target = join(dir, 'dev', 'vda');
    writeFileSync(target, Buffer.alloc(raw.length + 1024 * 1024, 0xee));
    const r = await agent(`write_image "${server.url}/files/host.img.gz" ${sum} "${target}" 0`);
    expect(r).toMatchObject({ code: 0 });
    expect(readFileSync(target).subarray(0, raw.length).equals(raw)).toBe(true);
  });

  it('when streaming, refuses an image whose checksum differs and wipes the first MiB, so the disk cannot boot it', async () => {
    const target = join(dir, 'dev', 'vda');
    writeFileSync(target, Buffer.alloc(raw.length, 0xee));
    const wrong = 'f'.repeat(64);
    const r = await agent(`write_image "${server.url}/files/host.img.gz" ${wrong} "${target}" 0`);
    expect(r.code).toBe(1);
    expect(r.out).toBe(`image sha256 mismatch: expected ${wrong}, streamed ${sum} (first MiB of ${target} wiped)`);
    const written = readFileSync(target);
    expect(written.subarray(0, 1024 * 1024).every((b) => b === 0)).toBe(true);
  });

  it('reports a download that fails', async () => {
    const target = join(dir, 'dev', 'vda');
    for (const size of [0, gz.length]) {
      const r = await agent(`write_image "${server.url}/files/missing.img.gz" ${sum} "${target}" ${size}`);
      expect(r.code).toBe(1);
      expect(r.out).toMatch(/^download failed: .*404/);
    }
  });

  it('stretches the first partition to the end of the disk', async () => {
    const target = join(dir, 'dev', 'vda');
    writeFileSync(target, raw);
    // the fake sysfs says vda has 8 GiB
    const r = await agent(`grow_partition "${target}"`);
    expect(r.code).toBe(0);
    expect(readFileSync(target).readUInt32LE(458)).toBe((8 * GiB) / 512 - 2048);
  });
});

describe('cleaning', () => {
  it('wipes the first and the last MiB of every disk', async () => {
    rmSync(join(dir, 'sys', 'block', 'vdb'), { recursive: true });
    rmSync(join(dir, 'sys', 'block', 'loop0'), { recursive: true });
    disk('vda', 4 * 1024 * 1024);
    const target = join(dir, 'dev', 'vda');
    writeFileSync(target, Buffer.alloc(4 * 1024 * 1024, 0xee));
    server.arm('n1', 'clean', { kind: 'clean' });
    const r = await agent(`API=${server.url} NODE=n1 TOKEN=${token}; do_clean`);
    expect(r.err).toContain('cleaned: /dev/vda');
    if (r.code !== 0) console.log(r.err);
    expect(r.code).toBe(0);
    // the result spent the token
    expect(server.isArmed('n1')).toBe(false);
    const result = reports.find((x) => x.endpoint === 'result');
    expect(result?.body).toMatchObject({
      status: 'ok',
      step: 'clean',
      message: 'wiped the partition tables and ends of: /dev/vda',
      timings: { clean: expect.any(Number) },
    });
    const d = readFileSync(target);
    const MiB = 1024 * 1024;
    expect(d.subarray(0, MiB).every((b) => b === 0)).toBe(true);
    expect(d.subarray(MiB, 3 * MiB).every((b) => b === 0xee)).toBe(true);
    expect(d.subarray(3 * MiB).every((b) => b === 0)).toBe(true);
  });
});

/**
 * A root file system with just enough to run this machine's ssh-keygen in a
 * chroot, as the agent runs the deployed image's: the binary, the libraries
 * and loader `ldd` names, and root in /etc/passwd (ssh-keygen looks itself up).
 */
function keygenRoot(root: string): void {
  const ldd = spawnSync('ldd', ['/usr/bin/ssh-keygen'], { encoding: 'utf8' });
  if (ldd.status !== 0) throw new Error(`ldd /usr/bin/ssh-keygen failed: run "apt-get install openssh-client"`);
  const files = ['/usr/bin/ssh-keygen', ...[...ldd.stdout.matchAll(/(\/\S+) \(0x/g)].map((m) => m[1]!)];
  for (const f of files) {
    mkdirSync(join(root, dirname(f)), { recursive: true });
    copyFileSync(f, join(root, f));
  }
  mkdirSync(join(root, 'etc'), { recursive: true });
  writeFileSync(join(root, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
  writeFileSync(join(root, 'etc', 'nsswitch.conf'), 'passwd: files\n');
}

describe('SSH host key', () => {
  it('is made in the deployed system by its own ssh-keygen; only the public line comes out', async () => {
    const root = join(dir, 'keygen-root');
    keygenRoot(root);
    const r = await agent(`host_key "${root}" ed25519 root@n1`);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/^ssh-ed25519 [A-Za-z0-9+/]+=* root@n1$/);
    expect(parsePublicKey(r.out).type).toBe('ssh-ed25519');
    const key = join(root, 'etc', 'ssh', 'ssh_host_ed25519_key');
    expect(readFileSync(key, 'utf8')).toMatch(/^-----BEGIN OPENSSH PRIVATE KEY-----/);
    expect(statSync(key).mode & 0o777).toBe(0o600);
    expect(readFileSync(`${key}.pub`, 'utf8').trim()).toBe(r.out);
    // the fingerprint is on the console for the operator to compare; the private key is not
    expect(r.err).toMatch(/SSH host key: 256 SHA256:\S+ root@n1 \(ED25519\)/);
    expect(r.out + r.err).not.toContain('PRIVATE');
    // /dev was lent for the run only
    expect(readFileSync('/proc/self/mounts', 'utf8')).not.toContain(join(root, 'dev'));
    // a key that came with the image is replaced, not kept
    const again = await agent(`host_key "${root}" ed25519 root@n1`);
    expect(again.code, again.err).toBe(0);
    expect(again.out).not.toBe(r.out);
  });

  it('says why when the image has no ssh-keygen', async () => {
    const root = join(dir, 'no-keygen-root');
    mkdirSync(join(root, 'etc'), { recursive: true });
    const r = await agent(`host_key "${root}" ed25519 root@n1`);
    expect(r).toMatchObject({
      code: 1,
      out: 'the image has no /usr/bin/ssh-keygen (Debian openssh-client) to make the SSH host key',
    });
  });
});

describe('command loop', () => {
  it('ends the boot with a failed result when the command is refused (it is handed out once)', async () => {
    reports.length = 0;
    server.arm('n1', 'deploy', {
      kind: 'deploy',
      image: 'host.img.gz',
      sha256: sum,
      rawBytes: raw.length,
      bytes: gz.length,
      hints: {},
      files: [{ path: '/etc/secret', mode: 0o600, content: new Secret('s3cret') }],
    });
    // someone (or an earlier try of this agent) already took it
    const taken = await fetch(`${server.url}/v1/agent/n1/command`, { headers: { Authorization: `Bearer ${token}` } });
    expect(taken.status).toBe(200);
    const r = await agent(`API=${server.url} NODE=n1 TOKEN=${token}; command_loop`);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/command refused: .*403/);
    expect(reports.find((x) => x.endpoint === 'result')?.body).toMatchObject({
      status: 'failed',
      step: 'command',
      message: expect.stringMatching(/^the boot server refused the command \(.*403.*\)$/),
    });
    expect(server.isArmed('n1')).toBe(false);
    server.disarm('n1');
  });

  it('asks again for a command that was cut short (no `end` line), and acts on the whole one', async () => {
    const answers = ['deploy\nimage http://x/host.img.gz ' + sum, 'poweroff\nend\n'];
    const asked: string[] = [];
    const api = createServer((req, res) => {
      asked.push(req.url ?? '');
      res.end(answers.shift() ?? 'wait\nend\n');
    });
    await new Promise<void>((r) => api.listen(0, '127.0.0.1', () => r()));
    try {
      const url = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
      const r = await agent(`API=${url} NODE=n1 TOKEN=t; command_loop`);
      expect(r.code, r.err).toBe(0);
      expect(r.err).toMatch(/the command was cut short \(\d+ bytes\): asking again/);
      // the cut-short deploy was never started: nothing but the two command requests
      expect(asked).toEqual(['/v1/agent/n1/command', '/v1/agent/n1/command']);
    } finally {
      api.close();
    }
  }, 20_000);
});
