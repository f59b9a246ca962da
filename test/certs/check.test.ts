/**
 * The operator's CA and certificates named under `tls:`: `inventory validate`
 * refuses each bad file with its code, the inventory field's line, the file
 * and the reason; good ones are used as given, mixed per endpoint with those
 * stackctl issues.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateKeyPair, issueCertificate, type Sans } from '../../src/certs/x509.js';
import { copyInventory, runCli } from '../helpers/cli.js';

const DAY = 86_400_000;
const now = Date.now();

/** A CA (cert and key files, key 0600) in `dir`; returns its PEMs. */
async function makeCa(dir: string, name = 'ca'): Promise<{ certPem: string; keyPem: string }> {
  const keys = await generateKeyPair();
  const certPem = await issueCertificate(
    {
      commonName: `operator ${name}`,
      ca: true,
      publicKeyPem: keys.publicKeyPem,
      notBefore: new Date(now - DAY),
      notAfter: new Date(now + 365 * DAY),
    },
    { keyPem: keys.keyPem },
  );
  writeFileSync(join(dir, `${name}.pem`), certPem);
  writeFileSync(join(dir, `${name}.key`), keys.keyPem, { mode: 0o600 });
  return { certPem, keyPem: keys.keyPem };
}

/** A server certificate and its key in `dir` as `<name>.pem` / `<name>.key`. */
async function makeLeaf(
  dir: string,
  name: string,
  ca: { certPem: string; keyPem: string },
  sans: Sans,
  days: { from: number; to: number } = { from: -1, to: 90 },
): Promise<void> {
  const keys = await generateKeyPair();
  const certPem = await issueCertificate(
    {
      commonName: name,
      sans,
      ca: false,
      publicKeyPem: keys.publicKeyPem,
      notBefore: new Date(now + days.from * DAY),
      notAfter: new Date(now + days.to * DAY),
    },
    ca,
  );
  writeFileSync(join(dir, `${name}.pem`), certPem);
  writeFileSync(join(dir, `${name}.key`), keys.keyPem, { mode: 0o600 });
}

/** The lab inventory with `tls:` appended; files are relative to its folder. */
function withTls(tls: string): { inv: string; dir: string } {
  const inv = copyInventory('lab.yaml');
  writeFileSync(inv, readFileSync(inv, 'utf8') + '\ntls:\n' + tls);
  return { inv, dir: dirname(inv) };
}

/** 1-based line of the first line of the file containing `text`. */
const lineOf = (file: string, text: string): number =>
  readFileSync(file, 'utf8')
    .split('\n')
    .findIndex((l) => l.includes(text)) + 1;

const PUBLIC_SANS: Sans = { dns: ['cloud.example.net'], ip: ['10.0.0.250'] };

/** Run validate, expecting refusal; returns stderr. */
async function refused(inv: string): Promise<string> {
  const r = await runCli('inventory', 'validate', '-i', inv);
  expect(r.code, r.stderr).toBe(3);
  return r.stderr;
}

describe('operator TLS files in inventory validate', () => {
  it('accepts an operator CA and a public certificate; certs generate issues the rest with that CA', async () => {
    const { inv, dir } = withTls(
      '  ca: {cert: ca.pem, key: ca.key}\n  endpoints:\n    public: {cert: public.pem, key: public.key}\n',
    );
    const ca = await makeCa(dir);
    await makeLeaf(dir, 'public', ca, PUBLIC_SANS);
    const v = await runCli('inventory', 'validate', '-i', inv);
    expect(v.code, v.stderr).toBe(0);
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`ca: operator's, checked ${join(dir, 'ca.pem')}`);
    expect(r.stdout).toContain(`public: operator's, checked ${join(dir, 'public.pem')}`);
    expect(r.stdout).toContain('internal: created');
    const certs = inv.replace(/\.yaml$/, '.certs');
    expect(existsSync(join(certs, 'ca.key')), 'no CA of its own beside the operator one').toBe(false);
    for (const f of [join(certs, 'internal.pem'), join(certs, 'registry.pem'), join(dir, 'public.pem')])
      expect(execFileSync('openssl', ['verify', '-CAfile', join(dir, 'ca.pem'), f], { encoding: 'utf8' })).toContain(
        ': OK',
      );
    const list = JSON.parse((await runCli('certs', 'list', '-i', inv, '--json')).stdout) as {
      certificates: { name: string; source: string }[];
    };
    expect(list.certificates.map((c) => `${c.name}:${c.source}`)).toEqual([
      'ca:operator',
      'public:operator',
      'internal:generated',
      'registry:generated',
    ]);
  });

  it("refuses a key that is not the certificate's: E_CERT_KEY_MISMATCH with the field's line and both files", async () => {
    const { inv, dir } = withTls('  endpoints:\n    public: {cert: public.pem, key: other.key}\n');
    const ca = await makeCa(dir);
    await makeLeaf(dir, 'public', ca, PUBLIC_SANS);
    await makeLeaf(dir, 'other', ca, PUBLIC_SANS);
    const err = await refused(inv);
    expect(err).toContain(`${inv}:${lineOf(inv, 'public: {cert')}:`);
    expect(err).toContain(
      `error E_CERT_KEY_MISMATCH at /tls/endpoints/public/key: tls.endpoints.public.key ${join(dir, 'other.key')} is not the private key of ${join(dir, 'public.pem')}`,
    );
  });

  it('refuses a certificate whose SANs miss the VIP: E_CERT_SAN names the VIP and what it has', async () => {
    const { inv, dir } = withTls('  endpoints:\n    public: {cert: public.pem, key: public.key}\n');
    const ca = await makeCa(dir);
    await makeLeaf(dir, 'public', ca, { dns: ['cloud.example.net'], ip: ['10.0.0.9'] });
    const err = await refused(inv);
    expect(err).toContain(
      `error E_CERT_SAN at /tls/endpoints/public/cert: tls.endpoints.public.cert ${join(dir, 'public.pem')}: no subject alternative name covers 10.0.0.250 (it has DNS:cloud.example.net, IP:10.0.0.9)`,
    );
  });

  it('refuses an expired certificate and one not valid yet: E_CERT_EXPIRED', async () => {
    const { inv, dir } = withTls(
      '  endpoints:\n    public: {cert: public.pem, key: public.key}\n    internal: {cert: internal.pem, key: internal.key}\n',
    );
    const ca = await makeCa(dir);
    await makeLeaf(dir, 'public', ca, PUBLIC_SANS, { from: -100, to: -2 });
    await makeLeaf(dir, 'internal', ca, { dns: [], ip: ['172.17.0.250'] }, { from: 3, to: 90 });
    const err = await refused(inv);
    expect(err).toMatch(
      new RegExp(
        `error E_CERT_EXPIRED at /tls/endpoints/public/cert: tls.endpoints.public.cert ${join(dir, 'public.pem')}: expired on \\S+ \\(CN=public\\)`,
      ),
    );
    expect(err).toMatch(/error E_CERT_EXPIRED at \/tls\/endpoints\/internal\/cert: .*internal\.pem: not valid before/);
  });

  it('refuses a CA key readable by group or others: E_CERT_KEY_PERMISSIONS; certs generate writes nothing', async () => {
    const { inv, dir } = withTls('  ca: {cert: ca.pem, key: ca.key}\n');
    await makeCa(dir);
    chmodSync(join(dir, 'ca.key'), 0o644);
    const err = await refused(inv);
    expect(err).toContain(
      `error E_CERT_KEY_PERMISSIONS at /tls/ca/key: tls.ca.key ${join(dir, 'ca.key')}: the CA key is accessible to group or others (mode 0644)`,
    );
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('E_CERT_KEY_PERMISSIONS');
    expect(existsSync(inv.replace(/\.yaml$/, '.certs'))).toBe(false);
  });

  it('refuses a file that is missing or not PEM, and a CA certificate that is no CA: E_CERT_FILE', async () => {
    const { inv, dir } = withTls(
      '  ca: {cert: leaf.pem, key: leaf.key}\n  endpoints:\n    public: {cert: nothing.pem, key: garbage.key}\n',
    );
    const ca = await makeCa(dir);
    await makeLeaf(dir, 'leaf', ca, PUBLIC_SANS);
    writeFileSync(join(dir, 'garbage.key'), 'not a key\n', { mode: 0o600 });
    const err = await refused(inv);
    expect(err).toContain(
      `error E_CERT_FILE at /tls/endpoints/public/cert: tls.endpoints.public.cert ${join(dir, 'nothing.pem')}: cannot read`,
    );
    expect(err).toContain(
      `error E_CERT_FILE at /tls/endpoints/public/key: tls.endpoints.public.key ${join(dir, 'garbage.key')}: no PEM private key block`,
    );
    expect(err).toContain(
      `error E_CERT_FILE at /tls/ca/cert: tls.ca.cert ${join(dir, 'leaf.pem')}: not a CA certificate`,
    );
    expect(err).not.toContain(readFileSync(join(dir, 'leaf.key'), 'utf8').split('\n')[1]);
  });

  it('refuses a CA without a key when an endpoint has no certificate: E_CERT_NO_CA_KEY', async () => {
    const { inv, dir } = withTls(
      '  ca: {cert: ca.pem}\n  endpoints:\n    public: {cert: public.pem, key: public.key}\n',
    );
    const ca = await makeCa(dir);
    await makeLeaf(dir, 'public', ca, PUBLIC_SANS);
    const err = await refused(inv);
    expect(err).toContain(
      'error E_CERT_NO_CA_KEY at /tls/ca: tls.ca has no key, and no certificate is given for tls.endpoints.internal, tls.endpoints.registry',
    );
  });

  it('refuses an endpoint certificate another CA issued: E_CERT_CHAIN', async () => {
    const { inv, dir } = withTls(
      '  ca: {cert: ca.pem, key: ca.key}\n  endpoints:\n    public: {cert: public.pem, key: public.key}\n',
    );
    await makeCa(dir);
    const other = await makeCa(dir, 'other');
    await makeLeaf(dir, 'public', other, PUBLIC_SANS);
    const err = await refused(inv);
    expect(err).toContain(
      `error E_CERT_CHAIN at /tls/endpoints/public/cert: tls.endpoints.public.cert ${join(dir, 'public.pem')}: not issued by the CA of tls.ca.cert (issuer CN=operator other)`,
    );
  });
});
