import { chmodSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { copyInventory, runCli } from '../helpers/cli.js';
import { loadSecrets } from '../../src/inventory/secrets.js';
import { inspect } from 'node:util';

const secretsOf = (inv: string): string => inv.replace(/\.yaml$/, '.secrets.yaml');

describe('stackctl secrets generate', () => {
  it('creates every secret the plan needs in a 0600 file, and prints none', async () => {
    const inv = copyInventory('lab.yaml');
    const r = await runCli('secrets', 'generate', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(statSync(secretsOf(inv)).mode & 0o777).toBe(0o600);
    const secrets = loadSecrets(secretsOf(inv))!;
    expect(secrets.services.get('keystone_admin_password')!.reveal()).toMatch(/^[A-Za-z0-9]{32}$/);
    expect(secrets.services.get('keystone_fernet_key_0')!.reveal()).toMatch(/^[A-Za-z0-9_-]{43}=$/);
    expect(secrets.services.get('keepalived_password')!.reveal()).toHaveLength(8);
    expect(secrets.bmc.get('lab-bmc')!.username).toBe('admin');
    for (const v of [...secrets.services.values(), secrets.bmc.get('lab-bmc')!.password]) {
      expect(r.stdout + r.stderr).not.toContain(v.reveal());
      expect(`${v}`).toBe('<redacted>');
      expect(JSON.stringify({ v })).not.toContain(v.reveal());
      expect(inspect(v)).not.toContain(v.reveal());
    }
    // The plan now renders with the values but prints only hashes.
    const plan = await runCli('plan', '-i', inv, '--json');
    expect(plan.code).toBe(0);
    expect(JSON.parse(plan.stdout).inputs.secrets).toBe('present');
    for (const v of secrets.services.values()) expect(plan.stdout).not.toContain(v.reveal());
  });

  it('never overwrites an existing value and adds only what is missing', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    const file = secretsOf(inv);
    const text = readFileSync(file, 'utf8')
      .replace(/keystone_admin_password: .*/, 'keystone_admin_password: operator-chosen-value')
      .replace(/\n\s*rabbitmq_password: .*/, '');
    writeFileSync(file, text);
    const r = await runCli('secrets', 'generate', '-i', inv);
    expect(r.stdout).toContain('1 secret(s) added');
    expect(r.stdout).toContain('+ rabbitmq_password');
    const secrets = loadSecrets(file)!;
    expect(secrets.services.get('keystone_admin_password')!.reveal()).toBe('operator-chosen-value');
    const again = await runCli('secrets', 'generate', '-i', inv);
    expect(again.stdout).toContain('unchanged');
  });

  it('refuses a secrets file readable by group or others, and changes nothing', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    const file = secretsOf(inv);
    chmodSync(file, 0o644);
    const before = readFileSync(file, 'utf8');
    const r = await runCli('secrets', 'generate', '-i', inv);
    expect(r.code).toBe(4);
    expect(r.stderr).toContain('E_SECRETS_PERMISSIONS');
    expect(r.stderr).toContain('chmod 600');
    expect(readFileSync(file, 'utf8')).toBe(before);
    // Every command that reads secrets refuses it too.
    expect((await runCli('plan', '-i', inv)).code).toBe(4);
  });

  it('does not invent credentials for real BMCs, and names them', async () => {
    const inv = copyInventory('example-multinode.yaml');
    const r = await runCli('secrets', 'generate', '-i', inv);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('bmc-computes');
    expect(r.stderr).toContain('bmc-controllers');
    expect(() => statSync(secretsOf(inv))).toThrow();
  });

  it('checks credential references once a secrets file exists', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    writeFileSync(
      inv,
      readFileSync(inv, 'utf8').replace(
        "credentials: lab-bmc }\n    nics:\n      - { mac: '52:54:00:00:10:01'",
        "credentials: other-bmc }\n    nics:\n      - { mac: '52:54:00:00:10:01'",
      ),
    );
    const r = await runCli('inventory', 'validate', '-i', inv);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/E_UNKNOWN_CREDENTIALS.*other-bmc/);
  });

  it('lets each BMC driver check its credentials offline during validate', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    const file = secretsOf(inv);
    const real = loadSecrets(file)!.bmc.get('lab-bmc')!.password.reveal();
    writeFileSync(file, readFileSync(file, 'utf8').replace(real, 'x'.repeat(24)), { mode: 0o600 });
    const r = await runCli('inventory', 'validate', '-i', inv);
    expect(r.code).toBe(3);
    // IPMI 2.0 passwords have at most 20 bytes: the IPMI node fails, before any BMC is touched.
    expect(r.stderr).toMatch(/lab\.yaml:\d+:\d+: error E_IPMI_PASSWORD_TOO_LONG at \/nodes\/0\/bmc/);
    expect(r.stderr).not.toContain('x'.repeat(24));
  });

  it("passes a BMC's insecure_http on to its driver's offline check", async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    const lab = "bmc: { address: 'redfish+http://127.0.0.1:8230/redfish/v1/Systems/cmp-0', credentials: lab-bmc }";
    const text = readFileSync(inv, 'utf8');
    expect(text).toContain(lab);
    const remote = "bmc: { address: 'redfish+http://10.1.1.22/redfish/v1/Systems/cmp-0', credentials: lab-bmc";
    writeFileSync(inv, text.replace(lab, `${remote}, insecure_http: true }`));
    const r = await runCli('inventory', 'validate', '-i', inv);
    expect(r.stderr).not.toContain('E_REDFISH_PLAIN_HTTP');
    expect(r.stderr).toContain('W_BMC_PLAINTEXT');
    expect(r.code).toBe(0);
  });
});
