import type { Command, Option } from 'commander';
import { describe, expect, it } from 'vitest';
import { ExitCode, UsageError } from '../../src/core/errors.js';
import { buildProgram } from '../../src/cli/main.js';
import { RANGE, parseWholeNumber } from '../../src/cli/numbers.js';
import { copyInventory, runCli } from '../helpers/cli.js';

/** Every command of the tree, with its full name (`nodes power`). */
function commands(c: Command, path: readonly string[] = []): [string, Command][] {
  return c.commands.flatMap((sub): [string, Command][] => {
    const p = [...path, sub.name()];
    return [[p.join(' '), sub], ...commands(sub, p)];
  });
}

/** Placeholders of the options that take a number. */
const NUMERIC = /<(n|port|seconds|percent|MiB|GiB)>/;

const numericOptions = async (): Promise<{ command: string; option: Option }[]> =>
  commands(await buildProgram()).flatMap(([command, c]) =>
    c.options.filter((o) => !o.hidden && NUMERIC.test(o.flags)).map((option) => ({ command, option })),
  );

describe('the number parser of every option', () => {
  it.each([
    { scenario: 'digits', text: '8', ok: 8 },
    { scenario: 'the lowest value', text: '1', ok: 1 },
    { scenario: 'the highest value', text: '256', ok: 256 },
    { scenario: 'leading zeros', text: '08', ok: 8 },
    { scenario: 'nothing', text: '' },
    { scenario: 'a word', text: 'four' },
    { scenario: 'digits then a word', text: '4x' },
    { scenario: 'blanks around it', text: ' 4' },
    { scenario: 'a sign', text: '+4' },
    { scenario: 'a negative number', text: '-1' },
    { scenario: 'a fraction', text: '4.5' },
    { scenario: 'a decimal point', text: '4.0' },
    { scenario: 'an exponent', text: '1e2' },
    { scenario: 'hexadecimal', text: '0x10' },
    { scenario: 'below the range', text: '0' },
    { scenario: 'above the range', text: '257' },
    { scenario: 'beyond a safe integer', text: '99999999999999999999' },
  ])('$scenario ($text)', ({ text, ok }) => {
    if (ok !== undefined) {
      expect(parseWholeNumber('--concurrency', text, RANGE.concurrency)).toBe(ok);
      return;
    }
    let err: unknown;
    try {
      parseWholeNumber('--concurrency', text, RANGE.concurrency);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UsageError);
    expect(err).toMatchObject({
      code: 'E_OPTION',
      exitCode: ExitCode.USAGE,
      message: `--concurrency must be a whole number from 1 to 256, not '${text}'`,
      details: { option: '--concurrency', value: text, min: 1, max: 256 },
    });
  });

  it('names the unit of a duration', () => {
    expect(() => parseWholeNumber('--timeout', '5m', RANGE.seconds, { unit: 'seconds' })).toThrow(
      "--timeout must be a whole number of seconds from 1 to 86400, not '5m'",
    );
  });

  it('is the parser of every numeric option of every command, whose help gives the range', async () => {
    const found = await numericOptions();
    // the commands that take numbers: a new one is listed here once it parses with numberOption
    expect(new Set(found.map((f) => f.command))).toEqual(
      new Set([
        'certs renew',
        'nodes power',
        'nodes bootdev',
        'nodes trust',
        'nodes enroll',
        'nodes inspect',
        'nodes list',
        'nodes provision',
        'nodes undeploy',
        'nodes validate',
        'nodes maintenance',
        'deploy',
        'upgrade',
        'status',
        'tempest run',
        'pxe config',
        'lab bmc start',
        'lab up',
      ]),
    );
    for (const { command, option } of found) {
      const at = `${command} ${option.long}`;
      expect(option.parseArg, `${at} has no parser`).toBeTypeOf('function');
      expect(option.description, at).toMatch(/\(([a-z]+, )?\d+-\d+\)/);
      expect(() => option.parseArg!('12abc', undefined), at).toThrow(
        new RegExp(`^${option.long} must be a whole number( of seconds)? from \\d+ to \\d+, not '12abc'$`),
      );
      if (option.defaultValue !== undefined) expect(option.defaultValue, at).toBeTypeOf('number');
    }
  });

  it('takes every duration in whole seconds, and says so in the help', async () => {
    const durations = commands(await buildProgram()).flatMap(([command, c]) =>
      c.options.filter((o) => /timeout/.test(o.long ?? '')).map((o) => ({ at: `${command} ${o.long}`, o })),
    );
    expect(durations.map((d) => d.at).sort()).toEqual([
      'deploy --provision-timeout',
      'deploy --task-timeout',
      'lab bmc start --timeout',
      'lab up --timeout',
      'nodes inspect --timeout',
      'nodes maintenance --migration-timeout',
      'nodes provision --ssh-timeout',
      'nodes provision --timeout',
      'nodes trust --timeout',
      'nodes undeploy --timeout',
      'status --timeout',
      'upgrade --task-timeout',
    ]);
    for (const { at, o } of durations) {
      expect(o.flags, at).toMatch(/ <seconds>$/);
      expect(o.description, at).toMatch(/\(seconds, \d+-\d+\)$/);
      expect(o.parseArg!('90', undefined), at).toBe(90);
    }
  });

  it.each([
    ['nodes', 'power', 'status', '--all', '--concurrency', 'lots'],
    ['nodes', 'list', '--concurrency', '0'],
    ['deploy', '--max-fail-percent', '101'],
    ['status', '--concurrency', '1e3'],
    ['pxe', 'config', '--http-port', '80.5'],
  ])('refuses a bad value before reading the inventory: %s %s %s', async (...args) => {
    const inv = copyInventory('lab.yaml');
    const r = await runCli(...args, '-i', inv);
    expect(r.code).toBe(ExitCode.USAGE);
    expect(r.stderr).toMatch(/error E_OPTION: --[a-z-]+ must be a whole number from \d+ to \d+, not '[^']+'/);
    expect(r.stderr).toContain('hint: For example');
  });
});
