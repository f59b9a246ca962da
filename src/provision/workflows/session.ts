/**
 * What the node workflows share while a command runs: the site (inventory,
 * addresses, registry), the persisted node states, the event sink, and one
 * BMC driver per node for the whole run (IPMI sessions share one UDP
 * transport). The command line opens it (src/cli/nodes-session.ts) and
 * decides where the events are shown.
 */
import type { BmcDriver, BmcTarget } from '../../bmc/driver.js';
import { IpmiTransport } from '../../bmc/ipmi/transport.js';
import { createDriver } from '../../bmc/registry.js';
import type { EventSink, StackctlEvent } from '../../core/events.js';
import type { Inventory } from '../../inventory/schema.js';
import { NodeStateStore, nodesFileFor } from '../machine.js';

/** What the workflows read of a site. */
export interface Site {
  /** The inventory file (absolute): the state files sit next to it. */
  readonly inventoryFile: string;
  readonly inventory: Inventory;
  /** node -> network -> address, from IPAM. */
  readonly addresses: ReadonlyMap<string, Readonly<Record<string, string>>>;
  /** The registry the nodes' dockerd pull from (cloud.registry, else the release's). */
  readonly registry: string;
  /** The CA (PEM) the nodes' dockerd trusts that registry with when it serves TLS. */
  readonly registryCa?: string;
}

/** A run of node workflows: site, node states, events, BMC drivers. */
export interface NodeSession {
  readonly site: Site;
  readonly store: NodeStateStore;
  readonly emit: (e: StackctlEvent) => void;
  readonly events: EventSink;
  /** The node's BMC driver, one per node for the whole run. */
  driver(node: string): BmcDriver;
  /** Close every driver and the IPMI transport, and fold the node state journal in when the run wrote to it. */
  close(): Promise<void>;
}

/**
 * Open a session: the node state store of the site (its transitions go to
 * `emit`) and drivers made on first use from `targets` (asked once, when the
 * first driver is wanted: a command that touches no BMC needs no credentials).
 */
export function openNodeSession(
  site: Site,
  o: { readonly emit: (e: StackctlEvent) => void; readonly targets: () => readonly BmcTarget[] },
): NodeSession {
  const events: EventSink = { emit: o.emit };
  const store = NodeStateStore.open(nodesFileFor(site.inventoryFile), { events });
  const transport = new IpmiTransport();
  const drivers = new Map<string, BmcDriver>();
  let targets: Map<string, BmcTarget> | undefined;
  return {
    site,
    store,
    emit: o.emit,
    events,
    driver(node) {
      let d = drivers.get(node);
      if (!d) {
        targets ??= new Map(o.targets().map((t) => [t.node, t]));
        // the lab's BMCs speak plain HTTP on loopback by design; the warning is for real sites
        d = createDriver(targets.get(node)!, { ipmiTransport: transport, redfish: { warn: () => undefined } });
        drivers.set(node, d);
      }
      return d;
    },
    async close() {
      try {
        await Promise.allSettled([...drivers.values()].map((d) => d.close()));
        await transport.close();
      } finally {
        store.close();
      }
    },
  };
}

/** Folder of a run's dnsmasq files and boot files: `<inventory>.pxe/`. */
export const pxeDirOf = (site: Pick<Site, 'inventoryFile'>): string =>
  site.inventoryFile.replace(/\.ya?ml$/, '') + '.pxe';
