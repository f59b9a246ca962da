/**
 * TLS on both VIPs (`tls: { internal: true }`) for the whole cloud on a 1ctl-1comp lab: HAProxy
 * serves the internal endpoints over TLS too, so every service's calls to Keystone, Glance,
 * Placement, Neutron and Nova, and stackctl's own (the deploy's registrations and starter
 * resources, status), must verify the internal VIP against the cloud's CA. The deploy must
 * converge (its identity work, image upload, Neutron agents and compute discovery all go through
 * the internal endpoints), a server must boot with a port on the tenant network (nova-api →
 * Keystone, Glance, Placement, Neutron; nova-compute → Placement, Neutron), and status must pass.
 * `npm run test:e2e:tls-internal`.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StatusReport } from '../../../src/status/model.js';
import { runCli } from '../../helpers/cli.js';
import { openstackJson } from '../../helpers/openstack.js';
import { CLOUD_IMAGES, deployLab, suiteFailed } from '../lab.js';

const lab = deployLab('tlsint', '10.74', 740, { registryPort: 15151, bmcPort: 17150 });
const INTERNAL_VIP = `${lab.prefix}.20.250`;
const timings: [string, number][] = [];
const seconds = (t0: number): number => Math.round((Date.now() - t0) / 100) / 10;
let openrc = '';
let ca = '';

describe('TLS on the internal VIP too: the whole cloud on a 1ctl-1comp lab', () => {
  beforeAll(async () => {
    const t0 = Date.now();
    await lab.up(CLOUD_IMAGES);
    timings.push(['lab up + push', seconds(t0)]);
    ca = await lab.tlsOn('tls: { internal: true }\n');
    const t1 = Date.now();
    const { report, text } = await lab.deploy();
    timings.push(['deploy', seconds(t1)]);
    if (!report?.ok) process.stderr.write(text.split('\n').slice(-80).join('\n') + '\n');
    expect(report?.ok).toBe(true);
    openrc = join(dirname(lab.inventory), 'internal.openrc');
    const r = await runCli('openrc', '-i', lab.inventory, '-o', openrc, '--os-interface', 'internal');
    expect(r.code, r.stderr).toBe(0);
  });

  afterAll(async (suite) => {
    process.stderr.write(`timings (s): ${timings.map(([k, v]) => `${k} ${v}`).join(', ')}\n`);
    await lab.downUnlessKept(suiteFailed(suite));
  });

  it('serves the internal VIP over TLS, verified against the CA; plain HTTP and an unverified client get nothing there', () => {
    const out = execFileSync(
      'openssl',
      ['s_client', '-connect', `${INTERNAL_VIP}:5000`, '-verify_return_error', '-CAfile', ca],
      { input: '', encoding: 'utf8', timeout: 30_000 },
    );
    expect(out).toMatch(/Verify return code: 0 \(ok\)/);
    for (const port of [5000, 8774, 8778, 9292, 9696, 8775]) {
      const ok = spawnSync(
        'curl',
        [
          '-sS',
          '-m',
          '10',
          '--cacert',
          ca,
          '-o',
          '/dev/null',
          '-w',
          '%{http_code}',
          `https://${INTERNAL_VIP}:${port}/`,
        ],
        {
          encoding: 'utf8',
        },
      );
      expect(ok.status, `https://${INTERNAL_VIP}:${port}/ ${ok.stderr}`).toBe(0);
      const unverified = spawnSync('curl', ['-sS', '-m', '10', `https://${INTERNAL_VIP}:${port}/`], {
        encoding: 'utf8',
      });
      expect(unverified.status, `port ${port}`).toBe(60); // curl: peer certificate cannot be authenticated
      const plain = spawnSync('curl', ['-sS', '-m', '10', `http://${INTERNAL_VIP}:${port}/`], { encoding: 'utf8' });
      expect(plain.stdout, `port ${port}`).not.toMatch(/"versions?"/);
    }
  });

  it('the catalog names https:// internal endpoints, and an admin on the internal interface boots a server with a port on the tenant network', () => {
    expect(readFileSync(openrc, 'utf8')).toContain(`export OS_AUTH_URL='https://${INTERNAL_VIP}:5000/v3'`);
    type Endpoint = { URL: string; Interface: string; 'Service Name': string };
    const internal = openstackJson<Endpoint[]>(openrc, 'endpoint list --interface internal');
    expect(internal.length).toBeGreaterThan(4);
    expect(internal.filter((e) => !e.URL.startsWith(`https://${INTERNAL_VIP}:`)).map((e) => e.URL)).toEqual([]);

    const t0 = Date.now();
    const server = openstackJson<{ id: string; status: string; 'OS-EXT-SRV-ATTR:host': string }>(
      openrc,
      'server create --flavor m1.tiny --image lab-tiny --nic net-id=demo-net --wait tls-internal-0',
    );
    timings.push(['server create', seconds(t0)]);
    expect(server.status).toBe('ACTIVE');
    // nova-compute bound the port through Neutron (over https:// with the CA)
    type Port = { binding_host_id: string; status: string };
    const ports = openstackJson<{ ID: string }[]>(openrc, `port list --server ${server.id}`);
    expect(ports.length).toBe(1);
    const port = openstackJson<Port>(openrc, `port show ${ports[0]!.ID}`);
    expect(port.binding_host_id).toBe(server['OS-EXT-SRV-ATTR:host']);
  });

  it('status reaches the cloud through the internal endpoints over TLS and lists the internal certificate, healthy', async () => {
    const r = await runCli('status', '-i', lab.inventory, '--json');
    const report = JSON.parse(r.stdout) as StatusReport;
    expect(report.certificates?.certificates.map((c) => `${c.name} ${c.state}`)).toEqual([
      'ca ok',
      'public ok',
      'internal ok',
    ]);
    expect(r.code, JSON.stringify(report.findings)).toBe(0);
  });

  it('a second deploy has nothing to do', async () => {
    const dry = await runCli('deploy', '-i', lab.inventory, '--dry-run');
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/dry run: 0 change\(s\) predicted/);
  });
});
