import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RemoteError, StackctlError } from '../../../src/core/errors.js';
import { InMemoryMachine } from '../../../src/lab/vbmc/machine.js';
import { driverFor, PASSWORD, startBmc, type RunningBmc } from './harness.js';
import { makeTlsFixture, type TlsFixture } from './tls-fixture.js';

let tls: TlsFixture;
let caIssued: RunningBmc;
let selfSigned: RunningBmc;

beforeAll(async () => {
  tls = await makeTlsFixture();
  caIssued = await startBmc({
    tls: { key: tls.leafKey, cert: tls.leafCert },
    machine: new InMemoryMachine({ name: 'a' }),
  });
  selfSigned = await startBmc({
    tls: { key: tls.selfKey, cert: tls.selfCert },
    machine: new InMemoryMachine({ name: 'b' }),
  });
});

afterAll(async () => {
  await caIssued?.bmc.close();
  await selfSigned?.bmc.close();
  await tls?.cleanup();
});

async function rejection(promise: Promise<unknown>): Promise<StackctlError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StackctlError);
  return err as StackctlError;
}

describe('RedfishDriver over https', () => {
  it.each([
    { scenario: 'a CA bundle file', bundle: () => tls.caPath },
    { scenario: 'CA bundle PEM text', bundle: () => tls.caPem },
  ])('verifies the BMC certificate against $scenario', async ({ bundle }) => {
    expect(caIssued.address.startsWith('redfish+https://127.0.0.1:')).toBe(true);
    const { driver, transcript } = driverFor(caIssued.address, { target: { caBundle: bundle() } });
    try {
      await driver.powerOn();
      expect(await driver.powerState()).toBe('on');
      await driver.powerOff();
      expect(transcript.warnings).toEqual([]);
    } finally {
      await driver.close();
    }
  });

  it('trusts a self-signed BMC certificate given as its own CA bundle', async () => {
    const { driver } = driverFor(selfSigned.address, { target: { caBundle: tls.selfCertPath } });
    try {
      expect(await driver.powerState()).toBe('off');
    } finally {
      await driver.close();
    }
  });

  it('refuses a self-signed certificate without a CA bundle, showing its SHA-256 fingerprint and never sending credentials', async () => {
    const before = selfSigned.bmc.stats.requests;
    const { driver } = driverFor(selfSigned.address, { node: 'ctl-5' });
    try {
      const err = await rejection(driver.powerState());
      expect(err).toBeInstanceOf(RemoteError);
      expect(err.code).toBe('E_REDFISH_TLS_UNTRUSTED');
      expect(tls.selfFingerprint).toMatch(/^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
      expect(err.message).toContain(tls.selfFingerprint);
      expect(err.message).toContain('ctl-5');
      expect(err.hint).toContain('--ca-bundle');
      expect(err.details['fingerprint256']).toBe(tls.selfFingerprint);
      expect(selfSigned.bmc.stats.requests).toBe(before);
      expect(JSON.stringify(err)).not.toContain(PASSWORD);
    } finally {
      await driver.close();
    }
  });

  it('refuses a certificate from an unknown CA when no bundle is given', async () => {
    const { driver } = driverFor(caIssued.address);
    try {
      const err = await rejection(driver.powerState());
      expect(err.code).toBe('E_REDFISH_TLS_UNTRUSTED');
      expect(err.message).toMatch(/fingerprint is ([0-9A-F]{2}:){31}[0-9A-F]{2}/);
    } finally {
      await driver.close();
    }
  });

  it('refuses a certificate whose CA is not the bundle given', async () => {
    const { driver } = driverFor(selfSigned.address, { target: { caBundle: tls.caPath } });
    try {
      expect((await rejection(driver.powerState())).code).toBe('E_REDFISH_TLS_UNTRUSTED');
    } finally {
      await driver.close();
    }
  });

  it('skips verification only with the insecure flag, and warns', async () => {
    const { driver, transcript } = driverFor(selfSigned.address, { node: 'lab-9', target: { insecure: true } });
    try {
      expect(await driver.powerState()).toBe('off');
      await driver.setBootDevice('pxe', { uefi: true });
      expect(await driver.getBootDevice()).toEqual({ device: 'pxe', persistent: false, uefi: true });
      expect(transcript.warnings).toHaveLength(1);
      expect(transcript.warnings[0]).toContain('lab-9');
      expect(transcript.warnings[0]).toContain('verification is off');
    } finally {
      await driver.close();
    }
  });
});
