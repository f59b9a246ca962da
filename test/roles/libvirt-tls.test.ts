/**
 * Live migration over TLS as the plan and `certs generate` make it (nova_live_migration_transport
 * tls): each compute gets a certificate of its own from the cloud's CA (server and client, its
 * names and addresses), libvirtd listens on TLS on the migration network with it, Nova dials
 * qemu+tls:// and QEMU streams over TLS; the key reaches only its own node, in a 0600 file.
 */
import { X509Certificate, createPrivateKey, createPublicKey } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAll, nodeCertSubjects, planOf } from '../../src/cli/context.js';
import { certificateReader } from '../../src/cli/status.js';
import type { PlanResult } from '../../src/roles/plan.js';
import { copyInventory, runCli } from '../helpers/cli.js';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** The lab inventory with libvirt, migration over `transport`, `tail` appended; secrets (and certificates) generated. */
async function inventory(transport: string, tail: string, certs: boolean): Promise<string> {
  const file = copyInventory('lab.yaml');
  dirs.push(dirname(file));
  const text = readFileSync(file, 'utf8')
    .replace('nova_compute_driver: fake.FakeDriver', 'nova_compute_driver: libvirt.LibvirtDriver')
    .replace(
      '    nova_virt_type: qemu\n',
      `    nova_virt_type: qemu\n    nova_live_migration_transport: ${transport}\n`,
    );
  writeFileSync(file, text + tail);
  expect((await runCli('secrets', 'generate', '-i', file)).code).toBe(0);
  if (certs) {
    const r = await runCli('certs', 'generate', '-i', file);
    expect(r.code, r.stderr).toBe(0);
  }
  return file;
}

const LIBVIRT = '/etc/stackctl/nova-libvirt';
const file = (p: PlanResult, node: string, dest: string): string => p.rendered.get(node)!.get(dest)!;
const configOf = (p: PlanResult, node: string, dest: string) =>
  p.plan.nodes.find((n) => n.name === node)!.configs.find((c) => c.dest === dest)!;

describe('live migration over TLS (nova_live_migration_transport: tls)', () => {
  it("issues each compute a server-and-client certificate of the cloud's CA naming it, and none to the controller", async () => {
    const inv = await inventory('tls', 'tls: {}\n', false);
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^node-cmp-0: created .*node-cmp-0\.pem$/m);
    expect(r.stdout).not.toMatch(/node-ctl-0/);
    const dir = inv.replace(/\.yaml$/, '.certs');
    const ca = new X509Certificate(readFileSync(`${dir}/ca.pem`));
    const cert = new X509Certificate(readFileSync(`${dir}/node-cmp-0.pem`));
    expect(cert.verify(ca.publicKey)).toBe(true);
    const addr = loadAll({ inventory: inv }).allocation.addresses.get('cmp-0')!;
    for (const ip of Object.values(addr)) expect(cert.subjectAltName).toContain(`IP Address:${ip}`);
    expect(cert.subjectAltName).toContain('DNS:cmp-0.lab.local');
    expect(cert.checkHost('cmp-0')).toBe('cmp-0');
    // both purposes: libvirtd serves with it and connects to the other computes with it
    const text = execFileSync('openssl', ['x509', '-noout', '-ext', 'extendedKeyUsage'], {
      input: readFileSync(`${dir}/node-cmp-0.pem`),
      encoding: 'utf8',
    });
    expect(text).toMatch(/TLS Web Server Authentication, TLS Web Client Authentication/);
    // the key: 0600, matching
    const key = `${dir}/node-cmp-0.key`;
    expect((await import('node:fs')).statSync(key).mode & 0o777).toBe(0o600);
    expect(cert.checkPrivateKey(createPrivateKey(readFileSync(key)))).toBe(true);
    // run again: kept byte for byte
    const again = await runCli('certs', 'generate', '-i', inv);
    expect(again.stdout).toMatch(/^node-cmp-0: kept /m);
    // listed, and renewable by name
    const list = await runCli('certs', 'list', '-i', inv, '--json');
    expect((JSON.parse(list.stdout) as { certificates: { name: string }[] }).certificates.map((x) => x.name)).toContain(
      'node-cmp-0',
    );
    const renew = await runCli('certs', 'renew', '-i', inv, '--cert', 'node-cmp-0');
    expect(renew.code, renew.stderr).toBe(0);
    expect(renew.stdout).toMatch(/^node-cmp-0: reissued .*\(renewal asked for/m);
  });

  it('renders libvirtd, QEMU and Nova for TLS, with the key of each compute in its own 0600 file', async () => {
    const inv = await inventory('tls', 'tls: {}\n', true);
    const all = loadAll({ inventory: inv });
    const p = planOf(all);
    const addr = all.allocation.addresses.get('cmp-0')!['internal_api']!;
    const libvirtd = file(p, 'cmp-0', `${LIBVIRT}/libvirtd.conf`);
    expect(libvirtd).toMatch(/^listen_tls = 1$/m);
    expect(libvirtd).toMatch(/^listen_tcp = 0$/m);
    expect(libvirtd).toContain(`listen_addr = "${addr}"`);
    expect(libvirtd).toMatch(/^tls_no_verify_certificate = 0$/m);
    expect(file(p, 'cmp-0', `${LIBVIRT}/qemu.conf`)).toMatch(/^default_tls_x509_cert_dir = "\/etc\/pki\/qemu"$/m);
    const nova = file(p, 'cmp-0', '/etc/stackctl/nova-compute/nova.conf');
    expect(nova).toMatch(/^live_migration_scheme = tls$/m);
    expect(nova).toContain(`live_migration_inbound_addr = ${addr}\n`);
    expect(nova).toMatch(/^live_migration_with_native_tls = true$/m);
    // the node's certificate, its key and the CA
    const dir = inv.replace(/\.yaml$/, '.certs');
    expect(file(p, 'cmp-0', `${LIBVIRT}/tls/node.pem`).trim()).toBe(
      readFileSync(`${dir}/node-cmp-0.pem`, 'utf8').trim(),
    );
    expect(file(p, 'cmp-0', `${LIBVIRT}/tls/ca.pem`).trim()).toBe(readFileSync(`${dir}/ca.pem`, 'utf8').trim());
    const keyPem = file(p, 'cmp-0', `${LIBVIRT}/tls/node.key`);
    expect(new X509Certificate(readFileSync(`${dir}/node-cmp-0.pem`)).checkPrivateKey(createPrivateKey(keyPem))).toBe(
      true,
    );
    expect(configOf(p, 'cmp-0', `${LIBVIRT}/tls/node.key`).mode).toBe('0600');
    // only nova_libvirt mounts the key's folder: nova_compute's own (which set-configs.sh copies into
    // /etc/nova for the nova user) holds none of it
    const novaCompute = all.catalog.services.get('nova-compute')!.containers!.find((c) => c.name === 'nova_compute')!;
    const mounted = (novaCompute.volumes ?? []).map((v) => v.split(':')[0]!).filter((v) => v.startsWith('/'));
    expect(mounted).toContain('/etc/stackctl/nova-compute');
    for (const [path, text] of p.rendered.get('cmp-0')!)
      if (mounted.some((m) => path.startsWith(`${m}/`))) expect(text, path).not.toContain(keyPem.trim().split('\n')[1]);
    expect(mounted.some((m) => `${LIBVIRT}/tls/node.key`.startsWith(`${m}/`))).toBe(false);
    // the controller runs no nova-compute: no such file, and no other node's key anywhere on it
    expect(p.rendered.get('ctl-0')!.has(`${LIBVIRT}/tls/node.key`)).toBe(false);
    const pub = createPublicKey(createPrivateKey(keyPem)).export({ type: 'spki', format: 'pem' }).toString();
    for (const [node, files] of p.rendered)
      if (node !== 'cmp-0') for (const text of files.values()) expect(text).not.toContain(keyPem.trim().split('\n')[1]);
    expect(pub).toMatch(/PUBLIC KEY/);
    // the start script installs the files where libvirt and QEMU look, then starts libvirtd
    const start = file(p, 'cmp-0', `${LIBVIRT}/start-libvirtd.sh`);
    expect(start).toContain('/etc/pki/libvirt/private/serverkey.pem');
    expect(start).toContain('install -o nova -g nova -m 0600 "$tls/node.key" /etc/pki/qemu/server-key.pem');
    expect(start.trimEnd().split('\n').at(-1)).toBe('exec libvirtd --listen');
    execFileSync('sh', ['-n'], { input: start });
    // the printed plan (no secrets): the key a placeholder, the certificate shown
    const shown = planOf({ ...all, secrets: undefined });
    expect(file(shown, 'cmp-0', `${LIBVIRT}/tls/node.key`)).toContain('<secret:tls_node_key>');
    expect(file(shown, 'cmp-0', `${LIBVIRT}/tls/node.pem`)).toContain('BEGIN CERTIFICATE');
  });

  it("has status read each node's certificate where libvirtd serves it (port and network from the service file)", async () => {
    const inv = await inventory('tls', 'tls: { public: false }\n', true);
    const all = loadAll({ inventory: inv });
    // the listener the service file declares is the one libvirtd.conf renders
    const served = all.catalog.services.get('nova-compute')!.node_certificate!.served!;
    expect(served).toEqual({ port: 16514, network_setting: 'nova_migration_network' });
    const conf = file(planOf(all), 'cmp-0', `${LIBVIRT}/libvirtd.conf`);
    const host = all.allocation.addresses.get('cmp-0')!['internal_api']!;
    expect(conf).toMatch(new RegExp(`^tls_port = "${served.port}"$`, 'm'));
    expect(conf).toContain(`listen_addr = "${host}"`);
    expect(nodeCertSubjects(all).map((n) => [n.node, n.served])).toEqual([['cmp-0', { host, port: 16514 }]]);
    // no libvirtd here: the CA read from its file, the node's certificate an error naming the listener
    // (a failure to read it fails the status; the real listener is read in test/orchestrator/libvirt-tls.test.ts)
    const read = await certificateReader(all, planOf(all).effective)!();
    expect(read.map((c) => [c.name, c.where.replace(/^.*\//, ''), c.error === undefined])).toEqual([
      ['ca', 'ca.pem', true],
      ['node-cmp-0', `${host}:16514`, false],
    ]);
  }, 30_000);

  it('renders nothing of TLS with another transport: empty certificate files, no TLS listener', async () => {
    const inv = await inventory('tcp', 'tls: {}\n', true);
    const p = planOf(loadAll({ inventory: inv }));
    for (const f of ['tls/node.pem', 'tls/node.key', 'tls/ca.pem'])
      expect(file(p, 'cmp-0', `${LIBVIRT}/${f}`).trim(), f).toBe('');
    expect(file(p, 'cmp-0', `${LIBVIRT}/libvirtd.conf`)).toMatch(/^listen_tls = 0$/m);
    expect(file(p, 'cmp-0', `${LIBVIRT}/start-libvirtd.sh`)).not.toContain('/etc/pki');
    expect(file(p, 'cmp-0', `${LIBVIRT}/qemu.conf`)).not.toContain('tls');
    expect(readFileSync(inv, 'utf8')).toContain('nova_live_migration_transport: tcp');
    const certs = await runCli('certs', 'list', '-i', inv, '--json');
    expect(
      (JSON.parse(certs.stdout) as { certificates: { name: string }[] }).certificates.map((x) => x.name),
    ).not.toContain('node-cmp-0');
  });

  it("refuses without the inventory's tls: section (E_TLS_REQUIRED) and without the node's certificate (E_CERT_MISSING)", async () => {
    const bare = await inventory('tls', '', false);
    expect(() => planOf(loadAll({ inventory: bare }))).toThrow(
      expect.objectContaining({
        code: 'E_TLS_REQUIRED',
        message: expect.stringContaining('nova-compute on cmp-0'),
        hint: expect.stringContaining('certs generate'),
      }),
    );
    const inv = await inventory('tls', 'tls: {}\n', true);
    rmSync(inv.replace(/\.yaml$/, '.certs/node-cmp-0.key'));
    expect(() => planOf(loadAll({ inventory: inv }))).toThrow(
      expect.objectContaining({
        code: 'E_CERT_MISSING',
        message: expect.stringMatching(
          /node cmp-0 needs a certificate of its own \(nova-compute\).*node-cmp-0\.key does not exist/,
        ),
      }),
    );
  });
});
