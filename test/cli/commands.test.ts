/** The table of top-level commands that lets a run load only the command it names. */
import { describe, expect, it } from 'vitest';
import { COMMANDS, commandNamed } from '../../src/cli/commands.js';
import { buildProgram } from '../../src/cli/main.js';

describe('the command table', () => {
  it.each(COMMANDS.map((c) => ({ scenario: c.name, command: c })))(
    '$scenario: its module declares exactly that top-level command',
    async ({ command }) => {
      const program = await buildProgram([command.name]);
      expect(program.commands.map((c) => c.name())).toEqual([command.name]);
    },
  );

  it('lists every command in the order --help shows them, each once', async () => {
    const program = await buildProgram();
    expect(program.commands.map((c) => c.name())).toEqual(COMMANDS.map((c) => c.name));
  });

  it('declares the same options and subcommands whether one command or all are loaded', async () => {
    const describeTree = (c: import('commander').Command): unknown => ({
      name: c.name(),
      options: c.options.map((o) => o.flags),
      commands: c.commands.map(describeTree),
    });
    const all = await buildProgram();
    for (const { name } of COMMANDS) {
      const one = await buildProgram(['--debug', name, '--help']);
      expect(describeTree(one.commands[0]!), name).toEqual(describeTree(all.commands.find((c) => c.name() === name)!));
    }
  });

  it.each([
    { scenario: 'a command after a program option', args: ['--debug', 'plan', '-i', 'x.yaml'], name: 'plan' },
    { scenario: 'a command with a subcommand', args: ['inventory', 'validate'], name: 'inventory' },
    { scenario: 'no command', args: ['--help'], name: undefined },
    { scenario: 'an unknown command', args: ['plna', '-i', 'x.yaml'], name: undefined },
    { scenario: 'the help command', args: ['help', 'plan'], name: undefined },
  ])('names $scenario', ({ args, name }) => {
    expect(commandNamed(args)?.name).toBe(name);
  });
});
