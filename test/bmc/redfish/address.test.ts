import { describe, expect, it } from 'vitest';
import { InputError } from '../../../src/core/errors.js';
import { Secret } from '../../../src/core/secret.js';
import { parseRedfishAddress, REDFISH_SCHEMES } from '../../../src/bmc/redfish/address.js';
import { RedfishDriver } from '../../../src/bmc/redfish/driver.js';
import type { RequestFn } from '../../../src/bmc/redfish/http.js';

describe('parseRedfishAddress', () => {
  it.each([
    {
      scenario: 'https with the default port',
      address: 'redfish+https://10.1.0.11/redfish/v1/Systems/1',
      want: { protocol: 'https', host: '10.1.0.11', port: 443, origin: 'https://10.1.0.11', systemId: '1' },
    },
    {
      scenario: 'https with a port and a name',
      address: 'redfish+https://bmc-3.example.net:8443/redfish/v1/Systems/System.Embedded.1',
      want: { protocol: 'https', host: 'bmc-3.example.net', port: 8443, systemId: 'System.Embedded.1' },
    },
    {
      scenario: 'a trailing slash',
      address: 'redfish+https://10.1.0.12/redfish/v1/Systems/1/',
      want: { protocol: 'https', systemPath: '/redfish/v1/Systems/1' },
    },
    {
      scenario: 'plain http for the lab',
      address: 'redfish+http://127.0.0.1:8000/redfish/v1/Systems/ctl-0',
      want: { protocol: 'http', port: 8000, hostKey: '127.0.0.1:8000', systemId: 'ctl-0' },
    },
    {
      scenario: 'IPv6',
      address: 'redfish+https://[fd00::5]:443/redfish/v1/Systems/1',
      want: { host: 'fd00::5', port: 443, hostKey: '[fd00::5]:443' },
    },
  ])('parses $scenario', ({ address, want }) => {
    expect(parseRedfishAddress('n', address)).toMatchObject(want);
  });

  it.each([
    { scenario: 'an unknown scheme', address: 'ipmi://10.1.0.11:623', match: /unknown scheme/ },
    {
      scenario: 'the bare redfish scheme',
      address: 'redfish://10.1.0.11/redfish/v1/Systems/1',
      match: /unknown scheme/,
    },
    {
      scenario: 'credentials in the address',
      address: 'redfish+https://root:calvin@10.1.0.11/redfish/v1/Systems/1',
      match: /credentials/,
    },
    {
      scenario: 'credentials without slashes',
      address: 'redfish+https:root:calvin@10.1.0.11/redfish/v1/Systems/1',
      match: /credentials/,
    },
    {
      scenario: 'credentials and an unknown scheme',
      address: 'https://root:calvin@10.1.0.11/redfish/v1/Systems/1',
      match: /unknown scheme/,
    },
    {
      scenario: 'a path that is not a system',
      address: 'redfish+https://10.1.0.11/redfish/v1/Managers/1',
      match: /path/,
    },
    { scenario: 'a query', address: 'redfish+https://10.1.0.11/redfish/v1/Systems/1?x=1', match: /query/ },
    { scenario: 'no host', address: 'redfish+https:///redfish/v1/Systems/1', match: /./ },
  ])('rejects $scenario with an InputError naming the node', ({ address, match }) => {
    let err: unknown;
    try {
      parseRedfishAddress('cmp-1', address);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InputError);
    expect((err as InputError).code).toBe('E_REDFISH_ADDRESS');
    expect((err as InputError).message).toContain('cmp-1');
    expect((err as InputError).message).toMatch(match);
    expect((err as InputError).message).not.toContain('calvin');
  });

  it('knows each scheme it lists', () => {
    for (const scheme of Object.keys(REDFISH_SCHEMES)) {
      expect(parseRedfishAddress('n', `${scheme}//h/redfish/v1/Systems/1`).protocol).toBe(
        REDFISH_SCHEMES[scheme as keyof typeof REDFISH_SCHEMES],
      );
    }
  });
});

describe('RedfishDriver.validate', () => {
  const noNetwork: RequestFn = () => Promise.reject(new Error('validate must not touch the network'));
  const make = (
    overrides: Record<string, unknown>,
    readFile = (p: string): string => {
      throw new Error(`ENOENT: ${p}`);
    },
  ) =>
    new RedfishDriver(
      {
        node: 'ctl-0',
        address: 'redfish+https://10.1.0.11/redfish/v1/Systems/1',
        username: 'root',
        password: new Secret('s3cret'),
        ...overrides,
      },
      { request: noNetwork, readFile },
    );

  it('accepts a complete target synchronously and offline', () => {
    expect(() => make({}).validate()).not.toThrow();
    expect(() =>
      make({ caBundle: '/etc/bmc-ca.pem' }, () => '-----BEGIN CERTIFICATE-----\nx\n').validate(),
    ).not.toThrow();
  });

  it.each([
    {
      scenario: 'a bad address',
      overrides: { address: 'redfish+ftp://x/redfish/v1/Systems/1' },
      code: 'E_REDFISH_ADDRESS',
    },
    {
      scenario: 'plain HTTP to a BMC off loopback',
      overrides: { address: 'redfish+http://10.1.0.11/redfish/v1/Systems/1' },
      code: 'E_REDFISH_PLAIN_HTTP',
    },
    {
      scenario: 'plain HTTP to a BMC named by host name',
      overrides: { address: 'redfish+http://bmc-3.example.net:8000/redfish/v1/Systems/1', insecureHttp: false },
      code: 'E_REDFISH_PLAIN_HTTP',
    },
    { scenario: 'an empty password', overrides: { password: new Secret('') }, code: 'E_REDFISH_CREDENTIALS' },
    { scenario: 'an empty user name', overrides: { username: ' ' }, code: 'E_REDFISH_CREDENTIALS' },
    {
      scenario: 'a CA bundle that cannot be read',
      overrides: { caBundle: '/nope/ca.pem' },
      code: 'E_REDFISH_CA_BUNDLE',
    },
  ])('rejects $scenario', ({ overrides, code }) => {
    expect(() => make(overrides).validate()).toThrow(expect.objectContaining({ code }));
  });

  it.each([
    { scenario: 'to 127.0.0.1', overrides: { address: 'redfish+http://127.0.0.1:8000/redfish/v1/Systems/1' } },
    { scenario: 'to ::1', overrides: { address: 'redfish+http://[::1]:8000/redfish/v1/Systems/1' } },
    { scenario: 'to localhost', overrides: { address: 'redfish+http://localhost:8000/redfish/v1/Systems/1' } },
    {
      scenario: 'off loopback with the explicit opt-in',
      overrides: { address: 'redfish+http://10.1.0.11/redfish/v1/Systems/1', insecureHttp: true },
    },
  ])('accepts plain HTTP $scenario', ({ overrides }) => {
    expect(() => make(overrides).validate()).not.toThrow();
  });

  it('rejects a CA bundle file without a certificate', () => {
    expect(() => make({ caBundle: '/etc/x.pem' }, () => 'not pem').validate()).toThrow(
      expect.objectContaining({ code: 'E_REDFISH_CA_BUNDLE' }),
    );
  });

  it('has kind redfish', () => {
    expect(make({}).kind).toBe('redfish');
  });
});
