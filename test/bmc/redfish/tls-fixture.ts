import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Certificates made with the openssl CLI for one test file. */
export interface TlsFixture {
  readonly dir: string;
  /** PEM of a test CA, and its path. */
  readonly caPem: string;
  readonly caPath: string;
  /** Key and certificate for 127.0.0.1 issued by the test CA. */
  readonly leafKey: string;
  readonly leafCert: string;
  /** A self-signed certificate for 127.0.0.1, its key, path and SHA-256 fingerprint as openssl prints it. */
  readonly selfKey: string;
  readonly selfCert: string;
  readonly selfCertPath: string;
  readonly selfFingerprint: string;
  cleanup(): Promise<void>;
}

async function openssl(args: readonly string[], cwd: string): Promise<string> {
  try {
    const { stdout } = await run('openssl', args, { cwd });
    return stdout;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new Error('the openssl command is missing: apt-get install openssl', { cause: err });
    }
    throw err;
  }
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** Make a CA, a CA-issued server certificate and a self-signed one, all for 127.0.0.1. */
export async function makeTlsFixture(): Promise<TlsFixture> {
  const dir = await mkdtemp(join(tmpdir(), 'redfish-tls-'));
  await openssl(
    [
      'req',
      '-x509',
      ...EC,
      '-keyout',
      'ca.key',
      '-out',
      'ca.pem',
      '-days',
      '2',
      '-subj',
      '/CN=Test BMC CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  await openssl(['req', '-new', ...EC, '-keyout', 'bmc.key', '-out', 'bmc.csr', '-subj', '/CN=127.0.0.1'], dir);
  await writeFile(
    join(dir, 'ext.cnf'),
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n',
  );
  await openssl(
    [
      'x509',
      '-req',
      '-in',
      'bmc.csr',
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      'bmc.pem',
      '-days',
      '2',
      '-extfile',
      'ext.cnf',
    ],
    dir,
  );
  await openssl(
    [
      'req',
      '-x509',
      ...EC,
      '-keyout',
      'self.key',
      '-out',
      'self.pem',
      '-days',
      '2',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    dir,
  );
  const fingerprintLine = await openssl(['x509', '-in', 'self.pem', '-noout', '-fingerprint', '-sha256'], dir);
  const selfFingerprint = fingerprintLine.trim().split('=')[1] ?? '';
  const read = (name: string): Promise<string> => readFile(join(dir, name), 'utf8');
  return {
    dir,
    caPem: await read('ca.pem'),
    caPath: join(dir, 'ca.pem'),
    leafKey: await read('bmc.key'),
    leafCert: await read('bmc.pem'),
    selfKey: await read('self.key'),
    selfCert: await read('self.pem'),
    selfCertPath: join(dir, 'self.pem'),
    selfFingerprint,
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}
