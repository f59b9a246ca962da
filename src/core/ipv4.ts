import ipaddr from 'ipaddr.js';

/**
 * IPv4 arithmetic on 32-bit unsigned integers. Parsing goes through ipaddr.js
 * (strict dotted-quad); the hot paths (IPAM over thousands of nodes) then work
 * on plain numbers.
 */

/** An IPv4 network as numbers: first and last address (inclusive) and prefix length. */
export interface Cidr4 {
  readonly base: number;
  readonly prefix: number;
  readonly first: number;
  readonly last: number;
  readonly text: string;
}

/** Parse a dotted-quad IPv4 address, or undefined when it is not one. */
export function parseIpv4(text: string): number | undefined {
  if (!ipaddr.IPv4.isValidFourPartDecimal(text)) return undefined;
  const b = ipaddr.IPv4.parse(text).octets;
  return ((b[0]! << 24) | (b[1]! << 16) | (b[2]! << 8) | b[3]!) >>> 0;
}

/** Format a 32-bit number as dotted-quad. */
export function formatIpv4(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/** Parse `a.b.c.d/p`; undefined when malformed. `exact` is false when host bits are set. */
export function parseCidr4(text: string): (Cidr4 & { exact: boolean }) | undefined {
  const slash = text.indexOf('/');
  if (slash < 0) return undefined;
  const addr = parseIpv4(text.slice(0, slash));
  const prefixText = text.slice(slash + 1);
  if (addr === undefined || !/^\d{1,2}$/.test(prefixText)) return undefined;
  const prefix = Number(prefixText);
  if (prefix > 32) return undefined;
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  const base = (addr & mask) >>> 0;
  const last = (base | (~mask >>> 0)) >>> 0;
  return { base, prefix, first: base, last, text, exact: base === addr };
}

/** True when `ip` lies in the network (network and broadcast addresses included). */
export function inCidr(ip: number, net: Cidr4): boolean {
  return ip >= net.first && ip <= net.last;
}

/** Usable host range of a network: excludes network and broadcast addresses for prefixes up to /30. */
export function hostRange(net: Cidr4): [number, number] {
  if (net.prefix >= 31) return [net.first, net.last];
  return [net.first + 1, net.last - 1];
}

/** True when two networks share any address. */
export function overlaps(a: Cidr4, b: Cidr4): boolean {
  return a.first <= b.last && b.first <= a.last;
}
