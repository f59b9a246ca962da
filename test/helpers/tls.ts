/** A copy of the shipped lab inventory whose registry serves TLS: a `tls:` section, registry_insecure false, certificates made. */
import { readFileSync, writeFileSync } from 'node:fs';
import { expect } from 'vitest';
import { copyInventory, runCli } from './cli.js';

/** The inventory file and the cloud CA (PEM) `certs generate` made for it. */
export async function tlsRegistryInventory(): Promise<{ file: string; ca: string }> {
  const file = copyInventory('lab.yaml');
  const text = readFileSync(file, 'utf8');
  expect(text).toContain('registry_insecure: true');
  writeFileSync(file, text.replace('registry_insecure: true', 'registry_insecure: false') + 'tls: {}\n');
  const g = await runCli('certs', 'generate', '-i', file);
  expect(g.code, g.stderr).toBe(0);
  return { file, ca: readFileSync(file.replace(/\.yaml$/, '.certs/ca.pem'), 'utf8') };
}
