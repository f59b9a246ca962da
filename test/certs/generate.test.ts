/**
 * `stackctl certs generate|renew|list` on a copy of the lab inventory: the chain
 * openssl verifies, the SANs it shows, the files' modes, a re-run that
 * changes nothing and a VIP change that reissues exactly what it touches.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { copyInventory, runCli } from '../helpers/cli.js';

/** Run openssl (a real peer, as TLS clients judge certificates); fails saying what to install. */
function openssl(...args: string[]): string {
  try {
    return execFileSync('openssl', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    const err = e as NodeJS.ErrnoException & { stderr?: string; stdout?: string };
    if (err.code === 'ENOENT') throw new Error('openssl is not installed: apt-get install openssl');
    throw new Error(`openssl ${args.join(' ')} failed: ${err.stdout ?? ''}${err.stderr ?? ''}`);
  }
}

const certsDir = (inv: string): string => inv.replace(/\.yaml$/, '.certs');

/** Every file of the folder with its bytes and mtime. */
function snapshot(dir: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(dir)
      .sort()
      .map((f) => [f, `${statSync(join(dir, f)).mtimeMs} ${readFileSync(join(dir, f), 'utf8')}`]),
  );
}

describe('stackctl certs generate', () => {
  it('creates a CA and the VIP, internal and registry certificates that openssl verifies, with the SANs of the inventory', async () => {
    const inv = copyInventory('lab.yaml');
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    const dir = certsDir(inv);
    expect(r.stdout).toContain(`ca: created ${join(dir, 'ca.pem')}`);
    for (const e of ['public', 'internal', 'registry'])
      expect(r.stdout).toContain(`${e}: created ${join(dir, `${e}.pem`)}`);

    const ca = join(dir, 'ca.pem');
    for (const e of ['public', 'internal', 'registry'])
      expect(openssl('verify', '-CAfile', ca, join(dir, `${e}.pem`)).trim()).toBe(`${join(dir, `${e}.pem`)}: OK`);
    const sans = (e: string): string => {
      const text = openssl('x509', '-in', join(dir, `${e}.pem`), '-noout', '-text');
      return /Subject Alternative Name:.*\n\s*(.*)/.exec(text)![1]!.trim();
    };
    expect(sans('public')).toBe('DNS:lab, IP Address:10.0.0.250');
    expect(sans('internal')).toBe('DNS:lab-internal, IP Address:172.17.0.250');
    expect(sans('registry')).toBe('IP Address:192.168.24.1');
    expect(openssl('x509', '-in', ca, '-noout', '-text')).toMatch(/CA:TRUE/);
    // each key is the key of its certificate, as openssl sees it
    for (const e of ['ca', 'public', 'internal', 'registry']) {
      const fromCert = openssl('x509', '-in', join(dir, `${e}.pem`), '-noout', '-pubkey');
      const fromKey = openssl('pkey', '-in', join(dir, `${e}.key`), '-pubout');
      expect(fromKey).toBe(fromCert);
    }
  });

  it('keeps keys private: folder 0700, keys 0600, certificates 0644; no key text in the output', async () => {
    const inv = copyInventory('lab.yaml');
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    const dir = certsDir(inv);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    for (const f of readdirSync(dir)) {
      const mode = statSync(join(dir, f)).mode & 0o777;
      expect([f, mode]).toEqual([f, f.endsWith('.key') ? 0o600 : 0o644]);
      if (f.endsWith('.key')) {
        const body = readFileSync(join(dir, f), 'utf8').split('\n')[1]!;
        expect(r.stdout + r.stderr).not.toContain(body);
      }
    }
    const list = await runCli('certs', 'list', '-i', inv);
    expect(list.stdout).not.toContain('PRIVATE KEY');
  });

  it('tightens a certificates folder the operator made with a looser mode to 0700', async () => {
    const inv = copyInventory('lab.yaml');
    mkdirSync(certsDir(inv), { mode: 0o755 });
    chmodSync(certsDir(inv), 0o755);
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(statSync(certsDir(inv)).mode & 0o777).toBe(0o700);
  });

  it('changes nothing when run again', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('certs', 'generate', '-i', inv);
    const before = snapshot(certsDir(inv));
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(' ').slice(0, 2).join(' ')),
    ).toEqual(['ca: kept', 'public: kept', 'internal: kept', 'registry: kept']);
    expect(snapshot(certsDir(inv))).toEqual(before);
  });

  it('reissues, and names, only the certificate whose VIP changed; the CA stays', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('certs', 'generate', '-i', inv);
    const dir = certsDir(inv);
    const before = snapshot(dir);
    writeFileSync(inv, readFileSync(inv, 'utf8').replace('vip: 10.0.0.250', 'vip: 10.0.0.249'));
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(
      `public: reissued ${join(dir, 'public.pem')} (its SANs no longer match the inventory (+IP:10.0.0.249 -IP:10.0.0.250))`,
    );
    expect(r.stdout).toContain('internal: kept');
    const after = snapshot(dir);
    for (const f of ['ca.pem', 'ca.key', 'internal.pem', 'internal.key', 'registry.pem', 'registry.key'])
      expect(after[f]).toBe(before[f]);
    expect(after['public.pem']).not.toBe(before['public.pem']);
    expect(after['public.key']).not.toBe(before['public.key']);
    expect(openssl('x509', '-in', join(dir, 'public.pem'), '-noout', '-ext', 'subjectAltName')).toContain(
      'IP Address:10.0.0.249',
    );
    expect(openssl('verify', '-CAfile', join(dir, 'ca.pem'), join(dir, 'public.pem'))).toContain('OK');
  });

  it('renew: nothing with days enough left; --days reissues what has fewer, --cert what it names; the CA stays', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('certs', 'generate', '-i', inv);
    const dir = certsDir(inv);
    const before = snapshot(dir);
    let r = await runCli('certs', 'renew', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('Nothing to renew: every generated certificate has 30 or more days left.');
    expect(snapshot(dir)).toEqual(before);

    r = await runCli('certs', 'renew', '-i', inv, '--cert', 'public');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`public: reissued ${join(dir, 'public.pem')} (renewal asked for (--cert))`);
    expect(r.stdout).toContain(`1 certificate(s) issued. Roll them out: stackctl deploy -i ${inv}`);
    let after = snapshot(dir);
    for (const f of ['ca.pem', 'ca.key', 'internal.pem', 'internal.key', 'registry.pem', 'registry.key'])
      expect(after[f]).toBe(before[f]);
    expect(after['public.key']).not.toBe(before['public.key']);
    expect(openssl('verify', '-CAfile', join(dir, 'ca.pem'), join(dir, 'public.pem'))).toContain('OK');

    // every leaf was issued for 825 days: under a threshold of 825 each has fewer left
    r = await runCli('certs', 'renew', '-i', inv, '--days', '825');
    expect(r.code, r.stderr).toBe(0);
    for (const e of ['public', 'internal', 'registry'])
      expect(r.stdout).toContain(`${e}: reissued ${join(dir, `${e}.pem`)} (it expires in 824 day(s))`);
    expect(r.stdout).toContain('ca: kept');
    after = snapshot(dir);
    expect([after['ca.pem'], after['ca.key']]).toEqual([before['ca.pem'], before['ca.key']]);
  });

  it('renew refuses an unknown name, an operator certificate and a --days beyond a certificate life, writing nothing', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('certs', 'generate', '-i', inv);
    const before = snapshot(certsDir(inv));
    let r = await runCli('certs', 'renew', '-i', inv, '--cert', 'nope');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('error E_CERT_NAME: --cert nope: no such certificate');
    r = await runCli('certs', 'renew', '-i', inv, '--days', '826');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--days must be a whole number from 1 to 825');
    writeFileSync(
      inv,
      `${readFileSync(inv, 'utf8')}\ntls:\n  endpoints:\n    public: { cert: pki/api.pem, key: pki/api.key }\n`,
    );
    r = await runCli('certs', 'renew', '-i', inv, '--cert', 'public');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("error E_CERT_OPERATOR: --cert public: this certificate is the operator's");
    expect(snapshot(certsDir(inv))).toEqual(before);
  });

  it('refuses a generated CA key readable by group or others, and writes nothing', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('certs', 'generate', '-i', inv);
    const dir = certsDir(inv);
    chmodSync(join(dir, 'ca.key'), 0o640);
    writeFileSync(inv, readFileSync(inv, 'utf8').replace('vip: 10.0.0.250', 'vip: 10.0.0.249'));
    const before = snapshot(dir);
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code).toBe(4);
    expect(r.stderr).toContain(
      `error E_CERT_KEY_PERMISSIONS: the CA key ${join(dir, 'ca.key')} is accessible to group or others (mode 0640)`,
    );
    expect(snapshot(dir)).toEqual(before);
  });

  it('never replaces a CA whose key is gone: E_CERT_FILE, nothing written', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('certs', 'generate', '-i', inv);
    const dir = certsDir(inv);
    execFileSync('rm', [join(dir, 'ca.key')]);
    const before = snapshot(dir);
    const r = await runCli('certs', 'generate', '-i', inv);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('E_CERT_FILE');
    expect(r.stderr).toContain('its key');
    expect(snapshot(dir)).toEqual(before);
  });
});

describe('stackctl certs list', () => {
  it('shows each certificate with its SANs, issuer, expiry, days left and source', async () => {
    const inv = copyInventory('lab.yaml');
    const missing = await runCli('certs', 'list', '-i', inv, '--json');
    expect(missing.code, missing.stderr).toBe(0);
    expect(JSON.parse(missing.stdout).certificates.map((c: { present: boolean }) => c.present)).toEqual([
      false,
      false,
      false,
      false,
    ]);
    await runCli('certs', 'generate', '-i', inv);
    const r = await runCli('certs', 'list', '-i', inv, '--json');
    const rows = JSON.parse(r.stdout).certificates as {
      name: string;
      source: string;
      issuer: string;
      sans: { ip: string[] };
      daysLeft: number;
      notAfter: string;
    }[];
    expect(rows.map((c) => [c.name, c.source])).toEqual([
      ['ca', 'generated'],
      ['public', 'generated'],
      ['internal', 'generated'],
      ['registry', 'generated'],
    ]);
    expect(rows[1]!.sans.ip).toEqual(['10.0.0.250']);
    expect(rows[1]!.issuer).toBe('CN=lab CA');
    expect(rows[1]!.daysLeft).toBe(824);
    const text = await runCli('certs', 'list', '-i', inv);
    expect(text.stdout).toMatch(/^public\s+generated\s+CN=lab\s+DNS:lab,IP:10\.0\.0\.250\s+CN=lab CA\s+\S+\s+824$/m);
  });
});
