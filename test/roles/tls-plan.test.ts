/**
 * HTTPS on the public VIP as the plan renders it: HAProxy binds TLS on the external VIP with the
 * certificate `certs generate` issued (chain and key in one 0600 file the haproxy container reads),
 * the internal VIP stays plain HTTP, Keystone's public endpoints become https://, and a new
 * certificate changes no container's hash: HAProxy re-reads it in place (config `reload`).
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { appendFileSync, readFileSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { internalAdminEnv, loadAll, planOf } from '../../src/cli/context.js';
import { clientCaFiles, credentialsIn } from '../../src/status/openstack-client.js';
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
    expect(Object.keys(haproxy.reloads ?? {}).sort()).toEqual([CFG, '/etc/stackctl/haproxy/tls/internal.pem', PEM]);
    expect(Object.keys(haproxy.inputs.configs)).toEqual(['/etc/stackctl/haproxy/run.sh']);
  });

  it('refuses to render without the certificate (E_CERT_MISSING)', async () => {
    const missing = await inventory('tls: {}\n', false);
    expect(() => planOf(loadAll({ inventory: missing }))).toThrow(
      expect.objectContaining({ code: 'E_CERT_MISSING', hint: expect.stringContaining('certs generate') }),
    );
  });

  it('keeps the placeholder without a secrets file (plan shows no certificate)', async () => {
    const inv = await inventory('tls: {}\n', true);
    const all = loadAll({ inventory: inv });
    const p = planOf({ ...all, secrets: undefined });
    expect(file(p, 'ctl-0', PEM)).toContain('<secret:tls_public_pem>');
    expect(new Secret('x').toString()).toBe('<redacted>');
  });
});

describe('the plan with tls: { internal: true }', () => {
  it('binds TLS on both VIPs, makes the internal endpoints https:// and has every client of them verify with the CA', async () => {
    const inv = await inventory('tls: { internal: true }\n', true);
    const p = planOf(loadAll({ inventory: inv }));
    expect(p.plan.tls).toEqual(['public', 'internal']);
    const cfg = file(p, 'ctl-0', CFG);
    expect(listen(cfg, 'keystone')).toContain(
      `bind ${VIP_INT}:5000 transparent ssl crt /etc/haproxy/tls/internal.pem\n`,
    );
    expect(listen(cfg, 'keystone')).toContain(`bind ${VIP_EXT}:5000 transparent ssl crt /etc/haproxy/tls/public.pem\n`);
    const internalPem = file(p, 'ctl-0', '/etc/stackctl/haproxy/tls/internal.pem');
    const leaf = new X509Certificate(internalPem);
    expect(leaf.subjectAltName).toContain(`IP Address:${VIP_INT}`);
    expect(createPrivateKey(internalPem).type).toBe('private');
    const ks = p.plan.services.find((s) => s.name === 'keystone')!;
    expect(ks.endpoints.every((e) => e.url.startsWith('https://'))).toBe(true);

    // the CA in each client's config folder, and every keystoneauth section pointing at it
    const ca = readFileSync(inv.replace(/\.yaml$/, '.certs/ca.pem'), 'utf8');
    expect(leaf.verify(new X509Certificate(ca).publicKey)).toBe(true);
    const clients: [string, string, string, number][] = [
      ['ctl-0', 'nova-api', '/etc/stackctl/nova-api/nova.conf', 5],
      ['ctl-0', 'nova-conductor', '/etc/stackctl/nova-conductor/nova.conf', 5],
      ['cmp-0', 'nova-compute', '/etc/stackctl/nova-compute/nova.conf', 5],
      ['ctl-0', 'neutron-server', '/etc/stackctl/neutron-server/neutron.conf', 2],
      ['ctl-0', 'glance', '/etc/stackctl/glance/glance-api.conf', 1],
      ['ctl-0', 'placement', '/etc/stackctl/placement/placement.conf', 1],
    ];
    for (const [node, svc, conf, sections] of clients) {
      expect(file(p, node, `/etc/stackctl/${svc}/ca.pem`).trim(), `${node} ${svc}`).toBe(ca.trim());
      const text = file(p, node, conf);
      expect(text.split(`cafile = /etc/stackctl/${svc}/ca.pem\n`).length - 1, conf).toBe(sections);
      expect(text).not.toMatch(/= http:\/\//);
    }
    // stackctl's own clients: the deploy's frontend gate, its identity work, status/upgrade's client
    const all = loadAll({ inventory: inv });
    const d = planDeploy(p.plan, all.catalog);
    const work = d.steps.flatMap((st) => st.nodes.flatMap((n) => n.containers));
    expect(work.find((c) => c.name === 'keystone')!.frontend).toMatch(new RegExp(`^https://${VIP_INT}:5000/`));
    expect(d.identity).toMatchObject({
      authUrl: `https://${VIP_INT}:5000/v3`,
      caFile: '/etc/stackctl/keystone/ca.pem',
    });
    const caFiles = clientCaFiles(all.catalog.provides);
    expect(caFiles).toEqual({ keystone: '/etc/stackctl/keystone/ca.pem', nova_api: '/etc/stackctl/nova-api/ca.pem' });
    const env = internalAdminEnv(all, p.plan)!;
    expect(credentialsIn(env, 'nova_api', caFiles)['OS_CACERT']).toBe('/etc/stackctl/nova-api/ca.pem');
    expect(
      credentialsIn({ ...env, OS_AUTH_URL: 'http://x:5000/v3' }, 'nova_api', caFiles)['OS_CACERT'],
    ).toBeUndefined();
    const metadata = file(p, 'cmp-0', '/etc/stackctl/neutron-ovn-metadata-agent/neutron_ovn_metadata_agent.ini');
    expect(metadata).toContain('nova_metadata_protocol = https\n');
    expect(metadata).toContain('auth_ca_cert = /etc/stackctl/neutron-ovn-metadata-agent/ca.pem\n');
  });

  it('leaves the CA files empty and no cafile anywhere with TLS on the public VIP only', async () => {
    const p = planOf(loadAll({ inventory: await inventory('tls: {}\n', true) }));
    expect(file(p, 'ctl-0', '/etc/stackctl/nova-api/ca.pem').trim()).toBe('');
    expect(file(p, 'ctl-0', '/etc/stackctl/nova-api/nova.conf')).not.toContain('cafile');
    expect(file(p, 'cmp-0', '/etc/stackctl/neutron-ovn-metadata-agent/neutron_ovn_metadata_agent.ini')).toContain(
      'nova_metadata_protocol = http\n',
    );
  });

  it('shows the CA (public) in a plan without the secrets, the served keys as placeholders', async () => {
    const inv = await inventory('tls: { internal: true }\n', true);
    const p = planOf({ ...loadAll({ inventory: inv }), secrets: undefined });
    const ca = readFileSync(inv.replace(/\.yaml$/, '.certs/ca.pem'), 'utf8');
    expect(file(p, 'ctl-0', '/etc/stackctl/nova-api/ca.pem').trim()).toBe(ca.trim());
    expect(file(p, 'ctl-0', '/etc/stackctl/haproxy/tls/internal.pem')).toContain('<secret:tls_internal_pem>');
    expect(file(p, 'ctl-0', PEM)).toContain('<secret:tls_public_pem>');
  });

  it('refuses to render without the CA (E_CERT_MISSING naming it)', async () => {
    const inv = await inventory('tls: { internal: true }\n', true);
    rmSync(inv.replace(/\.yaml$/, '.certs/ca.pem'));
    expect(() => planOf(loadAll({ inventory: inv }))).toThrow(
      expect.objectContaining({
        code: 'E_CERT_MISSING',
        message: expect.stringContaining('ca.pem (the CA) does not exist'),
      }),
    );
  });
});
