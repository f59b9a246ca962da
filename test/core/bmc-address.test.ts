import { describe, expect, it } from 'vitest';
import { BMC_SCHEMES, parseBmcAddress } from '../../src/core/bmc-address.js';
import { StackctlError } from '../../src/core/errors.js';

describe('BMC addresses', () => {
  it.each([
    { address: 'ipmi://10.1.0.11', driver: 'ipmi', port: 623, canonical: 'ipmi://10.1.0.11:623' },
    { address: 'ipmi://127.0.0.1:6230', driver: 'ipmi', port: 6230, canonical: 'ipmi://127.0.0.1:6230' },
    {
      address: 'redfish+https://bmc.example/redfish/v1/Systems/1',
      driver: 'redfish',
      port: 443,
      canonical: 'redfish+https://bmc.example:443/redfish/v1/Systems/1',
    },
    {
      address: 'redfish+http://127.0.0.1:8000/redfish/v1/Systems/a',
      driver: 'redfish',
      port: 8000,
      canonical: 'redfish+http://127.0.0.1:8000/redfish/v1/Systems/a',
    },
  ])('$address chooses the $driver driver', ({ address, driver, port, canonical }) => {
    const a = parseBmcAddress(address);
    expect([a.driver, a.port, a.canonical]).toEqual([driver, port, canonical]);
  });

  it('has a default port for every scheme', () => {
    for (const [scheme, info] of Object.entries(BMC_SCHEMES)) {
      const path = info.driver === 'redfish' ? '/redfish/v1/Systems/1' : '';
      expect(parseBmcAddress(`${scheme}://h${path}`).port).toBe(info.defaultPort);
    }
  });

  it.each([
    { address: 'idrac://10.0.0.1', code: 'E_BMC_SCHEME', says: 'ipmi, redfish+https, redfish+http' },
    { address: '10.0.0.1', code: 'E_BMC_ADDRESS', says: 'no scheme' },
    { address: 'redfish+https://h/redfish/v1', code: 'E_BMC_ADDRESS', says: 'does not name a system' },
    { address: 'ipmi://h:70000', code: 'E_BMC_ADDRESS', says: 'invalid port' },
    { address: 'ipmi://admin:s3cret@h', code: 'E_INLINE_SECRET', says: 'carries credentials' },
  ])('refuses $address ($code), naming it', ({ address, code, says }) => {
    try {
      parseBmcAddress(address);
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(StackctlError);
      const err = e as StackctlError;
      expect(err.code).toBe(code);
      expect(`${err.message} ${err.hint}`).toContain(says);
      expect(err.message).not.toContain('s3cret');
    }
  });
});
