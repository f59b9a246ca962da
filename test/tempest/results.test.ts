/**
 * Reading a Tempest run: the per-test lines of subunit-trace become counts,
 * failures and skips with their reasons; the selection regex picks the smoke
 * tests of the deployed APIs only.
 */
import { describe, expect, it } from 'vitest';
import { runTempest, type TempestRunner } from '../../src/cli/tempest.js';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { formatSummary, parseTrace, summarize, TRACE_STATUS, TestStatus } from '../../src/tempest/results.js';
import { EXCLUDED, excludeListFile, SMOKE_REGEX } from '../../src/tempest/selection.js';
import { tempDir } from '../helpers/cli.js';

const TRACE = `
{0} tempest.api.identity.admin.v3.test_domains.DomainsTestJSON.test_create_update_delete_domain[id-f2f5b44a-82e8-4dad-8084-0661ea3b18cf,smoke] [2.345678s] ... ok
{1} setUpClass (tempest.api.compute.servers.test_attach_interfaces.AttachInterfacesTestJSON) ... SKIPPED: Neutron support is required
{1} tempest.api.compute.servers.test_server_actions.ServerActionsTestJSON.test_resize_server_confirm[id-1499262a-9328-4eda-9068-db1ac57498d2,smoke] ... SKIPPED: Resize is not available.
{0} tempest.api.image.v2.test_images.BasicOperationsImagesTest.test_delete_image[id-f848bb94-1c6e-45a4-8726-39e3a5b23535,smoke] [0.900000s] ... FAILED

==============================
Failed 1 tests - output below:
==============================
Totals
`;

describe('a Tempest run, read from its trace', () => {
  it('maps every subunit-trace status word', () => {
    for (const [word, status] of Object.entries(TRACE_STATUS)) {
      const line = `{0} tempest.api.x.T.test_a[smoke] [0.1s] ... ${word}${status === TestStatus.SKIP ? ': why' : ''}`;
      expect(parseTrace(line), word).toEqual([
        { id: 'tempest.api.x.T.test_a', status, ...(status === TestStatus.SKIP ? { reason: 'why' } : {}) },
      ]);
    }
  });

  it('counts passes, failures and skips, keeping each skip reason and class-level skips', () => {
    const s = summarize(parseTrace(TRACE));
    expect([s.passed, s.failed, s.skipped]).toEqual([1, 1, 2]);
    expect(s.failures).toEqual(['tempest.api.image.v2.test_images.BasicOperationsImagesTest.test_delete_image']);
    expect(s.skips).toEqual([
      {
        id: 'setUpClass (tempest.api.compute.servers.test_attach_interfaces.AttachInterfacesTestJSON)',
        reason: 'Neutron support is required',
      },
      {
        id: 'tempest.api.compute.servers.test_server_actions.ServerActionsTestJSON.test_resize_server_confirm',
        reason: 'Resize is not available.',
      },
    ]);
    expect(formatSummary(s)).toMatch(/^tempest: 1 passed, 1 failed, 2 skipped\nfailed:\n {2}tempest\.api\.image/);
    expect(formatSummary(s)).toContain('Resize is not available.');
  });

  it('ignores everything that is not a test line', () => {
    expect(parseTrace('Totals\n======\nRan: 3 tests in 9.0 sec.\n - Passed: 3\n')).toEqual([]);
  });
});

describe('the selection', () => {
  const re = new RegExp(SMOKE_REGEX);
  it.each([
    ['tempest.api.identity.v3.test_tokens.TokensV3Test.test_create_token[id-6f8e4436,smoke]', true],
    ['tempest.api.compute.servers.test_create_server.ServersTestJSON.test_list_servers[id-9a438d88,smoke]', true],
    ['tempest.api.image.v2.test_images.ListImagesTest.test_list_no_params[id-1e341d7a,smoke]', true],
    [
      'tempest.api.compute.servers.test_create_server.ServersTestJSON.test_host_name_is_same_as_server_name[id-ac1ad47f]',
      false,
    ],
    ['tempest.api.network.test_networks.NetworksTest.test_list_networks[id-f7ffdeda,smoke]', false],
    [
      'tempest.scenario.test_server_basic_ops.TestServerBasicOps.test_server_basic_ops[compute,id-7fff3fb3,network,smoke]',
      false,
    ],
  ])('%s selected: %s', (id, selected) => {
    expect(re.test(id)).toBe(selected);
  });

  it('has no whitespace (tempest run splits --regex on it), and every exclusion has a reason', () => {
    expect(SMOKE_REGEX).not.toMatch(/\s/);
    for (const e of EXCLUDED) {
      expect(e.reason.length, e.regex).toBeGreaterThan(10);
      expect(() => new RegExp(e.regex)).not.toThrow();
    }
    expect(excludeListFile([{ regex: '^a\\.b', reason: 'why' }])).toBe('# why\n^a\\.b\n');
  });
});

describe('stackctl tempest run', () => {
  const workspace = (): string => {
    const ws = tempDir('stackctl-tempest-run-');
    mkdirSync(join(ws, 'etc'));
    writeFileSync(join(ws, 'etc', 'tempest.conf'), '[auth]\n');
    return ws;
  };
  const runner =
    (output: string, code: number, seen: string[][] = []): TempestRunner =>
    async (args) => {
      seen.push([...args]);
      return { code, output };
    };

  it('runs the smoke selection in the workspace and writes results.json', async () => {
    const ws = workspace();
    const seen: string[][] = [];
    const ok = TRACE.split('\n')
      .filter((l) => !l.includes('FAILED'))
      .join('\n');
    let printed = '';
    const s = await runTempest({ workspace: ws }, { runner: runner(ok, 0, seen), write: (t) => (printed += t) });
    expect([s.passed, s.failed, s.skipped]).toEqual([1, 0, 2]);
    expect(seen[0]).toEqual(
      expect.arrayContaining(['run', '--config-file', join(ws, 'etc', 'tempest.conf'), '--regex', SMOKE_REGEX]),
    );
    expect(printed).toMatch(/1 passed, 0 failed, 2 skipped/);
    expect(JSON.parse(readFileSync(join(ws, 'results.json'), 'utf8'))).toMatchObject({
      passed: 1,
      failed: 0,
      skipped: 2,
    });
  });

  it('fails with E_TEMPEST_FAILED naming the failed tests', async () => {
    await expect(
      runTempest({ workspace: workspace() }, { runner: runner(TRACE, 1), write: () => undefined }),
    ).rejects.toMatchObject({
      code: 'E_TEMPEST_FAILED',
      details: { failures: ['tempest.api.image.v2.test_images.BasicOperationsImagesTest.test_delete_image'] },
    });
  });

  it('refuses a folder with no tempest.conf', async () => {
    await expect(runTempest({ workspace: tempDir() }, { runner: runner('', 0) })).rejects.toMatchObject({
      code: 'E_TEMPEST_WORKSPACE',
    });
  });
});
