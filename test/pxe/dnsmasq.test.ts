/**
 * dnsmasq for real: our generated configuration on a bridge of its own, with
 * Debian's busybox udhcpc as the client inside network namespaces. Known
 * MACs get their static address and the iPXE chain; unknown MACs get nothing
 * and the log parser says so; a new lease is picked up by SIGHUP.
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import {
  DnsmasqService,
  dnsmasqSettingsFromInventory,
  parseDnsmasqLog,
  renderDnsmasq,
  type DnsmasqSettings,
} from '../../src/pxe/dnsmasq.js';
import { Segment, requireTools, type Client } from './netns.js';

const KNOWN = '52:54:00:5a:00:01';
const UNKNOWN = '52:54:00:5a:00:99';

describe('renderDnsmasq', () => {
  it('writes one static lease per node of the lab inventory and the iPXE chain', () => {
    const all = loadAll({ inventory: 'inventories/lab.yaml' });
    const settings = dnsmasqSettingsFromInventory(all.loaded.inventory, all.allocation.addresses, {
      interface: 'br-prov',
      runDir: '/run/stackctl/pxe',
      tftpRoot: '/usr/lib/ipxe',
      httpPort: 8080,
      ipv6Prefix: 'fd99::',
    });
    const { conf, hosts } = renderDnsmasq(settings);
    const ctl = all.allocation.addresses.get('ctl-0')!.provisioning;
    const cmp = all.allocation.addresses.get('cmp-0')!.provisioning;
    expect(hosts).toBe(`52:54:00:00:20:01,${cmp},cmp-0\n52:54:00:00:10:01,${ctl},ctl-0\n`);
    const lines = conf.split('\n');
    expect(lines).toEqual(
      expect.arrayContaining([
        'port=0',
        'interface=br-prov',
        'bind-interfaces',
        'dhcp-hostsfile=/run/stackctl/pxe/dnsmasq.hosts',
        'dhcp-range=192.168.24.0,static,255.255.255.0,1h',
        'dhcp-option=option:router,192.168.24.1',
        'no-ping',
        'enable-tftp',
        'tftp-root=/usr/lib/ipxe',
        'dhcp-userclass=set:ipxe,iPXE',
        'dhcp-match=set:efi64,option:client-arch,7',
        'dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi,,192.168.24.1',
        'dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe,,192.168.24.1',
        'dhcp-boot=tag:ipxe,http://192.168.24.1:8080/boot.ipxe',
        'enable-ra',
        'dhcp-range=fd99::,ra-only,64',
        'log-dhcp',
        'log-facility=/run/stackctl/pxe/dnsmasq.log',
        'pid-file=/run/stackctl/pxe/dnsmasq.pid',
        'dhcp-leasefile=/run/stackctl/pxe/dnsmasq.leases',
      ]),
    );
    // unknown MACs get nothing unless discovery is asked for
    expect(conf).not.toMatch(/dhcp-range=192\.168\.24\.100/);
    const discovery = renderDnsmasq(
      dnsmasqSettingsFromInventory(all.loaded.inventory, all.allocation.addresses, {
        interface: 'br-prov',
        runDir: '/run/stackctl/pxe',
        tftpRoot: '/usr/lib/ipxe',
        httpPort: 8080,
        discovery: true,
      }),
    );
    expect(discovery.conf).toContain('dhcp-range=192.168.24.100,192.168.24.199,255.255.255.0,1h');
  });

  it.each<[string, Partial<DnsmasqSettings>, RegExp]>([
    ['a path with a comma', { runDir: '/tmp/a,b' }, /not a plain absolute path/],
    ['an address off the network', { serverAddress: '10.0.0.1' }, /not in 192\.168\.24\.0\/24/],
    ['a MAC twice', { leases: [lease('a', 1), { ...lease('b', 2), mac: lease('a', 1).mac }] }, /given to two nodes/],
    ['an interface name with a space', { interface: 'br 0' }, /invalid interface/],
  ])('refuses %s', (_what, change, message) => {
    expect(() => renderDnsmasq({ ...base(), ...change })).toThrow(message);
  });
});

function lease(node: string, i: number): { node: string; mac: string; ip: string } {
  return { node, mac: `52:54:00:00:00:0${i}`, ip: `192.168.24.${10 + i}` };
}

function base(): DnsmasqSettings {
  return {
    interface: 'br0',
    serverAddress: '192.168.24.1',
    httpPort: 8080,
    runDir: '/tmp/x',
    tftpRoot: '/tmp/x/tftp',
    cidr: '192.168.24.0/24',
    leaseTime: '1h',
    leases: [lease('a', 1)],
  };
}

describe('parseDnsmasqLog', () => {
  it('tells per MAC what DHCP and TFTP saw', () => {
    const log = [
      'Nov 22 13:13:38 dnsmasq-dhcp[1]: 31 DHCPDISCOVER(br0) 52:54:00:aa:00:01 no address available',
      'Nov 22 13:13:41 dnsmasq-dhcp[1]: 68 DHCPDISCOVER(br0) 52:54:00:aa:00:02 ',
      'Nov 22 13:13:41 dnsmasq-dhcp[1]: 68 tags: known, br0',
      'Nov 22 13:13:41 dnsmasq-dhcp[1]: 68 DHCPOFFER(br0) 10.0.0.21 52:54:00:aa:00:02 ',
      'Nov 22 13:13:41 dnsmasq-dhcp[1]: 68 DHCPREQUEST(br0) 10.0.0.21 52:54:00:aa:00:02 ',
      'Nov 22 13:13:41 dnsmasq-dhcp[1]: 68 DHCPACK(br0) 10.0.0.21 52:54:00:aa:00:02 n1',
      'Nov 22 13:13:41 dnsmasq-tftp[1]: sent /srv/tftp/undionly.kpxe to 10.0.0.21',
      'Nov 22 13:13:41 dnsmasq-tftp[1]: file /srv/tftp/nope not found for 10.0.0.21',
      'Nov 22 13:13:41 dnsmasq-tftp[1]: sent /srv/tftp/x to 10.0.0.99',
    ].join('\n');
    const r = parseDnsmasqLog(log);
    expect([...r.keys()]).toEqual(['52:54:00:aa:00:01', '52:54:00:aa:00:02']);
    expect(r.get('52:54:00:aa:00:01')).toMatchObject({ unknown: true, ips: [] });
    const known = r.get('52:54:00:aa:00:02')!;
    expect(known.unknown).toBe(false);
    expect(known.ips).toEqual(['10.0.0.21']);
    expect(known.observations.map((o) => o.kind)).toEqual([
      'discover',
      'offer',
      'request',
      'ack',
      'tftp-sent',
      'tftp-not-found',
    ]);
    expect(known.observations[4]).toEqual({
      kind: 'tftp-sent',
      time: 'Nov 22 13:13:41',
      ip: '10.0.0.21',
      file: '/srv/tftp/undionly.kpxe',
    });
  });
});

describe('DnsmasqService on a real segment', () => {
  const tag = process.pid.toString(36).slice(-5);
  const seg = new Segment(tag, '10.231.77.1/24');
  let dir: string;
  let service: DnsmasqService | undefined;
  let client: Client;
  let settings: DnsmasqSettings;

  beforeAll(async () => {
    requireTools('dnsmasq', 'busybox', 'ip', 'iptables');
    dir = mkdtempSync(join(tmpdir(), 'stackctl-dnsmasq-'));
    // dnsmasq drops to an unprivileged user: its files must be readable by others
    chmodSync(dir, 0o755);
    mkdirSync(join(dir, 'tftp'), { mode: 0o755 });
    writeFileSync(join(dir, 'tftp', 'undionly.kpxe'), 'not really iPXE\n', { mode: 0o644 });
    writeFileSync(
      join(dir, 'udhcpc.sh'),
      '#!/bin/sh\n[ "$1" = bound ] && echo "BOUND ip=$ip boot_file=$boot_file siaddr=$siaddr hostname=$hostname"\nexit 0\n',
      { mode: 0o755 },
    );
    await seg.create();
    client = await seg.addClient(KNOWN);
    settings = {
      interface: seg.bridge,
      serverAddress: '10.231.77.1',
      httpPort: 8080,
      runDir: join(dir, 'run'),
      tftpRoot: join(dir, 'tftp'),
      cidr: '10.231.77.0/24',
      leaseTime: '1h',
      leases: [{ node: 'n1', mac: KNOWN, ip: '10.231.77.21' }],
    };
    service = new DnsmasqService(settings);
    await service.start();
  });

  afterAll(async () => {
    await service?.stop();
    await seg.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function udhcpc(extra: string[] = []): Promise<{ code: number; out: string }> {
    return seg.exec(client, [
      'busybox',
      'udhcpc',
      '-i',
      'eth0',
      '-n',
      '-q',
      '-t',
      '2',
      '-T',
      '1',
      '-s',
      join(dir, 'udhcpc.sh'),
      ...extra,
    ]);
  }

  it('gives a known MAC its static address and the TFTP chainloader', async () => {
    const r = await udhcpc();
    expect(r.code).toBe(0);
    expect(r.out).toContain('BOUND ip=10.231.77.21 boot_file=undionly.kpxe siaddr=10.231.77.1 hostname=n1');
    expect(service!.report().get(KNOWN)?.ips).toEqual(['10.231.77.21']);
  });

  it('sends iPXE clients to the boot server over HTTP', async () => {
    // user class option 77 = "iPXE", as iPXE sends it
    const r = await udhcpc(['-x', '0x4d:69505845']);
    expect(r.out).toContain('BOUND ip=10.231.77.21 boot_file=http://10.231.77.1:8080/boot.ipxe');
  });

  it('serves the chainloader over TFTP and logs it for the MAC', async () => {
    await seg.exec(client, ['ip', 'addr', 'add', '10.231.77.21/24', 'dev', 'eth0']);
    const r = await seg.exec(client, [
      'busybox',
      'tftp',
      '-g',
      '-r',
      'undionly.kpxe',
      '-l',
      '/dev/null',
      '10.231.77.1',
    ]);
    expect(r.code).toBe(0);
    await seg.exec(client, ['ip', 'addr', 'del', '10.231.77.21/24', 'dev', 'eth0']);
    const kinds = service!
      .report()
      .get(KNOWN)!
      .observations.map((o) => o.kind);
    expect(kinds).toContain('tftp-sent');
  });

  it('gives an unknown MAC no address, and the log parser reports it', async () => {
    await seg.exec(client, ['ip', 'link', 'set', 'eth0', 'address', UNKNOWN]);
    const r = await udhcpc();
    expect(r.code).not.toBe(0);
    expect(r.out).not.toContain('BOUND');
    const report = service!.report().get(UNKNOWN);
    expect(report?.unknown).toBe(true);
    expect(report?.observations.map((o) => o.kind)).toContain('no-address');
  });

  it('picks up a new static lease with SIGHUP, without a restart', async () => {
    const pid = service!.pid;
    const next = { ...settings, leases: [...settings.leases, { node: 'n2', mac: UNKNOWN, ip: '10.231.77.22' }] };
    expect(await service!.apply(next)).toBe('reloaded');
    expect(service!.pid).toBe(pid);
    const r = await udhcpc();
    expect(r.out).toContain('BOUND ip=10.231.77.22');
    expect(service!.report().get(UNKNOWN)?.unknown).toBe(false);
    expect(await service!.apply(next)).toBe('unchanged');
  });

  it('restarts when the main configuration changes', async () => {
    const pid = service!.pid;
    expect(await service!.apply({ ...settings, leaseTime: '2h' })).toBe('restarted');
    expect(service!.pid).not.toBe(pid);
    await seg.exec(client, ['ip', 'link', 'set', 'eth0', 'address', KNOWN]);
    expect((await udhcpc()).out).toContain('BOUND ip=10.231.77.21');
  });

  it('reports why dnsmasq could not start', async () => {
    const other = new DnsmasqService({ ...settings, runDir: join(dir, 'run2'), interface: `stknone-${tag}` });
    await expect(other.start()).rejects.toMatchObject({ code: 'E_DNSMASQ_EXIT' });
    await other.stop();
  });
});
