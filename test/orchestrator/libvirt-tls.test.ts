/**
 * libvirt's TLS listener for live migration, for real: two `nova_libvirt` containers of the
 * nova-compute image, each started as the plan renders it (start-libvirtd.sh, libvirtd.conf,
 * qemu.conf, the node's own certificate from `certs generate`) on a Docker network with the
 * computes' planned addresses. One compute's libvirtd connects to the other's over
 * qemu+tls:// with its own client certificate, as a live migration's source does; a client
 * with a certificate of another CA, and plain TCP, are refused.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { X509Certificate } from 'node:crypto';
import { loadAll, planOf } from '../../src/cli/context.js';
import { certificateReader } from '../../src/cli/status.js';
import { generateKeyPair, issueCertificate } from '../../src/certs/x509.js';
import { copyInventory, runCli, tempDir } from '../helpers/cli.js';
import { dockerOrFail, testImages } from '../images/fixture.js';

const NET = 'stackctl-libvirt-tls';
const SUBNET = '10.231.86';
const NODES = ['cmp-0', 'cmp-1'] as const;
const container = (node: string): string => `stackctl-libvirt-tls-${node}`;
const LIBVIRT = '/etc/stackctl/nova-libvirt/';

let image = '';
let inventoryFile = '';
const addr: Record<string, string> = {};
const dirs: string[] = [];

const docker = (args: string[], timeout = 120_000) => spawnSync('docker', args, { encoding: 'utf8', timeout });

function cleanup(): void {
  for (const n of [...NODES, 'stranger']) docker(['rm', '-f', container(n)]);
  docker(['network', 'rm', NET]);
}

/** The lab inventory with two libvirt computes migrating over TLS, internal_api on SUBNET. */
async function inventory(): Promise<string> {
  const file = copyInventory('lab.yaml');
  dirs.push(dirname(file));
  let text = readFileSync(file, 'utf8')
    .replace('nova_compute_driver: fake.FakeDriver', 'nova_compute_driver: libvirt.LibvirtDriver')
    .replace('    nova_virt_type: qemu\n', '    nova_virt_type: qemu\n    nova_live_migration_transport: tls\n')
    .replaceAll('172.17.0.', `${SUBNET}.`);
  const cmp = /\n {2}- name: cmp-0\n(?: {4}.*\n)+/.exec(text)![0];
  text = text.replace(
    cmp,
    cmp + cmp.replaceAll('cmp-0', 'cmp-1').replace(/'52:54:00:00:20:01'/, "'52:54:00:00:20:02'"),
  );
  writeFileSync(file, `${text}tls: { public: false }\n`);
  for (const cmd of [
    ['secrets', 'generate'],
    ['certs', 'generate'],
  ]) {
    const r = await runCli(...cmd, '-i', file);
    expect(r.code, r.stderr).toBe(0);
  }
  return file;
}

/** `virsh -c URI hostname` in a container. */
const virsh = (node: string, uri: string) =>
  docker(['exec', container(node), 'timeout', '30', 'virsh', '-c', uri, 'hostname'], 60_000);

describe("libvirt's TLS listener between two computes (nova_live_migration_transport: tls)", () => {
  beforeAll(async () => {
    const engine = await dockerOrFail();
    image = (await testImages(engine, ['nova-compute'])).find((b) => b.key === 'nova-compute')!.ref;
    cleanup();
    const inv = await inventory();
    inventoryFile = inv;
    const all = loadAll({ inventory: inv });
    const p = planOf(all);
    expect(docker(['network', 'create', '--subnet', `${SUBNET}.0/24`, NET]).status).toBe(0);
    const spec = all.catalog.services.get('nova-compute')!.containers.find((c) => c.name === 'nova_libvirt')!;
    for (const node of NODES) {
      addr[node] = all.allocation.addresses.get(node)!['internal_api']!;
      const dir = tempDir();
      dirs.push(dir);
      for (const [dest, text] of p.rendered.get(node)!) {
        if (!dest.startsWith(LIBVIRT)) continue;
        const f = join(dir, dest.slice(LIBVIRT.length));
        mkdirSync(dirname(f), { recursive: true });
        writeFileSync(f, text, { mode: 0o600 });
      }
      const r = docker([
        'run',
        '-d',
        '--name',
        container(node),
        '--hostname',
        node,
        // privileged, as the deploy runs nova_libvirt (a plain --privileged fails on this kind of host: lab.ts)
        '--cap-add',
        'ALL',
        '--cap-drop',
        'SYS_RESOURCE',
        '--security-opt',
        'seccomp=unconfined',
        '--security-opt',
        'apparmor=unconfined',
        '--network',
        NET,
        '--ip',
        addr[node]!,
        '-v',
        `${dir}:/etc/stackctl/libvirt:ro`,
        image,
        ...spec.command!,
      ]);
      expect(r.status, r.stderr).toBe(0);
    }
    for (const node of NODES) {
      const deadline = Date.now() + 90_000;
      for (;;) {
        const v = docker(['exec', container(node), 'virsh', '-c', 'qemu:///system', 'version'], 30_000);
        if (v.status === 0) break;
        if (Date.now() > deadline || /is not running/.test(v.stderr))
          throw new Error(
            `libvirtd on ${node} did not answer: ${v.stderr}\n${docker(['logs', container(node)]).stderr}`,
          );
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }, 1_800_000);

  afterAll(() => {
    cleanup();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it("connects one compute's libvirtd to the other's over TLS with the node certificates, by address", () => {
    for (const [from, to] of [
      ['cmp-0', 'cmp-1'],
      ['cmp-1', 'cmp-0'],
    ] as const) {
      const r = virsh(from, `qemu+tls://${addr[to]}/system`);
      expect(r.status, `${from} -> ${to}: ${r.stderr}`).toBe(0);
      expect(r.stdout.trim()).toBe(to);
    }
    // the key where QEMU reads it is nova's alone
    const ls = docker([
      'exec',
      container('cmp-0'),
      'stat',
      '-c',
      '%U %a',
      '/etc/pki/qemu/server-key.pem',
      '/etc/pki/libvirt/private/serverkey.pem',
    ]);
    expect(ls.stdout.trim().split('\n')).toEqual(['nova 600', 'root 600']);
  });

  it("has status read each compute's certificate where libvirtd serves it: the one in the node's files", async () => {
    const all = loadAll({ inventory: inventoryFile });
    const read = await certificateReader(all, planOf(all).effective)!();
    for (const node of NODES) {
      const served = read.find((c) => c.name === `node-${node}`);
      expect(served, `status read no certificate of ${node}`).toBeDefined();
      expect(served!.where).toBe(`${addr[node]}:16514`);
      expect(served!.error).toBeUndefined();
      const pem = readFileSync(inventoryFile.replace(/\.yaml$/, `.certs/node-${node}.pem`), 'utf8');
      const file = new X509Certificate(pem);
      expect(served!.notAfter!.getTime()).toBe(new Date(file.validTo).getTime());
      expect(served!.subject).toContain(node);
    }
  });

  it('listens on TLS only: plain TCP is closed', () => {
    const r = virsh('cmp-0', `qemu+tcp://${addr['cmp-1']}/system`);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Connection refused|unable to connect/i);
  });

  it("refuses a client whose certificate another CA issued: the server checks the client's", async () => {
    // a stranger on the migration network, with the image's libvirt client
    const ip = `${SUBNET}.200`;
    const run = docker([
      'run',
      '-d',
      '--name',
      container('stranger'),
      '--network',
      NET,
      '--ip',
      ip,
      '--entrypoint',
      'sleep',
      image,
      '600',
    ]);
    expect(run.status, run.stderr).toBe(0);
    // its own CA and a client certificate from it (what a node of another cloud would hold)
    const caKeys = await generateKeyPair();
    const now = Date.now();
    const validity = { notBefore: new Date(now - 60_000), notAfter: new Date(now + 86_400_000) };
    const caPem = await issueCertificate(
      { commonName: 'other CA', ca: true, publicKeyPem: caKeys.publicKeyPem, ...validity },
      caKeys,
    );
    const keys = await generateKeyPair();
    const certPem = await issueCertificate(
      {
        commonName: 'stranger',
        sans: { dns: ['stranger'], ip: [ip] },
        ca: false,
        clientAuth: true,
        publicKeyPem: keys.publicKeyPem,
        ...validity,
      },
      { certPem: caPem, keyPem: caKeys.keyPem },
    );
    // it trusts both CAs (so that its own certificate and the server's pass its client's checks):
    // only the server's check of the client certificate can stop it
    const cloudCa = docker(['exec', container('cmp-0'), 'cat', '/etc/pki/CA/cacert.pem']).stdout;
    const script =
      'mkdir -p /etc/pki/CA /etc/pki/libvirt/private && cat > /etc/pki/CA/cacert.pem && ' +
      'printf "%s" "$CERT" > /etc/pki/libvirt/clientcert.pem && printf "%s" "$KEY" > /etc/pki/libvirt/private/clientkey.pem';
    const put = spawnSync(
      'docker',
      ['exec', '-i', '-e', 'CERT', '-e', 'KEY', container('stranger'), 'sh', '-c', script],
      {
        input: cloudCa + caPem,
        encoding: 'utf8',
        env: { ...process.env, CERT: certPem, KEY: keys.keyPem },
      },
    );
    expect(put.status, put.stderr).toBe(0);
    const other = virsh('stranger', `qemu+tls://${addr['cmp-1']}/system`);
    process.stderr.write(`another CA's client certificate: ${other.stderr.trim()}\n`);
    expect(other.status).not.toBe(0);
    expect(other.stdout).not.toContain('cmp-1');
    // the server said why
    const logs = docker(['logs', container('cmp-1')]);
    process.stderr.write(`cmp-1's libvirtd: ${(logs.stdout + logs.stderr).trim().split('\n').slice(-3).join('\n')}\n`);
    expect(logs.stdout + logs.stderr).toMatch(/authentication failed: Failed to verify peer's certificate/);
  });
});
