/**
 * The HTTP boot server, inside stackctl: iPXE scripts per node, boot files
 * (kernel, initramfs, OS images) with Range requests and published SHA-256
 * digests, and the API the ramdisk agent calls back with a one-time token.
 *
 * Tokens are secrets: they are never logged or put in events, kept only as
 * long as a node is armed, compared in constant time (on their SHA-256, so
 * the lengths compared are always equal), and spent by the last call of a
 * boot (the report or the result).
 *
 * What hands out or uses a token answers only the node's own address, the
 * one dnsmasq's static lease gives its MAC: the boot script (which carries
 * the token) is served once per arming, and the agent API refuses every
 * other client. A refusal answers 403 and emits `pxe.refused`; a repeated
 * boot script or the node's token shown from another address also marks the
 * arming as suspect (`suspicion()`), so the workflow trusts nothing the node
 * reports afterwards.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { createReadStream, statSync, type Stats } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { type EventSink, NO_EVENTS } from '../core/events.js';
import { InputError, IoError } from '../core/errors.js';
import { checkSchema } from '../core/schema.js';
import { Secret } from '../core/secret.js';
import { chainScript, localBootScript, macHexhyp, nodeScript } from './ipxe.js';

/* ------------------------------------------------------------------------ */
/* Agent API bodies                                                         */
/* ------------------------------------------------------------------------ */

const closed = { additionalProperties: false } as const;

/** What the inspection ramdisk reports about the machine. */
export const IntrospectionSchema = Type.Object(
  {
    cpu: Type.Object(
      {
        count: Type.Integer({ minimum: 1 }),
        arch: Type.String({ minLength: 1 }),
        model: Type.Optional(Type.String({ maxLength: 256 })),
      },
      closed,
    ),
    memory_mib: Type.Integer({ minimum: 1 }),
    disks: Type.Array(
      Type.Object(
        {
          name: Type.String({ pattern: '^/dev/' }),
          size_bytes: Type.Integer({ minimum: 0 }),
          serial: Type.Optional(Type.String()),
          wwn: Type.Optional(Type.String()),
          model: Type.Optional(Type.String()),
          vendor: Type.Optional(Type.String()),
          rotational: Type.Optional(Type.Boolean()),
          hctl: Type.Optional(Type.String()),
          by_path: Type.Optional(Type.String()),
        },
        closed,
      ),
    ),
    interfaces: Type.Array(
      Type.Object(
        {
          name: Type.String({ minLength: 1 }),
          mac: Type.String({ pattern: '^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$' }),
          ipv4: Type.Optional(Type.String()),
          /** The kernel's operstate: up, down, unknown, dormant, lowerlayerdown, ... */
          link: Type.Optional(Type.String({ pattern: '^[a-z]{1,32}$' })),
        },
        closed,
      ),
      { minItems: 1 },
    ),
    boot_mode: Type.Optional(Type.Union([Type.Literal('uefi'), Type.Literal('bios')])),
    system: Type.Optional(
      Type.Object(
        {
          vendor: Type.Optional(Type.String()),
          product: Type.Optional(Type.String()),
          serial: Type.Optional(Type.String()),
        },
        closed,
      ),
    ),
  },
  { ...closed, description: 'hardware facts found by the inspection ramdisk' },
);
export type Introspection = Static<typeof IntrospectionSchema>;

/** What the deploy (or cleaning) ramdisk reports when its work is over. */
export const AgentResultSchema = Type.Object(
  {
    status: Type.Union([Type.Literal('ok'), Type.Literal('failed')]),
    /** The step that ended: write-image, clean, … */
    step: Type.String({ minLength: 1, maxLength: 64 }),
    message: Type.Optional(Type.String({ maxLength: 4096 })),
    root_device: Type.Optional(Type.String({ pattern: '^/dev/' })),
    image_sha256: Type.Optional(Type.String({ pattern: '^[0-9a-f]{64}$' })),
    /**
     * The public half of the SSH host key the agent generated in the deployed
     * system (OpenSSH line), when the command asked for one. The private half
     * never leaves the node.
     */
    host_key: Type.Optional(
      Type.String({ pattern: '^ssh-ed25519 [A-Za-z0-9+/]{1,1024}={0,3}(?: [\\x21-\\x7e]{1,255})?$' }),
    ),
    /** Seconds the agent spent per step, by its own clock (write-image, configure, clean, ...). */
    timings: Type.Optional(
      Type.Record(Type.String({ pattern: '^[a-z][a-z0-9-]{0,63}$' }), Type.Number({ minimum: 0 }), {
        maxProperties: 16,
      }),
    ),
  },
  { ...closed, description: 'the outcome of a deploy or cleaning run' },
);
export type AgentResult = Static<typeof AgentResultSchema>;

/** A sign of life from a working agent (deploy or cleaning), sent every few seconds. */
export const HeartbeatSchema = Type.Object(
  {
    /** What the agent is doing: command, write-image, verify-image, configure, clean, ... */
    step: Type.String({ pattern: '^[a-z][a-z0-9-]{0,63}$' }),
    message: Type.Optional(Type.String({ maxLength: 1024 })),
  },
  { ...closed, description: 'the agent is alive and at this step' },
);
export type Heartbeat = Static<typeof HeartbeatSchema>;

/** Why a node was armed; it decides which endpoint the token opens. */
export type BootPurpose = 'inspect' | 'clean' | 'deploy';

/**
 * The agent endpoints: their method, body schema, the purposes whose token
 * they accept, and whether an accepted call spends the token. Only the last
 * call of a boot spends it (the report or the result); the command and the
 * heartbeats in between leave it usable. The command itself is handed out
 * once (see `BootServer`).
 */
export const AGENT_ENDPOINTS = {
  introspection: { method: 'POST', schema: IntrospectionSchema, purposes: ['inspect'], spends: true },
  result: { method: 'POST', schema: AgentResultSchema, purposes: ['clean', 'deploy'], spends: true },
  heartbeat: { method: 'POST', schema: HeartbeatSchema, purposes: ['clean', 'deploy'], spends: false },
  command: { method: 'GET', schema: undefined, purposes: ['clean', 'deploy'], spends: false },
} as const satisfies Record<
  string,
  { method: 'GET' | 'POST'; schema: TSchema | undefined; purposes: readonly BootPurpose[]; spends: boolean }
>;
export type AgentEndpoint = keyof typeof AGENT_ENDPOINTS;

/** One accepted agent call that carries a report, handed to the injected callback. */
export type AgentReport =
  | { readonly node: string; readonly endpoint: 'introspection'; readonly body: Introspection }
  | { readonly node: string; readonly endpoint: 'result'; readonly body: AgentResult }
  | { readonly node: string; readonly endpoint: 'heartbeat'; readonly body: Heartbeat };

/** A file the agent writes into the deployed root file system. */
export interface AgentFile {
  /** Absolute path inside the deployed system. */
  readonly path: string;
  readonly mode: number;
  /**
   * Contents; a Secret for anything confidential (never logged; a command
   * holding one is served once, see `BootServer`).
   */
  readonly content: string | Secret;
}

/** Root device hints as the agent matches them (the inventory's `root_device`; every given hint must match). */
export interface AgentDiskHints {
  readonly serial?: string;
  readonly wwn?: string;
  readonly model?: string;
  readonly vendor?: string;
  readonly rotational?: boolean;
  readonly hctl?: string;
  readonly by_path?: string;
  readonly name?: string;
  /** Whole GiB, as in the inventory. */
  readonly size_gb?: number;
  readonly min_size_gb?: number;
}

/** What the agent is told to do when it asks for its command. */
export type AgentCommand =
  | {
      readonly kind: 'deploy';
      /** Name of the compressed image in the files folder. */
      readonly image: string;
      /** SHA-256 the streamed (compressed) image must have, from the build's record. */
      readonly sha256: string;
      /** Size of the raw image: the smallest disk it fits. */
      readonly rawBytes: number;
      /** Size of the compressed file: the agent checks it in RAM first when it fits. */
      readonly bytes: number;
      readonly hints: AgentDiskHints;
      /**
       * Have the agent generate the node's SSH host key in the deployed system
       * (with that system's ssh-keygen) and report its public half in the
       * result: no private key crosses the network.
       */
      readonly hostKey?: { readonly type: 'ed25519'; readonly comment: string };
      readonly files: readonly AgentFile[];
    }
  | { readonly kind: 'clean' }
  | { readonly kind: 'poweroff' };

/** When the agent of an armed node was last heard from. */
export interface AgentContact {
  /** First call of this boot (ms since the epoch). */
  readonly firstAt: number;
  readonly lastAt: number;
  /** The last step it reported (heartbeat) or `command` when it fetched its command. */
  readonly step: string;
}

/* ------------------------------------------------------------------------ */
/* The server                                                               */
/* ------------------------------------------------------------------------ */

/** A node the server knows, by the MAC of its provisioning NIC. */
export interface BootNode {
  readonly name: string;
  readonly mac: string;
  /**
   * Its provisioning address: the static lease dnsmasq gives its MAC (the
   * same IPAM address goes into dnsmasq's hosts file). The node's boot script
   * and the agent API answer requests from this address only; bytes of boot
   * files sent to it are counted per node.
   */
  readonly ip: string;
}

/** Options of the boot server; side effects are injectable. */
export interface BootServerOptions {
  /** Address to listen on: the deploy host's address on the provisioning network. */
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** Base URL the nodes use (default: http://host:port). */
  readonly publicUrl?: string;
  /** Flat folder of boot files: kernel, initramfs, images, optional `<file>.sha256`. */
  readonly filesDir: string;
  /** File names (in filesDir) of the ramdisk's kernel and initramfs. */
  readonly kernel: string;
  readonly initrd: string;
  /** Extra kernel arguments for every ramdisk boot, e.g. console=ttyS0,115200. */
  readonly kernelArgs?: readonly string[];
  readonly nodes: readonly BootNode[];
  /** Receives every accepted agent call; a throw answers 500 and leaves the token usable for a retry. */
  readonly onReport: (report: AgentReport) => void | Promise<void>;
  readonly events?: EventSink;
  readonly now?: () => number;
  readonly newToken?: () => string;
  /** A token not used within this time is refused (default one hour). */
  readonly tokenTtlMs?: number;
  /** Largest accepted agent body (default 1 MiB). */
  readonly maxBodyBytes?: number;
}

/** One arming of a node: from `arm()` to `disarm()` or the next `arm()`. */
interface Armed {
  readonly token: Secret;
  readonly digest: Buffer;
  readonly purpose: BootPurpose;
  readonly expires: number;
  readonly command: AgentCommand | undefined;
  /** A spending call is being stored: a second one is refused meanwhile. */
  inFlight: boolean;
  /** The token was spent (report or result accepted); the arming stays known until disarm. */
  spent: boolean;
  contact: AgentContact | undefined;
  /** The boot script (with the token) went to the node: never again in this arming. */
  scriptServed: boolean;
  /** The command (not `wait`) was answered at least once. */
  commandServed: boolean;
  /** A heartbeat or result came after the command: the agent has it, it is not served again. */
  commandTaken: boolean;
  /** Why this arming can no longer be trusted, once it cannot. */
  suspicion: string | undefined;
}

/** What a refused request asked for, for the `pxe.refused` event. */
type Asked = 'boot script' | AgentEndpoint;

/** Reasons of refusals (the event says why; the answer does not). */
const NOT_FROM_NODE = "not from the node's address";

/** True when the command holds confidential contents: served once, never re-sent. */
function carriesSecret(cmd: AgentCommand | undefined): boolean {
  return cmd?.kind === 'deploy' && cmd.files.some((f) => f.content instanceof Secret);
}

/** The client's address as the node table writes it (IPv4-mapped IPv6 unwrapped). */
function clientOf(req: IncomingMessage): string {
  return (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
}

/** Characters allowed in the values of a command line (they are split on blanks by the agent's shell). */
const COMMAND_WORD = /^[A-Za-z0-9._:/=,@+%-]{1,1024}$/;
const COMMAND_PATH = /^\/[A-Za-z0-9._/-]{1,255}$/;
/** A hint value is the rest of its line (the agent reads it whole and never evaluates it): printable, no edge blanks. */
const HINT_VALUE = /^[\x21-\x7e](?:[\x20-\x7e]{0,254}[\x21-\x7e])?$/;

function commandWord(what: string, value: string): string {
  if (!COMMAND_WORD.test(value)) {
    throw new InputError('E_AGENT_COMMAND', `${what} cannot be sent to the agent: '${value}'`, {
      hint: 'Use letters, digits and . _ : / = , @ + % - only (no blanks or quotes).',
    });
  }
  return value;
}

/**
 * The command as the agent's shell reads it: one `key value...` line each,
 * file contents in base64, and a last line `end` (the agent acts only on a
 * complete answer). May contain secrets (Secret file contents): sent only to
 * the node, never logged.
 */
export function renderAgentCommand(cmd: AgentCommand, filesUrl: string): string {
  if (cmd.kind !== 'deploy') return `${cmd.kind}\nend\n`;
  const lines = [
    'deploy',
    `image ${commandWord('image URL', `${filesUrl}/${cmd.image}`)} ${cmd.sha256} ${cmd.rawBytes} ${cmd.bytes}`,
  ];
  for (const [key, value] of Object.entries(cmd.hints)) {
    if (value === undefined) continue;
    const v = typeof value === 'boolean' ? (value ? '1' : '0') : String(value);
    if (!HINT_VALUE.test(v)) {
      throw new InputError('E_AGENT_COMMAND', `root device hint ${key} cannot be sent to the agent: '${v}'`, {
        hint: 'Printable characters only, without leading or trailing blanks.',
      });
    }
    lines.push(`hint ${commandWord('hint name', key)} ${v}`);
  }
  if (cmd.hostKey) lines.push(`hostkey ${cmd.hostKey.type} ${commandWord('host key comment', cmd.hostKey.comment)}`);
  for (const f of cmd.files) {
    if (!COMMAND_PATH.test(f.path) || f.path.split('/').includes('..')) {
      throw new InputError('E_AGENT_COMMAND', `file path '${f.path}' cannot be sent to the agent`, {
        hint: 'Absolute paths of letters, digits, . _ - and /, without ..',
      });
    }
    const content = typeof f.content === 'string' ? f.content : f.content.reveal();
    lines.push(
      `file ${(f.mode & 0o7777).toString(8).padStart(4, '0')} ${f.path} ${Buffer.from(content).toString('base64')}`,
    );
  }
  lines.push('end');
  return lines.join('\n') + '\n';
}

const FILE_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$/;
const AGENT_PATH = /^\/v1\/agent\/([a-z0-9-]{1,63})\/([a-z]+)$/;
const SCRIPT_PATH = /^\/boot\/([0-9a-f]{2}(?:-[0-9a-f]{2}){5})\.ipxe$/;

function digestOf(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

/**
 * The HTTP boot server. Start it with `BootServer.start()`.
 *
 * Single use: an armed node's boot script is served once, to the node's
 * address; a deploy command holding a Secret is served once; any other
 * command is served again (a truncated read is retried) until the agent's
 * next call shows it has it. What these rules refuse gets 403 and a
 * `pxe.refused` event; boot files (`/files/`) are served to anyone.
 */
export class BootServer {
  readonly #server: Server;
  readonly #opts: BootServerOptions;
  readonly #byName: Map<string, BootNode>;
  readonly #byMac: Map<string, BootNode>;
  readonly #armed = new Map<string, Armed>();
  /** Digests of spent tokens per node, so a replay is reported as such (bounded). */
  readonly #spent = new Map<string, Buffer[]>();
  readonly #sums = new Map<string, { key: string; sum: string }>();
  readonly #byIp: Map<string, string>;
  /** Boot scripts served per known node (how far a node got, for diagnostics). */
  readonly #scripts = new Map<string, number>();
  /** Bytes of /files sent, by node and file name. */
  readonly #served = new Map<string, Map<string, number>>();
  readonly #events: EventSink;
  readonly #now: () => number;
  readonly #newToken: () => string;

  private constructor(opts: BootServerOptions) {
    this.#opts = opts;
    this.#byName = new Map(opts.nodes.map((n) => [n.name, n]));
    this.#byMac = new Map(opts.nodes.map((n) => [macHexhyp(n.mac), n]));
    this.#byIp = new Map(opts.nodes.map((n) => [n.ip, n.name]));
    this.#events = opts.events ?? NO_EVENTS;
    this.#now = opts.now ?? Date.now;
    this.#newToken = opts.newToken ?? (() => randomBytes(32).toString('base64url'));
    this.#server = createServer((req, res) => {
      this.#handle(req, res).catch(() => {
        if (!res.headersSent) send(res, 500, 'internal error\n');
        else res.destroy();
      });
    });
  }

  /** Listen; resolves once the port is bound. */
  static async start(opts: BootServerOptions): Promise<BootServer> {
    const s = new BootServer(opts);
    await new Promise<void>((resolve, reject) => {
      s.#server.once('error', (err: NodeJS.ErrnoException) =>
        reject(
          new IoError('E_BOOT_HTTP_LISTEN', `cannot listen on ${opts.host}:${opts.port}: ${err.code ?? err.message}`, {
            hint: 'Another process holds the port, or the address is not on this host.',
            cause: err,
          }),
        ),
      );
      s.#server.listen(opts.port, opts.host, () => resolve());
    });
    return s;
  }

  /** The bound port. */
  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  /** Base URL the nodes use. */
  get url(): string {
    return this.#opts.publicUrl ?? `http://${this.#opts.host}:${this.port}`;
  }

  /**
   * Expect the node to boot from the network for `purpose`: issues a new
   * token (replacing any earlier one, and the earlier arming's single-use
   * marks and suspicion) that its boot script carries. Arm a node while it is
   * off: its boot script is served once.
   */
  arm(node: string, purpose: BootPurpose, command?: AgentCommand): void {
    if (!this.#byName.has(node)) {
      throw new InputError('E_BOOT_UNKNOWN_NODE', `cannot arm unknown node '${node}' for network boot`, {
        hint: 'The boot server knows the nodes of the inventory it was started with.',
      });
    }
    // a command the agent could not read fails here, in the workflow, not at the node
    if (command) renderAgentCommand(command, this.url);
    const token = this.#newToken();
    this.#armed.set(node, {
      token: new Secret(token),
      digest: digestOf(token),
      purpose,
      expires: this.#now() + (this.#opts.tokenTtlMs ?? 3_600_000),
      command,
      inFlight: false,
      spent: false,
      contact: undefined,
      scriptServed: false,
      commandServed: false,
      commandTaken: false,
      suspicion: undefined,
    });
  }

  /** When the agent of an armed node last called (command or heartbeat); undefined before its first call. */
  agentContact(node: string): AgentContact | undefined {
    const armed = this.#armed.get(node);
    return armed && !armed.spent ? armed.contact : undefined;
  }

  /**
   * Why the node's current arming can no longer be trusted, or undefined:
   * its boot script was asked for a second time (the node rebooted during its
   * network boot, or another machine took the script first), or its token was
   * shown from another address. Kept after the token is spent, until
   * `disarm()` or the next `arm()`: a workflow checks it before it trusts a
   * result. Never holds the token.
   */
  suspicion(node: string): string | undefined {
    return this.#armed.get(node)?.suspicion;
  }

  /** How many boot scripts the node's MAC asked for since the server started. */
  scriptsServed(node: string): number {
    return this.#scripts.get(node) ?? 0;
  }

  /** Bytes of boot files and images sent to a node (by its lease address), by file name. */
  bytesServed(node: string): Readonly<Record<string, number>> {
    return Object.fromEntries(this.#served.get(node) ?? []);
  }

  /** Forget the node's token: after a deploy, or when the operator aborts. */
  disarm(node: string): void {
    this.#armed.delete(node);
  }

  /** True while the node holds an unspent token. */
  isArmed(node: string): boolean {
    const armed = this.#armed.get(node);
    return armed !== undefined && !armed.spent;
  }

  /** Stop listening and drop open connections. */
  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const method = req.method ?? 'GET';
    const agent = AGENT_PATH.exec(path);
    if (agent) {
      const spec = Object.hasOwn(AGENT_ENDPOINTS, agent[2]!) ? AGENT_ENDPOINTS[agent[2] as AgentEndpoint] : undefined;
      if (spec && method !== spec.method) return send(res, 405, `use ${spec.method}\n`, { Allow: spec.method });
      return this.#agent(req, res, agent[1]!, agent[2]!);
    }
    if (method !== 'GET' && method !== 'HEAD') return send(res, 405, 'use GET\n', { Allow: 'GET, HEAD' });
    if (path === '/boot.ipxe') return send(res, 200, chainScript(this.url), IPXE);
    const script = SCRIPT_PATH.exec(path);
    // HEAD must not use up a script that is served once
    if (script && method !== 'GET') return send(res, 405, 'use GET\n', { Allow: 'GET' });
    if (script) return this.#script(req, res, script[1]!, path);
    if (path.startsWith('/files/')) return this.#file(req, res, path.slice('/files/'.length));
    return send(res, 404, 'not found\n');
  }

  #script(req: IncomingMessage, res: ServerResponse, mac: string, path: string): void {
    const node = this.#byMac.get(mac);
    if (!node) {
      this.#events.emit({ kind: 'pxe.unknown-mac', mac: mac.replace(/-/g, ':'), path });
      return send(res, 404, 'unknown MAC\n');
    }
    this.#scripts.set(node.name, (this.#scripts.get(node.name) ?? 0) + 1);
    const armed = this.#armed.get(node.name);
    // not armed (or an unused token expired): boot the disk; that answer holds nothing
    if (!armed || (!armed.scriptServed && armed.expires < this.#now())) {
      return send(res, 200, localBootScript(node.name), IPXE);
    }
    const client = clientOf(req);
    if (client !== node.ip) return this.#forbid(res, node, client, 'boot script', NOT_FROM_NODE);
    if (armed.scriptServed) {
      // the node rebooted during its network boot, or someone else took the script (and the token) first
      armed.suspicion ??= `its boot script was asked for a second time (from ${client})`;
      return this.#forbid(res, node, client, 'boot script', 'boot script already served in this arming');
    }
    armed.scriptServed = true;
    const files = `${this.url}/files`;
    const text = nodeScript({
      node: node.name,
      mac: node.mac,
      kernelUrl: `${files}/${this.#opts.kernel}`,
      initrdUrl: `${files}/${this.#opts.initrd}`,
      apiUrl: this.url,
      token: armed.token.reveal(),
      extraArgs: [`stackctl.purpose=${armed.purpose}`, ...(this.#opts.kernelArgs ?? [])],
    });
    // the script carries a secret: no caches in between
    send(res, 200, text, { ...IPXE, 'Cache-Control': 'no-store' });
  }

  async #file(req: IncomingMessage, res: ServerResponse, name: string): Promise<void> {
    if (!FILE_NAME.test(name)) return send(res, 404, 'not found\n');
    const file = join(this.#opts.filesDir, name);
    const st = statOrUndefined(file);
    if (!st?.isFile()) {
      const base = name.endsWith('.sha256') ? name.slice(0, -'.sha256'.length) : undefined;
      const target = base ? join(this.#opts.filesDir, base) : undefined;
      const tst = target ? statOrUndefined(target) : undefined;
      if (!base || !target || !tst?.isFile()) return send(res, 404, 'not found\n');
      const sum = await this.#sha256(target, tst);
      return send(res, 200, `${sum}  ${base}\n`, { 'Content-Type': 'text/plain; charset=utf-8' });
    }
    const size = st.size;
    const headers: Record<string, string> = {
      'Content-Type': name.endsWith('.ipxe') || name.endsWith('.sha256') ? 'text/plain' : 'application/octet-stream',
      'Accept-Ranges': 'bytes',
      'Last-Modified': st.mtime.toUTCString(),
    };
    const cached = this.#sums.get(file);
    if (cached?.key === sumKey(st)) headers['X-Checksum-Sha256'] = cached.sum;
    const range = parseRange(req.headers.range, size);
    if (range === 'unsatisfiable') {
      return send(res, 416, 'range not satisfiable\n', { 'Content-Range': `bytes */${size}` });
    }
    const [start, end] = range ?? [0, size - 1];
    const length = size === 0 ? 0 : end - start + 1;
    res.writeHead(range ? 206 : 200, {
      ...headers,
      'Content-Length': String(length),
      ...(range ? { 'Content-Range': `bytes ${start}-${end}/${size}` } : {}),
    });
    if (req.method === 'HEAD' || length === 0) return void res.end();
    const who = this.#byIp.get((req.socket.remoteAddress ?? '').replace(/^::ffff:/, ''));
    const counter = who ? (this.#served.get(who) ?? this.#served.set(who, new Map()).get(who)!) : undefined;
    await new Promise<void>((resolve) => {
      const stream = createReadStream(file, { start, end, highWaterMark: 1024 * 1024 });
      if (counter) stream.on('data', (chunk) => counter.set(name, (counter.get(name) ?? 0) + chunk.length));
      stream.on('error', () => {
        res.destroy();
        resolve();
      });
      res.on('close', () => {
        stream.destroy();
        resolve();
      });
      stream.pipe(res);
    });
  }

  /** SHA-256 of a file, cached while its size and mtime stay the same (OS images are large). */
  async #sha256(file: string, st: Stats): Promise<string> {
    const key = sumKey(st);
    const cached = this.#sums.get(file);
    if (cached?.key === key) return cached.sum;
    const hash = createHash('sha256');
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
    const sum = hash.digest('hex');
    this.#sums.set(file, { key, sum });
    return sum;
  }

  async #agent(req: IncomingMessage, res: ServerResponse, name: string, endpointName: string): Promise<void> {
    if (!Object.hasOwn(AGENT_ENDPOINTS, endpointName)) return send(res, 404, 'unknown endpoint\n');
    const endpoint = endpointName as AgentEndpoint;
    const node = this.#byName.get(name);
    if (!node) return send(res, 404, 'unknown node\n');
    const client = clientOf(req);
    if (client !== node.ip) {
      // a valid token shown from elsewhere has left the node: nothing it reports can be trusted now
      const leaked = this.#checkToken(name, endpoint, req.headers.authorization) === undefined;
      if (leaked) this.#armed.get(name)!.suspicion ??= `its token was shown from ${client}`;
      return this.#forbid(
        res,
        node,
        client,
        endpoint,
        leaked ? `${NOT_FROM_NODE}, with the node's valid token` : NOT_FROM_NODE,
      );
    }
    // check before reading the body, and again (synchronously) before spending the token
    const early = this.#checkToken(name, endpoint, req.headers.authorization);
    if (early !== undefined) return this.#refuse(res, name, endpoint, early);
    const spec = AGENT_ENDPOINTS[endpoint];
    if (spec.schema === undefined) return this.#command(res, node, client);

    const raw = await readBody(req, this.#opts.maxBodyBytes ?? 1024 * 1024);
    if (raw === undefined) return send(res, 413, 'body too large\n');
    let data: unknown;
    try {
      data = JSON.parse(raw);
    } catch {
      return sendJson(res, 400, { code: 'E_AGENT_JSON', message: 'the body is not valid JSON' });
    }
    const source = {
      file: `${endpoint} body`,
      data,
      issues: [],
      locate: (p: readonly (string | number)[]) => ({ file: `${endpoint} body`, path: '/' + p.join('/') }),
    };
    const { issues } = checkSchema(spec.schema as TSchema, source);
    if (issues.length) {
      return sendJson(res, 400, {
        code: 'E_AGENT_BODY',
        message: `the ${endpoint} body does not match its schema`,
        issues: issues.map((i) => ({ code: i.code, path: i.location.path, message: i.message })),
      });
    }

    const reason = this.#checkToken(name, endpoint, req.headers.authorization);
    if (reason !== undefined) return this.#refuse(res, name, endpoint, reason);
    const armed = this.#armed.get(name)!;
    // the agent calls on after reading its command: it has it
    if (armed.commandServed) armed.commandTaken = true;
    if (!spec.spends) {
      this.#touch(armed, (data as Heartbeat).step);
      try {
        await this.#opts.onReport({ node: name, endpoint, body: data } as AgentReport);
      } catch {
        // a heartbeat that could not be kept is not worth an agent retry
      }
      return sendJson(res, 202, { accepted: true });
    }
    // NOTE: in flight, not spent: a second call with the same token is refused
    // now, but a failing callback gives the agent its retry
    armed.inFlight = true;
    try {
      await this.#opts.onReport({ node: name, endpoint, body: data } as AgentReport);
    } catch {
      armed.inFlight = false;
      return sendJson(res, 500, { code: 'E_AGENT_STORE', message: 'the report could not be stored; retry' });
    }
    // spent, but the arming is kept until disarm: a boot script asked for now is still a repeat
    armed.spent = true;
    armed.inFlight = false;
    const spent = this.#spent.get(name) ?? [];
    this.#spent.set(name, [...spent, armed.digest].slice(-16));
    this.#events.emit({ kind: 'pxe.agent-report', node: name, endpoint });
    sendJson(res, 202, { accepted: true });
  }

  /**
   * The armed node's command, as text; `wait` while there is none. Marks the
   * agent as alive. A command with a Secret is answered once; any other until
   * the agent's next heartbeat or result (a truncated read can be retried).
   */
  #command(res: ServerResponse, node: BootNode, client: string): void {
    const armed = this.#armed.get(node.name)!;
    if (armed.command && (armed.commandTaken || (armed.commandServed && carriesSecret(armed.command)))) {
      return this.#forbid(
        res,
        node,
        client,
        'command',
        armed.commandTaken ? 'command already taken by the agent' : 'command with key material already served',
      );
    }
    const first = armed.contact === undefined;
    this.#touch(armed, 'command');
    const text = armed.command ? renderAgentCommand(armed.command, `${this.url}/files`) : 'wait\nend\n';
    if (armed.command) armed.commandServed = true;
    if (first) {
      this.#events.emit({ kind: 'pxe.agent-command', node: node.name, command: armed.command?.kind ?? 'wait' });
    }
    // the answer may carry secrets: no caches in between
    send(res, 200, text, { 'Cache-Control': 'no-store' });
  }

  #touch(armed: Armed, step: string): void {
    const t = this.#now();
    armed.contact = { firstAt: armed.contact?.firstAt ?? t, lastAt: t, step };
  }

  /** Undefined when the token opens this endpoint for this node; otherwise why not (for the event only). */
  #checkToken(node: string, endpoint: AgentEndpoint, header: string | undefined): string | undefined {
    const m = /^Bearer ([A-Za-z0-9._~+/=-]{1,512})$/.exec(header ?? '');
    if (!m) return 'no bearer token';
    const digest = digestOf(m[1]!);
    const armed = this.#armed.get(node);
    if (!armed || armed.spent || !timingSafeEqual(digest, armed.digest)) {
      const replay = (this.#spent.get(node) ?? []).some((d) => timingSafeEqual(d, digest));
      return replay ? 'token already used' : armed && !armed.spent ? 'wrong token' : 'node not armed';
    }
    if (armed.inFlight) return 'token already used';
    if (armed.expires < this.#now()) return 'token expired';
    if (!(AGENT_ENDPOINTS[endpoint].purposes as readonly BootPurpose[]).includes(armed.purpose)) {
      return `token is for ${armed.purpose}`;
    }
    return undefined;
  }

  /** 403 for a request the node's arming does not allow (wrong address, asked twice), with an event. */
  #forbid(res: ServerResponse, node: BootNode, client: string, asked: Asked, reason: string): void {
    this.#events.emit({ kind: 'pxe.refused', node: node.name, mac: node.mac, client, asked, reason });
    // as for tokens, the answer does not say why
    if (asked === 'boot script') return send(res, 403, 'forbidden\n');
    sendJson(res, 403, { code: 'E_BOOT_FORBIDDEN', message: 'forbidden' });
  }

  #refuse(res: ServerResponse, node: string, endpoint: AgentEndpoint, reason: string): void {
    this.#events.emit({ kind: 'pxe.token-rejected', node, endpoint, reason });
    // the answer does not say why: that is for the operator's event log, not for the caller
    sendJson(res, 401, { code: 'E_AGENT_TOKEN', message: 'token refused' }, { 'WWW-Authenticate': 'Bearer' });
  }
}

const IPXE = { 'Content-Type': 'text/plain; charset=utf-8' } as const;

function send(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, {
    'Content-Type': 'text/plain; charset=utf-8',
    ...headers,
    'Content-Length': String(Buffer.byteLength(body)),
  });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  send(res, status, JSON.stringify(body) + '\n', { ...headers, 'Content-Type': 'application/json' });
}

function statOrUndefined(file: string): Stats | undefined {
  try {
    return statSync(file);
  } catch {
    return undefined;
  }
}

function sumKey(st: Stats): string {
  return `${st.size}:${st.mtimeMs}`;
}

/**
 * Parse a Range header against a file size: undefined when absent or not in
 * bytes (serve the whole file), a `[start, end]` pair (inclusive), or
 * 'unsatisfiable' for a malformed, inverted, past-the-end or multi-part byte
 * range (one part is all iPXE and the agent ask for).
 */
export function parseRange(header: string | undefined, size: number): [number, number] | 'unsatisfiable' | undefined {
  if (header === undefined) return undefined;
  const m = /^\s*bytes\s*=\s*(.*)$/i.exec(header);
  if (!m) return undefined;
  const spec = m[1]!.trim();
  const r = /^(\d*)-(\d*)$/.exec(spec);
  if (!r || (r[1] === '' && r[2] === '')) return 'unsatisfiable';
  if (r[1] === '') {
    const suffix = Number(r[2]);
    if (suffix === 0 || size === 0) return 'unsatisfiable';
    return [Math.max(0, size - suffix), size - 1];
  }
  const start = Number(r[1]);
  const end = r[2] === '' ? size - 1 : Math.min(Number(r[2]), size - 1);
  if (start >= size || (r[2] !== '' && Number(r[2]) < start)) return 'unsatisfiable';
  return [start, end];
}

async function readBody(req: IncomingMessage, max: number): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of req) {
    total += (chunk as Buffer).length;
    if (total > max) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}
