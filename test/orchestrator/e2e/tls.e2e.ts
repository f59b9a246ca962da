/**
 * HTTPS on the public VIP of a 1ctl-1comp container lab (the identity tier: HAProxy, keepalived,
 * MariaDB, memcached, Keystone) with `tls: {}` and the CA `stackctl certs generate` makes. After the
 * deploy: `openstack token issue` over https:// with the CA works and fails without it on certificate
 * verification; `openssl s_client -verify_return_error -CAfile` against the public VIP succeeds;
 * plain HTTP there is not served; `stackctl status` lists the certificates. A certificate with one day
 * left, deployed, restarts no container (HAProxy reloads it in place) and makes `status`, which reads
 * the certificate served, fail naming it. `stackctl rotate
 * keystone-keys` then a deploy recreates only Keystone; a token issued before the rotation still
 * validates, one issued after works, and after a second rotation the first token, whose key is
 * retired, is refused. `stackctl rotate keystone-credential-keys`: a second rotation before the
 * deploy of the first is refused while a credential is on the key it would drop; the deploy
 * re-encrypts that credential with the new primary (its row's key_hash changes) and it still
 * decrypts, as after the next rotation.
 * `npm run test:e2e:tls`.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, issueCertificate, readCertificate } from '../../../src/certs/x509.js';
import { credentialKeyDigest } from '../../../src/cli/rotate-credentials.js';
import { keyEntry, keyIndices } from '../../../src/inventory/key-repository.js';
import { loadSecrets } from '../../../src/inventory/secrets.js';
import type { StatusReport } from '../../../src/status/model.js';
import { runCli } from '../../helpers/cli.js';
import { CLIENT_IMAGE } from '../../helpers/openstack.js';
import { release } from '../../images/fixture.js';
import { deployLab, suiteFailed } from '../lab.js';

const SERVICES = 'haproxy,keepalived,mariadb,memcached,keystone';
const IMAGES = ['haproxy', 'keepalived', 'mariadb', 'memcached', 'keystone'];
const lab = deployLab('tls', '10.78', 780, { registryPort: 15131, bmcPort: 17130 });
const PUBLIC_VIP = `${lab.prefix}.10.250`;
const timings: [string, number][] = [];
const seconds = (t0: number): number => Math.round((Date.now() - t0) / 100) / 10;

let openrc = '';
let certs = '';

/** `openstack ARGS` on this machine (client image, host network) with the openrc, and the CA unless `withoutCa`. */
function osc(args: string, withoutCa = false): { code: number; out: string; stdout: string } {
  const r = spawnSync(
    'docker',
    [
      'run',
      '--rm',
      '--network',
      'host',
      '-v',
      `${openrc}:/root/openrc:ro`,
      '-v',
      `${certs}/ca.pem:${certs}/ca.pem:ro`,
      CLIENT_IMAGE,
      'sh',
      '-c',
      `. /root/openrc && ${withoutCa ? 'unset OS_CACERT && ' : ''}openstack ${args}`,
    ],
    { encoding: 'utf8', timeout: 180_000 },
  );
  return { code: r.status ?? -1, out: `${r.stdout}${r.stderr}`, stdout: r.stdout };
}

/** `openstack token issue` over https://, with the CA unless `withoutCa`. */
function tokenIssue(withoutCa = false, column = 'expires'): { code: number; out: string } {
  return osc(`token issue -f value -c ${column}`, withoutCa);
}

/** A new token's id (the admin's, over https:// with the CA). */
function newToken(): string {
  const r = tokenIssue(false, 'id');
  expect(r.code, r.out).toBe(0);
  return r.out.trim().split('\n').pop()!;
}

/**
 * Keystone's answer to validating `subject` (GET /v3/auth/tokens with X-Subject-Token), authorised by
 * `auth`: its HTTP status. The tokens go in a 0600 header file, not on curl's command line.
 */
function validate(auth: string, subject: string): number {
  const headers = join(dirname(lab.inventory), 'token-headers');
  writeFileSync(headers, `X-Auth-Token: ${auth}\nX-Subject-Token: ${subject}\n`, { mode: 0o600 });
  const r = spawnSync(
    'curl',
    [
      '-sS',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code}',
      '-m',
      '30',
      '--cacert',
      `${certs}/ca.pem`,
      '-H',
      `@${headers}`,
      `https://${PUBLIC_VIP}:5000/v3/auth/tokens`,
    ],
    { encoding: 'utf8' },
  );
  rmSync(headers, { force: true });
  return Number(r.stdout.trim());
}

/** The file names of a key repository (the token keys unless named) in ctl-0's keystone container. */
async function keyFiles(repository = 'fernet-keys'): Promise<string[]> {
  const r = await lab.remote('ctl-0').exec(['docker', 'exec', 'keystone', 'ls', `/etc/keystone/${repository}`], {
    timeoutMs: 30_000,
  });
  return r.stdout
    .split(/\s+/)
    .filter(Boolean)
    .sort((a, b) => Number(a) - Number(b));
}

/**
 * Empty Keystone's cache (`flush_all` to each memcached of its [cache] memcache_servers): tokens it
 * validated, or issued, and credentials it read are answered from there until the entry expires, so
 * only an empty cache shows what the keys on disk accept.
 */
async function flushKeystoneCache(): Promise<void> {
  const program = [
    'import configparser, socket',
    "c = configparser.ConfigParser(interpolation=None, strict=False); c.read('/etc/keystone/keystone.conf')",
    "for s in c.get('cache', 'memcache_servers').split(','):",
    "    h, p = s.strip().rsplit(':', 1)",
    '    k = socket.create_connection((h, int(p)), 10)',
    "    k.sendall(b'flush_all\\r\\n'); print(k.recv(64).decode().strip()); k.close()",
  ].join('\n');
  const r = await lab.remote('ctl-0').docker.exec('keystone', ['python3', '-c', program], { timeoutMs: 30_000 });
  expect(r.code, r.stderr).toBe(0);
  expect(r.stdout.trim().split('\n')).toEqual(expect.arrayContaining(['OK']));
}

/** The key values of the credential repository in the lab's secrets file, by index. */
function credentialKeys(): Map<number, string> {
  const services = loadSecrets(lab.inventory.replace(/\.yaml$/, '.secrets.yaml'))!.services;
  return new Map(
    keyIndices('keystone_credential_key', services.keys()).map((i) => [
      i,
      services.get(keyEntry('keystone_credential_key', i))!.reveal(),
    ]),
  );
}

/** Keystone's credential rows: id -> the SHA-1 of the key that encrypted it, and the ciphertext. */
async function credentialRows(): Promise<Map<string, { keyHash: string; encrypted: string }>> {
  const r = await lab
    .remote('ctl-0')
    .docker.exec(
      'mariadb',
      [
        'mariadb',
        '--defaults-extra-file=/etc/mysql/mariadb.conf.d/stackctl/client.cnf',
        '-N',
        '-e',
        'SELECT id, key_hash, encrypted_blob FROM keystone.credential',
      ],
      { timeoutMs: 30_000 },
    );
  expect(r.code, r.stderr).toBe(0);
  const out = new Map<string, { keyHash: string; encrypted: string }>();
  for (const line of r.stdout.trim().split('\n').filter(Boolean)) {
    const [id, keyHash, encrypted] = line.split('\t');
    out.set(id!, { keyHash: keyHash!, encrypted: encrypted! });
  }
  return out;
}

/** `openstack credential show ID`: the blob it decrypts to. */
function credentialBlob(id: string): string {
  const r = osc(`credential show ${id} -f value -c blob`);
  expect(r.code, r.out).toBe(0);
  return r.stdout.trim();
}

async function status(...extra: string[]): Promise<{ code: number; report: StatusReport }> {
  const r = await runCli('status', '-i', lab.inventory, '--json', '--services', SERVICES, ...extra);
  return { code: r.code, report: JSON.parse(r.stdout) as StatusReport };
}

describe('HTTPS on the public VIP of a 1ctl-1comp lab', () => {
  beforeAll(async () => {
    const t0 = Date.now();
    await lab.up(IMAGES);
    timings.push(['lab up + push', seconds(t0)]);
    certs = dirname(await lab.tlsOn('tls: {}\n'));
    const t1 = Date.now();
    const { report, text } = await lab.deploy({ services: SERVICES });
    timings.push(['deploy', seconds(t1)]);
    if (!report?.ok) process.stderr.write(text.split('\n').slice(-60).join('\n') + '\n');
    expect(report?.ok).toBe(true);
    openrc = join(dirname(lab.inventory), 'admin.openrc');
    const r = await runCli('openrc', '-i', lab.inventory, '-o', openrc, '--os-interface', 'public');
    expect(r.code, r.stderr).toBe(0);
  });

  afterAll(async (suite) => {
    process.stderr.write(`timings (s): ${timings.map(([k, v]) => `${k} ${v}`).join(', ')}\n`);
    await lab.downUnlessKept(suiteFailed(suite));
  });

  it('openrc names the https:// public endpoint and the CA', () => {
    const text = readFileSync(openrc, 'utf8');
    expect(text).toContain(`export OS_AUTH_URL='https://${PUBLIC_VIP}:5000/v3'`);
    expect(text).toContain(`export OS_CACERT='${certs}/ca.pem'`);
  });

  it('openstack token issue works over https:// with the CA, and fails verifying without it', () => {
    const t0 = Date.now();
    const ok = tokenIssue();
    timings.push(['token over https', seconds(t0)]);
    expect(ok.code, ok.out).toBe(0);
    const bad = tokenIssue(true);
    expect(bad.code, bad.out).not.toBe(0);
    expect(bad.out).toMatch(/CERTIFICATE_VERIFY_FAILED|certificate verify failed/i);
  });

  it('openssl s_client verifies the public VIP against the CA; plain HTTP is not served there', () => {
    const out = execFileSync(
      'openssl',
      ['s_client', '-connect', `${PUBLIC_VIP}:5000`, '-verify_return_error', '-CAfile', `${certs}/ca.pem`],
      { input: '', encoding: 'utf8', timeout: 30_000 },
    );
    expect(out).toMatch(/Verify return code: 0 \(ok\)/);
    const plain = spawnSync('curl', ['-sS', '-m', '10', `http://${PUBLIC_VIP}:5000/v3`], { encoding: 'utf8' });
    expect(plain.stdout).not.toContain('"version"');
  });

  it('status lists the served certificate and the CA, healthy', async () => {
    const { code, report } = await status();
    expect(report.certificates?.certificates.map((c) => `${c.name} ${c.state}`)).toEqual(['ca ok', 'public ok']);
    expect(report.certificates?.certificates[1]!.where).toBe(`${PUBLIC_VIP}:5000`);
    expect(code, JSON.stringify(report.findings)).toBe(0);
  });

  it('a token issued before `rotate keystone-keys` validates while its key is kept, one issued after works too, and once its key is retired it is refused', async () => {
    expect(await keyFiles()).toEqual(['0', '1']);
    const before = newToken();
    expect(validate(before, before)).toBe(200);
    const r = await runCli('rotate', 'keystone-keys', '-i', lab.inventory);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('keys now 0 1 2');
    const started = await lab.startedAt();
    const t0 = Date.now();
    const { report } = await lab.deploy({ services: SERVICES });
    timings.push(['deploy of the rotated keys', seconds(t0)]);
    expect(report?.ok).toBe(true);
    const after = await lab.startedAt();
    expect([...after].filter(([k, v]) => started.get(k) !== v).map(([k]) => k)).toEqual(['ctl-0/keystone']);
    expect(await keyFiles()).toEqual(['0', '1', '2']);
    // NOTE: Keystone caches every token it issues or validates (memcached); emptied, the answers
    // below come from the keys on disk.
    await flushKeystoneCache();
    const t1 = Date.now();
    const fresh = newToken();
    timings.push(['token after the rotation', seconds(t1)]);
    expect(fresh).not.toBe(before);
    expect(validate(fresh, before)).toBe(200);
    expect(validate(fresh, fresh)).toBe(200);
    expect(validate(before, fresh)).toBe(200);
    // a second rotation (max_active_keys 3) drops key 1, which signed the first token
    expect((await runCli('rotate', 'keystone-keys', '-i', lab.inventory)).code).toBe(0);
    expect((await lab.deploy({ services: SERVICES })).report?.ok).toBe(true);
    expect(await keyFiles()).toEqual(['0', '2', '3']);
    await flushKeystoneCache();
    expect(validate(fresh, fresh)).toBe(200);
    expect([401, 404]).toContain(validate(fresh, before));
    expect(validate(before, fresh)).toBe(401);
  });

  it('rotate keystone-credential-keys: a key still in use is never dropped; the deploy of a rotation re-encrypts every credential with the new primary', async () => {
    const digest = (i: number): string => credentialKeyDigest(credentialKeys().get(i)!);
    expect(await keyFiles('credential-keys')).toEqual(['0', '1']);
    const blob1 = 'stackctl-e2e-stored-before-the-rotation';
    const c1 = osc(`credential create --type cert -f value -c id admin ${blob1}`);
    expect(c1.code, c1.out).toBe(0);
    const id1 = c1.stdout.trim();
    const stored = await credentialRows();
    expect(stored.get(id1)?.keyHash).toBe(digest(1));

    const r = await runCli('rotate', 'keystone-credential-keys', '-i', lab.inventory);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('keys now 0 1 2');

    // a second rotation before the deploy of the first is refused as undeployed; forced past that,
    // it would drop key 1, which still encrypts the first credential
    const secrets = lab.inventory.replace(/\.yaml$/, '.secrets.yaml');
    const unrotated = readFileSync(secrets, 'utf8');
    const early = await runCli('rotate', 'keystone-credential-keys', '-i', lab.inventory);
    expect(early.code).not.toBe(0);
    expect(early.stderr).toContain('E_ROTATE_NOT_DEPLOYED');
    const refused = await runCli('rotate', 'keystone-credential-keys', '--force', '-i', lab.inventory);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('E_ROTATE_KEY_IN_USE');
    expect(refused.stderr).toContain('key 1, which 1 credential(s) are still encrypted with');
    expect(refused.stderr).toContain(`Deploy the last rotation first ('stackctl deploy -i ${lab.inventory}')`);
    expect(readFileSync(secrets, 'utf8')).toBe(unrotated);

    // the deploy rolls the keys out, then its credential-migrate task moves the credential to key 2
    const started = await lab.startedAt();
    const t0 = Date.now();
    expect((await lab.deploy({ services: SERVICES })).report?.ok).toBe(true);
    timings.push(['deploy of the rotated credential keys (with credential_migrate)', seconds(t0)]);
    const after = await lab.startedAt();
    expect([...after].filter(([k, v]) => started.get(k) !== v).map(([k]) => k)).toEqual(['ctl-0/keystone']);
    expect(await keyFiles('credential-keys')).toEqual(['0', '1', '2']);
    const migrated = await credentialRows();
    expect(migrated.get(id1)?.keyHash).toBe(digest(2));
    expect(migrated.get(id1)?.encrypted).not.toBe(stored.get(id1)?.encrypted);
    await flushKeystoneCache();
    expect(credentialBlob(id1)).toBe(blob1);
    const blob2 = 'stackctl-e2e-stored-after-the-rotation';
    const c2 = osc(`credential create --type cert -f value -c id admin ${blob2}`);
    expect(c2.code, c2.out).toBe(0);
    const id2 = c2.stdout.trim();
    const rows = await credentialRows();
    expect(rows.get(id2)?.keyHash).toBe(digest(2));

    // --migrate: the same step alone, checked; nothing is left to move
    const t1 = Date.now();
    const m = await runCli('rotate', 'keystone-credential-keys', '--migrate', '-i', lab.inventory);
    timings.push(['credential --migrate', seconds(t1)]);
    expect(m.code, m.stderr).toBe(0);
    expect(m.stdout).toContain('credentials 2 on key 2 before; credentials 2 on key 2 now');
    expect(await credentialRows()).toEqual(rows);

    const r2 = await runCli('rotate', 'keystone-credential-keys', '-i', lab.inventory);
    expect(r2.code, r2.stderr).toBe(0);
    expect(r2.stdout).toContain('removed 1; keys now 0 2 3; credentials 2 on key 2, none on the key dropped');
    expect((await lab.deploy({ services: SERVICES })).report?.ok).toBe(true);
    expect(await keyFiles('credential-keys')).toEqual(['0', '2', '3']);
    await flushKeystoneCache();
    expect(credentialBlob(id1)).toBe(blob1);
    expect(credentialBlob(id2)).toBe(blob2);
  });

  it('a certificate with one day left, deployed, restarts nothing (HAProxy reloads it) and makes status fail naming it; certs renew and a deploy make it healthy again', async () => {
    const before = await lab.startedAt();
    const ca = { certPem: readFileSync(`${certs}/ca.pem`, 'utf8'), keyPem: readFileSync(`${certs}/ca.key`, 'utf8') };
    const keys = await generateKeyPair();
    const now = Date.now();
    // the SANs certs generate gave it: only its end differs from what the inventory wants
    const sans = readCertificate(readFileSync(`${certs}/public.pem`, 'utf8')).sans;
    expect(sans.ip).toEqual([PUBLIC_VIP]);
    const cert = await issueCertificate(
      {
        commonName: 'tls-lab',
        sans,
        ca: false,
        publicKeyPem: keys.publicKeyPem,
        notBefore: new Date(now - 300_000),
        notAfter: new Date(now + 86_400_000),
      },
      ca,
    );
    writeFileSync(`${certs}/public.key`, keys.keyPem, { mode: 0o600 });
    writeFileSync(`${certs}/public.pem`, cert);
    const t0 = Date.now();
    const { report, text } = await lab.deploy({ services: SERVICES });
    timings.push(['redeploy with the new certificate', seconds(t0)]);
    expect(report?.ok).toBe(true);
    const after = await lab.startedAt();
    const restarted = [...after].filter(([k, v]) => before.get(k) !== v).map(([k]) => k);
    expect(restarted).toEqual([]);
    // what the deploy did to containers, from its progress lines (`step 1 ctl-0: container haproxy reloaded ...`)
    const containerChanges = (out: string): string[] =>
      out
        .split('\n')
        .map((l) => /^step \d+ ([\w-]+): container ([\w-]+) (\w+)/.exec(l))
        .filter((m): m is RegExpExecArray => m !== null && m[3] !== 'unchanged')
        .map((m) => `${m[1]}/${m[2]} ${m[3]}`);
    expect(containerChanges(text)).toEqual(['ctl-0/haproxy reloaded']);
    const { code, report: st } = await status();
    expect(code).toBe(8);
    expect(st.findings).toContainEqual(
      expect.objectContaining({ subject: 'certificate public', message: expect.stringMatching(/expires in 0 day/) }),
    );

    // certs renew reissues exactly that one (under tls.expiry_days), the deploy reloads HAProxy, status is healthy
    const renew = await runCli('certs', 'renew', '-i', lab.inventory);
    expect(renew.code, renew.stderr).toBe(0);
    expect(renew.stdout).toMatch(/^public: reissued \S+ \(it expires in 0 day\(s\)\)$/m);
    expect(renew.stdout).toMatch(/^ca: kept /m);
    expect(renew.stdout).toContain('1 certificate(s) issued. Roll them out: stackctl deploy');
    const renewed = await lab.startedAt();
    const t1 = Date.now();
    const { report: again, text: againText } = await lab.deploy({ services: SERVICES });
    timings.push(['redeploy with the renewed certificate', seconds(t1)]);
    expect(again?.ok).toBe(true);
    const later = await lab.startedAt();
    expect([...later].filter(([k, v]) => renewed.get(k) !== v).map(([k]) => k)).toEqual([]);
    expect(containerChanges(againText)).toEqual(['ctl-0/haproxy reloaded']);
    const healthy = await status();
    expect(healthy.code, JSON.stringify(healthy.report.findings)).toBe(0);
  });

  it("serves the registry over TLS with the cloud's CA: a deploy makes the nodes trust it, they pull verified, without insecure-registries", async () => {
    const text = readFileSync(lab.inventory, 'utf8');
    expect(text).toContain('registry_insecure: true');
    writeFileSync(lab.inventory, text.replace('registry_insecure: true', 'registry_insecure: false'));
    const registry = /registry: (\S+)/.exec(text)![1]!; // as the nodes pull: the lab's provisioning .1
    const host = registry.replace(/:\d+$/, '');

    // as on hardware: `images push -i` turns the registry to TLS, the deploy's host preparation the nodes
    const t0 = Date.now();
    const push = await runCli(
      'images',
      'push',
      '-i',
      lab.inventory,
      '--only',
      'memcached',
      '--registry',
      '127.0.0.1:15131',
      '--registry-container',
      'stackctl-tls-registry',
    );
    timings.push(['images push turning registry TLS on', seconds(t0)]);
    expect(push.code, push.stderr).toBe(0);
    expect(push.stdout).toContain(`registry stackctl-tls-registry now serves TLS for ${host}`);
    const t1 = Date.now();
    const { report: d, text: deployed } = await lab.deploy({ services: SERVICES });
    timings.push(['deploy making the nodes trust the registry', seconds(t1)]);
    expect(d?.ok, deployed.split('\n').slice(-40).join('\n')).toBe(true);
    // progress lines: `step 1 ctl-0: host file /etc/docker/certs.d/…/ca.crt written (docker-registry-trust)`
    const lines = deployed.split('\n');
    for (const node of ['ctl-0', 'cmp-0']) {
      expect(lines).toContainEqual(
        expect.stringContaining(`${node}: host file /etc/docker/certs.d/${registry}/ca.crt written`),
      );
      expect(lines).toContainEqual(expect.stringContaining(`${node}: host unit dockerd reloaded (SIGHUP)`));
    }
    const node = 'stackctl-tls-ctl-0';
    const inNode = (...cmd: string[]) => spawnSync('docker', ['exec', node, ...cmd], { encoding: 'utf8' });
    const daemon = JSON.parse(inNode('cat', '/etc/docker/daemon.json').stdout) as Record<string, unknown>;
    // the registry is out of insecure-registries (the lab's own alias for it, lab-registry:5000, is lab up's business)
    expect(daemon['insecure-registries']).not.toContain(registry);
    expect(daemon['storage-driver']).toBe('overlay2'); // the node's other settings kept
    expect(inNode('cat', `/etc/docker/certs.d/${registry}/ca.crt`).stdout).toBe(
      readFileSync(join(certs, 'ca.pem'), 'utf8'),
    );

    // a pull over TLS, verified with the CA (the manifest is asked again even when the image is there)
    const ref = `${registry}/stackctl/memcached:${release.images['memcached']!.tag}`;
    const pulled = inNode('docker', 'pull', ref);
    expect(pulled.status, pulled.stderr).toBe(0);
    // without the CA the same pull fails on the certificate: nothing falls back to plain HTTP or skips verification
    expect(inNode('mv', `/etc/docker/certs.d/${registry}/ca.crt`, '/root/ca.crt').status).toBe(0);
    const refused = inNode('docker', 'pull', ref);
    expect(inNode('mv', '/root/ca.crt', `/etc/docker/certs.d/${registry}/ca.crt`).status).toBe(0);
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/certificate signed by unknown authority/);

    // status reads the registry's certificate and asks it for the planned images over HTTPS (the CA only)
    const { code, report } = await status();
    expect(code, JSON.stringify(report.findings)).toBe(0);
    expect(report.certificates?.certificates.map((c) => `${c.name} ${c.state}`)).toEqual([
      'ca ok',
      'public ok',
      'registry ok',
    ]);
    // a second deploy finds the nodes trusting it; lab up finds registry and nodes as asked
    const { report: again, text: againText } = await lab.deploy({ services: SERVICES });
    expect(again?.ok).toBe(true);
    expect(againText).not.toContain('reloaded (SIGHUP)');
    const up = await lab.upAgain();
    expect(up).not.toContain('now serves');
    // lab up lists no name of the registry as insecure any more (it drops the alias), then has nothing to do
    const daemonAfter = JSON.parse(inNode('cat', '/etc/docker/daemon.json').stdout) as Record<string, unknown>;
    expect(daemonAfter['insecure-registries']).toEqual([]);
    expect(inNode('cat', '/etc/docker/certs.d/lab-registry:5000/ca.crt').stdout).toBe(
      readFileSync(join(certs, 'ca.pem'), 'utf8'),
    );
    expect(await lab.upAgain()).toContain('lab already up, nothing changed');
  });
});
