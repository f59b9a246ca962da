/**
 * A container that runs users' workloads (`workloads:` in its service file: nova_libvirt, whose
 * QEMU runs the node's guests) is not recreated while any run, through executeDeploy against fake
 * nodes: the run fails on that node with E_WORKLOADS_RUNNING naming them and how to move them,
 * and stops nothing; --allow-workload-stop, an empty list or a stopped container let it through;
 * a list that cannot be read refuses too.
 */
import { describe, expect, it } from 'vitest';
import type { NodeAccess } from '../../src/orchestrator/context.js';
import { executeDeploy, predict } from '../../src/orchestrator/executor.js';
import type { DeployPlan } from '../../src/orchestrator/planner.js';
import type { ContainerEngine } from '../../src/remote/index.js';
import type { ContainerExecResult } from '../../src/remote/docker.js';
import { containerInfo, fakeDeps, fakeNode, isHealthcheck, servicePlan } from './fake-nodes.js';

const service = servicePlan('nova-compute');
const { worksOn, configsOn } = service;
/** The plan without its host preparation (KVM modules, devices: test/orchestrator/host.test.ts). */
const plan: DeployPlan = {
  ...service.plan,
  steps: service.plan.steps.map((st) => ({ ...st, nodes: st.nodes.map((n) => ({ ...n, host: [] })) })),
};
const LIST = 'virsh -c qemu:///system list --name';

/**
 * cmp-0 runs nova-compute's containers, nova_libvirt with an older hash (so the plan recreates it)
 * and `libvirt` for its state; `list` answers its workload list.
 */
function compute(libvirt: 'running' | 'exited', list: ContainerExecResult) {
  const log: string[] = [];
  const lists: string[] = [];
  const access = (node: string): NodeAccess => {
    const docker: Partial<ContainerEngine> = {
      inspectContainer: async (name) => {
        const w = worksOn(node).find((x) => x.name === name);
        if (!w) return undefined;
        if (name !== 'nova_libvirt' || log.includes(`${node} create ${name}`))
          return containerInfo(w, { status: 'running', health: 'healthy' });
        return containerInfo({ ...w, hash: 'an-older-hash' }, { status: libvirt });
      },
      imageExists: async () => true,
      exec: async (name, argv) => {
        if (argv.join(' ') === LIST) {
          lists.push(`${node} ${name}`);
          return list;
        }
        return { code: isHealthcheck(worksOn, node, name, argv) ? 0 : 1, stdout: '', stderr: '' };
      },
      stopContainer: async (name) => void log.push(`${node} stop ${name}`),
      removeContainer: async (name) => void log.push(`${node} remove ${name}`),
      createContainer: async (spec) => (log.push(`${node} create ${spec.name}`), spec.name),
      startContainer: async (name) => void log.push(`${node} start ${name}`),
      logs: async () => ({ stdout: '', stderr: '' }),
    };
    return fakeNode(node, configsOn, docker);
  };
  return { log, lists, deps: fakeDeps(access) };
}

const recreated = [
  'cmp-0 stop nova_libvirt',
  'cmp-0 remove nova_libvirt',
  'cmp-0 create nova_libvirt',
  'cmp-0 start nova_libvirt',
];

describe("a container that runs users' workloads (nova_libvirt's guests)", () => {
  it('declares them in nova-compute: the guests libvirt lists', () => {
    const w = worksOn('cmp-0').find((x) => x.name === 'nova_libvirt')!;
    expect(w.definition.workloads).toEqual({ what: 'guests', list: LIST.split(' ') });
  });

  it('is not recreated while guests run: E_WORKLOADS_RUNNING names them and how to move them, nothing stopped', async () => {
    const c = compute('running', { code: 0, stdout: 'instance-00000001\ninstance-00000002\n', stderr: '' });
    const r = await executeDeploy(plan, c.deps);
    expect(r.ok).toBe(false);
    expect(r.failures.map((f) => [f.node, f.code, f.path])).toEqual([
      ['cmp-0', 'E_WORKLOADS_RUNNING', 'step 4/cmp-0/nova_libvirt/workloads'],
    ]);
    const f = r.failures[0]!;
    expect(f.message).toBe(
      'cmp-0: nova_libvirt would be recreated (inputs label missing), stopping the 2 guests it runs: instance-00000001, instance-00000002',
    );
    expect(f.hint).toContain('stackctl nodes maintenance on --node cmp-0');
    expect(f.hint).toContain('--allow-workload-stop');
    expect(c.log).toEqual([]);
    // asked when the run observed the node, and again before any of the node's files went up
    expect(c.lists).toEqual(['cmp-0 nova_libvirt', 'cmp-0 nova_libvirt']);
  });

  it("refuses before the node's new files go up: a guest started later would read them from the folder nova_libvirt mounts", async () => {
    const file = configsOn('cmp-0').find((x) => x.dest.endsWith('/qemu-tcg.conf'))!;
    expect(file, "nova_libvirt's QEMU wrapper setting").toBeDefined();
    const withStaleFile = () => {
      const c = compute('running', { code: 0, stdout: 'instance-00000001\n', stderr: '' });
      const uploads: string[] = [];
      const connect = (node: string): NodeAccess => {
        const a = c.deps.connect(node) as NodeAccess;
        return {
          ...a,
          // the node holds an older qemu-tcg.conf
          exec: async (command, opts) => {
            const r = await a.exec(command, opts);
            return {
              ...r,
              stdout: r.stdout.replace(`${file.sha256}  ${file.dest}`, `${'0'.repeat(64)}  ${file.dest}`),
            };
          },
          files: { ...a.files, upload: async (_s, dest) => uploads.push(`${node} ${dest}`) },
        };
      };
      const rendered = new Map([['cmp-0', new Map([[file.dest, 'tb-cache 64\n']])]]);
      return { c, uploads, deps: { ...c.deps, connect, rendered } };
    };
    const refused = withStaleFile();
    const r = await executeDeploy(plan, refused.deps);
    expect(r.failures.map((f) => [f.node, f.code, f.path])).toEqual([
      ['cmp-0', 'E_WORKLOADS_RUNNING', 'step 4/cmp-0/nova_libvirt/workloads'],
    ]);
    expect(refused.uploads).toEqual([]);
    expect(refused.c.log).toEqual([]);
    // allowed: the file goes up, then the container is recreated
    const allowed = withStaleFile();
    const ok = await executeDeploy(plan, allowed.deps, { allowWorkloadStop: true });
    expect(ok.ok, JSON.stringify(ok.failures)).toBe(true);
    expect(allowed.uploads).toEqual([`cmp-0 ${file.dest}`]);
    expect(allowed.c.log).toEqual(recreated);
  });

  it('shows the refusal coming in the dry run', async () => {
    const c = compute('running', { code: 0, stdout: 'instance-00000001\n', stderr: '' });
    const p = await predict(plan, c.deps);
    expect(p.rows.filter((r) => r.name === 'nova_libvirt').map((r) => [r.node, r.action, r.detail])).toEqual([
      ['cmp-0', 'recreate', 'inputs label missing; refused, stopping the 1 guests it runs: instance-00000001'],
    ]);
    expect(c.log).toEqual([]);
    // with --allow-workload-stop, the dry run says what will stop
    const allowed = await predict(plan, c.deps, undefined, { allowWorkloadStop: true });
    expect(allowed.rows.filter((r) => r.name === 'nova_libvirt').map((r) => r.detail)).toEqual([
      'inputs label missing; allowed (--allow-workload-stop), stopping the 1 guests it runs: instance-00000001',
    ]);
  });

  it('is recreated with --allow-workload-stop', async () => {
    const c = compute('running', { code: 0, stdout: 'instance-00000001\n', stderr: '' });
    const r = await executeDeploy(plan, c.deps, { allowWorkloadStop: true });
    expect(r.ok, JSON.stringify(r.failures)).toBe(true);
    expect(c.log).toEqual(recreated);
  });

  it('is recreated when none runs, or when it is not running (it holds none)', async () => {
    const empty = compute('running', { code: 0, stdout: '\n', stderr: '' });
    expect((await executeDeploy(plan, empty.deps)).ok).toBe(true);
    expect(empty.log).toEqual(recreated);
    // observed, before the node's files, and once more right before the stop
    expect(empty.lists).toEqual(['cmp-0 nova_libvirt', 'cmp-0 nova_libvirt', 'cmp-0 nova_libvirt']);
    const stopped = compute('exited', { code: 0, stdout: 'instance-00000001\n', stderr: '' });
    expect((await executeDeploy(plan, stopped.deps)).ok).toBe(true);
    expect(stopped.lists).toEqual([]); // not running: not asked
    expect(stopped.log).toEqual(recreated);
  });

  it('is not recreated when the list cannot be read', async () => {
    const c = compute('running', { code: 1, stdout: '', stderr: 'error: failed to connect to the hypervisor' });
    const r = await executeDeploy(plan, c.deps);
    expect(r.failures.map((f) => [f.code, f.message])).toEqual([
      [
        'E_WORKLOADS_RUNNING',
        `cmp-0: nova_libvirt would be recreated (inputs label missing), and its guests cannot be listed (${LIST}: exit 1, error: failed to connect to the hypervisor)`,
      ],
    ]);
    expect(c.log).toEqual([]);
  });
});
