import { describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/core/errors.js';
import { copyInventory, runCli } from '../helpers/cli.js';
import { execFileSync } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { loadSecrets } from '../../src/inventory/secrets.js';

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

describe('stackctl openrc', () => {
  it('writes the admin credentials file with mode 0600 and prints no password', async () => {
    const inv = copyInventory('lab.yaml');
    expect((await runCli('openrc', '-i', inv)).code).toBe(4); // no secrets yet
    await runCli('secrets', 'generate', '-i', inv);
    const r = await runCli('openrc', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    const file = inv.replace(/\.yaml$/, '.openrc');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const text = readFileSync(file, 'utf8');
    const password = loadSecrets(inv.replace(/\.yaml$/, '.secrets.yaml'))!
      .services.get('keystone_admin_password')!
      .reveal();
    expect(text).toContain(`export OS_AUTH_URL='http://10.0.0.250:5000/v3'`);
    expect(text).toContain(`export OS_PASSWORD='${password}'`);
    expect(r.stdout + r.stderr).not.toContain(password);
    // The file is a shell file the OpenStack client can source.
    const env = execFileSync('sh', ['-c', `. "${file}" && echo "$OS_USERNAME@$OS_PROJECT_NAME $OS_INTERFACE"`], {
      encoding: 'utf8',
    });
    expect(env.trim()).toBe('admin@admin public');
  });
});
