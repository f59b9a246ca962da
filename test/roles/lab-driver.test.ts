/**
 * The lab's slow-migrating fake virt driver (roles/templates/nova/stackctl_lab.py.hbs), rendered
 * as a deploy renders it and run by Python against a stand-in for its base class, Nova's
 * fake.FakeLiveMigrateDriver: a migration lasts the setting's seconds, an abort ends it at once
 * and rolls it back (also when it comes first), a force-complete ends it as completed, and two
 * instances' migrations keep their own state. The update lab test (`npm run test:e2e:upgrade`)
 * runs it inside the real nova-compute.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { tempDir } from '../helpers/cli.js';
import { catalog, planFromText } from '../helpers/plan.js';

const DRIVER = '/etc/stackctl/nova-compute/virt/stackctl_lab.py';

/** The base class's part the driver relies on: its constructor. */
const FAKE_BASE = `
class FakeLiveMigrateDriver:
    def __init__(self, virtapi, read_only=False):
        self.virtapi = virtapi
`;

/** Four migrations in threads; prints one line per instance: outcome and seconds taken. */
const SCRIPT = `
import threading, time
from nova.virt import stackctl_lab

d = stackctl_lab.SlowLiveMigrateDriver(None)
out = {}
class I:
    def __init__(self, uuid): self.uuid = uuid
def run(uuid):
    t0 = time.monotonic()
    d.live_migration(None, I(uuid), 'dest',
        lambda *a, **k: out.__setitem__(uuid, ('completed', time.monotonic() - t0)),
        lambda *a, **k: out.__setitem__(uuid, (k.get('migration_status'), time.monotonic() - t0)))
d.live_migration_abort(I('early'))  # before its migration starts
ts = [threading.Thread(target=run, args=(u,)) for u in ('plain', 'aborted', 'forced', 'early')]
for t in ts: t.start()
time.sleep(0.3)
d.live_migration_abort(I('aborted'))
d.live_migration_force_complete(I('forced'))
for t in ts: t.join()
for u in sorted(out): print(u, out[u][0], round(out[u][1], 1))
`;

describe("the lab's slow-migrating fake driver", () => {
  it('lasts nova_fake_migration_s per instance, aborts and force-completes one instance at a time', () => {
    const text = generateInventoryYaml({ controllers: 1, computes: 1 }).replace(
      'release: zed }',
      'release: zed, settings: { nova_compute_driver: fake.FakeDriver, nova_fake_migration_s: 2, ' +
        'nova_fake_driver_class: stackctl_lab.SlowLiveMigrateDriver } }',
    );
    const { rendered } = planFromText(text);
    expect(rendered.get('cmp-0')!.get('/etc/stackctl/nova-compute/nova.conf')).toContain(
      'compute_driver = stackctl_lab.SlowLiveMigrateDriver',
    );
    const driver = rendered.get('cmp-0')!.get(DRIVER);
    expect(driver, `${DRIVER} is not rendered for cmp-0`).toBeDefined();
    // mounted where Nova imports drivers from (nova.virt.<compute_driver>)
    const compute = catalog.services.get('nova-compute')!.containers.find((c) => c.name === 'nova_compute')!;
    expect(compute.volumes).toContain(`${DRIVER}:/usr/lib/python3/dist-packages/nova/virt/stackctl_lab.py:ro`);

    const dir = tempDir('stackctl-lab-driver-');
    mkdirSync(join(dir, 'nova', 'virt'), { recursive: true });
    writeFileSync(join(dir, 'nova', '__init__.py'), '');
    writeFileSync(join(dir, 'nova', 'virt', '__init__.py'), '');
    writeFileSync(join(dir, 'nova', 'virt', 'fake.py'), FAKE_BASE);
    writeFileSync(join(dir, 'nova', 'virt', 'stackctl_lab.py'), driver!);
    let out: string;
    try {
      out = execFileSync('python3', ['-c', SCRIPT], { cwd: dir, encoding: 'utf8', timeout: 30_000 });
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (e.code === 'ENOENT') throw new Error('python3 is missing: apt-get install python3');
      throw err;
    }
    const rows = Object.fromEntries(
      out
        .trim()
        .split('\n')
        .map((l) => l.split(' '))
        .map(([uuid, outcome, secs]) => [uuid, { outcome, secs: Number(secs) }]),
    );
    expect(Object.keys(rows).sort()).toEqual(['aborted', 'early', 'forced', 'plain']);
    expect(rows.plain!.outcome).toBe('completed');
    expect(rows.plain!.secs).toBeGreaterThanOrEqual(1.9);
    expect(rows.aborted!.outcome).toBe('cancelled');
    expect(rows.aborted!.secs).toBeLessThan(1.5);
    expect(rows.early!.outcome).toBe('cancelled');
    expect(rows.early!.secs).toBeLessThan(1.5);
    expect(rows.forced!.outcome).toBe('completed');
    expect(rows.forced!.secs).toBeLessThan(1.5);
  });
});
