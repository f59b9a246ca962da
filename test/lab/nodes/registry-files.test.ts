/** What a lab node's dockerd is told about the lab registry: insecure-registries for plain HTTP, the CA for TLS. */
import { describe, expect, it } from 'vitest';
import { nodeDaemonJson, nodeRegistryFiles } from '../../../src/lab/nodes/lab.js';

const NAMES = ['10.96.1.1:5000', 'lab-registry:5000'];
const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

describe('lab node registry files', () => {
  it('lists the registry under insecure-registries only when the inventory says plain HTTP', () => {
    expect(JSON.parse(nodeDaemonJson({ names: NAMES, insecure: true }))).toEqual({
      'storage-driver': 'overlay2',
      'insecure-registries': NAMES,
    });
    expect(JSON.parse(nodeDaemonJson({ names: NAMES, insecure: false, ca: CA }))['insecure-registries']).toEqual([]);
    expect(nodeRegistryFiles({ names: NAMES, insecure: true, ca: CA }).map((f) => f.path)).toEqual([
      'etc/docker/daemon.json',
    ]);
  });

  it('gives each name of a TLS registry the CA, world-readable (it is public), under certs.d', () => {
    const files = nodeRegistryFiles({ names: NAMES, insecure: false, ca: CA });
    expect(files.map((f) => [f.path, f.mode])).toEqual([
      ['etc/docker/daemon.json', 0o644],
      ['etc/docker/certs.d/10.96.1.1:5000/ca.crt', 0o644],
      ['etc/docker/certs.d/lab-registry:5000/ca.crt', 0o644],
    ]);
    expect(files[1]!.data).toBe(CA);
  });
});
