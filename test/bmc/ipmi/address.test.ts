import { describe, expect, it } from 'vitest';
import { InputError } from '../../../src/core/errors.js';
import { Secret } from '../../../src/core/secret.js';
import { parseIpmiAddress } from '../../../src/bmc/ipmi/address.js';
import { IpmiDriver } from '../../../src/bmc/ipmi/driver.js';

describe('ipmi:// addresses', () => {
  const ok: [string, string, number][] = [
    ['ipmi://10.1.0.11', '10.1.0.11', 623],
    ['ipmi://10.1.0.11:6230', '10.1.0.11', 6230],
    ['ipmi://bmc-ctl-0.example.net/', 'bmc-ctl-0.example.net', 623],
  ];
  for (const [address, host, port] of ok) {
    it(`reads ${address} as ${host} port ${port}`, () => {
      expect(parseIpmiAddress('n', address)).toEqual({ host, port });
    });
  }

  const bad = [
    'redfish+https://10.1.0.11/redfish/v1/Systems/1',
    'ipmi://',
    'ipmi://10.1.0.11:99999',
    'ipmi://admin:secret@10.1.0.11',
    'ipmi://10.1.0.11/path',
    'ipmi://[fd00::1]:623',
    'not a url',
  ];
  for (const address of bad) {
    it(`refuses ${address} with an InputError naming the node`, () => {
      expect(() => parseIpmiAddress('ctl-0', address)).toThrow(InputError);
      expect(() => parseIpmiAddress('ctl-0', address)).toThrow(/ctl-0/);
    });
  }
});

describe('IpmiDriver.validate (offline)', () => {
  const target = { node: 'ctl-0', address: 'ipmi://10.1.0.11', username: 'admin', password: new Secret('pw') };

  it('passes a complete target without touching the network', () => {
    expect(() => new IpmiDriver(target).validate()).not.toThrow();
  });

  const cases: [string, Partial<typeof target>, string][] = [
    ['the null user', { username: '' }, 'E_IPMI_NULL_USER'],
    ['a user name over 16 bytes', { username: 'x'.repeat(17) }, 'E_IPMI_USERNAME_TOO_LONG'],
    ['an empty password', { password: new Secret('') }, 'E_IPMI_NO_PASSWORD'],
    ['a password over 20 bytes', { password: new Secret('p'.repeat(21)) }, 'E_IPMI_PASSWORD_TOO_LONG'],
    ['a bad address', { address: 'ipmi//x' }, 'E_IPMI_ADDRESS'],
  ];
  for (const [what, change, code] of cases) {
    it(`refuses ${what} (${code})`, () => {
      const driver = new IpmiDriver({ ...target, ...change });
      expect(() => driver.validate()).toThrow(expect.objectContaining({ code }));
    });
  }

  it('never puts the password in an error', () => {
    const secret = 'p'.repeat(21);
    try {
      new IpmiDriver({ ...target, password: new Secret(secret) }).validate();
    } catch (err) {
      expect(JSON.stringify(err)).not.toContain(secret);
      expect(String(err)).not.toContain(secret);
    }
  });
});
