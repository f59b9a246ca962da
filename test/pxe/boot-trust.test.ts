/**
 * A second client on the provisioning network: the real boot services
 * (startBootServices: our dnsmasq with the inventory's static leases, and the
 * boot server that takes its node table from them) on a bridge of their own,
 * with two network namespaces behind it. One is the armed node (its MAC gets
 * its lease from dnsmasq); the other is an attacker on the same segment that
 * names the node's MAC in its URLs and, later, takes the node's MAC itself.
 *
 * What must hold: the attacker never gets the boot script or the command
 * (403, a `pxe.refused` event naming its address), even with the node's token
 * in hand; what the node gets holds no private key; and an attacker that
 * spoofs MAC and address and asks first does get the script (the residual
 * risk docs/provisioning.md states), but the node's own request then gives it
 * away: the arming is marked suspect and a deploy would stop.
 *
 * Needs root and the Debian packages dnsmasq-base, busybox, iproute2,
 * iptables and curl; run it under the machine lock (it creates namespaces).
 */
import { chmodSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import type { StackctlEvent } from '../../src/core/events.js';
import { deployCommand } from '../../src/provision/deploy.js';
import { startBootServices, type BootServices } from '../../src/pxe/services.js';
import { generateEd25519 } from '../../src/remote/keys.js';
import { copyInventory } from '../helpers/cli.js';
import { Segment, requireTools, type Client } from './netns.js';

const NET = '10.231.79';
const NODE = 'ctl-0';
const ATTACKER_MAC = '52:54:00:66:66:66';
const ATTACKER_IP = `${NET}.66`;

describe('the boot server with a second client on the provisioning network', () => {
  const tag = process.pid.toString(36).slice(-5);
  const seg = new Segment(tag, `${NET}.1/24`);
  const events: StackctlEvent[] = [];
  let services: BootServices | undefined;
  let node: Client;
  let attacker: Client;
  let mac: string;
  let nodeIp: string;
  let dir: string;

  beforeAll(async () => {
    requireTools('dnsmasq', 'busybox', 'ip', 'iptables', 'curl');
    // the lab inventory, its provisioning network moved onto this test's bridge
    const inv = copyInventory('lab.yaml');
    writeFileSync(inv, readFileSync(inv, 'utf8').replaceAll('192.168.24.', `${NET}.`));
    dir = join(inv, '..');
    // dnsmasq drops to an unprivileged user: its folders must be readable by others
    chmodSync(dir, 0o755);
    const all = loadAll({ inventory: inv });
    const ctl = all.loaded.inventory.nodes.find((n) => n.name === NODE)!;
    mac = ctl.nics.find((n) => n.network === 'provisioning')!.mac.toLowerCase();
    nodeIp = all.allocation.addresses.get(NODE)!.provisioning!;
    writeFileSync(
      join(dir, 'udhcpc.sh'),
      '#!/bin/sh\n[ "$1" = bound ] && ip addr add "$ip/24" dev "$interface" && echo "BOUND ip=$ip"\nexit 0\n',
      { mode: 0o755 },
    );

    await seg.create();
    node = await seg.addClient(mac);
    attacker = await seg.addClient(ATTACKER_MAC);
    services = await startBootServices({
      inventory: all.loaded.inventory,
      addresses: all.allocation.addresses,
      interface: seg.bridge,
      httpPort: 0,
      runDir: join(dir, 'pxe'),
      filesDir: dir,
      kernel: 'vmlinuz',
      initrd: 'initrd.gz',
      onReport: () => undefined,
      events: { emit: (e) => events.push(e) },
    });
  });

  afterAll(async () => {
    await services?.close();
    await seg.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function dhcp(c: Client): Promise<string> {
    const r = await seg.exec(c, [
      'busybox',
      'udhcpc',
      '-i',
      'eth0',
      '-n',
      '-q',
      '-t',
      '3',
      '-T',
      '1',
      '-s',
      join(dir, 'udhcpc.sh'),
    ]);
    return r.out;
  }

  /** curl from a namespace: status and body. */
  async function get(c: Client, path: string, token?: string): Promise<{ status: number; body: string }> {
    const r = await seg.exec(c, [
      'curl',
      '-s',
      '-m',
      '10',
      '-w',
      '\n%{http_code}',
      ...(token ? ['-H', `Authorization: Bearer ${token}`] : []),
      services!.server.url + path,
    ]);
    const at = r.out.lastIndexOf('\n');
    return { status: Number(r.out.slice(at + 1)), body: r.out.slice(0, at) };
  }

  const script = (): string => `/boot/${mac.replace(/:/g, '-')}.ipxe`;
  const refused = (): (readonly [string, string, string])[] =>
    events.flatMap((e) => (e.kind === 'pxe.refused' && e.mac === mac ? [[e.client, e.asked, e.reason] as const] : []));

  it('gives the node its static lease, and the attacker none', async () => {
    expect(await dhcp(node)).toContain(`BOUND ip=${nodeIp}`);
    expect(await dhcp(attacker)).not.toContain('BOUND');
    // an attacker can give itself an address all the same
    await seg.exec(attacker, ['ip', 'addr', 'add', `${ATTACKER_IP}/24`, 'dev', 'eth0']);
  });

  it("refuses the attacker the node's boot script and command, even with the node's token", async () => {
    const server = services!.server;
    const image = { name: 'host-abc.img.lzo', sha256: 'a'.repeat(64), rawBytes: 1_000_000, bytes: 400_000 };
    const authorizedKey = generateEd25519('operator').publicKey.line;
    server.arm(NODE, 'deploy', deployCommand({ image, authorizedKey }, { node: NODE, mac, ip: nodeIp, prefix: 24 }));

    expect((await get(attacker, script())).status).toBe(403);
    const mine = await get(node, script());
    expect(mine.status).toBe(200);
    const token = /stackctl\.token=(\S+)/.exec(mine.body)![1]!;
    expect(server.suspicion(NODE)).toBeUndefined();

    // the token crosses the segment in clear: suppose the attacker read it
    const stolen = await get(attacker, `/v1/agent/${NODE}/command`, token);
    expect(stolen.status).toBe(403);
    expect(stolen.body).not.toContain('deploy');
    expect(server.suspicion(NODE)).toBe(`its token was shown from ${ATTACKER_IP}`);

    const command = await get(node, `/v1/agent/${NODE}/command`, token);
    expect(command.status).toBe(200);
    expect(command.body).toContain('\nhostkey ed25519 root@ctl-0\n');
    // what the node gets holds no private key: the agent makes the host key on the node
    const files = command.body
      .split('\n')
      .filter((l) => l.startsWith('file '))
      .map((l) => Buffer.from(l.split(' ')[3]!, 'base64').toString());
    expect(files.length).toBeGreaterThan(2);
    expect(files.join('\n')).not.toContain('PRIVATE');

    expect((await get(node, script())).status).toBe(403);
    expect(refused()).toEqual([
      [ATTACKER_IP, 'boot script', "not from the node's address"],
      [ATTACKER_IP, 'command', "not from the node's address, with the node's valid token"],
      [nodeIp, 'boot script', 'boot script already served in this arming'],
    ]);
    expect(JSON.stringify(events)).not.toContain(token);
    server.disarm(NODE);
  });

  it("lets an attacker that takes the node's MAC and address ask first, and the node's own request gives it away", async () => {
    const server = services!.server;
    events.length = 0;
    // the node is still off when it is armed; the attacker becomes the node on the wire
    await seg.exec(node, ['ip', 'link', 'set', 'eth0', 'down']);
    await seg.exec(attacker, ['ip', 'addr', 'flush', 'dev', 'eth0']);
    await seg.exec(attacker, ['ip', 'link', 'set', 'eth0', 'address', mac]);
    expect(await dhcp(attacker)).toContain(`BOUND ip=${nodeIp}`);
    server.arm(NODE, 'inspect');
    expect((await get(attacker, script())).status).toBe(200);
    expect(server.suspicion(NODE)).toBeUndefined();

    // the real node powers on and asks for its script
    await seg.exec(attacker, ['ip', 'link', 'set', 'eth0', 'down']);
    await seg.exec(node, ['ip', 'link', 'set', 'eth0', 'up']);
    expect((await get(node, script())).status).toBe(403);
    expect(server.suspicion(NODE)).toBe(`its boot script was asked for a second time (from ${nodeIp})`);
    expect(refused()).toEqual([[nodeIp, 'boot script', 'boot script already served in this arming']]);
    server.disarm(NODE);
  });
});
