/** `stackctl status` refuses what it cannot check before it touches any node. */
import { describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/core/errors.js';
import { copyInventory, runCli } from '../helpers/cli.js';

describe('stackctl status: input checks', () => {
  it('needs the secrets file (config hashes are those of the real secrets)', async () => {
    const r = await runCli('status', '-i', copyInventory('lab.yaml'));
    expect(r.code).toBe(ExitCode.INVALID_INPUT);
    expect(r.stderr).toContain('error E_SECRETS_REQUIRED');
  });

  it('names a --services entry the plan lacks, and a --timeout out of range', async () => {
    const inv = copyInventory('lab.yaml');
    expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
    const bad = await runCli('status', '-i', inv, '--services', 'memcached,nova-cells');
    expect(bad.code).toBe(ExitCode.USAGE);
    expect(bad.stderr).toContain("error E_UNKNOWN_SERVICE: service 'nova-cells' is not part of this cloud's plan");
    const t = await runCli('status', '-i', inv, '--timeout', '1');
    expect(t.code).toBe(ExitCode.USAGE);
    expect(t.stderr).toContain('--timeout must be a whole number of seconds from 5 to 3600');
  });
});
