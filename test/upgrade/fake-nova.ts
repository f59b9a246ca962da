/**
 * A fake Nova behind the CloudClient interface: compute services,
 * hypervisors with statistics, flavours and servers, answering the
 * OpenStack client's argv with the JSON the client prints. Live migrations
 * complete, roll back or hang as each server is told to, after a number of
 * `server show` polls.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { StackctlEvent } from '../../src/core/events.js';
import { RemoteError } from '../../src/core/errors.js';
import { parseInventory } from '../../src/inventory/load.js';
import type { CloudClient, UpgradeContext } from '../../src/upgrade/context.js';
import { catalog, release } from '../helpers/plan.js';
import { labPlan } from '../status/fixture.js';

const labText = readFileSync(join(import.meta.dirname, '..', '..', 'inventories', 'lab.yaml'), 'utf8');

export interface FakeHost {
  host: string;
  status: 'enabled' | 'disabled';
  state: 'up' | 'down';
  /** Physical totals and usage, as hypervisor show reports them up to microversion 2.87. */
  vcpus: number;
  memoryMb: number;
  diskGb: number;
  vcpusUsed?: number;
  memoryMbUsed?: number;
  diskGbUsed?: number;
  /** The service's last report (`Updated At`); a fixed time when unset. */
  updatedAt?: string;
}

export interface FakeFlavor {
  id: string;
  name: string;
  vcpus: number;
  ram: number;
  disk: number;
  ephemeral?: number;
  swap?: number | '';
}

export interface FakeServer {
  id: string;
  name: string;
  status: string;
  host: string;
  flavor: string;
  task?: string;
  /**
   * What a live migration of it does (default: moves to the first other enabled host). `hangs`
   * until aborted (then rolls back); `hangs-for-good` ignores the abort too.
   */
  migration?: 'moves' | 'rolls-back' | 'hangs' | 'hangs-for-good' | 'refused';
  /** Its addresses, listed in the Networks column (the workload ledger watches the first that answers). */
  addresses?: string[];
  /** Polls before the migration ends (default 1). */
  polls?: number;
  /** Looks at its migration record (`server migration list`) before the conductor lets it run: `accepted` until then. */
  acceptedLooks?: number;
}

export class FakeNova implements CloudClient {
  readonly calls: string[][] = [];
  /** Most live migrations seen in flight at once. */
  maxInFlight = 0;
  #left = new Map<string, number>();
  /** Nova's migration records: server, id, status. */
  readonly migrations: { server: string; id: string; status: string }[] = [];
  constructor(
    readonly hosts: FakeHost[],
    readonly flavors: FakeFlavor[],
    readonly servers: FakeServer[],
  ) {}

  #inFlight(): number {
    return this.servers.filter((s) => s.task === 'migrating').length;
  }

  async openstack(argv: readonly string[]): Promise<string> {
    this.calls.push([...argv]);
    let a = [...argv];
    let microversion = '2.1';
    if (a[0] === '--os-compute-api-version') {
      microversion = a[1]!;
      a = a.slice(2);
    }
    const cmd = a
      .filter((x) => !x.startsWith('-'))
      .slice(0, 2)
      .join(' ');
    const host = (name: string): FakeHost => {
      const h = this.hosts.find((x) => x.host === name);
      if (!h) throw new RemoteError('E_OPENSTACK_CLIENT', `no compute service on ${name}`);
      return h;
    };
    if (a.join(' ').startsWith('compute service set')) {
      const [name, binary] = a.slice(-2);
      if (binary !== 'nova-compute') throw new Error(`unexpected binary ${binary}`);
      host(name!).status = a.includes('--disable') ? 'disabled' : 'enabled';
      return '';
    }
    if (cmd === 'compute service') {
      return JSON.stringify(
        this.hosts.map((h, i) => ({
          ID: i + 1,
          Binary: 'nova-compute',
          Host: h.host,
          Zone: 'nova',
          Status: h.status,
          State: h.state,
          'Updated At': h.updatedAt ?? '2026-11-22T17:00:00.000000',
        })),
      );
    }
    if (cmd === 'hypervisor list') {
      // NOTE: IDs are UUIDs from 2.53 on; a list at 2.1 would give IDs a 2.87 show refuses.
      if (microversion !== '2.87') throw new Error(`hypervisor list at microversion ${microversion}`);
      // With --long the Zed client adds vCPU and memory statistics (microversion ≤ 2.87), never the disk.
      const long = a.includes('--long');
      return JSON.stringify(
        this.hosts.map((h, i) => {
          const on = this.servers.filter((s) => s.host === h.host);
          const sum = (f: (x: FakeFlavor) => number): number =>
            on.reduce((t, s) => t + f(this.flavors.find((x) => x.id === s.flavor)!), 0);
          return {
            ID: `hv-${i}`,
            'Hypervisor Hostname': `${h.host}.lab.example`,
            'Hypervisor Type': 'fake',
            'Host IP': `10.0.0.${i + 10}`,
            State: h.state,
            ...(long
              ? {
                  'vCPUs Used': h.vcpusUsed ?? sum((f) => f.vcpus),
                  vCPUs: h.vcpus,
                  'Memory MB Used': h.memoryMbUsed ?? 512 + sum((f) => f.ram),
                  'Memory MB': h.memoryMb,
                }
              : {}),
          };
        }),
      );
    }
    if (cmd === 'hypervisor show') {
      if (microversion !== '2.87') throw new Error(`hypervisor show without statistics (microversion ${microversion})`);
      const h = this.hosts[Number(a[2]!.replace('hv-', ''))]!;
      const on = this.servers.filter((s) => s.host === h.host);
      const sum = (f: (x: FakeFlavor) => number): number =>
        on.reduce((t, s) => t + f(this.flavors.find((x) => x.id === s.flavor)!), 0);
      return JSON.stringify({
        hypervisor_hostname: `${h.host}.lab.example`,
        vcpus: h.vcpus,
        vcpus_used: h.vcpusUsed ?? sum((f) => f.vcpus),
        memory_mb: h.memoryMb,
        memory_mb_used: h.memoryMbUsed ?? 512 + sum((f) => f.ram),
        local_gb: h.diskGb,
        local_gb_used: h.diskGbUsed ?? sum((f) => f.disk),
      });
    }
    if (cmd === 'server list') {
      const on = a[a.indexOf('--host') + 1];
      if (!a.includes('--all-projects')) throw new Error('server list without --all-projects');
      // time passes between two lists too: migrations under way go on
      for (const s of this.servers.filter((x) => x.host === on)) this.#tick(s);
      return JSON.stringify(
        this.servers
          .filter((s) => s.host === on)
          .map((s) => ({
            ID: s.id,
            Name: s.name,
            Status: s.status,
            'Task State': s.task ?? null,
            'Flavor Name': this.flavors.find((f) => f.id === s.flavor)?.name ?? '',
            'Flavor ID': s.flavor,
            Host: s.host,
            ...(s.addresses ? { Networks: { 'demo-net': s.addresses } } : {}),
          })),
      );
    }
    if (cmd === 'flavor list') {
      return JSON.stringify(
        this.flavors.map((f) => ({
          ID: f.id,
          Name: f.name,
          RAM: f.ram,
          Disk: f.disk,
          Ephemeral: f.ephemeral ?? 0,
          Swap: f.swap ?? '',
          VCPUs: f.vcpus,
          'Is Public': true,
        })),
      );
    }
    if (cmd === 'server migrate') {
      if (!a.includes('--live-migration')) throw new Error('cold migration requested');
      const s = this.servers.find((x) => x.id === a.at(-1))!;
      if (s.migration === 'refused') throw new RemoteError('E_OPENSTACK_CLIENT', 'No valid host was found. (HTTP 400)');
      s.status = 'MIGRATING';
      s.task = 'migrating';
      this.migrations.push({
        server: s.id,
        id: String(this.migrations.length + 1),
        status: s.acceptedLooks ? 'accepted' : 'running',
      });
      this.#left.set(s.id, s.polls ?? 1);
      this.maxInFlight = Math.max(this.maxInFlight, this.#inFlight());
      return '';
    }
    if (a.join(' ').startsWith('server migration list')) {
      const on = a[a.indexOf('--server') + 1];
      // each look brings an accepted migration one step nearer to running
      const s = this.servers.find((x) => x.id === on);
      const accepted = this.migrations.find((x) => x.server === on && x.status === 'accepted');
      if (s && accepted) {
        s.acceptedLooks = (s.acceptedLooks ?? 1) - 1;
        if (s.acceptedLooks <= 0) accepted.status = 'running';
      }
      return JSON.stringify(
        this.migrations
          .filter((m) => m.server === on)
          .map((m) => ({ Id: Number(m.id), Status: m.status, 'Server UUID': m.server, Type: 'live-migration' })),
      );
    }
    if (a.join(' ').startsWith('server migration abort')) {
      if (microversion < '2.65') throw new Error(`abort at microversion ${microversion}`);
      const [server, id] = a.slice(-2);
      const m = this.migrations.find((x) => x.server === server && x.id === id);
      if (!m) throw new RemoteError('E_OPENSTACK_CLIENT', `no migration ${id} of ${server} (HTTP 404)`);
      if (m.status !== 'running')
        throw new RemoteError(
          'E_OPENSTACK_CLIENT',
          `Cannot 'abort live migration' migration ${id} while it is in migration_status ${m.status} (HTTP 400)`,
        );
      const s = this.servers.find((x) => x.id === server)!;
      if (s.migration === 'hangs-for-good') return '';
      m.status = 'cancelled';
      s.status = 'ACTIVE';
      s.task = undefined;
      return '';
    }
    if (cmd === 'server show') {
      const s = this.servers.find((x) => x.id === a[2])!;
      this.#tick(s);
      return JSON.stringify({
        id: s.id,
        name: s.name,
        status: s.status,
        'OS-EXT-SRV-ATTR:host': s.host,
        'OS-EXT-STS:task_state': s.task ?? null,
      });
    }
    throw new Error(`fake Nova does not know: openstack ${argv.join(' ')}`);
  }

  /** One poll's worth of a live migration under way: it ends after its polls, moved or rolled back. */
  #tick(s: FakeServer): void {
    if (s.task !== 'migrating') return;
    const left = (this.#left.get(s.id) ?? s.polls ?? 1) - 1;
    this.#left.set(s.id, left);
    if (left > 0 || s.migration === 'hangs' || s.migration === 'hangs-for-good') return;
    const m = this.migrations.findLast((x) => x.server === s.id && x.status === 'running');
    if (m) m.status = s.migration === 'rolls-back' ? 'error' : 'completed';
    s.status = 'ACTIVE';
    s.task = undefined;
    if (s.migration === 'rolls-back') return;
    const dest = this.hosts.find((h) => h.host !== s.host && h.status === 'enabled' && h.state === 'up');
    if (dest) s.host = dest.host;
  }
}

/** An UpgradeContext over the lab inventory (ctl-0, cmp-0) with a fake clock; `over` replaces any part. */
export function fakeContext(over: Partial<UpgradeContext> = {}): UpgradeContext & {
  readonly events: StackctlEvent[];
  readonly clock: { t: number };
} {
  const { deployPlan } = labPlan();
  const loaded = parseInventory('inventories/lab.yaml', labText, { roles: catalog.roleInfo });
  const events: StackctlEvent[] = [];
  const clock = { t: 1_000_000 };
  const work = (node: string, container: string) =>
    deployPlan.steps
      .flatMap((s) => s.nodes.filter((n) => n.node === node).flatMap((n) => n.containers))
      .find((c) => c.name === container);
  const ctx: UpgradeContext = {
    services: catalog.provides,
    inventory: loaded.inventory,
    inventoryFile: 'inventories/lab.yaml',
    registry: { scheme: 'http' },
    plan: {} as UpgradeContext['plan'], // NOTE: no handler under test reads the upgrade plan
    current: release,
    target: release,
    currentDeploy: deployPlan,
    targetDeploy: deployPlan,
    targetRendered: new Map(),
    connect: () => {
      throw new Error('no node in this test');
    },
    secret: () => undefined,
    cloud: {
      openstack: async () => {
        throw new Error('no cloud in this test');
      },
    },
    targetWork: work,
    currentWork: work,
    oneOff: async () => ({ code: 0, log: '' }),
    emit: (e) => void events.push(e),
    now: () => clock.t,
    sleep: async (ms) => {
      clock.t += ms;
      await Promise.resolve();
    },
    ...over,
  };
  return Object.assign(ctx, { events, clock });
}
