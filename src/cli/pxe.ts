import type { Command } from 'commander';
import { dnsmasqPaths, dnsmasqSettingsFromInventory, renderDnsmasq } from '../pxe/dnsmasq.js';
import { loadAll } from './context.js';
import { RANGE, numberOption } from './numbers.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { out } from './output.js';

type PxeConfigOpts = CommonOpts & {
  interface: string;
  runDir: string;
  tftpRoot: string;
  httpPort: number;
  serverAddress?: string;
  discovery?: boolean;
  ipv6Prefix?: string;
};

/** `stackctl pxe config`: the boot services' generated configuration. */
export function registerPxe(program: Command): void {
  const pxe = program.command('pxe').description('network boot services: dnsmasq (DHCP/TFTP) and the HTTP boot server');
  inventoryOptions(pxe.command('config'))
    .description('print the dnsmasq configuration and static leases generated from the inventory and IPAM')
    .option('--interface <name>', 'provisioning interface dnsmasq binds to', 'br-prov')
    .option('--run-dir <dir>', 'folder of the generated files, pid, log and leases', '/run/stackctl/pxe')
    .option('--tftp-root <dir>', 'folder holding undionly.kpxe and ipxe.efi', '/usr/lib/ipxe')
    .addOption(numberOption('--http-port <port>', 'port of the HTTP boot server', RANGE.port, 8080))
    .option('--server-address <ip>', "deploy host's address on provisioning (default: the network's gateway)")
    .option('--discovery', 'also give unknown MACs an address from networks.provisioning.dhcp_range')
    .option('--ipv6-prefix <prefix>', 'ULA /64 prefix on the interface, for router advertisements (e.g. fd99::)')
    .action((opts: PxeConfigOpts) => {
      const port = opts.httpPort;
      const all = loadAll(opts);
      const settings = dnsmasqSettingsFromInventory(all.loaded.inventory, all.allocation.addresses, {
        interface: opts.interface,
        runDir: opts.runDir,
        tftpRoot: opts.tftpRoot,
        httpPort: port,
        ...(opts.serverAddress ? { serverAddress: opts.serverAddress } : {}),
        ...(opts.discovery ? { discovery: true } : {}),
        ...(opts.ipv6Prefix ? { ipv6Prefix: opts.ipv6Prefix } : {}),
      });
      const { conf, hosts } = renderDnsmasq(settings);
      const paths = dnsmasqPaths(opts.runDir);
      out(`# ${paths.conf}\n${conf}\n# ${paths.hosts}\n${hosts}`);
    });
}
