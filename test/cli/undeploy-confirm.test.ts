/**
 * `nodes undeploy` wipes disks: it names the nodes and waits for the
 * operator's yes before any node is touched. The prompt is driven through
 * the command's injected terminal; the refusals through the real CLI (no
 * terminal under the test runner).
 */
import { existsSync } from 'node:fs';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/core/errors.js';
import { registerProvision } from '../../src/cli/nodes-provision.js';
import { NodeStateStore, nodesFileFor } from '../../src/provision/machine.js';
import { copyInventory, runCli } from '../helpers/cli.js';

/** The lab inventory with both nodes active (walked there through the transition table). */
function activeLab(): string {
  const inv = copyInventory('lab.yaml');
  const store = NodeStateStore.open(nodesFileFor(inv));
  for (const n of ['ctl-0', 'cmp-0'])
    for (const e of ['manage', 'done', 'provide', 'done', 'deploy', 'wait', 'done']) store.apply(n, e as 'manage');
  expect(store.get('ctl-0').state).toBe('active');
  return inv;
}

const states = (inv: string): string[] =>
  ['ctl-0', 'cmp-0'].map((n) => NodeStateStore.open(nodesFileFor(inv)).get(n).state);

/** `nodes undeploy ARGS` with a terminal that answers `answer`; resolves to the error and the questions asked. */
async function onTerminal(answer: boolean, ...args: string[]): Promise<{ err: unknown; asked: string[] }> {
  const asked: string[] = [];
  const program = new Command('stackctl').exitOverride();
  registerProvision(program.command('nodes'), {
    interactive: () => true,
    confirm: async (q) => (asked.push(q), answer),
  });
  let err: unknown;
  try {
    await program.parseAsync(['node', 'stackctl', 'nodes', 'undeploy', ...args]);
  } catch (e) {
    err = e;
  }
  return { err, asked };
}

describe('nodes undeploy asks before it wipes disks', () => {
  it('refuses without --yes when no terminal can answer, touching no node', async () => {
    const inv = activeLab();
    const r = await runCli('nodes', 'undeploy', '--role', 'Compute', '-i', inv);
    expect(r.code).toBe(ExitCode.USAGE);
    expect(r.stderr).toContain(
      'error E_CONFIRM: undeploying cmp-0 (power off, wipe every disk) needs --yes when no terminal can confirm it',
    );
    expect(r.stderr).toContain(
      `hint: Nothing was done. To go on without a prompt: stackctl nodes undeploy -i ${inv} --role Compute --yes`,
    );
    expect(states(inv)).toEqual(['active', 'active']);
    expect(existsSync(inv.replace('.yaml', '.pxe'))).toBe(false);
  });

  it('names the nodes at the prompt and does nothing on a no', async () => {
    const inv = activeLab();
    const { err, asked } = await onTerminal(false, '--node', 'ctl-0', '--node', 'cmp-0', '-i', inv);
    expect(asked).toEqual([expect.stringMatching(/^Undeploy 2 node\(s\): ctl-0, cmp-0\? .*every disk .* \[y\/N\] $/)]);
    expect(err).toMatchObject({
      code: 'E_CONFIRM',
      message: 'not confirmed: undeploying ctl-0, cmp-0 (power off, wipe every disk) was not done',
    });
    expect(states(inv)).toEqual(['active', 'active']);
  });

  it('goes on after a yes at the prompt, or with --yes and no prompt', async () => {
    // past the confirmation, the next step needs a provisioning interface: this machine has no VM lab bridge
    const inv = activeLab();
    const yes = await onTerminal(true, '--all', '-i', inv);
    expect(yes.asked).toHaveLength(1);
    expect(yes.err).toMatchObject({ code: 'E_PXE_INTERFACE' });
    const flag = await onTerminal(false, '--all', '--yes', '-i', inv);
    expect(flag.asked).toEqual([]);
    expect(flag.err).toMatchObject({ code: 'E_PXE_INTERFACE' });
    const cli = await runCli('nodes', 'undeploy', '--all', '--yes', '-i', inv);
    expect(cli.stderr).toContain('error E_PXE_INTERFACE');
  });

  it('refuses a node that is not deployed before it asks anything', async () => {
    const inv = copyInventory('lab.yaml');
    const { err, asked } = await onTerminal(true, '--all', '-i', inv);
    expect(err).toMatchObject({ code: 'E_NODE_STATE' });
    expect(asked).toEqual([]);
  });
});
