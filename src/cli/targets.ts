import { IoError, UsageError } from '../core/errors.js';
import type { BmcTarget } from '../bmc/driver.js';
import type { Loaded } from './context.js';

/** How nodes are chosen on the command line. */
export interface SelectOptions {
  node?: string[];
  role?: string;
  all?: boolean;
}

/**
 * The nodes a command acts on: --node (repeatable), --role, or --all. One of
 * them is required, so that no command touches every BMC of a site by accident.
 */
export function selectNodes(all: Loaded, sel: SelectOptions): string[] {
  const nodes = all.loaded.inventory.nodes;
  const given = [sel.node?.length ? 1 : 0, sel.role ? 1 : 0, sel.all ? 1 : 0].reduce((a, b) => a + b, 0);
  if (given !== 1) {
    throw new UsageError('E_NODE_SELECTION', 'choose the nodes with exactly one of --node NAME, --role ROLE or --all', {
      hint: 'For example: --node ctl-0 --node ctl-1, --role Compute, or --all.',
    });
  }
  if (sel.all) return nodes.map((n) => n.name);
  if (sel.role) {
    const picked = nodes.filter((n) => n.role === sel.role).map((n) => n.name);
    if (!picked.length) {
      throw new UsageError('E_NODE_SELECTION', `no node has role '${sel.role}'`, {
        hint: `Roles in this inventory: ${[...new Set(nodes.map((n) => n.role))].sort().join(', ')}.`,
      });
    }
    return picked;
  }
  const known = new Set(nodes.map((n) => n.name));
  const unknown = sel.node!.filter((n) => !known.has(n));
  if (unknown.length) {
    throw new UsageError(
      'E_UNKNOWN_NODE',
      `no node named ${unknown.map((n) => `'${n}'`).join(', ')} in the inventory`,
      {
        hint: 'Node names are listed by stackctl plan.',
      },
    );
  }
  return [...new Set(sel.node!)];
}

/** BMC targets of the named nodes, with credentials from the secrets file. */
export function bmcTargets(all: Loaded, names: readonly string[]): BmcTarget[] {
  if (!all.secrets) {
    throw new IoError('E_NO_SECRETS_FILE', `no secrets file ${all.secretsFile}: the BMC credentials live there`, {
      hint: "Write the BMC credentials under bmc: in that file (mode 0600), or run 'stackctl secrets generate' for lab BMCs.",
    });
  }
  const byName = new Map(all.loaded.inventory.nodes.map((n) => [n.name, n]));
  return names.map((name) => {
    const node = byName.get(name)!;
    const cred = all.secrets!.bmc.get(node.bmc.credentials)!;
    return {
      node: name,
      address: node.bmc.address,
      username: cred.username,
      password: cred.password,
      ...(node.bmc.ca_bundle ? { caBundle: node.bmc.ca_bundle } : {}),
      ...(node.bmc.insecure_http ? { insecureHttp: true } : {}),
    };
  });
}
