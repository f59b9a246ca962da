import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { copyInventory, runCli } from '../helpers/cli.js';

const events = (inv: string): string => {
  const f = inv.replace(/\.yaml$/, '.events.jsonl');
  return existsSync(f) ? readFileSync(f, 'utf8') : '';
};

/** Bad input is refused before the cloud is asked anything (the live migrations themselves: test:e2e:guest). */
describe('stackctl nodes maintenance: refused before anything is touched', () => {
  it('an action it does not know, a node the inventory lacks, a node that runs no nova-compute', async () => {
    const inv = copyInventory('lab.yaml');
    expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
    const cases: [string[], string, RegExp][] = [
      [['drain', '--node', 'cmp-0'], 'E_USAGE', /unknown maintenance action 'drain'.*\n.*on, off/],
      [['on', '--node', 'cmp-9'], 'E_UNKNOWN_NODE', /node 'cmp-9' is not in .*lab\.yaml[\s\S]*ctl-0/],
      [['on', '--node', 'ctl-0'], 'E_NOT_A_COMPUTE', /node 'ctl-0' runs no nova-compute[\s\S]*cmp-0/],
      [['on', '--node', 'cmp-0', '--concurrency', '0'], 'E_OPTION', /--concurrency/],
    ];
    for (const [args, code, text] of cases) {
      const r = await runCli('nodes', 'maintenance', ...args, '-i', inv);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).not.toBe(0);
      expect(r.stderr).toContain(code);
      expect(r.stderr).toMatch(text);
    }
    // nothing started: no command.start in the event log
    expect(events(inv)).not.toContain('nodes maintenance');
  });
});
