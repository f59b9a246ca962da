/**
 * `stackctl nodes trust`: fetch each node's SSH host key, show its SHA256
 * fingerprint, and record it in `<inventory>.known_hosts` only when the
 * operator says so (`--yes`, or "y" at a terminal prompt). A key that differs
 * from the recorded one is never taken on that: only
 * `--replace-changed-key NODE` replaces it, node by node; otherwise it is an
 * error showing both fingerprints and that flag. Also creates stackctl's SSH
 * key `<inventory>.ssh/id_ed25519` when it is missing.
 */
import type { Command } from 'commander';
import { RemoteError, UsageError } from '../core/errors.js';
import {
  DEFAULT_SSH_USER,
  HostKeyVerdict,
  ensureClientKey,
  fetchHostKey as defaultFetchHostKey,
  hostKeyError,
  knownHostName,
  recordHostKey,
  recordedKeys,
  sshFilesFor,
  type PublicKey,
  type SshTarget,
} from '../remote/index.js';
import { askTerminal, onTerminal, type ConfirmDeps } from './confirm.js';
import { loadAll } from './context.js';
import { fanOut, setFailureExit, type NodeOutcome } from './fanout.js';
import { withRunLock } from './run-lock.js';
import { RANGE, numberOption, secondsOption } from './numbers.js';
import { inventoryOptions, type CommonOpts } from './options.js';
import { out, table } from './output.js';
import { selectNodes, type SelectOptions } from './targets.js';

/** The network whose address stackctl uses to reach a node by SSH. */
export const SSH_NETWORK = 'provisioning';

/** Where a node's offered key stands against the known_hosts file. */
export const TrustStatus = {
  /** Not recorded yet. */
  NEW: 'new',
  /** Already recorded: nothing to do. */
  KNOWN: 'known',
  /** A different key is recorded: reinstalled node, or someone in between. Replaced only with --replace-changed-key. */
  CHANGED: 'changed',
  /** The node could not be asked. */
  FAILED: 'failed',
} as const;
export type TrustStatus = (typeof TrustStatus)[keyof typeof TrustStatus];

/** One node's line of the result. */
interface TrustResult extends NodeOutcome {
  address: string;
  port: number;
  status: TrustStatus;
  keyType?: string;
  fingerprint?: string;
  /** Fingerprints recorded before, when the key changed. */
  previous?: string[];
  recorded: boolean;
  /** The key the node offered (not printed). */
  offered?: PublicKey;
}

type TrustOpts = CommonOpts &
  SelectOptions & {
    yes?: boolean;
    replaceChangedKey?: string[];
    json?: boolean;
    sshPort: number;
    sshUser: string;
    /** Seconds. */
    timeout: number;
    concurrency: number;
  };

/** Side effects of the command, injectable for tests (CONVENTIONS.md 8). */
export interface TrustDeps extends ConfirmDeps {
  /** Reads a host's key without logging in. */
  readonly fetchHostKey?: (t: SshTarget, o: { timeoutMs: number }) => Promise<PublicKey>;
  /** Where messages for the operator go. */
  readonly err?: (text: string) => void;
}

/** Add `trust` to the `nodes` command group. */
export function registerTrust(nodes: Command, deps: TrustDeps = {}): void {
  const fetchKey = deps.fetchHostKey ?? ((t, o) => defaultFetchHostKey(t, o));
  const confirm = deps.confirm ?? askTerminal;
  const interactive = deps.interactive ?? onTerminal;
  const say = deps.err ?? ((text: string) => void process.stderr.write(text));
  inventoryOptions(nodes.command('trust'))
    .description(
      "show each node's SSH host key fingerprint and, with --yes, record it in <inventory>.known_hosts (also creates stackctl's SSH key <inventory>.ssh/id_ed25519)",
    )
    .option('--node <name...>', 'these nodes (repeatable)')
    .option('--role <role>', 'every node of this role')
    .option('--all', 'every node of the inventory')
    .option('--yes', 'record the new keys shown without asking (never replaces a changed key)')
    .option(
      '--replace-changed-key <name...>',
      "replace this node's recorded key by the one it offers now (repeatable; compare the new fingerprint with the node's console first)",
    )
    .addOption(numberOption('--ssh-port <port>', 'SSH port of the nodes', RANGE.port, 22))
    .option('--ssh-user <user>', 'SSH user (for messages; no login happens)', DEFAULT_SSH_USER)
    .addOption(secondsOption('--timeout', 'connect timeout per node', { min: 1, max: 600 }, 10))
    .addOption(numberOption('--concurrency <n>', 'nodes asked at once', RANGE.concurrency, 32))
    .option('--json', 'results as JSON on stdout')
    // the key is always shown; recording it (and creating stackctl's SSH key) writes state: under the run lock
    .action((opts: TrustOpts) =>
      withRunLock(opts.inventory, async () => {
        const port = opts.sshPort;
        const timeoutMs = opts.timeout * 1000;
        const all = loadAll(opts);
        const names = selectNodes(all, opts);
        const replace = new Set(opts.replaceChangedKey ?? []);
        const strays = [...replace].filter((n) => !names.includes(n));
        if (strays.length) {
          throw new UsageError(
            'E_NODE_SELECTION',
            `--replace-changed-key names ${strays.map((n) => `'${n}'`).join(', ')}, not among the nodes selected`,
            { hint: `Select the node too, e.g. --node ${strays[0]} --replace-changed-key ${strays[0]}.` },
          );
        }
        const files = sshFilesFor(all.inventoryFile);
        const key = ensureClientKey(files.privateKeyFile);
        if (key.created) {
          say(
            `created stackctl's SSH key ${files.privateKeyFile} (mode 0600); add ${files.privateKeyFile}.pub to ~${opts.sshUser}/.ssh/authorized_keys on every node\n`,
          );
        }
        // every node is asked (a failure is its row); nothing is recorded before all are shown
        const results = await fanOut(
          {
            command: 'trust',
            outcomes: names.map((name): TrustResult => ({
              node: name,
              ok: false,
              address: all.allocation.addresses.get(name)?.[SSH_NETWORK] ?? '',
              port,
              status: TrustStatus.FAILED,
              recorded: false,
            })),
            concurrency: opts.concurrency,
            visible: false,
          },
          async (r) => {
            if (!r.address) {
              throw new RemoteError('E_NO_SSH_ADDRESS', `${r.node} has no ${SSH_NETWORK} address`, {
                hint: `Give the node a NIC on the ${SSH_NETWORK} network; stackctl reaches nodes by SSH there.`,
              });
            }
            const offered = await fetchKey({ node: r.node, host: r.address, port, user: opts.sshUser }, { timeoutMs });
            const before = recordedKeys(files.knownHostsFile, r.address, port);
            r.keyType = offered.type;
            r.fingerprint = offered.fingerprint;
            r.offered = offered;
            if (before.some((k) => k.blob.equals(offered.blob))) r.status = TrustStatus.KNOWN;
            else if (before.length) {
              r.status = TrustStatus.CHANGED;
              r.previous = before.map((k) => k.fingerprint);
              // shown, never recorded: the error carries both fingerprints and the one flag that replaces it
              if (!replace.has(r.node)) {
                throw hostKeyError(
                  { verdict: HostKeyVerdict.CHANGED, offered, recorded: before },
                  r.node,
                  r.address,
                  port,
                  opts.inventory,
                );
              }
            } else r.status = TrustStatus.NEW;
            return r.status;
          },
        );

        const pending = results.filter((r) => r.status === TrustStatus.NEW);
        const replacing = results.filter((r) => r.status === TrustStatus.CHANGED && replace.has(r.node));
        // Show first, always: the operator compares these with the nodes' consoles before trusting.
        if (!opts.json) {
          out(
            table(
              ['NODE', 'ADDRESS', 'KEY', 'FINGERPRINT', 'STATUS'],
              results.map((r) => [
                r.node,
                knownHostName(r.address || '-', port),
                r.keyType ?? '-',
                r.fingerprint ?? '-',
                r.status === TrustStatus.CHANGED
                  ? `CHANGED (recorded ${r.previous!.join(', ')})`
                  : r.status === TrustStatus.FAILED
                    ? `FAILED ${r.error!.code}: ${r.error!.message}`
                    : r.status,
              ]),
            ),
          );
          for (const r of results) {
            // a FAILED row already shows its message; a changed key's is the warning itself
            if (r.status === TrustStatus.CHANGED && r.error) say(`${r.node}: ${r.error.code}: ${r.error.message}\n`);
            if (r.error?.hint) say(`${r.node}: hint: ${r.error.hint}\n`);
          }
        }
        for (const r of results) {
          if (replace.has(r.node) && (r.status === TrustStatus.NEW || r.status === TrustStatus.KNOWN)) {
            say(`${r.node}: --replace-changed-key: its key is ${r.status}, not changed: nothing to replace\n`);
          }
        }
        // named one by one on the command line: that is the operator's word for each of them
        for (const r of replacing) {
          recordHostKey(files.knownHostsFile, r.address, port, r.offered!.blob);
          r.recorded = true;
          say(
            `${r.node}: replaced host key ${r.previous!.join(', ')} by ${r.fingerprint} in ${files.knownHostsFile}\n`,
          );
        }
        let accept = Boolean(opts.yes);
        if (pending.length && !accept && !opts.json && interactive()) {
          accept = await confirm(`Record ${pending.length} new host key(s) in ${files.knownHostsFile}? [y/N] `);
        }
        if (pending.length && accept) {
          for (const r of pending) {
            recordHostKey(files.knownHostsFile, r.address, port, r.offered!.blob);
            r.recorded = true;
          }
          say(`recorded ${pending.length} host key(s) in ${files.knownHostsFile}\n`);
        } else if (pending.length) {
          say(
            `not recorded: compare the fingerprints with each node's console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then run again with --yes\n`,
          );
        }
        if (opts.json) {
          out(
            JSON.stringify(
              // the rows as they always were: no outcome bookkeeping, no key blob
              results.map(({ exit: _exit, offered: _offered, ok: _ok, result: _result, ms: _ms, ...rest }) => rest),
              null,
              2,
            ) + '\n',
          );
        }
        setFailureExit(results);
      }),
    );
}
