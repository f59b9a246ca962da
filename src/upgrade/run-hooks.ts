/**
 * Running the `hook` actions of a plan: a built-in hook dispatches to its
 * implementation (evacuate.ts); an inventory hook runs its command, argv as
 * given and no shell, once on the deploy host or on each node of the batch,
 * with STACKCTL_HOOK, STACKCTL_HOOK_POINT, STACKCTL_BATCH_NODES and
 * STACKCTL_INVENTORY in its environment and the hook's timeout_s as deadline.
 */
import { spawn } from 'node:child_process';
import { mapLimit } from '../core/concurrency.js';
import { InputError, RemoteError, StackctlError, messageOf } from '../core/errors.js';
import type { ActionHandler, UpgradeContext } from './context.js';
import { novaEnable, novaEvacuate, novaUp, type EvacuationOptions } from './evacuate.js';
import { BUILTIN_HOOKS, type BuiltinHook } from './hooks.js';
import type { UpgradeAction } from './model.js';

/** A `hook` action of the plan. */
export type HookAction = Extract<UpgradeAction, { kind: 'hook' }>;

/** Knobs of the hook runner. */
export const HOOK_DEFAULTS = {
  /** Deadline of a hook whose inventory entry has no timeout_s (the schema's default). */
  timeoutS: 600,
  /** After the deadline: TERM, then KILL this much later. */
  killGraceMs: 5_000,
  /** Characters of a failed hook's output quoted in the error. */
  outputTail: 2_000,
  /** Nodes a `run_on: nodes` hook runs on at once. */
  concurrency: 16,
} as const;

/** The inventory's `upgrade.evacuation` knobs (seconds) as the hook's options (milliseconds). */
export function evacuationOptions(
  e:
    | {
        concurrency?: number;
        timeout_s?: number;
        poll_s?: number;
        abort_grace_s?: number;
        watch_workloads?: boolean;
        workload_max_gap_s?: number;
      }
    | undefined,
): EvacuationOptions {
  return {
    ...(e?.watch_workloads !== undefined ? { watchWorkloads: e.watch_workloads } : {}),
    ...(e?.workload_max_gap_s !== undefined ? { workloadMaxGapMs: e.workload_max_gap_s * 1000 } : {}),
    ...(e?.concurrency !== undefined ? { concurrency: e.concurrency } : {}),
    ...(e?.timeout_s !== undefined ? { timeoutMs: e.timeout_s * 1000 } : {}),
    ...(e?.poll_s !== undefined ? { pollMs: e.poll_s * 1000 } : {}),
    ...(e?.abort_grace_s !== undefined ? { abortGraceMs: e.abort_grace_s * 1000 } : {}),
  };
}

/** The built-in hooks, by name: each takes the batch's hosts (a new built-in fails to compile until it is here). */
export const BUILTIN_HOOK_RUNNERS: {
  readonly [K in BuiltinHook]: (hosts: readonly string[], ctx: UpgradeContext) => Promise<string>;
} = {
  'nova-evacuate': (hosts, ctx) => novaEvacuate(hosts, ctx, evacuationOptions(ctx.inventory.upgrade?.evacuation)),
  'nova-up': (hosts, ctx) => novaUp(hosts, ctx, evacuationOptions(ctx.inventory.upgrade?.evacuation)),
  'nova-enable': (hosts, ctx) => novaEnable(hosts, ctx),
};

/** The environment a hook sees (never a secret). */
export function hookEnv(action: HookAction, inventoryFile: string): Record<string, string> {
  return {
    STACKCTL_HOOK: action.hook,
    STACKCTL_HOOK_POINT: action.point,
    STACKCTL_BATCH_NODES: action.nodes.join(' '),
    STACKCTL_INVENTORY: inventoryFile,
  };
}

const tail = (s: string, n: number = HOOK_DEFAULTS.outputTail): string => {
  const t = s.trim();
  return t.length > n ? '…' + t.slice(-n) : t;
};

/** What a local run gave. */
export interface LocalRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly timedOut: boolean;
  /** stdout and stderr interleaved, the end only. */
  readonly output: string;
}

/**
 * Spawn argv on this machine without a shell, its process group killed at the
 * deadline (TERM, then KILL): a script's children must not outlive it.
 */
export function runLocal(
  argv: readonly string[],
  env: Readonly<Record<string, string>>,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<LocalRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      shell: false,
    });
    let output = '';
    const keep = HOOK_DEFAULTS.outputTail * 4;
    const take = (b: Buffer): void => {
      output += b.toString('utf8');
      if (output.length > keep) output = output.slice(-keep);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    let timedOut = false;
    let killer: NodeJS.Timeout | undefined;
    const killGroup = (sig: NodeJS.Signals): void => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig);
      } catch {
        // already gone
      }
    };
    const stop = (): void => {
      killGroup('SIGTERM');
      killer = setTimeout(() => killGroup('SIGKILL'), HOOK_DEFAULTS.killGraceMs);
    };
    const deadline = setTimeout(() => {
      timedOut = true;
      stop();
    }, timeoutMs);
    signal?.addEventListener('abort', stop, { once: true });
    child.on('error', (err) => {
      clearTimeout(deadline);
      clearTimeout(killer);
      reject(err);
    });
    child.on('close', (code, sig) => {
      clearTimeout(deadline);
      clearTimeout(killer);
      signal?.removeEventListener('abort', stop);
      resolve({ code, signal: sig, timedOut, output });
    });
  });
}

function hookFailed(action: HookAction, where: string, why: string, output: string): RemoteError {
  return new RemoteError(
    'E_HOOK_FAILED',
    `hook ${action.hook} (${action.point}) failed on ${where}: ${why}${output.trim() ? `: ${tail(output)}` : ''}`,
    {
      hint: `Fix the hook's command (upgrade.hooks.${action.hook} of the inventory), then resume the upgrade.`,
      details: { hook: action.hook, point: action.point, where, command: action.command ?? [] },
    },
  );
}

async function runInventoryHook(action: HookAction, ctx: UpgradeContext): Promise<string> {
  const def = ctx.inventory.upgrade?.hooks?.[action.hook];
  const command = action.command ?? def?.command;
  if (!command?.length) {
    throw new InputError('E_UNKNOWN_HOOK', `hook ${action.hook} has no command in ${ctx.inventoryFile}`, {
      hint: `Define upgrade.hooks.${action.hook}.command in the inventory.`,
      details: { hook: action.hook },
    });
  }
  const timeoutS = def?.timeout_s ?? HOOK_DEFAULTS.timeoutS;
  const env = hookEnv(action, ctx.inventoryFile);
  const t0 = ctx.now();
  if (action.runOn === 'deploy-host') {
    let r: LocalRun;
    try {
      r = await runLocal(command, env, timeoutS * 1000, ctx.signal);
    } catch (err) {
      throw hookFailed(action, 'the deploy host', `cannot start ${command[0]}: ${messageOf(err)}`, '');
    }
    if (r.timedOut) throw hookFailed(action, 'the deploy host', `no end within ${timeoutS} s (killed)`, r.output);
    if (r.code !== 0)
      throw hookFailed(
        action,
        'the deploy host',
        r.code === null ? `killed by ${r.signal}` : `exit ${r.code}`,
        r.output,
      );
    return `${action.hook}: done on the deploy host in ${((ctx.now() - t0) / 1000).toFixed(1)} s`;
  }
  const results = await mapLimit(action.nodes, HOOK_DEFAULTS.concurrency, async (node) => {
    try {
      // NOTE: the variables go through the exec environment (ExecOptions.env), not argv.
      const r = await ctx.connect(node).exec(command, { timeoutMs: timeoutS * 1000, env });
      return r.code === 0 ? { node } : { node, why: `exit ${r.code}`, output: `${r.stdout}\n${r.stderr}` };
    } catch (err) {
      return { node, why: `${err instanceof StackctlError ? err.code + ': ' : ''}${messageOf(err)}`, output: '' };
    }
  });
  const failed = results.filter((r) => r.why !== undefined);
  if (failed.length) {
    const first = failed[0]!;
    const err = hookFailed(
      action,
      failed.map((f) => f.node).join(', '),
      failed.map((f) => `${f.node}: ${f.why}`).join('; '),
      first.output ?? '',
    );
    throw err;
  }
  return `${action.hook}: done on ${action.nodes.length} node(s)`;
}

/** Runs a `hook` action: built-in by name, inventory hooks by their command. */
export const hookHandler: ActionHandler<HookAction> = async (action, ctx) => {
  if (action.source === 'built-in') {
    if (!(action.hook in BUILTIN_HOOKS)) {
      throw new InputError('E_UNKNOWN_HOOK', `hook ${action.hook} is marked built-in but stackctl has no such hook`, {
        hint: `Built-in hooks: ${Object.keys(BUILTIN_HOOKS).join(', ')}.`,
        details: { hook: action.hook },
      });
    }
    return BUILTIN_HOOK_RUNNERS[action.hook as BuiltinHook](action.nodes, ctx);
  }
  return runInventoryHook(action, ctx);
};
