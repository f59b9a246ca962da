import { existsSync } from 'node:fs';
import { canonicalJson } from '../core/hash.js';
import { readTextFile, writeFileAtomic } from '../core/fs.js';
import { InputError, type Issue } from '../core/errors.js';
import { formatIpv4, hostRange, parseIpv4 } from '../core/ipv4.js';
import type { Inventory } from './schema.js';
import type { ParsedNetwork, RoleInfo } from './semantic.js';

/**
 * IPAM: each node's address on each network of its role. Allocations are
 * persisted next to the inventory (`<inventory>.ipam.json`) so that a re-run
 * never renumbers a node, adding a node never moves another, and a removed
 * node keeps its address reserved until `stackctl ipam release` frees it.
 * Fixed addresses (`nodes[].ips`) always win. New nodes take the lowest free
 * address of the pool, in inventory order: deterministic for equal inputs.
 */

/** The persisted state: network -> node -> address. */
export interface IpamState {
  readonly version: 1;
  readonly networks: Record<string, Record<string, string>>;
}

export const EMPTY_IPAM: IpamState = { version: 1, networks: {} };

/** Path of the IPAM state file that belongs to an inventory file. */
export function ipamFileFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.ipam.json';
}

/** Read the state file; a missing file is an empty state. */
export function loadIpamState(file: string): IpamState {
  if (!existsSync(file)) return EMPTY_IPAM;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readTextFile(file, 64 * 1024 * 1024));
  } catch (e) {
    if (e instanceof InputError) throw e;
    throw new InputError('E_IPAM_STATE', `IPAM state ${file} is not valid JSON`, {
      hint: 'Restore it from a backup; removing it would renumber every node.',
      location: { file },
    });
  }
  const obj = parsed as Partial<IpamState>;
  if (obj.version !== 1 || typeof obj.networks !== 'object' || obj.networks === null) {
    throw new InputError('E_IPAM_STATE', `IPAM state ${file} has an unknown format`, {
      hint: 'Expected {"version": 1, "networks": {...}}.',
      location: { file },
    });
  }
  return obj as IpamState;
}

/** Write the state atomically, keys sorted so the file diffs cleanly. */
export function saveIpamState(file: string, state: IpamState): void {
  writeFileAtomic(file, JSON.stringify(JSON.parse(canonicalJson(state)), null, 2) + '\n');
}

/** Result of an allocation pass. */
export interface Allocation {
  /** node -> network -> address, for every node of the inventory. */
  readonly addresses: Map<string, Record<string, string>>;
  /** The state to persist (equal to the input when nothing changed). */
  readonly state: IpamState;
  readonly changed: boolean;
  readonly issues: Issue[];
}

/** Allocate addresses; pure: reads only its arguments. */
export function allocate(
  inv: Inventory,
  networks: ReadonlyMap<string, ParsedNetwork>,
  roles: ReadonlyMap<string, RoleInfo>,
  previous: IpamState,
  locate: (path: (string | number)[]) => Issue['location'],
): Allocation {
  const issues: Issue[] = [];
  const addresses = new Map<string, Record<string, string>>();
  for (const node of inv.nodes) addresses.set(node.name, {});
  const nextState: Record<string, Record<string, string>> = {};
  let changed = false;
  const inInventory = new Map(inv.nodes.map((n, i) => [n.name, i]));

  for (const [netName, net] of [...networks.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const prev = previous.networks[netName] ?? {};
    const out: Record<string, string> = {};
    const used = new Map<number, string>(); // address -> holder (node name or a reason)

    // Nodes that need an address here, in inventory order.
    const needing = inv.nodes.filter((n) => roles.get(n.role)?.networks.includes(netName));
    const needs = new Set(needing.map((n) => n.name));

    // 1. Fixed addresses win.
    for (const n of needing) {
      const fixed = n.ips?.[netName];
      if (fixed === undefined) continue;
      const ip = parseIpv4(fixed);
      if (ip === undefined) continue;
      used.set(ip, n.name);
      out[n.name] = fixed;
    }
    // 2. Earlier allocations are kept, including those of removed nodes (until released).
    for (const [nodeName, text] of Object.entries(prev).sort(([a], [b]) => a.localeCompare(b))) {
      if (out[nodeName] !== undefined) continue;
      const ip = parseIpv4(text);
      if (ip === undefined) continue;
      if (!inInventory.has(nodeName)) {
        used.set(ip, nodeName);
        out[nodeName] = text;
        issues.push({
          severity: 'warning',
          code: 'W_IPAM_STALE',
          message: `node '${nodeName}' is no longer in the inventory but keeps ${text} on ${netName}`,
          hint: `Run 'stackctl ipam release ${nodeName}' to free its addresses.`,
          location: locate(['nodes']),
        });
        continue;
      }
      if (!needs.has(nodeName)) continue; // its role no longer uses this network: freed
      const holder = used.get(ip);
      if (holder !== undefined || reservedReason(ip, net) !== undefined) {
        const idx = inInventory.get(nodeName)!;
        issues.push({
          severity: 'error',
          code: 'E_IPAM_CONFLICT',
          message: `address ${text} allocated earlier to node '${nodeName}' on ${netName} is now ${holder !== undefined ? `the fixed address of '${holder}'` : reservedReason(ip, net)}`,
          hint: `Change the inventory back, or run 'stackctl ipam release ${nodeName} --network ${netName}' to renumber that node.`,
          location: locate(['nodes', idx]),
        });
        continue;
      }
      used.set(ip, nodeName);
      out[nodeName] = text;
    }
    // 3. New nodes take the lowest free address.
    const [poolStart, poolEnd] = net.allocation ?? hostRange(net.cidr);
    let cursor = poolStart;
    for (const n of needing) {
      if (out[n.name] !== undefined) continue;
      while (cursor <= poolEnd && (used.has(cursor) || reservedReason(cursor, net) !== undefined)) {
        // Skip the whole DHCP range in one step rather than address by address.
        if (net.dhcp && cursor >= net.dhcp[0] && cursor <= net.dhcp[1]) cursor = net.dhcp[1] + 1;
        else cursor++;
      }
      if (cursor > poolEnd) {
        issues.push({
          severity: 'error',
          code: 'E_IPAM_EXHAUSTED',
          message: `network ${netName} has no free address left for node '${n.name}'`,
          hint: `Widen the cidr or allocation_range of ${netName}, or release addresses of removed nodes.`,
          location: locate(['networks', netName]),
        });
        break;
      }
      used.set(cursor, n.name);
      out[n.name] = formatIpv4(cursor);
      cursor++;
    }
    for (const [nodeName, text] of Object.entries(out)) {
      const rec = addresses.get(nodeName);
      if (rec) rec[netName] = text;
    }
    if (Object.keys(out).length > 0) nextState[netName] = out;
    if (!sameRecord(prev, out)) changed = true;
  }
  for (const netName of Object.keys(previous.networks)) if (!networks.has(netName)) changed = true;
  return { addresses, state: { version: 1, networks: nextState }, changed, issues };
}

/** Release the addresses of a node that left the inventory. Returns the new state. */
export function release(state: IpamState, node: string, network?: string): { state: IpamState; freed: string[] } {
  const freed: string[] = [];
  const networks: Record<string, Record<string, string>> = {};
  for (const [net, rec] of Object.entries(state.networks)) {
    const copy = { ...rec };
    if ((network === undefined || network === net) && copy[node] !== undefined) {
      freed.push(`${net} ${copy[node]}`);
      delete copy[node];
    }
    if (Object.keys(copy).length) networks[net] = copy;
  }
  return { state: { version: 1, networks }, freed };
}

function reservedReason(ip: number, net: ParsedNetwork): string | undefined {
  if (net.cidr.prefix < 31 && (ip === net.cidr.first || ip === net.cidr.last))
    return 'the network or broadcast address';
  if (ip === net.gateway) return `the gateway of ${net.name}`;
  if (ip === net.vip) return `the VIP of ${net.name}`;
  if (net.dhcp && ip >= net.dhcp[0] && ip <= net.dhcp[1]) return `inside the DHCP range of ${net.name}`;
  if (ip < net.cidr.first || ip > net.cidr.last) return `outside ${net.cidr.text}`;
  return undefined;
}

function sameRecord(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  return ka.every((k) => a[k] === b[k]);
}
