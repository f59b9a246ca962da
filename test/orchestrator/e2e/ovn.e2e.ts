/**
 * Tenant networking on a 1ctl-2comp container lab: Open vSwitch (userspace datapath) and
 * ovn-controller on every node, OVN's databases and ovn-northd on the controller, Neutron with
 * ML2/OVN. After `stackctl deploy`: the three chassis are in the Southbound database, the external
 * network, the tenant network and its router exist, a port plugged into a network namespace on a
 * compute gets its address by DHCP from OVN and pings the router, and its floating IP answers ping
 * and TCP from this machine over the lab's external network. `npm run test:e2e:ovn`.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labImageRef } from '../../../src/images/catalog.js';
import { imageRef } from '../../../src/roles/release.js';
import { runCli, tempDir } from '../../helpers/cli.js';
import { openstack, openstackJson } from '../../helpers/openstack.js';
import { release } from '../../images/fixture.js';
import type { StatusReport } from '../../../src/status/model.js';
import { CLOUD_IMAGES, deployLab, suiteFailed } from '../lab.js';

const lab = deployLab('ovn', '10.76', 760, { topology: '1ctl-2comp', registryPort: 15111, bmcPort: 16930 });
const P = lab.prefix;
const CHASSIS = ['cmp-0', 'cmp-1', 'ctl-0'];
/** The nodes with an address on the external network: the only ones that may hold router gateways. */
const GATEWAYS = ['ctl-0'];
const SBCTL = 'docker exec ovn_sb_db ovn-sbctl --db=unix:/run/ovn/ovnsb_db.sock';
const NBCTL = 'docker exec ovn_nb_db ovn-nbctl --db=unix:/run/ovn/ovnnb_db.sock';
const PROBE_NODE = 'cmp-0';
const ROUTER_IP = '192.168.200.1';
/** busybox (ping, httpd) on this machine: the lab node image carries it, run on the host network. */
const NODE_IMAGE = labImageRef(release, 'node');
/** ethtool on this machine: the openvswitch image, on the host network. */
const OVS_IMAGE = imageRef(release, 'openvswitch')!;

const timings: [string, number][] = [];
const seconds = (t0: number): number => Math.round((Date.now() - t0) / 100) / 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A shell script on a lab node: its stdout; fails with its stderr. */
async function onNode(node: string, script: string, timeoutMs = 120_000): Promise<string> {
  const r = await lab.remote(node).exec(['sh', '-c', script], { timeoutMs });
  if (r.code !== 0) throw new Error(`${node}: exit ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/** A command on this machine in a container of `image` on the host network. */
function onHost(image: string, args: string[], timeoutMs = 60_000): string {
  return execFileSync(
    'docker',
    [
      'run',
      '--rm',
      '--network',
      'host',
      '--cap-add',
      'NET_ADMIN',
      '--cap-add',
      'NET_RAW',
      '--entrypoint',
      args[0]!,
      image,
      ...args.slice(1),
    ],
    { encoding: 'utf8', timeout: timeoutMs, stdio: ['ignore', 'pipe', 'pipe'] },
  );
}

/** Retry until `check` passes or `s` seconds ran out; returns the seconds it took. */
async function eventually(s: number, check: () => Promise<void> | void): Promise<number> {
  const t0 = Date.now();
  for (;;) {
    try {
      await check();
      return seconds(t0);
    } catch (e) {
      if (Date.now() - t0 > s * 1000) throw e;
      await sleep(1000);
    }
  }
}

/** What the nodes' OVS/OVN and Neutron containers say, on stderr (after a failure). */
async function diagnose(): Promise<void> {
  const script = [
    'docker ps -a --format "{{.Names}} {{.Status}}"',
    'ip -4 -o addr show | grep -v " lo "',
    'docker exec openvswitch_vswitchd ovs-vsctl show 2>&1 | head -60',
    'for c in openvswitch_db openvswitch_vswitchd ovn_controller ovn_nb_db ovn_sb_db ovn_northd neutron_server neutron_ovn_metadata_agent; do',
    '  docker inspect $c >/dev/null 2>&1 || continue; echo "--- $c"; docker logs --tail 25 $c 2>&1; done',
  ].join('\n');
  for (const node of ['ctl-0', 'cmp-0', 'cmp-1']) {
    const r = await lab
      .remote(node)
      .exec(['sh', '-c', script], { timeoutMs: 60_000 })
      .catch((e: unknown) => ({ stdout: String(e), stderr: '' }));
    process.stderr.write(`===== ${node}\n${r.stdout}${r.stderr}\n`);
  }
}

let openrc = '';
const os = (args: string): string => openstack(openrc, args, 120_000);
const osJson = <T>(args: string): T => openstackJson<T>(openrc, args, 120_000);

describe('OVN on a 1ctl-2comp lab', () => {
  beforeAll(async () => {
    const t0 = Date.now();
    await lab.up(CLOUD_IMAGES);
    timings.push(['lab up + push', seconds(t0)]);
    const t1 = Date.now();
    const { report, text } = await lab.deploy();
    timings.push(['deploy', seconds(t1)]);
    process.stderr.write(
      `deploy: ${report?.steps.map((x) => `step ${x.step} ${(x.ms / 1000).toFixed(1)} s`).join(', ')}\n`,
    );
    if (!report?.ok) process.stderr.write(text.split('\n').slice(-60).join('\n') + '\n');
    expect(report?.ok).toBe(true);
    openrc = join(tempDir('stackctl-ovn-openrc-'), 'admin.openrc');
    const r = await runCli('openrc', '-i', lab.inventory, '-o', openrc);
    expect(r.code, r.stderr).toBe(0);
  });

  afterAll(async (suite) => {
    process.stderr.write(`timings (s): ${timings.map(([k, v]) => `${k} ${v}`).join(', ')}\n`);
    const failed = suiteFailed(suite);
    if (failed) await diagnose().catch((e: unknown) => process.stderr.write(`diagnostics failed: ${String(e)}\n`));
    await lab.downUnlessKept(failed);
  });

  it('every chassis (both computes, the controller as gateway) is in the Southbound database', async () => {
    const show = await onNode('ctl-0', 'docker exec ovn_sb_db ovn-sbctl --db=unix:/run/ovn/ovnsb_db.sock show');
    process.stderr.write(`--- ovn-sbctl show\n${show}\n`);
    const names = await onNode(
      'ctl-0',
      'docker exec ovn_sb_db ovn-sbctl --db=unix:/run/ovn/ovnsb_db.sock --bare --columns=name list Chassis',
    );
    expect(names.split(/\s+/).filter(Boolean).sort()).toEqual(CHASSIS);
    // the gateway chassis carries the provider mapping
    const ctl = await onNode('ctl-0', 'docker exec ovn_controller ovs-vsctl get Open_vSwitch . external_ids');
    expect(ctl).toMatch(/ovn-bridge-mappings="?physnet1:br-ex/);
    expect(ctl).toMatch(/ovn-bridge-datapath-type=netdev/);
    // Neutron 21 reads the gateway flag and the physnets from the Southbound rows' external_ids,
    // where the ovn-controller start script mirrors them: on the gateway chassis only
    for (const node of CHASSIS) {
      const ids = await onNode('ctl-0', `${SBCTL} get Chassis ${node} external_ids`);
      if (GATEWAYS.includes(node)) {
        expect(ids, `${node}'s Chassis row`).toMatch(/ovn-cms-options="?enable-chassis-as-gw/);
        expect(ids, `${node}'s Chassis row`).toMatch(/ovn-bridge-mappings="?physnet1:br-ex/);
      } else expect(ids, `${node}'s Chassis row`).not.toMatch(/ovn-cms-options|ovn-bridge-mappings/);
    }
    // ... and so sees them: an OVN Controller Gateway agent on each gateway chassis, a plain one elsewhere
    const agents = osJson<{ 'Agent Type': string; Host: string; Alive: boolean | string }[]>('network agent list');
    process.stderr.write(`--- network agent list\n${JSON.stringify(agents)}\n`);
    const hosts = (type: string) =>
      agents
        .filter((a) => a['Agent Type'] === type)
        .map((a) => a.Host)
        .sort();
    expect(hosts('OVN Controller Gateway agent')).toEqual(GATEWAYS);
    expect(hosts('OVN Controller agent')).toEqual(CHASSIS.filter((c) => !GATEWAYS.includes(c)));
  });

  it('stackctl status reads the OVN databases (standalone on one controller) and finds the network tier healthy', async () => {
    const r = await runCli(
      'status',
      '-i',
      lab.inventory,
      '--json',
      '--services',
      'openvswitch,ovn-central,ovn-controller,neutron-server',
    );
    const report = JSON.parse(r.stdout) as StatusReport;
    const ovn = report.clusters.find((c) => c.service === 'ovn-central');
    process.stderr.write(
      `--- status: ovn-central ${JSON.stringify(ovn)}\nfindings ${JSON.stringify(report.findings)}\n`,
    );
    expect(ovn?.kind).toBe('ovsdb');
    expect(ovn?.state).toBe('ok');
    expect(ovn?.members).toEqual([
      {
        node: 'ctl-0',
        databases: [
          { name: 'OVN_Northbound', clustered: false },
          { name: 'OVN_Southbound', clustered: false },
        ],
      },
    ]);
    expect(report.findings).toEqual([]);
    expect(r.code).toBe(0);
  });

  it('the deploy made the external network, the tenant network and its router (idempotently)', () => {
    const ext = osJson<Record<string, unknown>>('network show public');
    expect(ext['router:external']).toBe(true);
    expect(ext['provider:network_type']).toBe('flat');
    expect(ext['provider:physical_network']).toBe('physnet1');
    const net = osJson<Record<string, unknown>>('network show demo-net');
    expect(net['provider:network_type']).toBe('geneve');
    // Geneve over the lab's 1500-byte tenant network: 1500 - 38 - 20
    expect(net['mtu']).toBe(1442);
    const router = osJson<{ external_gateway_info: { network_id: string } | null }>('router show demo-router');
    expect(router.external_gateway_info?.network_id).toBe(ext['id']);
  });

  let port = { id: '', mac: '', ip: '' };
  it('a port in a network namespace on a compute gets its address by DHCP from OVN and pings the router', async () => {
    os('security group create probe-sg');
    os('security group rule create --ingress --protocol icmp probe-sg');
    os('security group rule create --ingress --protocol tcp --dst-port 8080 probe-sg');
    const p = osJson<{ id: string; mac_address: string; fixed_ips: { ip_address: string }[] }>(
      'port create --network demo-net --security-group probe-sg probe-port',
    );
    port = { id: p.id, mac: p.mac_address, ip: p.fixed_ips[0]!.ip_address };
    // veth into br-int bound to the Neutron port by iface-id; tx checksum offload off on both ends
    // (the userspace datapath does not fill in partial checksums)
    await onNode(
      PROBE_NODE,
      [
        'set -e',
        'ip netns add probe',
        'ip link add prb0 type veth peer name prbns',
        'ip link set prbns netns probe',
        `ip netns exec probe ip link set prbns address ${port.mac}`,
        'ip netns exec probe ip link set lo up',
        'ip netns exec probe ip link set prbns up',
        'ip netns exec probe ethtool -K prbns tx off >/dev/null',
        'ethtool -K prb0 tx off >/dev/null',
        'ip link set prb0 up',
        `docker exec openvswitch_vswitchd ovs-vsctl --may-exist add-port br-int prb0 -- set Interface prb0 external_ids:iface-id=${port.id} external_ids:attached-mac=${port.mac} external_ids:iface-status=active`,
      ].join('\n'),
    );
    const t0 = Date.now();
    await eventually(90, async () => {
      await onNode(PROBE_NODE, 'ip netns exec probe udhcpc -i prbns -n -q -t 5 -T 2 -s /etc/udhcpc/default.script');
    });
    timings.push(['port up to DHCP lease', seconds(t0)]);
    const addr = await onNode(PROBE_NODE, 'ip netns exec probe ip -4 -o addr show dev prbns');
    expect(addr).toContain(`${port.ip}/24`);
    const ping = await onNode(PROBE_NODE, `ip netns exec probe busybox ping -c 3 -W 2 ${ROUTER_IP}`);
    expect(ping).toMatch(/3 packets received/);
    // ovn-controller on the compute claimed the port (Neutron keeps it DOWN: it has no binding host)
    const show = await onNode('ctl-0', 'docker exec ovn_sb_db ovn-sbctl --db=unix:/run/ovn/ovnsb_db.sock show');
    const onCompute = show.split(/^Chassis /m).find((c) => c.startsWith(`${PROBE_NODE}\n`));
    expect(onCompute, show).toContain(`Port_Binding "${port.id}"`);
  });

  it('its floating IP answers ping and TCP from this machine', async () => {
    expect(port.id, 'the port of the previous test').not.toBe('');
    // The router's gateway port must be on a gateway chassis (a node with br-ex on the external
    // network): Neutron's candidates in the Northbound database, the port's binding in the Southbound.
    // Were the gateway flag missing from the Chassis rows' external_ids (OVN 23.03 publishes it in
    // other_config, Neutron 21 reads external_ids), Neutron would see no gateway chassis and could
    // put the gateway on a compute, which has no way out.
    const [gwPort] = osJson<{ ID: string }[]>('port list --router demo-router --device-owner network:router_gateway');
    expect(gwPort?.ID, "demo-router's gateway port").toBeTruthy();
    const candidates = (await onNode('ctl-0', `${NBCTL} lrp-get-gateway-chassis lrp-${gwPort!.ID}`))
      .split('\n')
      .map((l) => /_(\S+)\s+\d+\s*$/.exec(l.trim())?.[1])
      .filter((c): c is string => c !== undefined);
    process.stderr.write(`--- gateway chassis of lrp-${gwPort!.ID}: ${candidates.join(' ')}\n`);
    expect(candidates.length, "the router's gateway port has no gateway chassis").toBeGreaterThan(0);
    for (const c of candidates)
      expect(GATEWAYS, `Neutron made ${c} a gateway chassis of the router (not on the external network)`).toContain(c);
    const sb = await onNode('ctl-0', `${SBCTL} show`);
    const gateway = sb.split(/^Chassis /m).find((c) => /Port_Binding "?cr-lrp-/.test(c));
    expect(GATEWAYS, `the router's gateway port is bound to a chassis off the external network:\n${sb}`).toContain(
      gateway?.split('\n')[0]?.replace(/"/g, ''),
    );
    const fip = osJson<{ floating_ip_address: string }>(`floating ip create --port ${port.id} public`);
    const ip = fip.floating_ip_address;
    // TCP: a web server in the namespace; this machine's veth into the gateway node's external NIC
    // sends into the userspace datapath, so its transmit checksum offload goes off too.
    await onNode(
      PROBE_NODE,
      'mkdir -p /tmp/probe-www && echo probe-ok > /tmp/probe-www/index.html && ip netns exec probe busybox httpd -p 8080 -h /tmp/probe-www',
    );
    const iflink = (
      await onNode(
        'ctl-0',
        `ip -o -4 addr show | awk '$4 ~ /^${P}\\.10\\.10\\//{print $2}' | head -n1 | xargs -I{} cat /sys/class/net/{}/iflink`,
      )
    ).trim();
    const hostVeth = execFileSync('ip', ['-o', 'link'], { encoding: 'utf8' })
      .split('\n')
      .find((l) => l.startsWith(`${iflink}:`))
      ?.split(':')[1]
      ?.trim()
      .replace(/@.*$/, '');
    expect(hostVeth, `this machine's veth of ctl-0's external NIC (ifindex ${iflink})`).toBeTruthy();
    onHost(OVS_IMAGE, ['ethtool', '-K', hostVeth!, 'tx', 'off']);
    const t0 = Date.now();
    const pingS = await eventually(60, () => {
      const out = onHost(NODE_IMAGE, ['busybox', 'ping', '-c', '1', '-W', '1', ip], 10_000);
      expect(out).toMatch(/1 packets received/);
    });
    timings.push(['floating IP answers ping after association', seconds(t0)]);
    const ping = onHost(NODE_IMAGE, ['busybox', 'ping', '-c', '5', ip]);
    process.stderr.write(`--- ping ${ip} from this machine (after ${pingS} s)\n${ping}\n`);
    expect(ping).toMatch(/5 packets received/);
    const body = execFileSync('curl', ['-sS', '--max-time', '10', `http://${ip}:8080/`], { encoding: 'utf8' });
    expect(body.trim()).toBe('probe-ok');
  });

  it("the compute's OVN metadata agent answers 169.254.169.254 for the port's network, through its namespace's haproxy", async () => {
    expect(port.id, 'the port of the previous tests').not.toBe('');
    const net = osJson<{ id: string }>('network show demo-net');
    // the agent made the network's namespace on the compute that has a port of it
    const t0 = Date.now();
    await eventually(90, async () => {
      const ns = await onNode(PROBE_NODE, 'docker exec neutron_ovn_metadata_agent ip netns list');
      expect(ns).toContain(`ovnmeta-${net.id}`);
    });
    timings.push(['metadata namespace on the compute', seconds(t0)]);
    // Neutron's metadata port of the network (OVN localport): DHCP offers its route to 169.254.169.254
    // as a classless static route, which busybox's udhcpc script does not apply: the probe adds it.
    const [md] = osJson<{ 'Fixed IP Addresses': unknown }[]>(
      `port list --network ${net.id} --device-owner network:distributed`,
    );
    const mdIp = /\b(\d+\.\d+\.\d+\.\d+)\b/.exec(JSON.stringify(md?.['Fixed IP Addresses']))?.[1];
    expect(mdIp, "demo-net's metadata port").toBeTruthy();
    const inNs = await onNode(
      PROBE_NODE,
      `docker exec neutron_ovn_metadata_agent ip netns exec ovnmeta-${net.id} ip -4 -o addr show`,
    );
    expect(inNs).toContain('169.254.169.254/32');
    expect(inNs).toContain(`${mdIp}/`);
    await onNode(PROBE_NODE, `ip netns exec probe ip route replace 169.254.169.254/32 via ${mdIp}`);
    // The probe port belongs to no instance (no device id): the agent, having found it in the
    // Southbound database by network and address, answers 404 itself; haproxy alone (agent socket
    // missing) would answer 503, and no answer at all means the chain is broken before haproxy.
    let answer = '';
    await eventually(60, async () => {
      answer = await onNode(
        PROBE_NODE,
        'ip netns exec probe curl -sS -i --max-time 10 http://169.254.169.254/openstack',
      );
      expect(answer).toMatch(/^HTTP\/1\.[01] 404/);
    });
    process.stderr.write(`--- metadata from the probe namespace\n${answer}\n`);
    expect(answer).toContain('The resource could not be found');
  });

  it('the userspace datapath does not busy-poll: OVS/OVN memory and idle CPU per node', async () => {
    const names = 'openvswitch_db openvswitch_vswitchd ovn_controller ovn_nb_db ovn_sb_db ovn_northd';
    for (const node of CHASSIS) {
      const out = await onNode(
        node,
        `docker stats --no-stream --format '{{.Name}} {{.CPUPerc}} {{.MemUsage}}' $(for c in ${names}; do docker inspect --format '{{.Name}}' $c 2>/dev/null | tr -d /; done)`,
      );
      process.stderr.write(`--- ${node} OVS/OVN (docker stats)\n${out}`);
      const vswitchd = /^openvswitch_vswitchd ([\d.]+)%/m.exec(out);
      expect(vswitchd, out).not.toBeNull();
      expect(Number(vswitchd![1])).toBeLessThan(25);
    }
  });
});
