/**
 * The top-level commands and the module that declares each, in the order `--help` lists them. A run
 * imports only the module of the command it names (`stackctl plan` never loads ssh2, dockerode,
 * listr2 or the X.509 library: about a second of start-up on this kind of machine); `--help`, no
 * command or an unknown one imports them all. test/cli/commands.test.ts checks every row against the
 * commands its module declares.
 */
import type { Command } from 'commander';

/** Adds one top-level command (with its subcommands) to the program. */
export type Register = (program: Command) => void;

/** A top-level command: its name and how to load the code that declares it. */
export interface CommandModule {
  readonly name: string;
  readonly load: () => Promise<Register>;
}

export const COMMANDS: readonly CommandModule[] = [
  { name: 'inventory', load: async () => (await import('./inventory.js')).registerInventory },
  { name: 'secrets', load: async () => (await import('./secrets.js')).registerSecrets },
  { name: 'certs', load: async () => (await import('./certs.js')).registerCerts },
  { name: 'rotate', load: async () => (await import('./rotate.js')).registerRotate },
  { name: 'plan', load: async () => (await import('./plan.js')).registerPlan },
  { name: 'ipam', load: async () => (await import('./ipam.js')).registerIpam },
  { name: 'schema', load: async () => (await import('./schema.js')).registerSchema },
  { name: 'nodes', load: async () => (await import('./nodes.js')).registerNodes },
  {
    name: 'images',
    load: async () => {
      const [{ registerImages }, { registerRamdisk }] = await Promise.all([
        import('./images.js'),
        import('./ramdisk.js'),
      ]);
      return (program) => void registerRamdisk(registerImages(program));
    },
  },
  { name: 'deploy', load: async () => (await import('./deploy.js')).registerDeploy },
  { name: 'recover', load: async () => (await import('./recover.js')).registerRecover },
  { name: 'upgrade', load: async () => (await import('./upgrade.js')).registerUpgrade },
  { name: 'openrc', load: async () => (await import('./openrc.js')).registerOpenrc },
  { name: 'report', load: async () => (await import('./report.js')).registerReport },
  { name: 'status', load: async () => (await import('./status.js')).registerStatus },
  { name: 'tempest', load: async () => (await import('./tempest.js')).registerTempest },
  { name: 'pxe', load: async () => (await import('./pxe.js')).registerPxe },
  {
    name: 'lab',
    load: async () => {
      const [{ registerLab }, { registerLabUp }] = await Promise.all([import('./lab.js'), import('./lab-up.js')]);
      return (program) => registerLabUp(registerLab(program));
    },
  },
];

/**
 * The command an argument list names: its first word that is no option (the program's own options
 * take no value), when that word is a command of the table; otherwise undefined.
 */
export function commandNamed(args: readonly string[]): CommandModule | undefined {
  const word = args.find((a) => !a.startsWith('-'));
  return COMMANDS.find((c) => c.name === word);
}
