/**
 * What the commands that act on deployed nodes share: one SSH connection per
 * node (Docker and files over it), opened on first use, to the node's
 * provisioning address; and the event sink, which appends every event to
 * the inventory's JSON-lines log and echoes it as the command's output asks.
 */
import { InputError } from '../core/errors.js';
import { JsonLinesLog, eventsFileFor, formatEvent, type StackctlEvent } from '../core/events.js';
import { openPool, remoteFor, type Remote } from '../remote/index.js';
import type { Loaded } from './context.js';

/** Connections to the nodes of one inventory; close() them all when done. */
export interface NodeSessions {
  readonly connect: (node: string) => Remote;
  readonly close: () => Promise<void>;
}

/**
 * Open connections lazily: a node without an address is refused when first asked for.
 * `connectTimeoutMs` bounds SSH connect and login (a command that must not wait long for a node that is down).
 */
export function nodeSessions(
  all: Pick<Loaded, 'inventoryFile' | 'allocation'>,
  opts: { readonly connectTimeoutMs?: number } = {},
): NodeSessions {
  const pool = openPool(all.inventoryFile, opts.connectTimeoutMs ? { connectTimeoutMs: opts.connectTimeoutMs } : {});
  const remotes = new Map<string, Remote>();
  const connect = (name: string): Remote => {
    let r = remotes.get(name);
    if (!r) {
      const addresses = all.allocation.addresses.get(name) ?? {};
      const address = addresses.provisioning ?? Object.values(addresses)[0];
      if (!address) {
        throw new InputError('E_NODE_ADDRESS', `node ${name} has no address to reach it by SSH`, {
          hint: 'Give its role the provisioning network.',
        });
      }
      remotes.set(name, (r = remoteFor(pool, { name, address })));
    }
    return r;
  };
  const close = async (): Promise<void> => {
    for (const r of remotes.values()) await r.close().catch(() => undefined);
    await pool.close();
  };
  return { connect, close };
}

/**
 * Every event to the log; on the output too: as JSON lines with --json, as
 * text lines when no progress display shows them (`visible`).
 */
export function eventSink(
  inventoryFile: string,
  o: { readonly json?: boolean; readonly visible: boolean; readonly write: (text: string) => void },
): (e: StackctlEvent) => void {
  const log = new JsonLinesLog(eventsFileFor(inventoryFile));
  return (e) => {
    log.emit(e);
    if (o.json) o.write(JSON.stringify({ time: new Date().toISOString(), ...e }) + '\n');
    else if (!o.visible) o.write(formatEvent(e) + '\n');
  };
}
