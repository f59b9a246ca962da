import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { minRotationPeriodS, parseSpan, systemdArg } from '../../src/cli/rotate-timer.js';
import { copyInventory, runCli, tempDir } from '../helpers/cli.js';

const secretsOf = (inv: string): string => inv.replace(/\.yaml$/, '.secrets.yaml');

/** systemd's own check of unit files (Debian's systemd package): its complaints, '' when none. */
function verifyUnits(files: string[]): string {
  const which = spawnSync('sh', ['-c', 'command -v systemd-analyze'], { encoding: 'utf8' });
  expect(which.status, 'systemd-analyze is missing: apt-get install systemd').toBe(0);
  const r = spawnSync('systemd-analyze', ['verify', ...files], { encoding: 'utf8' });
  return `${r.status === 0 ? '' : `exit ${r.status}\n`}${r.stdout}${r.stderr}`.trim();
}

/** The inventory copied into a folder whose name holds what systemd would read as syntax. */
async function awkwardInventory(): Promise<string> {
  const plain = copyInventory('lab.yaml');
  const dir = join(dirname(plain), 'ops $HOME 100% "q" \\x');
  mkdirSync(dir);
  const inv = join(dir, 'lab.yaml');
  cpSync(plain, inv);
  expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
  return inv;
}

describe('rotation timer units', () => {
  it('reads spans in hours, days or weeks and refuses anything else', () => {
    expect(parseSpan('12h')).toBe(43_200);
    expect(parseSpan('7d')).toBe(604_800);
    expect(parseSpan('2w')).toBe(1_209_600);
    for (const bad of ['7', '0d', '1.5d', '7 d', 'weekly', '-1d', '1m'])
      expect(() => parseSpan(bad), bad).toThrow(expect.objectContaining({ code: 'E_ROTATE_TIMER_SPAN' }));
  });

  it("follows Keystone's rule: (max_active_keys - 2) periods cover the token lifetime and the allow-expired window", () => {
    // the defaults: 3 keys, tokens of 1 h, window of 2 d -> 2 d 1 h
    expect(minRotationPeriodS(3600, 3)).toBe(176_400);
    expect(minRotationPeriodS(3600, 4)).toBe(88_200);
    expect(minRotationPeriodS(3600, 2)).toBe(Infinity);
  });

  it("quotes an ExecStart= argument as systemd parses it: quotes and backslashes escaped, '%' and '$' doubled, no control character", () => {
    expect(systemdArg('/srv/a b')).toBe('"/srv/a b"');
    expect(systemdArg('x"y\\z')).toBe('"x\\"y\\\\z"');
    expect(systemdArg('100%$HOME')).toBe('"100%%$$HOME"');
    expect(() => systemdArg('a\nExecStart=/bin/sh')).toThrow(expect.objectContaining({ code: 'E_ROTATE_TIMER_PATH' }));
  });
});

describe('stackctl rotate keystone-keys --timer', () => {
  it('writes a service that rotates then deploys keystone, and a timer, which systemd accepts; rotates nothing now', async () => {
    const inv = await awkwardInventory();
    const secretsBefore = readFileSync(secretsOf(inv), 'utf8');
    const units = tempDir('stackctl-units-');
    const r = await runCli('rotate', 'keystone-keys', '-i', inv, '--timer', '7d', '--unit-dir', units);
    expect(r.code, r.stderr).toBe(0);
    const name = 'stackctl-rotate-keystone-keys-lab';
    const files = [join(units, `${name}.service`), join(units, `${name}.timer`)];
    expect(r.stdout).toContain(`${files.join(', ')} written: rotate keystone-keys then deploy keystone, every 7 d`);
    expect(r.stdout).toMatch(/not enabled \(units written outside \/etc\/systemd\/system\)/);
    expect(verifyUnits(files)).toBe('');

    const service = readFileSync(files[0]!, 'utf8');
    const quoted = systemdArg(inv);
    expect(quoted).toContain('$$HOME 100%% \\"q\\" \\\\x');
    const bin = systemdArg(realpathSync(join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli', 'bin.js')));
    const lines = service.split('\n').filter((l) => l.startsWith('ExecStart='));
    expect(lines).toEqual([
      `ExecStart=${systemdArg(process.execPath)} ${bin} "rotate" "keystone-keys" "-i" ${quoted}`,
      `ExecStart=${systemdArg(process.execPath)} ${bin} "deploy" "--services" "keystone" "-i" ${quoted}`,
    ]);
    expect(service).toMatch(/^Type=oneshot$/m);
    const timer = readFileSync(files[1]!, 'utf8');
    expect(timer).toMatch(/^OnActiveSec=604800s$/m);
    expect(timer).toMatch(/^OnUnitActiveSec=604800s$/m);
    expect(timer).toMatch(/^WantedBy=timers\.target$/m);
    // the keys are not rotated by installing the timer
    expect(readFileSync(secretsOf(inv), 'utf8')).toBe(secretsBefore);

    const off = await runCli('rotate', 'keystone-keys', '-i', inv, '--timer', 'off', '--unit-dir', units);
    expect(off.code, off.stderr).toBe(0);
    expect(files.filter((f) => existsSync(f))).toEqual([]);
  });

  it('refuses a period shorter than the keys must live, naming the shortest; more keys allow a shorter one', async () => {
    const inv = copyInventory('lab.yaml');
    expect((await runCli('secrets', 'generate', '-i', inv)).code).toBe(0);
    const units = tempDir('stackctl-units-');
    const daily = await runCli('rotate', 'keystone-keys', '-i', inv, '--timer', '1d', '--unit-dir', units);
    expect(daily.code).toBe(2);
    expect(daily.stderr).toContain('E_ROTATE_TIMER_TOO_OFTEN');
    expect(daily.stderr).toContain('the period must be at least 2 d 1 h');
    expect(daily.stderr).toContain('Nothing was written');
    expect(execFileSync('ls', ['-A', units], { encoding: 'utf8' })).toBe('');

    const text = readFileSync(inv, 'utf8');
    writeFileSync(inv, text.replace(/^ {2}settings:\n/m, '  settings:\n    keystone_fernet_max_active_keys: 4\n'));
    const r = await runCli('rotate', 'keystone-keys', '-i', inv, '--timer', '25h', '--unit-dir', units);
    expect(r.code, r.stderr).toBe(0);

    writeFileSync(inv, text.replace(/^ {2}settings:\n/m, '  settings:\n    keystone_fernet_max_active_keys: 2\n'));
    const two = await runCli('rotate', 'keystone-keys', '-i', inv, '--timer', '8w', '--unit-dir', units);
    expect(two.stderr).toContain('every rotation drops the key that signed the tokens in use');

    const bad = await runCli('rotate', 'keystone-keys', '-i', inv, '--timer', 'weekly', '--unit-dir', units);
    expect(bad.stderr).toContain('E_ROTATE_TIMER_SPAN');
  });
});
