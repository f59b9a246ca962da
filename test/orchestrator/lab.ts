/**
 * A container lab of its own for deploy tests: name, subnets and ports no
 * other test uses, brought up with `lab up`, images pushed to its registry,
 * removed with `lab down --purge`.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { expect, vi } from 'vitest';
import { loadAll } from '../../src/cli/context.js';
import { runDeploy, type DeployOpts } from '../../src/cli/deploy.js';
import { runLabDown, runLabUp } from '../../src/cli/lab-up.js';
import { pushImages } from '../../src/images/registry.js';
import { journalFileFor, parseJournal, type JournalRecord } from '../../src/orchestrator/journal.js';
import { LABEL } from '../../src/orchestrator/state.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { openPool, remoteFor, type Remote, type SshPool } from '../../src/remote/index.js';
import { tempDir } from '../helpers/cli.js';
import { dockerOrFail, release, testImages } from '../images/fixture.js';

export const root = join(import.meta.dirname, '..', '..');
const bin = join(root, 'dist', 'src', 'cli', 'bin.js');

/** Run a function with stdout swallowed (lab commands print there). */
export async function quiet<T>(f: () => Promise<T>): Promise<T> {
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  try {
    return await f();
  } finally {
    spy.mockRestore();
  }
}

/** A deploy test lab. `offset` keeps ports of two labs apart. */
export function deployLab(name: string, prefix: string, offset: number) {
  let engine: LocalEngine | undefined;
  let pool: SshPool | undefined;
  // made in up(): a suite filtered out never creates (or leaks) its folder
  let dir: string | undefined;
  const inventoryOf = (): string => join(dir!, `${name}.yaml`);
  const registry = `127.0.0.1:${18100 + offset + (process.pid % 200)}`;
  const labOpts = {
    kind: 'container',
    name,
    get inventory() {
      return inventoryOf();
    },
    topology: '1ctl-1comp',
    prefix,
    bmcPort: String(18600 + 2 * offset + (process.pid % 150)),
    registry,
    registryContainer: `stackctl-${name}-registry`,
    timeout: '60',
  };
  const labDeps = () => ({ engine: engine!, bin });
  const ctlAddress = `${prefix}.24.10`;
  const remotes = new Map<string, Remote>();
  const lab = {
    get inventory(): string {
      return inventoryOf();
    },
    prefix,
    /** ctl-0 over SSH, as deploy reaches it. */
    ctl(): Remote {
      return remoteFor(pool!, { name: 'ctl-0', address: ctlAddress });
    },
    /** lab up, push `images`, wait for ctl-0's nested dockerd. */
    async up(images: readonly string[]): Promise<void> {
      expect(existsSync(bin), 'the virtual BMC process runs the built stackctl: npm run build first').toBe(true);
      engine = await dockerOrFail();
      dir = tempDir(`stackctl-${name}-`);
      await testImages(engine, [...images, 'node', 'registry']);
      const t0 = Date.now();
      await quiet(() => runLabUp({ ...labOpts }, labDeps()));
      await pushImages(engine, release, registry, images, () => undefined);
      process.stderr.write(`lab up + push ${images.join(', ')}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
      pool = openPool(inventoryOf());
      for (let i = 0; i < 40; i++) {
        if (
          await lab
            .ctl()
            .docker.version()
            .then(
              () => true,
              () => false,
            )
        )
          break;
        await new Promise((r) => setTimeout(r, 250));
      }
    },
    async down(): Promise<void> {
      for (const r of remotes.values()) await r.close().catch(() => undefined);
      remotes.clear();
      await pool?.close();
      if (engine && dir) {
        const inventory = inventoryOf();
        await quiet(() => runLabDown({ kind: 'container', name, inventory, purge: true }, labDeps()));
      }
      if (dir) rmSync(dir, { recursive: true, force: true }); // the journal and event log are the deploy's, not the lab's
    },
    /** `stackctl deploy` in process; returns the report and what it printed. */
    async deploy(opts: Partial<DeployOpts> = {}) {
      let text = '';
      const report = await runDeploy(
        { inventory: inventoryOf(), ...opts },
        { write: (t) => void (text += t), tty: false },
      );
      return { report, text };
    },
    journal(): JournalRecord[] {
      return parseJournal(readFileSync(journalFileFor(inventoryOf()), 'utf8'));
    },
    /** Every node of the inventory, by name. */
    nodes(): string[] {
      return loadAll({ inventory: inventoryOf() }).loaded.inventory.nodes.map((n) => n.name);
    },
    /** Any node over SSH at its provisioning address (one Remote per node, closed by down()). */
    remote(name: string): Remote {
      let r = remotes.get(name);
      if (!r) {
        const address = loadAll({ inventory: inventoryOf() }).allocation.addresses.get(name)?.provisioning;
        if (!address) throw new Error(`no node ${name} with a provisioning address in ${inventoryOf()}`);
        remotes.set(name, (r = remoteFor(pool!, { name, address })));
      }
      return r;
    },
    /**
     * StartedAt of every container the deploy made, on every node, keyed
     * `node/container`: equal maps mean nothing was restarted.
     */
    async startedAt(): Promise<Map<string, string>> {
      const out = new Map<string, string>();
      for (const n of lab.nodes()) {
        const docker = lab.remote(n).docker;
        for (const c of await docker.listContainers({ labels: { [LABEL.cloud]: name } })) {
          const info = await docker.inspectContainer(c.name);
          if (info) out.set(`${n}/${c.name}`, info.state.startedAt);
        }
      }
      return new Map([...out].sort(([a], [b]) => a.localeCompare(b)));
    },
  };
  return lab;
}
