import { appendFileSync, chmodSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadAll, planOf } from '../../src/cli/context.js';
import { loadSecrets } from '../../src/inventory/secrets.js';
import { journalFileFor } from '../../src/orchestrator/journal.js';
import type { Plan } from '../../src/roles/plan.js';
import { copyInventory, runCli } from '../helpers/cli.js';

const secretsOf = (inv: string): string => inv.replace(/\.yaml$/, '.secrets.yaml');

/** node/container -> hash and node/config -> sha256 of a plan. */
function hashes(plan: Plan): Map<string, string> {
  const out = new Map<string, string>();
  for (const n of plan.nodes) {
    for (const c of n.containers) out.set(`${n.name}/${c.service}/${c.name}`, c.hash);
    for (const f of n.configs) out.set(`${n.name}/${f.service}:${f.dest}`, f.sha256);
  }
  return out;
}

function changed(a: Map<string, string>, b: Map<string, string>): string[] {
  return [...new Set([...a.keys(), ...b.keys()])].filter((k) => a.get(k) !== b.get(k)).sort();
}

/** The key values of a repository of the secrets file (the token keys unless named), by index. */
function keys(inv: string, repository = 'keystone_fernet_key'): Map<number, string> {
  const s = loadSecrets(secretsOf(inv))!;
  const out = new Map<number, string>();
  for (const [name, v] of s.services) {
    const m = new RegExp(`^${repository}_(\\d+)$`).exec(name);
    if (m) out.set(Number(m[1]), v.reveal());
  }
  return new Map([...out].sort(([a], [b]) => a - b));
}

describe('stackctl rotate keystone-keys', () => {
  it('promotes the staged key, makes a new staged key, drops the oldest at max_active_keys; prints indices only', async () => {
    const inv = copyInventory('lab.yaml');
    expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
    const k0 = keys(inv);
    expect([...k0.keys()]).toEqual([0, 1]);

    const r1 = await runCli('rotate', 'keystone-keys', '-i', inv);
    expect(r1.code, r1.stderr).toBe(0);
    expect(r1.stdout).toContain('staged key 0 promoted to 2 (the primary)');
    expect(r1.stdout).toContain('keys now 0 1 2');
    const k1 = keys(inv);
    expect([...k1.keys()]).toEqual([0, 1, 2]);
    expect(k1.get(2)).toBe(k0.get(0));
    expect(k1.get(1)).toBe(k0.get(1));
    expect(k1.get(0)).not.toBe(k0.get(0));
    expect(k1.get(0)).toMatch(/^[A-Za-z0-9_-]{43}=$/);
    expect(statSync(secretsOf(inv)).mode & 0o777).toBe(0o600);

    const r2 = await runCli('rotate', 'keystone-keys', '-i', inv);
    expect(r2.code, r2.stderr).toBe(0);
    expect(r2.stdout).toContain('removed 1');
    const k2 = keys(inv);
    expect([...k2.keys()]).toEqual([0, 2, 3]);
    expect(k2.get(3)).toBe(k1.get(0));
    expect(k2.get(2)).toBe(k0.get(0));

    for (const v of [...k0.values(), ...k1.values(), ...k2.values()]) {
      expect(r1.stdout + r1.stderr + r2.stdout + r2.stderr).not.toContain(v);
    }
    // the other secrets are untouched
    const others = [...loadSecrets(secretsOf(inv))!.services.keys()].filter(
      (n) => !n.startsWith('keystone_fernet_key_'),
    );
    expect(others).toContain('keystone_admin_password');
  });

  it('changes the plan of the keystone containers only, and the printed plan shows no key', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    const before = planOf(loadAll({ inventory: inv }));
    expect((await runCli('rotate', 'keystone-keys', '-i', inv)).code).toBe(0);
    const after = planOf(loadAll({ inventory: inv }));
    const diff = changed(hashes(before.effective), hashes(after.effective));
    expect(diff.length).toBeGreaterThan(0);
    for (const d of diff)
      expect(d).toMatch(/^[^/]+\/keystone(\/keystone|:\/etc\/stackctl\/keystone\/fernet-keys\.list)$/);
    const ctls = after.effective.nodes.filter((n) => n.services.includes('keystone')).map((n) => n.name);
    expect(diff.filter((d) => d.endsWith('/keystone/keystone'))).toEqual(
      ctls.map((n) => `${n}/keystone/keystone`).sort(),
    );

    // every controller gets the same list: 0 staged, 1 secondary, 2 primary
    const k = keys(inv);
    for (const n of ctls) {
      expect(after.rendered.get(n)!.get('/etc/stackctl/keystone/fernet-keys.list')).toBe(
        [...k].map(([i, v]) => `${i} ${v}\n`).join(''),
      );
      expect(after.rendered.get(n)!.get('/etc/stackctl/keystone/keystone.conf')).toContain('max_active_keys = 3\n');
    }
    const plan = await runCli('plan', '-i', inv, '--json');
    expect(plan.code).toBe(0);
    for (const v of k.values()) expect(plan.stdout).not.toContain(v);
  });

  it('keeps as many keys as cloud.settings.keystone_fernet_max_active_keys says', async () => {
    const inv = copyInventory('lab.yaml');
    const text = readFileSync(inv, 'utf8');
    expect(text).toMatch(/^ {2}settings:\n/m);
    writeFileSync(inv, text.replace(/^ {2}settings:\n/m, '  settings:\n    keystone_fernet_max_active_keys: 4\n'));
    await runCli('secrets', 'generate', '-i', inv);
    for (let i = 0; i < 4; i++) expect((await runCli('rotate', 'keystone-keys', '-i', inv)).code).toBe(0);
    expect([...keys(inv).keys()]).toEqual([0, 3, 4, 5]);
    const p = planOf(loadAll({ inventory: inv }));
    expect(p.rendered.get('ctl-0')!.get('/etc/stackctl/keystone/keystone.conf')).toContain('max_active_keys = 4\n');
  });

  it('refuses a second rotation until the deploy journal shows the first one uploaded to every node; --force overrides', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    const LIST = '/etc/stackctl/keystone/fernet-keys.list';
    /** Record in the journal the key list of the current secrets as uploaded to every keystone node. */
    const deployed = (): void => {
      for (const n of planOf(loadAll({ inventory: inv })).effective.nodes) {
        const c = n.configs.find((f) => f.dest === LIST);
        if (!c) continue;
        const effect = { kind: 'upload', node: n.name, target: LIST, hash: c.sha256 };
        appendFileSync(
          journalFileFor(inv),
          JSON.stringify({ time: new Date().toISOString(), run: 'r1', type: 'effect', state: 'done', effect }) + '\n',
        );
      }
    };
    deployed();
    expect((await runCli('rotate', 'keystone-keys', '-i', inv)).code).toBe(0);
    const before = readFileSync(secretsOf(inv), 'utf8');
    const refused = await runCli('rotate', 'keystone-keys', '-i', inv);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('E_ROTATE_NOT_DEPLOYED');
    expect(refused.stderr).toContain('ctl-0');
    expect(readFileSync(secretsOf(inv), 'utf8')).toBe(before);
    deployed();
    expect((await runCli('rotate', 'keystone-keys', '-i', inv)).code).toBe(0);
    expect([...keys(inv).keys()]).toEqual([0, 2, 3]);
    const forced = await runCli('rotate', 'keystone-keys', '-i', inv, '--force');
    expect(forced.code, forced.stderr).toBe(0);
    expect([...keys(inv).keys()]).toEqual([0, 3, 4]);
  });

  it('refuses without a secrets file, and with one others can read (changing nothing)', async () => {
    const inv = copyInventory('lab.yaml');
    const none = await runCli('rotate', 'keystone-keys', '-i', inv);
    expect(none.code).not.toBe(0);
    expect(none.stderr).toContain('E_NO_SECRETS_FILE');
    await runCli('secrets', 'generate', '-i', inv);
    chmodSync(secretsOf(inv), 0o644);
    const before = readFileSync(secretsOf(inv), 'utf8');
    const open = await runCli('rotate', 'keystone-keys', '-i', inv);
    expect(open.code).toBe(4);
    expect(open.stderr).toContain('E_SECRETS_PERMISSIONS');
    expect(readFileSync(secretsOf(inv), 'utf8')).toBe(before);
  });

  it('rotate keystone-credential-keys: the same rotation of the credential keys, 3 kept, only Keystone and its credential-keys.list change', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    const k0 = keys(inv, 'keystone_credential_key');
    expect([...k0.keys()]).toEqual([0, 1]);
    const tokenKeys = keys(inv);
    const before = planOf(loadAll({ inventory: inv }));
    const r = await runCli('rotate', 'keystone-credential-keys', '-i', inv);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('keystone_credential_key rotated: staged key 0 promoted to 2 (the primary)');
    expect(r.stdout).toContain('keys now 0 1 2');
    expect(r.stdout).toContain(`'stackctl rotate keystone-credential-keys --migrate -i ${inv}'`);
    const k1 = keys(inv, 'keystone_credential_key');
    expect(k1.get(2)).toBe(k0.get(0));
    expect(k1.get(1)).toBe(k0.get(1));
    expect(keys(inv)).toEqual(tokenKeys);
    for (const v of [...k0.values(), ...k1.values()]) expect(r.stdout + r.stderr).not.toContain(v);

    const after = planOf(loadAll({ inventory: inv }));
    const diff = changed(hashes(before.effective), hashes(after.effective));
    for (const d of diff)
      expect(d).toMatch(/^[^/]+\/keystone(\/keystone|:\/etc\/stackctl\/keystone\/credential-keys\.list)$/);
    expect(diff).toContain('ctl-0/keystone:/etc/stackctl/keystone/credential-keys.list');
    expect(after.rendered.get('ctl-0')!.get('/etc/stackctl/keystone/credential-keys.list')).toBe(
      [...k1].map(([i, v]) => `${i} ${v}\n`).join(''),
    );
  });

  it('only the credential keys take --migrate', async () => {
    const inv = copyInventory('lab.yaml');
    await runCli('secrets', 'generate', '-i', inv);
    const r = await runCli('rotate', 'keystone-keys', '--migrate', '-i', inv);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/unknown option '--migrate'/);
  });
});
