import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { writeFileAtomic } from '../core/fs.js';
import { saveIpamState } from '../inventory/ipam.js';
import { generateSecrets, secretsFileFor } from '../inventory/secrets.js';
import { recordCreated } from '../lab/nodes/lab.js';
import { secretSpecs } from '../roles/catalog.js';
import { loadAll, type Loaded } from './context.js';
import { out, printIssues } from './output.js';

/** Options every `lab` command shares. */
export interface LabOpts {
  kind: string;
  name: string;
  inventory?: string;
  roles?: string;
  releases?: string;
}

/** The lab's inventory file: -i/--out, else `<name>.yaml` in the working folder. */
export const inventoryOf = (o: LabOpts): string => resolve(o.inventory ?? `${o.name}.yaml`);

/** loadAll options of a lab command. */
export const loadOpts = (o: LabOpts, inventory: string) => ({
  inventory,
  ...(o.roles ? { roles: o.roles } : {}),
  ...(o.releases ? { releases: o.releases } : {}),
});

/**
 * The first steps of every `lab up`: write the inventory (`yaml()`) unless
 * it exists, generate what the secrets file lacks (every lab BMC is on
 * loopback, so all credentials can be made here), save the IPAM state, and
 * record the files created next to the inventory (for `lab down --purge`).
 */
export function prepareLabInventory(o: LabOpts, label: string, yaml: () => string): Loaded {
  const file = inventoryOf(o);
  const created: string[] = [];
  if (!existsSync(file)) {
    writeFileAtomic(file, yaml());
    created.push(file);
    out(`wrote ${file} (${label})\n`);
  } else out(`using ${file}\n`);

  let all = loadAll(loadOpts(o, file));
  const inv = all.loaded.inventory;
  const used = new Set(inv.nodes.flatMap((n) => all.catalog.roles.get(n.role)!.services));
  const bmcRefs = new Map<string, { lab: boolean; nodes: string[] }>();
  for (const n of inv.nodes) {
    const ref = bmcRefs.get(n.bmc.credentials) ?? { lab: true, nodes: [] };
    ref.nodes.push(n.name);
    bmcRefs.set(n.bmc.credentials, ref);
  }
  const sec = generateSecrets(all.secretsFile, secretSpecs(all.catalog, used), bmcRefs);
  if (sec.created) created.push(sec.file);
  if (sec.added.length) out(`${sec.file}: ${sec.added.length} secret(s) added\n`);
  all = loadAll(loadOpts(o, file));
  printIssues(all.warnings);
  if (all.allocation.changed || !existsSync(all.ipamFile)) {
    if (!existsSync(all.ipamFile)) created.push(all.ipamFile);
    saveIpamState(all.ipamFile, all.allocation.state);
  }
  created.push(file.replace(/\.ya?ml$/, '') + '.events.jsonl');
  if (existsSync(secretsFileFor(file)) && created.length) recordCreated(file, created);
  return all;
}
