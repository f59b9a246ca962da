/**
 * A client RMCP+ session with one BMC: discovery (channel authentication
 * capabilities, cipher suites), Open Session, RAKP 1-4, then protected
 * commands with sequence numbers, a replay window, retransmission and
 * busy-retry. Credentials refused by the BMC end the attempt at once: BMCs
 * lock accounts after a few failures, so nothing is retried.
 */
import { AuthError, RemoteError } from '../../core/errors.js';
import type { Secret } from '../../core/secret.js';
import {
  CURRENT_CHANNEL,
  decodeAuthCapabilities,
  encodeAuthCapabilitiesRequest,
  parseCipherSuiteRecords,
  type CipherSuiteRecord,
} from './commands.js';
import {
  SET_PRIVILEGE_CODES,
  completionCodeError,
  completionCodeInfo,
  type CommandContext,
  type CompletionCodeInfo,
} from './completion-codes.js';
import {
  CIPHER_SUITES,
  cipherSuiteById,
  defaultRandomBytes,
  deriveSessionKeys,
  sameBytes,
  userKey,
  type CipherSuite,
  type RandomBytes,
} from './crypto.js';
import { Command, NetFn, decodeResponse, encodeRequest, type IpmiResponse } from './message.js';
import { DropReason, PayloadType, encodeV15, encodeV2, openV2, parsePacket, type PacketProtection } from './packet.js';
import { Privilege, privilegeName } from './privilege.js';
import {
  AUTH_FAILURE_STATUSES,
  ROLE_NAME_ONLY_LOOKUP,
  RakpStatus,
  SUITE_REFUSED_STATUSES,
  decodeOpenSessionResponse,
  decodeRakp2,
  decodeRakp4,
  encodeOpenSessionRequest,
  encodeRakp1,
  encodeRakp3,
  rakp2AuthCode,
  rakp3AuthCode,
  rakp4Icv,
  rakpStatusName,
  sessionIntegrityKey,
  type OpenSessionResponse,
  type Rakp2,
  type Rakp4,
  type RakpContext,
} from './rakp.js';
import { ReplayWindow } from './replay.js';
import type { IpmiTransport, Peer, Verdict } from './transport.js';
import { AsfMessageType, decodeAsf, encodeAsfPing } from './rmcp.js';

/** Everything needed to open a session; the driver fills it from the target and its options. */
export interface SessionParams {
  readonly transport: IpmiTransport;
  readonly peer: Peer;
  readonly node: string;
  /** Address as written in the inventory, for messages. */
  readonly address: string;
  readonly username: string;
  readonly password: Secret;
  /** Privilege to request and then set on the session (operator suffices for power and boot). */
  readonly privilege: Privilege;
  /** Per-attempt timeout (ms). */
  readonly timeoutMs: number;
  /** Retransmissions after the first attempt. */
  readonly retries: number;
  /** How often a command answered "busy" (C0h and friends) is retried. */
  readonly busyRetries: number;
  /** First backoff after a busy answer (ms), doubled each time. */
  readonly busyBackoffMs: number;
  /** Cipher suites to consider, best first (default 17 then 3). */
  readonly suites?: readonly number[];
  readonly random?: RandomBytes;
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
}

/** Options of a single command. */
export interface CommandOptions {
  /** Command-specific completion codes (80h-BEh) for this command. */
  readonly specific?: Readonly<Record<number, CompletionCodeInfo>>;
  /** Completion codes the caller handles itself (returned instead of thrown). */
  readonly allow?: ReadonlySet<number>;
  /** Retransmissions for this command (default: the session's). */
  readonly retries?: number;
  /** Session privilege the command needs; the session is raised to the configured level first if below. */
  readonly privilege?: Privilege;
}

function authFailed(p: SessionParams, reason: string, status?: number): AuthError {
  return new AuthError('E_IPMI_AUTH', `authentication failed for node ${p.node} at ${p.address} (${reason})`, {
    hint:
      'Check the BMC username and password of this node in the secrets file. stackctl did not retry: ' +
      'BMCs lock accounts after repeated failures.',
    details: { node: p.node, address: p.address, username: p.username, ...(status === undefined ? {} : { status }) },
  });
}

function refused(p: SessionParams, code: string, message: string, hint: string): RemoteError {
  return new RemoteError(code, `the BMC of node ${p.node} at ${p.address} ${message}`, {
    hint,
    details: { node: p.node, address: p.address },
  });
}

/** Non-zero 32-bit random number (session ids must not be zero). */
function randomId(random: RandomBytes): number {
  for (;;) {
    const id = random(4).readUInt32LE(0);
    if (id !== 0) return id;
  }
}

/** Send an ASF presence ping and wait for the pong: true when the BMC says it speaks IPMI. */
export async function presencePing(
  transport: IpmiTransport,
  peer: Peer,
  ctx: { node: string; address: string; timeoutMs: number; retries: number },
): Promise<boolean> {
  const tag = Math.floor(Math.random() * 0xfe);
  return transport.exchange(peer, {
    ...ctx,
    what: 'ASF presence ping',
    build: () => encodeAsfPing(tag),
    accept: (d): Verdict<boolean> => {
      const m = decodeAsf(d);
      if (!m) return { drop: DropReason.UNEXPECTED };
      return m.type === AsfMessageType.PONG && m.tag === tag
        ? { value: m.ipmiSupported }
        : { drop: DropReason.UNEXPECTED };
    },
  });
}

/** An established RMCP+ session. */
export class IpmiSession {
  readonly suite: CipherSuite;
  readonly #p: SessionParams;
  readonly #consoleSessionId: number;
  readonly #bmcSessionId: number;
  readonly #protection: PacketProtection;
  readonly #replay = new ReplayWindow();
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  #outSeq = 0;
  /** RMCP+ sessions start at User (or lower); raised on the first command that needs more. */
  #privilege: number = Privilege.USER;
  #rqSeq: number;
  #lastUsed: number;
  #closed = false;

  private constructor(
    p: SessionParams,
    suite: CipherSuite,
    ids: { console: number; bmc: number },
    protection: PacketProtection,
    rqSeq: number,
  ) {
    this.#p = p;
    this.suite = suite;
    this.#consoleSessionId = ids.console;
    this.#bmcSessionId = ids.bmc;
    this.#protection = protection;
    this.#rqSeq = rqSeq;
    this.#now = p.now ?? Date.now;
    this.#sleep = p.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.#lastUsed = this.#now();
  }

  /** When the session last carried a command (ms since epoch, by the injected clock). */
  get lastUsed(): number {
    return this.#lastUsed;
  }

  /** Discover, negotiate and authenticate; resolves to an active session at the requested privilege. */
  static async open(p: SessionParams): Promise<IpmiSession> {
    const handshake = new Handshake(p);
    const established = await handshake.run();
    const session = new IpmiSession(
      p,
      established.suite,
      { console: established.consoleSessionId, bmc: established.bmcSessionId },
      established.protection,
      handshake.rqSeq,
    );
    return session;
  }

  #ctx(command: string): CommandContext {
    return { node: this.#p.node, address: this.#p.address, command };
  }

  /** Send one command in the session; non-zero completion codes become RemoteErrors (busy ones are retried). */
  async command(
    name: string,
    netFn: number,
    cmd: number,
    data: Buffer,
    options: CommandOptions = {},
  ): Promise<IpmiResponse> {
    if (this.#closed)
      throw refused(this.#p, 'E_IPMI_SESSION_CLOSED', 'session was already closed', 'Open a new driver.');
    if (options.privilege !== undefined && this.#privilege < options.privilege && this.#privilege < this.#p.privilege) {
      // Raised lazily, to the configured level: read-only work (power polling) saves a round trip per session.
      // When the configured level is too low, the command goes out anyway and the BMC's D4h says so.
      const level = this.#p.privilege;
      await this.command(
        'Set Session Privilege Level',
        NetFn.APP,
        Command.SET_SESSION_PRIVILEGE_LEVEL,
        Buffer.from([level]),
        { specific: SET_PRIVILEGE_CODES },
      );
      this.#privilege = level;
    }
    for (let busy = 0; ; busy++) {
      this.#rqSeq = (this.#rqSeq % 63) + 1;
      const rqSeq = this.#rqSeq;
      const request = encodeRequest({ netFn, cmd, rqSeq, data });
      const res = await this.#p.transport.exchange(this.#p.peer, {
        node: this.#p.node,
        address: this.#p.address,
        what: name,
        timeoutMs: this.#p.timeoutMs,
        retries: options.retries ?? this.#p.retries,
        // Each retransmission gets a new session sequence number: the BMC's replay window drops repeats.
        build: () =>
          encodeV2(
            {
              payloadType: PayloadType.IPMI,
              sessionId: this.#bmcSessionId,
              sequence: this.#nextOutSeq(),
              payload: request,
            },
            this.#protection,
          ),
        accept: (d) => this.#accept(d, netFn, cmd, rqSeq),
      });
      this.#lastUsed = this.#now();
      const cc = res.completionCode;
      if (cc === 0 || options.allow?.has(cc)) return res;
      const info = completionCodeInfo(cc, options.specific);
      if (info.retry && busy < this.#p.busyRetries) {
        await this.#sleep(this.#p.busyBackoffMs * 2 ** busy);
        continue;
      }
      throw completionCodeError(cc, this.#ctx(name), options.specific);
    }
  }

  #nextOutSeq(): number {
    this.#outSeq = (this.#outSeq + 1) >>> 0 || 1;
    return this.#outSeq;
  }

  #accept(d: Buffer, netFn: number, cmd: number, rqSeq: number): Verdict<IpmiResponse> {
    const pkt = parsePacket(d);
    if (pkt.kind === 'drop') return { drop: pkt.reason };
    if (pkt.kind !== 'v2' || pkt.payloadType !== PayloadType.IPMI) return { drop: DropReason.UNEXPECTED };
    if (pkt.sessionId !== this.#consoleSessionId) return { drop: DropReason.UNKNOWN_SESSION };
    if (!this.#replay.accepts(pkt.sequence)) return { drop: DropReason.REPLAY };
    const opened = openV2(pkt, this.#protection);
    if (!opened.ok) return { drop: opened.reason };
    const res = decodeResponse(opened.payload);
    if (!res) return { drop: DropReason.MALFORMED };
    // Authentic, so its sequence number is spent even if it answers an earlier (retransmitted) request.
    this.#replay.commit(pkt.sequence);
    if (res.rqSeq !== rqSeq || res.cmd !== cmd || res.netFn !== netFn) return { drop: DropReason.UNEXPECTED };
    return { value: res };
  }

  /** Close the session on the BMC (best effort, one short attempt). Safe to call twice. */
  async close(): Promise<void> {
    if (this.#closed) return;
    const id = Buffer.alloc(4);
    id.writeUInt32LE(this.#bmcSessionId, 0);
    try {
      // One attempt: a BMC that forgot the session stays silent, and closing must not take seconds.
      await this.command('Close Session', NetFn.APP, Command.CLOSE_SESSION, id, { retries: 0 });
    } catch {
      // The BMC expires idle sessions by itself; a lost Close Session costs nothing but a slot for a while.
    } finally {
      this.#closed = true;
    }
  }
}

interface Established {
  readonly suite: CipherSuite;
  readonly consoleSessionId: number;
  readonly bmcSessionId: number;
  readonly protection: PacketProtection;
}

/** The pre-session conversation; kept apart so the session class only holds an authenticated state. */
class Handshake {
  rqSeq = 0;
  #tag = 0;
  readonly #p: SessionParams;
  readonly #random: RandomBytes;

  constructor(p: SessionParams) {
    this.#p = p;
    this.#random = p.random ?? defaultRandomBytes;
  }

  async run(): Promise<Established> {
    await this.#checkRmcpPlus();
    const candidates = await this.#candidateSuites();
    for (let i = 0; i < candidates.length; i++) {
      const suite = candidates[i] as CipherSuite;
      const result = await this.#authenticate(suite);
      if (result === 'suite-refused') continue;
      return result;
    }
    throw refused(
      this.#p,
      'E_IPMI_NO_CIPHER_SUITE',
      `accepts none of the cipher suites stackctl uses (${candidates.map((s) => s.id).join(', ')})`,
      'Enable cipher suite 17 (or 3) for the operator/administrator privilege on the BMC LAN channel.',
    );
  }

  #exchange<T>(
    what: string,
    build: () => Buffer,
    accept: (d: Buffer) => Verdict<T>,
    afterSilence?: () => T | undefined,
  ): Promise<T> {
    return this.#p.transport.exchange(this.#p.peer, {
      node: this.#p.node,
      address: this.#p.address,
      what,
      timeoutMs: this.#p.timeoutMs,
      retries: this.#p.retries,
      build,
      accept,
      ...(afterSilence ? { afterSilence } : {}),
    });
  }

  /** A command outside any session (session id 0, no protection), in v1.5 or v2.0 framing. */
  #presession(what: string, cmd: number, data: Buffer, v15: boolean): Promise<IpmiResponse> {
    this.rqSeq = (this.rqSeq % 63) + 1;
    const rqSeq = this.rqSeq;
    const msg = encodeRequest({ netFn: NetFn.APP, cmd, rqSeq, data });
    const packet = v15
      ? encodeV15(msg)
      : encodeV2({ payloadType: PayloadType.IPMI, sessionId: 0, sequence: 0, payload: msg });
    return this.#exchange<IpmiResponse>(
      what,
      () => packet,
      (d) => {
        const pkt = parsePacket(d);
        if (pkt.kind === 'drop') return { drop: pkt.reason };
        let body: Buffer;
        if (pkt.kind === 'v15' && pkt.sessionId === 0) body = pkt.message;
        else if (pkt.kind === 'v2' && pkt.payloadType === PayloadType.IPMI && pkt.sessionId === 0 && !pkt.encrypted) {
          body = pkt.payload;
        } else return { drop: DropReason.UNEXPECTED };
        const res = decodeResponse(body);
        if (!res) return { drop: DropReason.MALFORMED };
        if (res.rqSeq !== rqSeq || res.cmd !== cmd) return { drop: DropReason.UNEXPECTED };
        return { value: res };
      },
    );
  }

  async #checkRmcpPlus(): Promise<void> {
    const what = 'Get Channel Authentication Capabilities';
    // v1.5 framing: every IPMI 2.0 BMC answers discovery in it; some (OpenIPMI's lanserv) ignore v2.0 framing here.
    const res = await this.#presession(
      what,
      Command.GET_CHANNEL_AUTH_CAPABILITIES,
      encodeAuthCapabilitiesRequest(this.#p.privilege),
      true,
    );
    if (res.completionCode !== 0) {
      throw completionCodeError(res.completionCode, { node: this.#p.node, address: this.#p.address, command: what });
    }
    const caps = decodeAuthCapabilities(res.data);
    if (!caps?.rmcpPlus) {
      throw refused(
        this.#p,
        'E_IPMI_NO_RMCP_PLUS',
        'does not offer IPMI v2.0 (RMCP+) sessions',
        'Enable IPMI 2.0 / RMCP+ on the BMC; stackctl never uses IPMI v1.5 authentication.',
      );
    }
  }

  async #candidateSuites(): Promise<CipherSuite[]> {
    const preferred = (this.#p.suites ?? CIPHER_SUITES.map((s) => s.id))
      .map((id) => cipherSuiteById(id))
      .filter((s): s is CipherSuite => s !== undefined);
    const offered = await this.#offeredSuites();
    // A BMC that cannot list its suites is asked for each acceptable one in turn, best first.
    if (!offered) return preferred;
    const usable = preferred.filter((s) =>
      offered.some(
        (r) =>
          r.oemIana === undefined &&
          r.id === s.id &&
          r.auth.includes(s.auth) &&
          r.integrity.includes(s.integrity) &&
          r.confidentiality.includes(s.confidentiality),
      ),
    );
    if (usable.length === 0) {
      throw refused(
        this.#p,
        'E_IPMI_NO_CIPHER_SUITE',
        `offers only cipher suites ${offered.map((r) => r.id).join(', ') || '(none)'}; stackctl uses 17 or 3`,
        'Enable cipher suite 17 (HMAC-SHA256, AES-128) or 3 (HMAC-SHA1, AES-128) on the BMC LAN channel.',
      );
    }
    return usable;
  }

  async #offeredSuites(): Promise<CipherSuiteRecord[] | undefined> {
    const chunks: Buffer[] = [];
    for (let index = 0; index < 64; index++) {
      const res = await this.#presession(
        'Get Channel Cipher Suites',
        Command.GET_CHANNEL_CIPHER_SUITES,
        Buffer.from([CURRENT_CHANNEL, 0x00, 0x80 | index]),
        true,
      );
      if (res.completionCode !== 0) return index === 0 ? undefined : parseCipherSuiteRecords(Buffer.concat(chunks));
      const part = res.data.subarray(1);
      chunks.push(part);
      if (part.length < 16) break;
    }
    return parseCipherSuiteRecords(Buffer.concat(chunks));
  }

  async #authenticate(suite: CipherSuite): Promise<Established | 'suite-refused'> {
    const p = this.#p;
    const consoleSessionId = randomId(this.#random);
    const tag = (this.#tag = (this.#tag + 1) & 0xff);
    const open = await this.#exchange<OpenSessionResponse>(
      'RMCP+ Open Session',
      () =>
        encodeV2({
          payloadType: PayloadType.OPEN_SESSION_REQUEST,
          sessionId: 0,
          sequence: 0,
          payload: encodeOpenSessionRequest({
            tag,
            privilege: p.privilege,
            consoleSessionId,
            auth: suite.auth,
            integrity: suite.integrity,
            confidentiality: suite.confidentiality,
          }),
        }),
      (d) => {
        const pkt = parsePacket(d);
        if (pkt.kind !== 'v2' || pkt.payloadType !== PayloadType.OPEN_SESSION_RESPONSE)
          return { drop: DropReason.UNEXPECTED };
        if (pkt.sessionId !== 0) return { drop: DropReason.UNKNOWN_SESSION };
        const r = decodeOpenSessionResponse(pkt.payload);
        if (!r) return { drop: DropReason.MALFORMED };
        if (r.tag !== tag || (r.status === RakpStatus.OK && r.consoleSessionId !== consoleSessionId)) {
          return { drop: DropReason.UNEXPECTED };
        }
        return { value: r };
      },
    );
    if (open.status !== RakpStatus.OK) {
      if (SUITE_REFUSED_STATUSES.has(open.status)) return 'suite-refused';
      if (open.status === RakpStatus.UNAUTHORIZED_ROLE) {
        throw authFailed(
          p,
          `unauthorized role: the user may not log in at the ${privilegeName(p.privilege)} level`,
          open.status,
        );
      }
      if (AUTH_FAILURE_STATUSES.has(open.status)) throw authFailed(p, rakpStatusName(open.status), open.status);
      throw refused(
        p,
        'E_IPMI_OPEN_SESSION_REFUSED',
        `refused to open a session: ${rakpStatusName(open.status)}`,
        'The BMC may have no free session slots; wait a minute for idle sessions to expire and retry.',
      );
    }
    if (
      open.auth !== suite.auth ||
      open.integrity !== suite.integrity ||
      open.confidentiality !== suite.confidentiality
    ) {
      // A BMC that "accepts" by downgrading the proposal gets no session from us.
      throw refused(
        p,
        'E_IPMI_DOWNGRADE',
        `answered cipher suite ${suite.id} with other algorithms (${open.auth}/${open.integrity}/${open.confidentiality})`,
        'The BMC firmware negotiates RMCP+ incorrectly; update it.',
      );
    }

    const consoleRandom = this.#random(16);
    const role = p.privilege | ROLE_NAME_ONLY_LOOKUP;
    const kuid = userKey(p.password.reveal());
    const contextOf = (r: Rakp2): RakpContext => ({
      suite,
      consoleSessionId,
      bmcSessionId: open.bmcSessionId,
      consoleRandom,
      bmcRandom: r.bmcRandom,
      guid: r.guid,
      role,
      username: p.username,
    });
    // A RAKP 2 whose code does not match is either the wrong password or a forged or damaged packet: drop it
    // and keep listening for the rest of the attempt; only if nothing better arrives is the password wrong.
    let mismatched: Rakp2 | undefined;
    const rakp2 = await this.#exchange<Rakp2 | 'mismatch'>(
      'RAKP Message 1',
      () =>
        encodeV2({
          payloadType: PayloadType.RAKP1,
          sessionId: 0,
          sequence: 0,
          payload: encodeRakp1({ tag, bmcSessionId: open.bmcSessionId, consoleRandom, role, username: p.username }),
        }),
      (d) => {
        const pkt = parsePacket(d);
        if (pkt.kind !== 'v2' || pkt.payloadType !== PayloadType.RAKP2) return { drop: DropReason.UNEXPECTED };
        if (pkt.sessionId !== 0) return { drop: DropReason.UNKNOWN_SESSION };
        const r = decodeRakp2(pkt.payload);
        if (!r) return { drop: DropReason.MALFORMED };
        if (r.tag !== tag || (r.status === RakpStatus.OK && r.consoleSessionId !== consoleSessionId)) {
          return { drop: DropReason.UNEXPECTED };
        }
        if (r.status === RakpStatus.OK && !sameBytes(rakp2AuthCode(contextOf(r), kuid), r.authCode)) {
          mismatched = r;
          return { drop: DropReason.BAD_INTEGRITY };
        }
        return { value: r };
      },
      () => (mismatched ? 'mismatch' : undefined),
    );
    if (rakp2 === 'mismatch') {
      // Tell the BMC so it frees the half-open session, but do not wait: the verdict is already known.
      await p.transport.send(
        p.peer,
        encodeV2({
          payloadType: PayloadType.RAKP3,
          sessionId: 0,
          sequence: 0,
          payload: encodeRakp3({
            tag,
            status: RakpStatus.INVALID_INTEGRITY_CHECK_VALUE,
            bmcSessionId: open.bmcSessionId,
            authCode: Buffer.alloc(0),
          }),
        }),
      );
      throw authFailed(p, 'wrong password: the RAKP 2 key exchange code does not match');
    }
    if (rakp2.status !== RakpStatus.OK) {
      if (rakp2.status === RakpStatus.UNAUTHORIZED_ROLE) {
        throw authFailed(
          p,
          `unauthorized role: the user may not log in at the ${privilegeName(p.privilege)} level`,
          rakp2.status,
        );
      }
      if (AUTH_FAILURE_STATUSES.has(rakp2.status)) throw authFailed(p, rakpStatusName(rakp2.status), rakp2.status);
      throw refused(p, 'E_IPMI_RAKP_REFUSED', `refused RAKP 1: ${rakpStatusName(rakp2.status)}`, 'Retry later.');
    }
    const ctx = contextOf(rakp2);
    const sik = sessionIntegrityKey(ctx, kuid);
    const icv = rakp4Icv(ctx, sik);
    const authCode = rakp3AuthCode(ctx, kuid);
    let badIcv = false;
    const rakp4 = await this.#exchange<Rakp4 | 'mismatch'>(
      'RAKP Message 3',
      () =>
        encodeV2({
          payloadType: PayloadType.RAKP3,
          sessionId: 0,
          sequence: 0,
          payload: encodeRakp3({ tag, status: RakpStatus.OK, bmcSessionId: open.bmcSessionId, authCode }),
        }),
      (d) => {
        const pkt = parsePacket(d);
        if (pkt.kind !== 'v2' || pkt.payloadType !== PayloadType.RAKP4) return { drop: DropReason.UNEXPECTED };
        if (pkt.sessionId !== 0) return { drop: DropReason.UNKNOWN_SESSION };
        const r = decodeRakp4(pkt.payload);
        if (!r) return { drop: DropReason.MALFORMED };
        if (r.tag !== tag || (r.status === RakpStatus.OK && r.consoleSessionId !== consoleSessionId)) {
          return { drop: DropReason.UNEXPECTED };
        }
        if (r.status === RakpStatus.OK && !sameBytes(icv, r.icv)) {
          badIcv = true;
          return { drop: DropReason.BAD_INTEGRITY };
        }
        return { value: r };
      },
      () => (badIcv ? 'mismatch' : undefined),
    );
    if (rakp4 === 'mismatch') {
      throw authFailed(p, 'RAKP 4 integrity check failed; the BMC may use a BMC key (Kg) stackctl does not have');
    }
    if (rakp4.status !== RakpStatus.OK) {
      if (AUTH_FAILURE_STATUSES.has(rakp4.status)) throw authFailed(p, rakpStatusName(rakp4.status), rakp4.status);
      throw refused(p, 'E_IPMI_RAKP_REFUSED', `refused RAKP 3: ${rakpStatusName(rakp4.status)}`, 'Retry later.');
    }
    const keys = deriveSessionKeys(suite.hash, sik);
    return {
      suite,
      consoleSessionId,
      bmcSessionId: open.bmcSessionId,
      protection: { suite, k1: keys.k1, aesKey: keys.aesKey, random: this.#random },
    };
  }
}
