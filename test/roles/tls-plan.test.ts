/**
 * HTTPS on the public VIP as the plan renders it: HAProxy binds TLS on the external VIP with the
 * certificate `certs generate` issued (chain and key in one 0600 file the haproxy container reads),
 * the internal VIP stays plain HTTP, Keystone's public endpoints become https://, and a new
 * certificate changes no container's hash: HAProxy re-reads it in place (config `reload`).
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { appendFileSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAll, planOf } from '../../src/cli/context.js';
import { Secret } from '../../src/core/secret.js';
import { planDeploy } from '../../src/orchestrator/planner.js';
import type { PlanResult } from '../../src/roles/plan.js';
import { copyInventory, runCli } from '../helpers/cli.js';

const VIP_EXT = '10.0.0.250';
const VIP_INT = '172.17.0.250';
const PEM = '/etc/stackctl/haproxy/tls/public.pem';
const CFG = '/etc/stackctl/haproxy/haproxy.cfg';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** The shipped lab inventory (one controller, one compute) with `tail` appended, its secrets generated (and its certificates, when `certs`). */
async function inventory(tail: string, certs: boolean): Promise<string> {
  const file = copyInventory('lab.yaml');
  dirs.push(dirname(file));
  appendFileSync(file, tail);
  expect((await runCli('secrets', 'generate', '-i', file)).code).toBe(0);
  if (certs) {
    const r = await runCli('certs', 'generate', '-i', file);
    expect(r.code, r.stderr).toBe(0);
  }
  return file;
}

const file = (p: PlanResult, node: string, dest: string): string => p.rendered.get(node)!.get(dest)!;
const listen = (cfg: string, name: string): string =>
  cfg.split(/\n(?=listen )/).find((b) => b.startsWith(`listen ${name}\n`))!;

describe('the plan without a tls section', () => {
  it('serves plain HTTP on both VIPs, with http:// endpoints and an empty certificate file', async () => {
    const p = planOf(loadAll({ inventory: await inventory('', false) }));
    const cfg = file(p, 'ctl-0', CFG);
    expect(cfg).not.toMatch(/\bssl\b/);
    expect(listen(cfg, 'keystone')).toContain(`bind ${VIP_EXT}:5000 transparent\n`);
    expect(file(p, 'ctl-0', PEM).trim()).toBe('');
    const ks = p.plan.services.find((s) => s.name === 'keystone')!;
    expect(ks.endpoints.every((e) => e.url.startsWith('http://'))).toBe(true);
    expect(p.plan.tls).toBeUndefined();
    expect(file(p, 'ctl-0', '/etc/stackctl/keystone/keystone.conf')).not.toContain('enable_proxy_headers_parsing');
  });
});

describe('the plan with tls: {}', () => {
  it('binds TLS on the external VIP only, with the certificate and its key in one 0600 file', async () => {
    const inv = await inventory('tls: {}\n', true);
    const p = planOf(loadAll({ inventory: inv }));
    expect(p.plan.tls).toEqual(['public']);
    const ks = listen(file(p, 'ctl-0', CFG), 'keystone');
    expect(ks).toContain(`bind ${VIP_INT}:5000 transparent\n`);
    expect(ks).toContain(`bind ${VIP_EXT}:5000 transparent ssl crt /etc/haproxy/tls/public.pem\n`);
    expect(ks).toContain('http-request set-header X-Forwarded-Proto https if { ssl_fc }');
    // Galera's frontend (TCP, internal only) is untouched
    expect(listen(file(p, 'ctl-0', CFG), 'mariadb')).not.toMatch(/\bssl\b/);

    const pem = file(p, 'ctl-0', PEM);
    const cert = new X509Certificate(pem);
    expect(cert.checkIP(VIP_EXT)).toBe(VIP_EXT);
    expect(cert.checkPrivateKey(createPrivateKey(pem))).toBe(true);
    const cfgEntry = p.effective.nodes.find((n) => n.name === 'ctl-0')!.configs.find((c) => c.dest === PEM)!;
    expect(cfgEntry.mode).toBe('0600');
    // the printable plan never holds the key: the hash is of the placeholder
    expect(JSON.stringify(p.plan)).not.toContain('PRIVATE KEY');
    // computes run no HAProxy: no certificate there
    expect(p.rendered.get('cmp-0')!.has(PEM)).toBe(false);
  });

  it("makes the catalog's public endpoints https:// and keeps internal and admin on http://", async () => {
    const p = planOf(loadAll({ inventory: await inventory('tls: {}\n', true) }));
    for (const s of p.plan.services)
      for (const e of s.endpoints)
        expect(e.url.startsWith(e.interface === 'public' ? `https://${VIP_EXT}:` : `http://${VIP_INT}:`), e.url).toBe(
          true,
        );
    expect(p.plan.services.find((s) => s.name === 'keystone')!.frontends[0]!.tls).toEqual([VIP_EXT]);
    const ctl = (dest: string): string => file(p, 'ctl-0', dest);
    expect(ctl('/etc/stackctl/keystone/bootstrap.env')).toContain(`OS_BOOTSTRAP_PUBLIC_URL=https://${VIP_EXT}:5000/v3`);
    expect(ctl('/etc/stackctl/keystone/bootstrap.env')).toContain(
      `OS_BOOTSTRAP_INTERNAL_URL=http://${VIP_INT}:5000/v3`,
    );
    expect(ctl('/etc/stackctl/keystone/keystone.conf')).toContain('enable_proxy_headers_parsing = true');
  });

  it('a new certificate recreates no container: only the HAProxy nodes get the file, which HAProxy re-reads in place', async () => {
    const inv = await inventory('tls: {}\n', true);
    const all = loadAll({ inventory: inv });
    const before = planOf(all).effective;
    rmSync(inv.replace(/\.yaml$/, '.certs/public.pem'));
    expect((await runCli('certs', 'generate', '-i', inv)).code).toBe(0);
    const after = planOf(all).effective;
    const changed: string[] = [];
    const files: string[] = [];
    for (const n of after.nodes) {
      const old = before.nodes.find((x) => x.name === n.name)!;
      for (const c of n.containers)
        if (old.containers.find((x) => x.name === c.name)!.hash !== c.hash) changed.push(`${n.name}/${c.name}`);
      for (const f of n.configs)
        if (old.configs.find((x) => x.dest === f.dest)!.sha256 !== f.sha256) files.push(`${n.name}:${f.dest}`);
    }
    expect(changed).toEqual([]);
    expect(files).toEqual([`ctl-0:${PEM}`]);
    // the deploy plan: the haproxy container re-reads both of its reloaded files, and neither is in its inputs
    const d = planDeploy(after, all.catalog);
    const haproxy = d.steps.flatMap((st) => st.nodes.flatMap((n) => n.containers)).find((c) => c.name === 'haproxy')!;
    expect(Object.keys(haproxy.reloads ?? {}).sort()).toEqual([CFG, PEM]);
    expect(Object.keys(haproxy.inputs.configs)).toEqual(['/etc/stackctl/haproxy/run.sh']);
  });

  it('refuses to render without the certificate (E_CERT_MISSING) and refuses tls.internal (E_TLS_INTERNAL)', async () => {
    const missing = await inventory('tls: {}\n', false);
    expect(() => planOf(loadAll({ inventory: missing }))).toThrow(
      expect.objectContaining({ code: 'E_CERT_MISSING', hint: expect.stringContaining('certs generate') }),
    );
    const internal = await inventory('tls: { internal: true }\n', true);
    expect(() => planOf(loadAll({ inventory: internal }))).toThrow(expect.objectContaining({ code: 'E_TLS_INTERNAL' }));
  });

  it('keeps the placeholder without a secrets file (plan shows no certificate)', async () => {
    const inv = await inventory('tls: {}\n', true);
    const all = loadAll({ inventory: inv });
    const p = planOf({ ...all, secrets: undefined });
    expect(file(p, 'ctl-0', PEM)).toContain('<secret:tls_public_pem>');
    expect(new Secret('x').toString()).toBe('<redacted>');
  });
});
