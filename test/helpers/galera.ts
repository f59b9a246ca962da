/**
 * A service file whose Galera server is not called `mariadb`: the recovery, the deploy's guard and
 * status must take the container and the client from its `cluster_check`, never from a name they
 * know.
 */
import type { Catalog } from '../../src/roles/catalog.js';
import { catalogWith } from './plan.js';

/** The names the changed file gives the Galera server container and its client. */
export const RENAMED = { container: 'galera_server', client: 'mysql' } as const;

/** The shipped roles, mariadb.yaml's server container renamed and its cluster check run by another client. */
export function renamedGaleraCatalog(): Catalog {
  return catalogWith('services/mariadb.yaml', (doc) => {
    const containers = doc.containers as { name: string }[];
    const server = containers.find((c) => c.name === 'mariadb')!;
    server.name = RENAMED.container;
    const provides = doc.provides as { database: { container: string } };
    provides.database.container = RENAMED.container;
    const check = doc.cluster_check as { container: string; command: string[] };
    check.container = RENAMED.container;
    check.command = [RENAMED.client, ...check.command.slice(1)];
  });
}
