import { describe, expect, it } from 'vitest';
import { formatIpv4, hostRange, inCidr, overlaps, parseCidr4, parseIpv4 } from '../../src/core/ipv4.js';

describe('IPv4 arithmetic', () => {
  it('round-trips addresses', () => {
    for (const a of ['0.0.0.0', '10.0.0.1', '192.168.24.255', '255.255.255.255'])
      expect(formatIpv4(parseIpv4(a)!)).toBe(a);
  });
  it('rejects what is not a dotted quad', () => {
    for (const a of ['10.0.0', '10.0.0.256', 'a.b.c.d', '10.0.0.1/24', '']) expect(parseIpv4(a)).toBeUndefined();
  });
  it('parses networks and notices host bits', () => {
    const n = parseCidr4('172.17.0.0/24')!;
    expect([formatIpv4(n.first), formatIpv4(n.last), n.exact]).toEqual(['172.17.0.0', '172.17.0.255', true]);
    expect(parseCidr4('172.17.0.5/24')!.exact).toBe(false);
    expect(parseCidr4('172.17.0.0/33')).toBeUndefined();
    expect(hostRange(n).map(formatIpv4)).toEqual(['172.17.0.1', '172.17.0.254']);
    expect(inCidr(parseIpv4('172.17.1.1')!, n)).toBe(false);
  });
  it('detects overlapping networks', () => {
    expect(overlaps(parseCidr4('10.0.0.0/8')!, parseCidr4('10.1.0.0/16')!)).toBe(true);
    expect(overlaps(parseCidr4('10.0.0.0/24')!, parseCidr4('10.0.1.0/24')!)).toBe(false);
  });
});
