/**
 * A container lab of its own for deploy tests: name, subnets and ports no
 * other test uses, brought up with `lab up`, images pushed to its registry,
 * removed with `lab down --purge`.
 */
import { appendFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, vi } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { loadAll } from '../../src/cli/context.js';
import { runDeploy, type DeployOpts } from '../../src/cli/deploy.js';
import { runLabDown, runLabUp } from '../../src/cli/lab-up.js';
import { pushImages } from '../../src/images/registry.js';
import { journalFileFor, parseJournal, type JournalRecord } from '../../src/orchestrator/journal.js';
import { LABEL } from '../../src/orchestrator/state.js';
import type { LocalEngine } from '../../src/remote/docker-local.js';
import { openPool, remoteFor, type ContainerEngine, type Remote, type SshPool } from '../../src/remote/index.js';
import { runCli, tempDir } from '../helpers/cli.js';
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

/** Every image of the release the whole cloud runs, for `lab.up()` of a whole-cloud test. */
export const CLOUD_IMAGES = [
  'haproxy',
  'keepalived',
  'mariadb',
  'memcached',
  'rabbitmq',
  'openvswitch',
  'ovn-central',
  'ovn-controller',
  'keystone',
  'glance-api',
  'placement-api',
  'neutron-server',
  'neutron-ovn-metadata-agent',
  'nova-api',
  'nova-conductor',
  'nova-scheduler',
  'nova-compute',
] as const;

/** Optional choices of a deploy test lab. */
/** The rows of a `deploy --dry-run` table that predict a change, each on one line. */
export const dueRows = (dryRun: string): string[] =>
  dryRun
    .split('\n')
    .filter((l) => /^\d\s/.test(l) && !/\b(unchanged|done)\b/.test(l))
    .map((l) => l.trim().replace(/\s+/g, ' '));

/**
 * Keystone's last `tail` log lines (uwsgi logs each request it answered), MariaDB's process list
 * and the Python stack of every busy Keystone thread (uwsgi's tracebacker), from a controller's
 * Docker: what a client that got no answer was waiting for.
 */
export async function keystoneState(docker: ContainerEngine, tail = 20): Promise<string> {
  const log = await docker.logs('keystone', { tail }).then(
    (l) => (l.stdout + l.stderr).trim(),
    (e: Error) => `no log: ${e.message}`,
  );
  const processes = await docker
    .exec(
      'mariadb',
      ['mariadb', '--defaults-extra-file=/etc/mysql/mariadb.conf.d/stackctl/client.cnf', '-e', 'SHOW PROCESSLIST'],
      { timeoutMs: 10_000 },
    )
    .then(
      (r) => (r.stdout + r.stderr).trim(),
      (e: Error) => `not listed: ${e.message}`,
    );
  // what each uwsgi worker's busy threads are doing (the tracebacker sockets of uwsgi.ini)
  const threads = await docker
    .exec(
      'keystone',
      [
        'sh',
        '-c',
        'for s in /var/lib/keystone/tracebacker*; do echo "$s:"; timeout 5 uwsgi_python3 --connect-and-read "$s" 2>&1 | grep -v "^\\[uwsgi\\]"; done',
      ],
      { timeoutMs: 15_000 },
    )
    .then(
      (r) => (r.stdout + r.stderr).trim(),
      (e: Error) => `not read: ${e.message}`,
    );
  return `keystone's last log lines:\n${log}\nMariaDB's processes:\n${processes}\nkeystone's busy threads:\n${threads}`;
}

export interface DeployLabOptions {
  /** Lab topology preset (default 1ctl-1comp). */
  readonly topology?: string;
  /** Registry port on 127.0.0.1 (default: derived from `offset` and the pid). */
  readonly registryPort?: number;
  /** First virtual BMC port (default: derived from `offset` and the pid). */
  readonly bmcPort?: number;
  /**
   * Service secrets written into the secrets file once `lab up` has generated it, as an operator
   * who chooses some passwords would (e.g. ones with quotes, `#`, `$` and spaces).
   */
  readonly secrets?: Readonly<Record<string, string>>;
  /** What the computes run (`lab up --compute`; default Nova's fake driver). */
  readonly compute?: 'fake' | 'libvirt';
}

/** Seconds since `t0`, one decimal. */
const since = (t0: number): string => ((Date.now() - t0) / 1000).toFixed(1);

/** A deploy test lab. `offset` keeps ports of two labs apart. */
export function deployLab(name: string, prefix: string, offset: number, options: DeployLabOptions = {}) {
  let engine: LocalEngine | undefined;
  let pool: SshPool | undefined;
  // made in up(): a suite filtered out never creates (or leaks) its folder
  let dir: string | undefined;
  const inventoryOf = (): string => join(dir!, `${name}.yaml`);
  const registry = `127.0.0.1:${options.registryPort ?? 18100 + offset + (process.pid % 200)}`;
  const labOpts = {
    kind: 'container',
    name,
    get inventory() {
      return inventoryOf();
    },
    topology: options.topology ?? '1ctl-1comp',
    prefix,
    bmcPort: options.bmcPort ?? 18600 + 2 * offset + (process.pid % 150),
    registry,
    registryContainer: `stackctl-${name}-registry`,
    timeout: 60,
    ...(options.compute ? { compute: options.compute } : {}),
  };
  const labDeps = () => ({ engine: engine!, bin });
  const ctlAddress = `${prefix}.24.10`;
  /** The internal_api VIP of the lab's inventory (keepalived's, HAProxy's frontends behind it). */
  const internalVip = `${prefix}.20.250`;
  /** Seconds taken by `lab up` and by the image push of the last up(). */
  const timings = { labUpS: 0, pushS: 0 };
  const remotes = new Map<string, Remote>();
  const lab = {
    timings,
    get inventory(): string {
      return inventoryOf();
    },
    prefix,
    internalVip,
    /** ctl-0 over SSH, as deploy reaches it. */
    ctl(): Remote {
      return remoteFor(pool!, { name: 'ctl-0', address: ctlAddress });
    },
    /** Stop a node's container, as a power loss would (`docker stop` of the node). */
    async stopNode(node: string): Promise<void> {
      await engine!.stop(`stackctl-${name}-${node}`, 10);
    },
    /** lab up, push `images`, wait for every node's nested dockerd. */
    async up(images: readonly string[]): Promise<void> {
      expect(existsSync(bin), 'the virtual BMC process runs the built stackctl: npm run build first').toBe(true);
      engine = await dockerOrFail();
      dir = tempDir(`stackctl-${name}-`);
      await testImages(engine, [...images, 'node', 'registry']);
      const t0 = Date.now();
      await quiet(() => runLabUp({ ...labOpts }, labDeps()));
      if (options.secrets) chooseSecrets(inventoryOf().replace(/\.yaml$/, '.secrets.yaml'), options.secrets);
      timings.labUpS = Number(since(t0));
      const t1 = Date.now();
      await pushImages(engine, release, registry, images, () => undefined);
      timings.pushS = Number(since(t1));
      process.stderr.write(`lab up ${timings.labUpS} s, push ${images.join(', ')} ${timings.pushS} s\n`);
      pool = openPool(inventoryOf());
      const nodes = loadAll({ inventory: inventoryOf() }).loaded.inventory.nodes.map((n) => n.name);
      // A loaded machine can take a while to start the nested dockerds: a deploy must not meet a missing socket.
      for (const node of nodes) {
        let ready = false;
        for (let i = 0; i < 240 && !ready; i++) {
          ready = await lab
            .remote(node)
            .docker.version()
            .then(
              () => true,
              () => false,
            );
          if (!ready) await new Promise((r) => setTimeout(r, 250));
        }
        expect(ready, `${node}: its dockerd did not answer within 60 s`).toBe(true);
      }
    },
    /** `lab up` again on the lab's inventory as it is now (re-entrant: it brings what exists in line). */
    async upAgain(): Promise<string> {
      const lines: string[] = [];
      const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => lines.push(String(chunk)) > 0);
      try {
        await runLabUp({ ...labOpts }, labDeps());
      } finally {
        spy.mockRestore();
      }
      return lines.join('');
    },
    /**
     * Drop the cached SSH connections and open a fresh pool: after a node was powered off and on,
     * its old connection is dead and a call over it would wait for the keep-alive to notice.
     */
    async reconnect(): Promise<void> {
      for (const r of remotes.values()) await r.close().catch(() => undefined);
      remotes.clear();
      await pool?.close().catch(() => undefined);
      pool = openPool(inventoryOf());
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
    /**
     * down(), unless STACKCTL_KEEP_LAB keeps the lab for a look: =1 a failed run's, =all any run's
     * (remove it with `stackctl lab down --purge`).
     */
    async downUnlessKept(failed: boolean): Promise<void> {
      const keep = process.env['STACKCTL_KEEP_LAB'];
      if ((keep === '1' && failed) || keep === 'all') {
        process.stderr.write(`lab kept: ${inventoryOf()}\n`);
        return;
      }
      await lab.down();
    },
    /**
     * TLS for the next deploy: `section` (a `tls:` line) appended to the inventory and the cloud's
     * CA and certificates issued (`certs generate`); returns the CA file.
     */
    async tlsOn(section: string): Promise<string> {
      appendFileSync(inventoryOf(), section);
      const g = await runCli('certs', 'generate', '-i', inventoryOf());
      expect(g.code, g.stderr).toBe(0);
      return inventoryOf().replace(/\.yaml$/, '.certs/ca.pem');
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
    /** The node among `among` that holds the internal_api VIP (the keepalived master), if any. */
    async vipHolder(among: readonly string[]): Promise<string | undefined> {
      for (const n of among) {
        const r = await lab
          .remote(n)
          .exec(['ip', '-o', '-4', 'addr', 'show'], { timeoutMs: 10_000 })
          .catch(() => undefined);
        if (r?.stdout.includes(`${internalVip}/32`)) return n;
      }
      return undefined;
    },
    /**
     * `openstack token issue` as the cloud's admin through the internal_api VIP, in the keystone
     * container of `node`; tried up to `tries` times, a second apart. The last answer (or error).
     */
    async issueToken(node: string, tries: number): Promise<{ code: number; stdout: string; stderr: string }> {
      const password = loadAll({ inventory: inventoryOf() }).secrets!.services.get('keystone_admin_password')!;
      let last = { code: -1, stdout: '', stderr: 'not tried' };
      for (let i = 0; i < tries; i++) {
        last = await lab
          .remote(node)
          .exec(
            [
              'docker',
              'exec',
              '-e',
              'OS_PASSWORD',
              'keystone',
              'openstack',
              `--os-auth-url=http://${internalVip}:5000/v3`,
              '--os-username=admin',
              '--os-project-name=admin',
              '--os-user-domain-name=Default',
              '--os-project-domain-name=Default',
              '--os-identity-api-version=3',
              'token',
              'issue',
              '-f',
              'value',
              '-c',
              'expires',
            ],
            { timeoutMs: 60_000, env: { OS_PASSWORD: password } },
          )
          .catch((e: unknown) => ({ code: -1, stdout: '', stderr: String(e) }));
        if (last.code === 0) return last;
        await new Promise((r) => setTimeout(r, 1000));
      }
      return last;
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

/** Replace service secrets of a secrets file (kept at mode 0600); every name must exist there. */
function chooseSecrets(file: string, chosen: Readonly<Record<string, string>>): void {
  const doc = parseYaml(readFileSync(file, 'utf8')) as { services: Record<string, string> };
  for (const [name, value] of Object.entries(chosen)) {
    expect(doc.services[name], `secret ${name} in ${file}`).toBeDefined();
    doc.services[name] = value;
  }
  writeFileSync(file, stringifyYaml(doc), { mode: 0o600 });
}

/** Whether a suite (what afterAll is given) or one of its tests failed. */
export function suiteFailed(suite: {
  readonly tasks: readonly { readonly result?: { readonly state?: string } }[];
  readonly result?: { readonly state?: string };
}): boolean {
  return suite.tasks.some((t) => t.result?.state === 'fail') || suite.result?.state === 'fail';
}
