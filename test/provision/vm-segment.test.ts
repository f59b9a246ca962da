/**
 * The VM tests' segment with the real `ip` and `iptables`: a bridge left by a
 * killed run with the same address is removed before a new one takes it (a
 * CI run failed on such a leftover: its link-down route took the host's
 * replies to the VMs), and a holder that is not a dead test's is reported.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { $ } from 'zx';
import { VmSegment, removeStaleHolders, requireVmTools, tagPid } from './vm-segment.js';

/** pid 60466175 (zzzzz in base 36) is above any pid_max Linux allows by default: its run is dead. */
const DEAD = 'zzzzz';
const ADDR = '10.231.89.1';

async function route(address: string): Promise<string> {
  return (await $({ quiet: true })`ip -4 route get ${address}`).stdout;
}

describe('VmSegment and stale segments', () => {
  const seg = new VmSegment(process.pid.toString(36).slice(-5), `${ADDR}/24`, 'fd9a:231:89::1/64');
  afterAll(async () => {
    await seg.destroy();
    for (const l of [`stkib-${DEAD}`, `stkit0-${DEAD}`, 'stkx-holder'])
      await $({ nothrow: true, quiet: true })`ip link del ${l}`;
    await $({
      nothrow: true,
      quiet: true,
    })`iptables -D DOCKER-USER -i ${'stkib-' + DEAD} -o ${'stkib-' + DEAD} -j ACCEPT`;
  });

  it('reads the pid from a tag', () => {
    expect(tagPid(process.pid.toString(36))).toBe(process.pid);
    expect(tagPid('no-tag')).toBeUndefined();
    expect(tagPid(DEAD)).toBe(60466175);
  });

  it("removes a dead run's bridge, its tap and its rule, then routes the prefix through the new bridge", async () => {
    requireVmTools();
    const stale = `stkib-${DEAD}`;
    await $`ip link add ${stale} type bridge`;
    await $`ip addr add ${ADDR}/24 dev ${stale}`;
    await $`ip link set ${stale} up`;
    await $`ip tuntap add dev ${'stkit0-' + DEAD} mode tap`;
    await $`ip link set ${'stkit0-' + DEAD} master ${stale} up`;
    const chain = await $({ nothrow: true, quiet: true })`iptables -n -L DOCKER-USER`;
    if (chain.exitCode === 0) await $`iptables -I DOCKER-USER -i ${stale} -o ${stale} -j ACCEPT`;
    expect(await route('10.231.89.21')).toContain(`dev ${stale}`);

    await seg.create();

    const links = (await $({ quiet: true })`ip -br link`).stdout;
    expect(links).not.toContain(stale);
    expect(links).not.toContain(`stkit0-${DEAD}`);
    if (chain.exitCode === 0) expect((await $({ quiet: true })`iptables -S DOCKER-USER`).stdout).not.toContain(stale);
    expect(await route('10.231.89.21')).toContain(`dev ${seg.bridge}`);
  });

  it('refuses an address held by an interface that is not a dead test run, naming it', async () => {
    await $`ip link add stkx-holder type bridge`;
    await $`ip addr add 10.231.88.1/24 dev stkx-holder`;
    await expect(removeStaleHolders('10.231.88.1', 'stkib-other')).rejects.toThrow(
      /stkx-holder already holds 10\.231\.88\.1: remove it \("ip link del stkx-holder"\)/,
    );
    expect((await $({ quiet: true })`ip -br addr show stkx-holder`).stdout).toContain('10.231.88.1');
  });
});
