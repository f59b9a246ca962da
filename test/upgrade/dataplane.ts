/**
 * A dataplane probe for the upgrade lab tests that run the fake virt driver (no guest to watch): a
 * Neutron port on the starter tenant network, plugged into a network namespace on a compute (a veth
 * in br-int bound to the port by `iface-id`, its address by DHCP from OVN), with a floating IP. In
 * the namespace busybox httpd serves the guest image's state page (`boot_id=… counter=… uptime=…`):
 * a boot id drawn when the port was plugged, a counter in hundredths of a second of the node's uptime.
 * So the watch the guest tests use (src/workloads/guest-watch.ts) polls it from this machine through
 * the gateway chassis, the router and the Geneve tunnel, and reads its gaps per upgrade phase.
 */
import { openstackJson } from '../helpers/openstack.js';

/** What the probe needs of a lab: a shell on a node. */
interface LabShell {
  remote(node: string): {
    exec(argv: string[], options: { timeoutMs: number }): Promise<{ code: number; stdout: string; stderr: string }>;
  };
}

/** A plugged probe port. */
export interface ProbePort {
  readonly id: string;
  readonly node: string;
  readonly fixedIp: string;
  readonly floatingIp: string;
  /** The URL of its state page, through the floating IP. */
  readonly url: string;
  /** Its boot id (drawn once, when plugged). */
  readonly bootId: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A shell script on a node; its standard output, or an error with both outputs. */
async function onNode(lab: LabShell, node: string, script: string): Promise<string> {
  const r = await lab.remote(node).exec(['sh', '-c', script], { timeoutMs: 120_000 });
  if (r.code !== 0) throw new Error(`${node}: exit ${r.code}\n${r.stdout}${r.stderr}`);
  return r.stdout;
}

/**
 * The state page's CGI script: the boot id from its file, the counter the node's uptime in hundredths
 * of a second (it never goes back while the namespace's node runs).
 */
const stateCgi = (dir: string): string =>
  [
    '#!/bin/sh',
    "printf 'Content-Type: text/plain\\r\\n\\r\\n'",
    `read up idle < /proc/uptime`,
    `printf 'boot_id=%s counter=%s uptime=%s\\n' "$(cat ${dir}/boot_id)" "$(echo "$up" | tr -d .)" "$up"`,
  ].join('\n') + '\n';

/**
 * Make `name` (a security group letting in ICMP and HTTP, a port on `network`) and plug it into a
 * namespace of that name on `node`, serve the state page there on port 80, give it a floating IP on
 * `external`, and wait until this machine reads the page through that address (at most 3 minutes).
 */
export async function plugProbePort(
  lab: LabShell,
  openrc: string,
  options: { node: string; name: string; network?: string; external?: string },
): Promise<ProbePort> {
  const { node, name } = options;
  const os = <T>(args: string): T => openstackJson<T>(openrc, args, 120_000);
  os(`security group create ${name}-sg`);
  os(`security group rule create --ingress --protocol icmp ${name}-sg`);
  os(`security group rule create --ingress --protocol tcp --dst-port 80 ${name}-sg`);
  const p = os<{ id: string; mac_address: string; fixed_ips: { ip_address: string }[] }>(
    `port create --network ${options.network ?? 'demo-net'} --security-group ${name}-sg ${name}`,
  );
  const fixedIp = p.fixed_ips[0]!.ip_address;
  const dir = `/tmp/${name}`;
  // veth into br-int bound to the Neutron port; transmit checksum offload off on both ends (the
  // userspace datapath does not fill in partial checksums: ping would work and TCP would not)
  await onNode(
    lab,
    node,
    [
      'set -e',
      `ip netns add ${name}`,
      `ip link add ${name}-o type veth peer name ${name}-i`,
      `ip link set ${name}-i netns ${name}`,
      `ip netns exec ${name} ip link set ${name}-i address ${p.mac_address}`,
      `ip netns exec ${name} ip link set lo up`,
      `ip netns exec ${name} ip link set ${name}-i up`,
      `ip netns exec ${name} ethtool -K ${name}-i tx off >/dev/null`,
      `ethtool -K ${name}-o tx off >/dev/null`,
      `ip link set ${name}-o up`,
      `docker exec openvswitch_vswitchd ovs-vsctl --may-exist add-port br-int ${name}-o -- set Interface ${name}-o ` +
        `external_ids:iface-id=${p.id} external_ids:attached-mac=${p.mac_address} external_ids:iface-status=active`,
    ].join('\n'),
  );
  let leased = '';
  for (let i = 0; i < 30 && !leased.includes(`${fixedIp}/`); i++) {
    await onNode(
      lab,
      node,
      `ip netns exec ${name} udhcpc -i ${name}-i -n -q -t 5 -T 2 -s /etc/udhcpc/default.script >/dev/null 2>&1 || true`,
    );
    leased = await onNode(lab, node, `ip netns exec ${name} ip -4 -o addr show dev ${name}-i`);
    if (!leased.includes(`${fixedIp}/`)) await sleep(2000);
  }
  if (!leased.includes(`${fixedIp}/`))
    throw new Error(`${name} on ${node}: no DHCP lease for ${fixedIp} from OVN in 30 tries (${leased.trim()})`);
  const cgi = Buffer.from(stateCgi(dir)).toString('base64');
  await onNode(
    lab,
    node,
    [
      'set -e',
      `mkdir -p ${dir}/cgi-bin`,
      `cat /proc/sys/kernel/random/uuid > ${dir}/boot_id`,
      `echo ${cgi} | base64 -d > ${dir}/cgi-bin/state`,
      `chmod 755 ${dir}/cgi-bin/state`,
      `ip netns exec ${name} busybox httpd -p 80 -h ${dir}`,
    ].join('\n'),
  );
  const bootId = (await onNode(lab, node, `cat ${dir}/boot_id`)).trim();
  const floatingIp = os<{ floating_ip_address: string }>(
    `floating ip create --port ${p.id} ${options.external ?? 'public'}`,
  ).floating_ip_address;
  const url = `http://${floatingIp}/cgi-bin/state`;
  const deadline = Date.now() + 180_000;
  for (;;) {
    const body = await fetch(url, { signal: AbortSignal.timeout(2000) })
      .then((r) => r.text())
      .catch((e: unknown) => String(e));
    if (body.includes(`boot_id=${bootId} `)) break;
    if (Date.now() > deadline)
      throw new Error(`${name}: ${url} did not answer with its state page within 3 minutes (last: ${body.trim()})`);
    await sleep(1000);
  }
  return { id: p.id, node, fixedIp, floatingIp, url, bootId };
}
