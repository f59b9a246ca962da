import { afterEach, describe, expect, it, vi } from 'vitest';
import { AuthError, ExitCode, TimeoutError } from '../../src/core/errors.js';
import type { StackctlEvent } from '../../src/core/events.js';
import { failureExit, fanOut, reportOutcomes, resultCell, type NodeOutcome } from '../../src/cli/fanout.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** stdout and stderr of `fn`, and the exit status it set. */
function captured(fn: () => void): { stdout: string; stderr: string; exitCode: number | undefined } {
  let stdout = '';
  let stderr = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((c: string | Uint8Array) => ((stdout += String(c)), true));
  vi.spyOn(process.stderr, 'write').mockImplementation((c: string | Uint8Array) => ((stderr += String(c)), true));
  const saved = process.exitCode;
  process.exitCode = undefined;
  try {
    fn();
    return { stdout, stderr, exitCode: process.exitCode as number | undefined };
  } finally {
    process.exitCode = saved;
    vi.restoreAllMocks();
  }
}

afterEach(() => vi.restoreAllMocks());

describe('the per-node fan-out of the node commands', () => {
  it('works on at most --concurrency nodes at once, keeps the given order, and goes on after a failure', async () => {
    const events: StackctlEvent[] = [];
    const settled: string[] = [];
    let running = 0;
    let most = 0;
    const nodes = ['n0', 'n1', 'n2', 'n3', 'n4', 'n5'];
    const outcomes = await fanOut(
      {
        command: 'power on',
        outcomes: nodes.map((node): NodeOutcome => ({ node, ok: false })),
        concurrency: 2,
        visible: false,
        emit: (e) => void events.push(e),
        settle: (o) => void settled.push(o.node),
      },
      async (o) => {
        running++;
        most = Math.max(most, running);
        // later nodes finish first: the outcomes keep the given order all the same
        await sleep(30 - 5 * Number(o.node.slice(1)));
        running--;
        if (o.node === 'n1') throw new AuthError('E_IPMI_AUTH', 'refused', { hint: 'check the password' });
        return `on (${o.node})`;
      },
    );
    expect(most).toBe(2);
    expect(outcomes.map((o) => o.node)).toEqual(nodes);
    expect(outcomes.map((o) => o.ok)).toEqual([true, false, true, true, true, true]);
    expect(outcomes[1]).toMatchObject({
      error: { code: 'E_IPMI_AUTH', message: 'refused', hint: 'check the password' },
      exit: ExitCode.AUTH,
    });
    expect(outcomes[0]!.result).toBe('on (n0)');
    expect(outcomes.every((o) => typeof o.ms === 'number')).toBe(true);
    expect(settled.sort()).toEqual(nodes);
    expect(events[0]).toEqual({ kind: 'command.start', command: 'power on', nodes });
    expect(events.filter((e) => e.kind === 'node.failed')).toEqual([
      { kind: 'node.failed', node: 'n1', action: 'power on', code: 'E_IPMI_AUTH', message: 'refused' },
    ]);
    expect(events.at(-1)).toEqual({ kind: 'command.end', command: 'power on', ok: 5, failed: 1 });
  });

  it('exits with the failures’ own status when they share one, else REMOTE', () => {
    expect(failureExit([{ exit: undefined }])).toBeUndefined();
    expect(failureExit([{ exit: ExitCode.AUTH }, { exit: undefined }, { exit: ExitCode.AUTH }])).toBe(ExitCode.AUTH);
    expect(failureExit([{ exit: ExitCode.AUTH }, { exit: ExitCode.TIMEOUT }])).toBe(ExitCode.REMOTE);
  });

  it('prints a table and the hints, or JSON without the exit statuses, and sets the exit status', async () => {
    const outcomes = await fanOut(
      {
        command: 'validate',
        outcomes: ['ctl-0', 'cmp-0'].map((node): NodeOutcome & { bmc: string } => ({
          node,
          ok: false,
          bmc: 'ipmi://x',
        })),
        concurrency: 4,
        visible: false,
      },
      async (o) => {
        if (o.node === 'cmp-0') throw new TimeoutError('E_IPMI_TIMEOUT', 'no answer', { hint: 'is it on?' });
        return 'ok';
      },
    );
    const columns = [
      ['NODE', (o: (typeof outcomes)[number]) => o.node],
      ['BMC', (o: (typeof outcomes)[number]) => o.bmc],
      ['RESULT', resultCell],
    ] as const;
    const text = captured(() => reportOutcomes(outcomes, { columns }));
    expect(text.stdout).toMatch(
      /^NODE\s+BMC\s+RESULT\nctl-0\s+ipmi:\/\/x\s+ok\ncmp-0\s+ipmi:\/\/x\s+FAILED E_IPMI_TIMEOUT: no answer\n$/,
    );
    expect(text.stderr).toBe('cmp-0: hint: is it on?\n');
    expect(text.exitCode).toBe(ExitCode.TIMEOUT);
    const json = captured(() => reportOutcomes(outcomes, { json: true, columns }));
    const rows = JSON.parse(json.stdout) as Record<string, unknown>[];
    expect(rows.map((r) => [r.node, r.ok, r.bmc])).toEqual([
      ['ctl-0', true, 'ipmi://x'],
      ['cmp-0', false, 'ipmi://x'],
    ]);
    expect(rows.every((r) => !('exit' in r))).toBe(true);
    expect(json.exitCode).toBe(ExitCode.TIMEOUT);
  });
});
