import { describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/core/errors.js';
import { copyInventory, runCli } from '../helpers/cli.js';
import { readFileSync, writeFileSync } from 'node:fs';

describe('the stackctl command line', () => {
  it('exits 2 on wrong usage, saying what is missing', async () => {
    const r = await runCli('plan');
    expect(r.code).toBe(ExitCode.USAGE);
    expect(r.stderr).toContain("required option '-i, --inventory <file>'");
  });

  it('prints message and hint, and the stack only with --debug', async () => {
    const inv = copyInventory('lab.yaml');
    writeFileSync(inv, readFileSync(inv, 'utf8').replace('release: zed', 'release: zzz'));
    const plain = await runCli('plan', '-i', inv);
    expect(plain.code).toBe(ExitCode.INVALID_INPUT);
    expect(plain.stderr).toContain("error E_UNKNOWN_RELEASE: release 'zzz' has no manifest");
    expect(plain.stderr).toContain('hint:');
    expect(plain.stderr).not.toMatch(/^\s+at /m);
    const debug = await runCli('--debug', 'plan', '-i', inv);
    expect(debug.stderr).toMatch(/^\s+at /m);
  });

  it('prints the published JSON Schemas', async () => {
    const r = await runCli('schema', 'inventory');
    expect(JSON.parse(r.stdout).$id).toBe('urn:stackctl:schema:inventory');
    expect((await runCli('schema', 'nope')).code).toBe(ExitCode.USAGE);
  });

  it('shows a readable plan table', async () => {
    const r = await runCli('plan', '-i', copyInventory('lab.yaml'));
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^NODE\s+ROLE\s+EXTERNAL\s+INTERNAL_API\s+PROVISIONING\s+TENANT\s+SERVICES$/m);
    expect(r.stdout).toMatch(/^ctl-0\s+Controller\s+10\.0\.0\.10\s+172\.17\.0\.11/m);
    expect(r.stdout).toMatch(/^3\s+bootstrap: databases, users, schema migrations\s+\d+/m);
  });
});
