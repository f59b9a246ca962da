/** One name per concept on the command line, and the old spellings kept with a warning. */
import { readFileSync } from 'node:fs';
import type { Command, Option } from 'commander';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../src/cli/main.js';
import { copyInventory, runCli } from '../helpers/cli.js';

/** Every command of the tree with its visible options, by full name (`nodes provision`). */
function visibleOptions(c: Command, path: readonly string[] = []): { command: string; option: Option }[] {
  return c.commands.flatMap((sub) => {
    const p = [...path, sub.name()];
    return [
      ...sub.options.filter((o) => !o.hidden).map((option) => ({ command: p.join(' '), option })),
      ...visibleOptions(sub, p),
    ];
  });
}

/**
 * Parse argv with the real option declarations, the command's action replaced
 * by one that keeps the options; resolves to them and what went to stderr.
 */
async function parsed(args: readonly string[]): Promise<{ opts: Record<string, unknown>; stderr: string }> {
  const program = await buildProgram();
  let cmd: Command = program;
  for (const name of args.filter((a) => !a.startsWith('-'))) {
    const sub = cmd.commands.find((c) => c.name() === name);
    if (!sub) break;
    cmd = sub;
  }
  let opts: Record<string, unknown> = {};
  cmd.action((o: Record<string, unknown>) => void (opts = o));
  let stderr = '';
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  await program.parseAsync(['node', 'stackctl', ...args]);
  return { opts, stderr };
}

afterEach(() => vi.restoreAllMocks());

describe('one name per concept', () => {
  it('--interface is always a network interface of this machine; the Keystone one is --os-interface', async () => {
    const all = visibleOptions(await buildProgram());
    const nic = all.filter((o) => o.option.long === '--interface');
    expect(nic.map((o) => o.command).sort()).toEqual([
      'deploy',
      'nodes inspect',
      'nodes provision',
      'nodes undeploy',
      'pxe config',
    ]);
    for (const o of nic) expect(o.option.description, o.command).toMatch(/provisioning interface/);
    const os = all.filter((o) => o.option.long === '--os-interface');
    expect(os.map((o) => o.command).sort()).toEqual(['openrc', 'tempest config']);
    for (const o of os)
      expect(o.option.description).toMatch(/Keystone endpoint interface .* \(OS_INTERFACE\): public or internal/);
  });

  it('shows one spelling of each concept in --help: --dry-run, --max-fail-percent, --host-image', async () => {
    const all = visibleOptions(await buildProgram());
    const commandsWith = (long: string): string[] =>
      all
        .filter((o) => o.option.long === long)
        .map((o) => o.command)
        .sort();
    expect(commandsWith('--dry-run')).toEqual(['deploy', 'recover galera', 'upgrade']);
    expect(commandsWith('--max-fail-percent')).toEqual(['deploy', 'upgrade']);
    expect(commandsWith('--host-image')).toEqual(['deploy', 'nodes provision', 'nodes undeploy']);
    expect(commandsWith('--plan')).toEqual([]);
    expect(commandsWith('--failure-budget')).toEqual([]);
    // --image is the cloud image Tempest boots, nothing else
    expect(commandsWith('--image')).toEqual(['tempest config']);
  });
});

describe('the old spellings', () => {
  it.each([
    {
      args: ['deploy', '-i', 'x.yaml', '--failure-budget', '50'],
      key: 'maxFailPercent',
      value: 50,
      now: '--max-fail-percent',
    },
    { args: ['upgrade', '-i', 'x.yaml', '--to', 'zed-update', '--plan'], key: 'dryRun', value: true, now: '--dry-run' },
    {
      args: ['upgrade', '-i', 'x.yaml', '--to', 'zed-update', '--failure-budget', '10'],
      key: 'maxFailPercent',
      value: 10,
      now: '--max-fail-percent',
    },
    {
      args: ['deploy', '-i', 'x.yaml', '--image', '/srv/host'],
      key: 'hostImage',
      value: '/srv/host',
      now: '--host-image',
    },
    {
      args: ['nodes', 'provision', '--all', '-i', 'x.yaml', '--image', '/srv/host'],
      key: 'hostImage',
      value: '/srv/host',
      now: '--host-image',
    },
    {
      args: ['openrc', '-i', 'x.yaml', '--interface', 'internal'],
      key: 'osInterface',
      value: 'internal',
      now: '--os-interface',
    },
  ])('$args.0 $args.3: still works, with a warning naming $now', async ({ args, key, value, now }) => {
    const { opts, stderr } = await parsed(args);
    expect(opts[key]).toEqual(value);
    expect(stderr).toMatch(
      new RegExp(`^warning W_OPTION_DEPRECATED: --[a-z-]+ is the old spelling of ${now}: use ${now}\\n$`),
    );
  });

  it('goes through the new option parser: a bad value is refused as for the new spelling', async () => {
    await expect(parsed(['deploy', '-i', 'x.yaml', '--failure-budget', 'half'])).rejects.toMatchObject({
      code: 'E_OPTION',
      message: "--max-fail-percent must be a whole number from 0 to 100, not 'half'",
    });
    await expect(parsed(['openrc', '-i', 'x.yaml', '--interface', 'admin'])).rejects.toMatchObject({
      code: 'E_OPTION',
      message: "--os-interface must be public or internal, not 'admin'",
    });
  });

  it('upgrade --plan prints what upgrade --dry-run prints', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const now = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--dry-run', '--json');
    const old = await runCli('upgrade', '-i', inv, '--to', 'zed-update', '--plan', '--json');
    expect(old.code, old.stderr).toBe(0);
    expect(old.stdout).toBe(now.stdout);
    expect(old.stderr).toContain('warning W_OPTION_DEPRECATED: --plan is the old spelling of --dry-run');
  });

  it('openrc --interface internal writes OS_INTERFACE=internal, as --os-interface internal does', async () => {
    const inv = copyInventory('lab.yaml');
    expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
    const file = inv.replace(/\.yaml$/, '.openrc');
    const r = await runCli('openrc', '-i', inv, '--os-interface', 'internal');
    expect(r.code, r.stderr).toBe(0);
    const now = readFileSync(file, 'utf8');
    expect(now).toContain("export OS_INTERFACE='internal'");
    expect(now).toContain("export OS_AUTH_URL='http://172.17.0.250:5000/v3'");
    const old = await runCli('openrc', '-i', inv, '--interface', 'internal');
    expect(old.code, old.stderr).toBe(0);
    expect(readFileSync(file, 'utf8')).toBe(now);
    const bad = await runCli('openrc', '-i', inv, '--os-interface', 'admin');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("error E_OPTION: --os-interface must be public or internal, not 'admin'");
  });
});
