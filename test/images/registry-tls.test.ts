import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Secret } from '../../src/core/secret.js';
import { generateKeyPair, issueCertificate } from '../../src/certs/x509.js';
import { headManifest, parseImageRef } from '../../src/images/registry-api.js';
import { caFetch } from '../../src/images/registry-https.js';
import { ensureRegistry } from '../../src/images/registry.js';
import {
  fingerprintOf,
  registryConfigYaml,
  servedFingerprint,
  type RegistryTls,
} from '../../src/images/registry-tls.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { dockerOrFail, release, testImages } from './fixture.js';

const NAME = `stackctl-test-registry-tls-${process.pid}`;
const PORT = 16100 + (process.pid % 800);
const ADDRESS = `127.0.0.1:${PORT}`;
/** The name the registry's certificate carries, as the nodes reach it (not the address asked here). */
const HOST = '10.99.1.1';
const DAY = 86_400_000;

async function ca(cn: string): Promise<{ certPem: string; keyPem: string }> {
  const k = await generateKeyPair();
  const now = Date.now();
  const certPem = await issueCertificate(
    {
      commonName: cn,
      notBefore: new Date(now - DAY),
      notAfter: new Date(now + 30 * DAY),
      publicKeyPem: k.publicKeyPem,
      ca: true,
    },
    { keyPem: k.keyPem },
  );
  return { certPem, keyPem: k.keyPem };
}

async function leaf(
  issuer: { certPem: string; keyPem: string },
  ip: string,
): Promise<{ certPem: string; keyPem: string }> {
  const k = await generateKeyPair();
  const now = Date.now();
  const certPem = await issueCertificate(
    {
      commonName: 'registry',
      sans: { dns: [], ip: [ip] },
      notBefore: new Date(now - DAY),
      notAfter: new Date(now + 30 * DAY),
      publicKeyPem: k.publicKeyPem,
      ca: false,
    },
    issuer,
  );
  return { certPem, keyPem: k.keyPem };
}

describe('the local registry over TLS (Debian docker-registry with the cloud CA)', () => {
  let engine: LocalEngine;
  let cloudCa: { certPem: string; keyPem: string };
  let tls: RegistryTls;
  beforeAll(async () => {
    engine = await dockerOrFail();
    await testImages(engine, ['registry']);
    cloudCa = await ca('test CA');
    const cert = await leaf(cloudCa, HOST);
    tls = { certPem: cert.certPem, key: new Secret(cert.keyPem), caPem: cloudCa.certPem, host: HOST };
  }, 900_000);
  afterAll(async () => {
    await engine?.removeContainer(NAME);
  });

  it('writes the registry configuration with http.tls only when TLS is on', () => {
    expect(registryConfigYaml(true)).toContain('tls: { certificate: /etc/docker/registry/tls/registry.pem');
    expect(registryConfigYaml(false)).not.toContain('tls');
  });

  it('starts serving the certificate; a client trusting the CA and checking the registry name gets an answer', async () => {
    const r = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME, tls });
    expect(r.created).toBe(true);
    expect(await servedFingerprint('127.0.0.1', PORT)).toBe(fingerprintOf(tls.certPem));
    const ok = await caFetch(tls.caPem, HOST)(`https://${ADDRESS}/v2/`);
    expect(ok.status).toBe(200);
    // the registry API's HEAD through the same client: an image that is not there is a 404, not an error
    const head = await headManifest(parseImageRef(`${HOST}:5000/stackctl/none:zed-1`), {
      address: ADDRESS,
      scheme: 'https',
      fetch: caFetch(tls.caPem, HOST),
    });
    expect(head.status).toBe(404);
    // plain HTTP is not served any more
    expect((await fetch(`http://${ADDRESS}/v2/`)).status).toBe(400);
  }, 120_000);

  it('refuses a registry certificate of another CA, or one that does not name the registry', async () => {
    const other = await ca('another CA');
    await expect(caFetch(other.certPem, HOST)(`https://${ADDRESS}/v2/`)).rejects.toMatchObject({
      cause: { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' },
    });
    await expect(caFetch(tls.caPem, '10.99.1.2')(`https://${ADDRESS}/v2/`)).rejects.toMatchObject({
      cause: { code: 'ERR_TLS_CERT_ALTNAME_INVALID' },
    });
  });

  it('is reconfigured in place: another certificate, then plain HTTP, then TLS again; nothing changes when it serves what is asked', async () => {
    const again = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME, tls });
    expect(again).toMatchObject({ created: false, reconfigured: false });

    const renewed = await leaf(cloudCa, HOST);
    const tls2 = { ...tls, certPem: renewed.certPem, key: new Secret(renewed.keyPem) };
    const r2 = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME, tls: tls2 });
    expect(r2).toMatchObject({ created: false, reconfigured: true });
    expect(await servedFingerprint('127.0.0.1', PORT)).toBe(fingerprintOf(tls2.certPem));

    const plain = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME, tls: false });
    expect(plain.reconfigured).toBe(true);
    expect(await servedFingerprint('127.0.0.1', PORT)).toBeUndefined();
    expect((await fetch(`http://${ADDRESS}/v2/`)).status).toBe(200);

    // a push without an inventory takes whatever the registry serves, and changes nothing
    const any = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME });
    expect(any.reconfigured).toBe(false);

    const back = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME, tls });
    expect(back.reconfigured).toBe(true);
    expect(await servedFingerprint('127.0.0.1', PORT)).toBe(fingerprintOf(tls.certPem));
    const anyTls = await ensureRegistry(engine, { release, address: ADDRESS, container: NAME });
    expect(anyTls.reconfigured).toBe(false);
  }, 300_000);

  it('keeps the key out of the container configuration (no environment, no command line)', async () => {
    const inspect = execFileSync('docker', ['inspect', NAME], { encoding: 'utf8' });
    expect(inspect).toContain('docker-registry'); // the container's command is there
    expect(inspect).not.toContain('PRIVATE KEY');
    expect(inspect).not.toContain(tls.key.reveal().split('\n')[1]!);
    const key = await engine.exec(NAME, ['stat', '-c', '%a %U', '/etc/docker/registry/tls/registry.key']);
    expect(key.output.trim()).toBe('600 root');
  });
});
