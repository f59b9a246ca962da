import type { Command } from 'commander';
import { IoError } from '../core/errors.js';
import { writeFileAtomic } from '../core/fs.js';
import { adminCredentials } from '../roles/credentials.js';
import { caFile } from '../certs/served.js';
import { certsDirFor } from '../certs/files.js';
import { loadAll, planOf } from './context.js';
import { inventoryOptions, osInterfaceOption, type CommonOpts, type OsInterface } from './options.js';
import { out } from './output.js';

/** Quote a value for a POSIX shell `export` line. */
function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * `stackctl openrc`: the cloud's admin credentials as a shell file (mode 0600)
 * for the OpenStack client. The password comes from the secrets file and is
 * written only into that file, never printed.
 */
export function registerOpenrc(program: Command): void {
  const cmd = inventoryOptions(program.command('openrc'))
    .description(
      'write the admin credentials file for the OpenStack client (mode 0600); prints its path, not the password',
    )
    .option('-o, --output <file>', 'where to write it (default: <inventory>.openrc next to the inventory)');
  osInterfaceOption(cmd, 'the client');
  cmd.action((opts: CommonOpts & { output?: string; osInterface: OsInterface }) => {
    const all = loadAll(opts);
    const password = all.secrets?.services.get('keystone_admin_password');
    if (!password) {
      throw new IoError('E_NO_ADMIN_PASSWORD', `the secrets file ${all.secretsFile} holds no keystone_admin_password`, {
        hint: "Run 'stackctl secrets generate' first (and deploy the cloud with it).",
      });
    }
    const { plan } = planOf(all);
    const cacert = caFile(all.inventoryFile, certsDirFor(all.inventoryFile), all.loaded.inventory.tls);
    const creds = adminCredentials(plan, password, {
      iface: opts.osInterface,
      region: all.loaded.inventory.cloud.region ?? 'RegionOne',
      ...(cacert ? { cacert } : {}),
    });
    if (!creds) {
      throw new IoError('E_NO_KEYSTONE', 'no node of this inventory runs keystone', {
        hint: 'Give a node a role with the keystone service (Controller or AllInOne).',
      });
    }
    const file = opts.output ?? all.inventoryFile.replace(/\.ya?ml$/, '') + '.openrc';
    const lines = Object.entries(creds.env).map(([k, v]) => [k, typeof v === 'string' ? v : v.reveal()] as const);
    const body =
      `# Admin credentials of cloud ${plan.cloud.name}, written by stackctl openrc. Keep private.\n` +
      lines.map(([k, v]) => `export ${k}=${shellQuote(v)}`).join('\n') +
      '\n';
    writeFileAtomic(file, body, 0o600);
    out(`${file}: admin credentials for ${creds.url} (source it: . ${file})\n`);
  });
}
