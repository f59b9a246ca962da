import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { buildCommandLine, killScript } from '../../src/remote/ssh.js';
import { shellJoin, shellQuote } from '../../src/remote/quote.js';
import { Secret } from '../../src/core/secret.js';

/** Words that must reach the command unchanged, each a trap for naive quoting. */
const WORDS: readonly string[] = [
  'plain',
  'with space',
  "it's",
  '"double"',
  '$(id)',
  '`id`',
  '$HOME',
  '*',
  '',
  'a\nb',
  '\\',
  "'",
  '--flag=x y',
  '; rm -rf /',
];

describe('shell quoting', () => {
  it('every word reaches /bin/sh literally', () => {
    const out = execFileSync('/bin/sh', ['-c', `printf '%s\\0' ${shellJoin(WORDS)}`]);
    expect(out.toString().split('\0').slice(0, -1)).toEqual(WORDS);
  });

  it('leaves safe words bare and refuses NUL', () => {
    expect(shellQuote('/etc/kolla/x.conf')).toBe('/etc/kolla/x.conf');
    expect(() => shellQuote('a\0b')).toThrow();
    expect(() => shellJoin([])).toThrow();
  });

  it('puts environment values on stdin, never in the command line', () => {
    const { line, stdinPrefix } = buildCommandLine(['env'], 1000, { TOKEN: new Secret('hunter2') });
    expect(line).not.toContain('hunter2');
    expect(stdinPrefix).toContain('export TOKEN=hunter2');
    // The prelude reads the exports back with builtins and runs the command with them.
    const out = execFileSync('/bin/sh', ['-c', line.replace(/^timeout -s KILL \d+ /, '')], {
      input: stdinPrefix + 'rest of stdin\n',
      encoding: 'utf8',
    });
    expect(out).toContain('TOKEN=hunter2');
    expect(() => buildCommandLine(['true'], 1000, { 'BAD-NAME': 'x' })).toThrow();
  });

  it('the kill script does not match its own command line', () => {
    const script = killScript('abc123');
    expect(script).not.toContain('stackctl-cmd-abc123');
    expect(execFileSync('/bin/sh', ['-c', script]).toString()).toBe('');
  });
});
