import { formatIpv4 } from '../core/ipv4.js';

/** Shape of a generated inventory. */
export interface GenerateOptions {
  readonly name?: string;
  readonly controllers: number;
  readonly computes: number;
  /** Address BMCs as lab virtual BMCs on loopback ports (true) or as a site's IPMI/Redfish mix (false). */
  readonly lab?: boolean;
}

/**
 * Write an inventory as YAML text for a topology: controllers and computes on
 * four networks wide enough for 60,000 nodes. Used by the benchmarks and tests
 * and as a starting point for large sites. Deterministic.
 */
export function generateInventoryYaml(opts: GenerateOptions): string {
  const lines: string[] = [
    `cloud: { name: ${opts.name ?? 'gen'}, registry_insecure: true, release: zed }`,
    'networks:',
    '  provisioning: { cidr: 10.128.0.0/16, gateway: 10.128.0.1, dhcp_range: [10.128.255.0, 10.128.255.254] }',
    '  internal_api: { cidr: 10.129.0.0/16, vlan: 20, vip: 10.129.255.250 }',
    '  external: { cidr: 10.130.0.0/16, gateway: 10.130.0.1, vip: 10.130.255.250 }',
    '  tenant: { cidr: 10.131.0.0/16, vlan: 50 }',
    'nodes:',
  ];
  const total = opts.controllers + opts.computes;
  for (let i = 0; i < total; i++) {
    const ctl = i < opts.controllers;
    const name = ctl ? `ctl-${i}` : `cmp-${i - opts.controllers}`;
    const mac = `52:54:${hex(i >>> 24)}:${hex((i >>> 16) & 255)}:${hex((i >>> 8) & 255)}:${hex(i & 255)}`;
    const bmcHost = formatIpv4(((10 << 24) | (132 << 16)) + i + 1);
    const bmc = opts.lab
      ? `ipmi://127.0.0.1:${10000 + i}`
      : i % 2 === 0
        ? `ipmi://${bmcHost}:623`
        : `redfish+https://${bmcHost}/redfish/v1/Systems/1`;
    lines.push(
      `  - name: ${name}`,
      `    role: ${ctl ? 'Controller' : 'Compute'}`,
      `    bmc: { address: '${bmc}', credentials: bmc-default }`,
      `    nics: [ { mac: '${mac}', network: provisioning } ]`,
      '    root_device: { min_size_gb: 50 }',
    );
  }
  return lines.join('\n') + '\n';
}

function hex(n: number): string {
  return n.toString(16).padStart(2, '0');
}
