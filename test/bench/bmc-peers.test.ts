/**
 * The peers of bench:bmc: the package named when a peer is missing, the
 * FreeIPMI credentials file, ipmipower's arguments and output, and the CPU
 * of waited-for children read from /proc.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  childrenCpuMs,
  freeipmiCredentials,
  ipmipowerArgs,
  parseIpmipowerStat,
  PEER_PACKAGES,
  requirePeer,
} from '../../bench/bmc-peers.js';

describe('requirePeer', () => {
  for (const [command, pkg] of Object.entries(PEER_PACKAGES)) {
    it(`names Debian's ${pkg} when ${command} is missing`, () => {
      expect(() => requirePeer(command as keyof typeof PEER_PACKAGES, () => undefined)).toThrow(
        `apt-get install -y ${pkg}`,
      );
    });
  }
});

describe('freeipmiCredentials', () => {
  it('writes user and password to a file only its owner reads, and removes its folder', () => {
    const c = freeipmiCredentials('admin', 's3cret!');
    try {
      expect(readFileSync(c.file, 'utf8')).toBe('username admin\npassword s3cret!\n');
      expect(statSync(c.file).mode & 0o777).toBe(0o600);
    } finally {
      c.remove();
    }
    expect(existsSync(c.file)).toBe(false);
  });

  it('refuses values the unquoted format cannot hold', () => {
    expect(() => freeipmiCredentials('admin', 'two words')).toThrow('password');
    expect(() => freeipmiCredentials('ad\nmin', 'pw')).toThrow('user name');
  });
});

describe('ipmipowerArgs', () => {
  it('lists every BMC as host:port, takes the credentials from the file, never from argv', () => {
    const args = ipmipowerArgs({
      configFile: '/x/f.conf',
      host: '127.0.0.1',
      ports: [20000, 20001],
      suite: 17,
      fanout: 8,
    });
    expect(args).toEqual([
      '--config-file',
      '/x/f.conf',
      '--driver-type',
      'LAN_2_0',
      '--cipher-suite-id',
      '17',
      '--fanout',
      '8',
      '--always-prefix',
      '--hostname',
      '127.0.0.1:20000,127.0.0.1:20001',
      '--stat',
    ]);
    expect(args.join(' ')).not.toMatch(/--password|-p /);
  });
});

describe('parseIpmipowerStat', () => {
  it('counts on and off and keeps the other lines', () => {
    const out = '127.0.0.1: on\n127.0.0.1: off\n127.0.0.1: on\n127.0.0.1: session timeout\n\n';
    expect(parseIpmipowerStat(out)).toEqual({ on: 2, off: 1, other: ['127.0.0.1: session timeout'] });
  });
});

describe('childrenCpuMs', () => {
  it('reads cutime and cstime (fields 16 and 17) after a command name with spaces and parentheses', () => {
    const fields = Array.from({ length: 50 }, (_, i) => String(i + 3)); // field n holds n, from field 3
    fields[0] = 'S';
    const stat = `1234 (a (b) c) ${fields.join(' ')}`;
    expect(childrenCpuMs(stat)).toBe(((16 + 17) * 1000) / 100);
  });

  it('grows by the CPU of a child once it has been waited for', () => {
    const before = childrenCpuMs();
    // a child that burns about 0.3 s of CPU
    execFileSync(process.execPath, ['-e', 'const t = Date.now(); while (Date.now() - t < 300) {}']);
    expect(childrenCpuMs()).toBeGreaterThan(before);
  });
});
