/**
 * This machine is the lab's user: it reaches floating IPs over the cloud's external network, through
 * that network's Docker bridge and the veths into the gateway nodes, where OVS's userspace datapath
 * reads the frames. Frames this machine's TCP left to transmit checksum offload reach the guest with
 * no valid checksum, and TCP fails while ping works (LAB-FACTS 9, trap B). The bridge and every veth
 * on it get `tx off`, from a small container on this machine's network (ethtool is in the node image,
 * not on the machine).
 */
import { RemoteError } from '../../core/errors.js';
import type { LocalEngine } from '../../remote/docker-local.js';

/** The container that runs ethtool on this machine's network; lab down removes it with the lab's label. */
export const hostNetContainer = (lab: string): string => `stackctl-${lab}-hostnet`;

/**
 * Turn transmit checksum offload off on the bridge holding `gateway` (this machine's address on the
 * network) and on every port of it. The address is an argument of the script, never part of it.
 */
export const OFFLOAD_OFF_SCRIPT = [
  'set -e',
  'br=$(ip -o -4 addr show | awk -v a="$1" \'{ split($4, p, "/"); if (p[1] == a) print $2 }\' | head -n1)',
  '[ -n "$br" ] || { echo "no interface holds $1" >&2; exit 3; }',
  'for dev in "$br" $(ls "/sys/class/net/$br/brif" 2>/dev/null); do ethtool -K "$dev" tx off >/dev/null; done',
  'echo "$br $(ls "/sys/class/net/$br/brif" 2>/dev/null | wc -l)"',
].join('\n');

/** Ensure the host-network container runs; true when it was created. */
async function ensureHostNet(
  engine: LocalEngine,
  name: string,
  image: string,
  labels: Readonly<Record<string, string>>,
): Promise<boolean> {
  const c = await engine.container(name);
  if (!c) {
    await engine.createContainer({
      name,
      image,
      labels,
      networks: [{ name: 'host' }],
      capAdd: ['NET_ADMIN'],
      entrypoint: ['sleep', 'infinity'],
      restart: 'no',
    });
  }
  if (!c?.running) await engine.start(name);
  return !c;
}

/**
 * Transmit checksum offload off on the external network's bridge and its veths. Returns the bridge
 * and how many ports it has; RemoteError E_LAB_OFFLOAD when ethtool could not do it.
 */
export async function checksumOffloadOff(
  engine: LocalEngine,
  o: {
    readonly lab: string;
    readonly image: string;
    readonly labels: Readonly<Record<string, string>>;
    readonly gateway: string;
  },
): Promise<{ bridge: string; ports: number; created: boolean }> {
  const name = hostNetContainer(o.lab);
  const created = await ensureHostNet(engine, name, o.image, o.labels);
  const r = await engine.exec(name, ['sh', '-c', OFFLOAD_OFF_SCRIPT, 'offload-off', o.gateway]);
  if (r.exitCode !== 0) {
    throw new RemoteError(
      'E_LAB_OFFLOAD',
      `lab '${o.lab}': transmit checksum offload could not be turned off on the bridge of ${o.gateway}: ${r.output.trim().slice(-300)}`,
      {
        hint: `Look at \`docker logs ${name}\` and \`ip -o -4 addr\` on this machine: the lab's external network should be a Docker bridge holding ${o.gateway}.`,
      },
    );
  }
  const [bridge = '', ports = '0'] = r.output.trim().split(/\s+/);
  return { bridge, ports: Number(ports), created };
}
