/**
 * A virtual IPMI 2.0 BMC speaking RMCP+ (lanplus) over UDP, in front of a
 * MachineBackend. Many run in one process, one socket each. It offers cipher
 * suites 17 and 3 only, refuses v1.5 authentication, and refuses bad
 * credentials as real BMCs do: an unknown user gets RAKP 2 "unauthorized
 * name", a wrong password shows in RAKP 2's code (the console notices) or in
 * RAKP 4 "invalid integrity check value" (when the console goes on anyway).
 */
import { createSocket, type Socket } from 'node:dgram';
import type { Secret } from '../../../core/secret.js';
import {
  CURRENT_CHANNEL,
  encodeAuthCapabilities,
  encodeCipherSuiteRecords,
  type DeviceId,
} from '../../../bmc/ipmi/commands.js';
import {
  CIPHER_SUITES,
  cipherSuiteByAlgorithms,
  defaultRandomBytes,
  deriveSessionKeys,
  sameBytes,
  userKey,
  type CipherSuite,
  type RandomBytes,
} from '../../../bmc/ipmi/crypto.js';
import { Command, NetFn, decodeRequest, encodeResponse, type IpmiRequest } from '../../../bmc/ipmi/message.js';
import {
  DropReason,
  PayloadType,
  encodeV15,
  encodeV2,
  openV2,
  parsePacket,
  type PacketProtection,
  type ParsedPacket,
} from '../../../bmc/ipmi/packet.js';
import { Privilege } from '../../../bmc/ipmi/privilege.js';
import {
  RakpStatus,
  decodeOpenSessionRequest,
  decodeRakp1,
  decodeRakp3,
  encodeOpenSessionResponse,
  encodeRakp2,
  encodeRakp4,
  rakp2AuthCode,
  rakp3AuthCode,
  rakp4Icv,
  sessionIntegrityKey,
  type RakpContext,
} from '../../../bmc/ipmi/rakp.js';
import { ReplayWindow } from '../../../bmc/ipmi/replay.js';
import { encodeAsfPong, decodeAsf, AsfMessageType } from '../../../bmc/ipmi/rmcp.js';
import { newCounters, type TransportCounters } from '../../../bmc/ipmi/transport.js';
import type { MachineBackend } from '../machine.js';
import { BootOptionsState } from './boot-options.js';
import { CC, handleCommand, type CommandResult } from './commands.js';

/** Completion code of a busy BMC (fault injection). */
const BUSY = 0xc0;

/** Runs `send` after `ms` on a timer that does not keep the process alive. */
const defaultSchedule = (send: () => void, ms: number): void => void setTimeout(send, ms).unref();

/** The LAN channel number this BMC reports. */
export const LAN_CHANNEL = 0x01;

/** Defaults of a virtual BMC. */
export const VBMC_DEFAULTS = {
  /** Cipher suites offered, in listing order. */
  suites: [3, 17] as readonly number[],
  /** Concurrent sessions, as small BMCs allow (4-16 is common). */
  maxSessions: 16,
  /** Idle time after which a session is forgotten (ms), as the spec's default. */
  sessionTimeoutMs: 60_000,
  /** Identity returned by Get Device ID. */
  device: {
    deviceId: 0x20,
    deviceRevision: 0x01,
    firmwareMajor: 1,
    firmwareMinor: 0,
    ipmiVersion: '2.0',
    manufacturerId: 0,
    productId: 0x5643,
  } satisfies DeviceId,
} as const;

/** Options of a virtual BMC; side effects are injectable. */
export interface IpmiBmcServerOptions {
  readonly backend: MachineBackend;
  readonly username: string;
  readonly password: Secret;
  /** Highest privilege of the user. Default administrator. */
  readonly privilege?: Privilege;
  /** 16-byte system GUID; random by default. */
  readonly guid?: Buffer;
  readonly suites?: readonly number[];
  readonly device?: Partial<DeviceId>;
  readonly maxSessions?: number;
  readonly sessionTimeoutMs?: number;
  readonly now?: () => number;
  readonly random?: RandomBytes;
  readonly createSocket?: () => Socket;
  /** Runs `send` after `ms` (faults.replyDelayMs); setTimeout by default. */
  readonly schedule?: (send: () => void, ms: number) => void;
  /** Fault injection for tests and benchmarks of client resilience. */
  readonly faults?: VbmcFaults;
}

/** Misbehaviours a lab BMC can be told to show. */
export interface VbmcFaults {
  /** Answer this many chassis commands with C0h (node busy) before serving them. */
  busyAnswers?: number;
  /** Drop this many datagrams silently before answering (a lossy network). */
  dropDatagrams?: number;
  /**
   * Carry out in-session commands of this kind but lose `count` of their answers (the network lost the
   * reply after the BMC acted). A retransmission of the same request is answered again, not executed again.
   */
  loseReplies?: { readonly netFn: number; readonly cmd: number; count: number };
  /**
   * Hold every answer this long (ms) before sending it: the round trip of a real network and BMC firmware,
   * where a session kept open saves the most. Read at each answer, so a benchmark can change it between runs.
   */
  replyDelayMs?: number;
}

/** Where a virtual BMC listens. */
export interface ListenOptions {
  readonly host?: string;
  /** 0 picks a free port; the chosen one is returned. */
  readonly port?: number;
}

interface ServerSession {
  readonly bmcSessionId: number;
  readonly consoleSessionId: number;
  readonly peer: string;
  readonly suite: CipherSuite;
  readonly openTag: number;
  readonly openResponse: Buffer;
  state: 'opened' | 'rakp2' | 'active';
  lastActivity: number;
  rakp?: RakpContext;
  rakp2?: Buffer;
  rakp4?: Buffer;
  protection?: PacketProtection;
  /** Maximum privilege granted at RAKP time. */
  maxPrivilege: number;
  privilege: number;
  readonly replay: ReplayWindow;
  outSeq: number;
  /** Last request and its (pending) answer, so a retransmission is not executed twice. */
  last?: { key: string; answer: Promise<Buffer> };
}

/** One virtual BMC. */
export class IpmiBmcServer {
  /** Traffic and drop counters (garbage, bad HMACs, replays and unknown sessions are counted here). */
  readonly counters: TransportCounters = newCounters();
  readonly backend: MachineBackend;
  readonly guid: Buffer;
  readonly #o: IpmiBmcServerOptions;
  readonly #suites: readonly CipherSuite[];
  readonly #device: DeviceId;
  readonly #boot = new BootOptionsState();
  readonly #sessions = new Map<number, ServerSession>();
  readonly #now: () => number;
  readonly #random: RandomBytes;
  readonly #kuid: Buffer;
  #socket: Socket | undefined;

  constructor(options: IpmiBmcServerOptions) {
    this.#o = options;
    this.backend = options.backend;
    this.#now = options.now ?? Date.now;
    this.#random = options.random ?? defaultRandomBytes;
    this.guid = options.guid ?? this.#random(16);
    this.#suites = (options.suites ?? VBMC_DEFAULTS.suites)
      .map((id) => CIPHER_SUITES.find((s) => s.id === id))
      .filter((s): s is CipherSuite => s !== undefined);
    this.#device = { ...VBMC_DEFAULTS.device, ...options.device };
    this.#kuid = userKey(options.password.reveal());
  }

  /** Number of sessions currently held (any state). */
  get sessionCount(): number {
    return this.#sessions.size;
  }

  /** Start answering on a UDP port; resolves to the address actually bound. */
  async listen(options: ListenOptions = {}): Promise<{ host: string; port: number }> {
    const host = options.host ?? '127.0.0.1';
    const socket = (this.#o.createSocket ?? (() => createSocket('udp4')))();
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(options.port ?? 0, host, () => {
        socket.off('error', reject);
        resolve();
      });
    });
    socket.on('error', () => {
      this.counters.sendErrors += 1;
    });
    socket.on('message', (msg, rinfo) => {
      this.counters.received += 1;
      void this.handle(msg, `${rinfo.address}:${rinfo.port}`).then((reply) => {
        if (!reply) return;
        const send = (): void => {
          if (this.#socket !== socket) return; // closed while the answer was held
          // No completion callback: the send completes synchronously when it can (errors reach 'error').
          socket.send(reply, rinfo.port, rinfo.address);
          this.counters.sent += 1;
        };
        const delay = this.#o.faults?.replyDelayMs ?? 0;
        if (delay > 0) (this.#o.schedule ?? defaultSchedule)(send, delay);
        else send();
      });
    });
    this.#socket = socket;
    return { host, port: socket.address().port };
  }

  /** Stop answering. Safe to call twice. */
  async close(): Promise<void> {
    const socket = this.#socket;
    this.#socket = undefined;
    this.#sessions.clear();
    if (socket) await new Promise<void>((r) => socket.close(() => r()));
  }

  #drop(reason: DropReason): undefined {
    this.counters.dropped[reason] += 1;
    return undefined;
  }

  /**
   * Answer one datagram from `peer` ("ip:port"); undefined means no answer
   * (dropped and counted). Never throws, whatever the bytes.
   */
  async handle(datagram: Buffer, peer: string): Promise<Buffer | undefined> {
    const faults = this.#o.faults;
    if (faults?.dropDatagrams) {
      faults.dropDatagrams -= 1;
      return undefined;
    }
    try {
      const pkt = parsePacket(datagram);
      switch (pkt.kind) {
        case 'drop':
          return this.#drop(pkt.reason);
        case 'asf': {
          const m = decodeAsf(datagram);
          return m && m.type === AsfMessageType.PING ? encodeAsfPong(m.tag) : this.#drop(DropReason.MALFORMED);
        }
        case 'v15':
          return this.#v15(pkt);
        case 'v2':
          return await this.#v2(pkt, peer);
      }
    } catch {
      return this.#drop(DropReason.MALFORMED);
    }
  }

  /** Channel discovery answers, valid before and inside sessions. */
  #discovery(req: IpmiRequest): CommandResult | undefined {
    if (req.netFn !== NetFn.APP) return undefined;
    if (req.cmd === Command.GET_CHANNEL_AUTH_CAPABILITIES) {
      if (req.data.length !== 2) return { cc: CC.DATA_LENGTH_INVALID };
      // Without bit 7 the console asks for the v1.5 form; we only speak v2.0, which the answer still says.
      return { cc: CC.OK, data: encodeAuthCapabilities(LAN_CHANNEL) };
    }
    if (req.cmd === Command.GET_CHANNEL_CIPHER_SUITES) {
      if (req.data.length !== 3) return { cc: CC.DATA_LENGTH_INVALID };
      const channel = (req.data[0] ?? 0) & 0x0f;
      if (channel !== CURRENT_CHANNEL && channel !== LAN_CHANNEL) return { cc: CC.INVALID_DATA_FIELD };
      if ((req.data[1] ?? 0) !== PayloadType.IPMI) return { cc: CC.INVALID_DATA_FIELD };
      const byId = ((req.data[2] ?? 0) & 0x80) !== 0;
      const index = (req.data[2] ?? 0) & 0x3f;
      const all = byId
        ? encodeCipherSuiteRecords(
            this.#suites.map((s) => ({
              id: s.id,
              auth: [s.auth],
              integrity: [s.integrity],
              confidentiality: [s.confidentiality],
            })),
          )
        : Buffer.from([
            ...new Set(this.#suites.flatMap((s) => [s.auth, 0x40 | s.integrity, 0x80 | s.confidentiality])),
          ]);
      return {
        cc: CC.OK,
        data: Buffer.concat([Buffer.from([LAN_CHANNEL]), all.subarray(index * 16, index * 16 + 16)]),
      };
    }
    return undefined;
  }

  #v15(pkt: Extract<ParsedPacket, { kind: 'v15' }>): Buffer | undefined {
    // v1.5 sessions (MD2/MD5/straight password) are never offered: only discovery outside a session.
    if (pkt.sessionId !== 0) return this.#drop(DropReason.UNSUPPORTED);
    const req = decodeRequest(pkt.message);
    if (!req) return this.#drop(DropReason.MALFORMED);
    const r = this.#discovery(req);
    if (!r) return this.#drop(DropReason.UNEXPECTED);
    return encodeV15(encodeResponse(req, r.cc, r.data));
  }

  async #v2(pkt: Extract<ParsedPacket, { kind: 'v2' }>, peer: string): Promise<Buffer | undefined> {
    if (pkt.sessionId === 0) {
      if (pkt.authenticated || pkt.encrypted) return this.#drop(DropReason.UNEXPECTED);
      switch (pkt.payloadType) {
        case PayloadType.IPMI:
          return this.#presessionCommand(pkt.payload);
        case PayloadType.OPEN_SESSION_REQUEST:
          return this.#openSession(pkt.payload, peer);
        case PayloadType.RAKP1:
          return this.#rakp1(pkt.payload, peer);
        case PayloadType.RAKP3:
          return this.#rakp3(pkt.payload, peer);
        default:
          return this.#drop(DropReason.UNEXPECTED);
      }
    }
    if (pkt.payloadType !== PayloadType.IPMI) return this.#drop(DropReason.UNSUPPORTED);
    return this.#sessionCommand(pkt, peer);
  }

  #presessionCommand(payload: Buffer): Buffer | undefined {
    const req = decodeRequest(payload);
    if (!req) return this.#drop(DropReason.MALFORMED);
    const r = this.#discovery(req);
    if (!r) return this.#drop(DropReason.UNEXPECTED);
    return encodeV2({
      payloadType: PayloadType.IPMI,
      sessionId: 0,
      sequence: 0,
      payload: encodeResponse(req, r.cc, r.data),
    });
  }

  #reply(payloadType: number, payload: Buffer): Buffer {
    return encodeV2({ payloadType, sessionId: 0, sequence: 0, payload });
  }

  #expire(): void {
    const now = this.#now();
    const limit = this.#o.sessionTimeoutMs ?? VBMC_DEFAULTS.sessionTimeoutMs;
    for (const [id, s] of this.#sessions) if (now - s.lastActivity > limit) this.#sessions.delete(id);
  }

  #openSession(payload: Buffer, peer: string): Buffer | undefined {
    const req = decodeOpenSessionRequest(payload);
    if (!req) return this.#drop(DropReason.MALFORMED);
    // A retransmitted request gets the same session, not a second one.
    for (const s of this.#sessions.values()) {
      if (
        s.peer === peer &&
        s.consoleSessionId === req.consoleSessionId &&
        s.openTag === req.tag &&
        s.state === 'opened'
      ) {
        return this.#reply(PayloadType.OPEN_SESSION_RESPONSE, s.openResponse);
      }
    }
    const fail = (status: number) =>
      this.#reply(
        PayloadType.OPEN_SESSION_RESPONSE,
        encodeOpenSessionResponse({
          tag: req.tag,
          status,
          privilege: 0,
          consoleSessionId: req.consoleSessionId,
          bmcSessionId: 0,
          auth: 0,
          integrity: 0,
          confidentiality: 0,
        }),
      );
    const suite = cipherSuiteByAlgorithms(req.auth, req.integrity, req.confidentiality);
    if (!suite || !this.#suites.includes(suite)) {
      if (!this.#suites.some((s) => s.auth === req.auth)) return fail(RakpStatus.INVALID_AUTH_ALGORITHM);
      if (!this.#suites.some((s) => s.integrity === req.integrity)) return fail(RakpStatus.INVALID_INTEGRITY_ALGORITHM);
      if (!this.#suites.some((s) => s.confidentiality === req.confidentiality)) {
        return fail(RakpStatus.INVALID_CONFIDENTIALITY_ALGORITHM);
      }
      return fail(RakpStatus.NO_CIPHER_SUITE_MATCH);
    }
    const userMax = this.#o.privilege ?? Privilege.ADMINISTRATOR;
    if (req.privilege > Privilege.OEM) return fail(RakpStatus.INVALID_ROLE);
    if (req.privilege > userMax) return fail(RakpStatus.UNAUTHORIZED_ROLE);
    this.#expire();
    if (this.#sessions.size >= (this.#o.maxSessions ?? VBMC_DEFAULTS.maxSessions)) {
      return fail(RakpStatus.INSUFFICIENT_RESOURCES);
    }
    let bmcSessionId = 0;
    while (bmcSessionId === 0 || this.#sessions.has(bmcSessionId)) bmcSessionId = this.#random(4).readUInt32LE(0);
    const granted = req.privilege === 0 ? userMax : req.privilege;
    const openResponse = encodeOpenSessionResponse({
      tag: req.tag,
      status: RakpStatus.OK,
      privilege: granted,
      consoleSessionId: req.consoleSessionId,
      bmcSessionId,
      auth: suite.auth,
      integrity: suite.integrity,
      confidentiality: suite.confidentiality,
    });
    this.#sessions.set(bmcSessionId, {
      bmcSessionId,
      consoleSessionId: req.consoleSessionId,
      peer,
      suite,
      openTag: req.tag,
      openResponse,
      state: 'opened',
      lastActivity: this.#now(),
      maxPrivilege: granted,
      privilege: Privilege.USER,
      replay: new ReplayWindow(),
      outSeq: 0,
    });
    return this.#reply(PayloadType.OPEN_SESSION_RESPONSE, openResponse);
  }

  #rakp1(payload: Buffer, peer: string): Buffer | undefined {
    const m = decodeRakp1(payload);
    if (!m) return this.#drop(DropReason.MALFORMED);
    const s = this.#sessions.get(m.bmcSessionId);
    const fail = (status: number, consoleSessionId: number) =>
      this.#reply(
        PayloadType.RAKP2,
        encodeRakp2({
          tag: m.tag,
          status,
          consoleSessionId,
          bmcRandom: Buffer.alloc(0),
          guid: Buffer.alloc(0),
          authCode: Buffer.alloc(0),
        }),
      );
    if (!s || s.peer !== peer) return fail(RakpStatus.INVALID_SESSION_ID, 0);
    if (s.state === 'rakp2' && s.rakp2 && s.rakp && sameBytes(s.rakp.consoleRandom, m.consoleRandom)) {
      return this.#reply(PayloadType.RAKP2, s.rakp2); // retransmission: same random, same answer
    }
    if (s.state !== 'opened') return fail(RakpStatus.INACTIVE_SESSION_ID, s.consoleSessionId);
    const requested = m.role & 0x0f;
    if (m.username !== this.#o.username) {
      this.#sessions.delete(s.bmcSessionId);
      return fail(RakpStatus.UNAUTHORIZED_NAME, s.consoleSessionId);
    }
    if (requested < Privilege.CALLBACK || requested > Privilege.OEM) {
      this.#sessions.delete(s.bmcSessionId);
      return fail(RakpStatus.INVALID_ROLE, s.consoleSessionId);
    }
    if (requested > (this.#o.privilege ?? Privilege.ADMINISTRATOR)) {
      this.#sessions.delete(s.bmcSessionId);
      return fail(RakpStatus.UNAUTHORIZED_ROLE, s.consoleSessionId);
    }
    const rakp: RakpContext = {
      suite: s.suite,
      consoleSessionId: s.consoleSessionId,
      bmcSessionId: s.bmcSessionId,
      consoleRandom: m.consoleRandom,
      bmcRandom: this.#random(16),
      guid: this.guid,
      role: m.role,
      username: m.username,
    };
    s.rakp = rakp;
    s.maxPrivilege = Math.min(s.maxPrivilege || requested, requested);
    s.state = 'rakp2';
    s.lastActivity = this.#now();
    s.rakp2 = encodeRakp2({
      tag: m.tag,
      status: RakpStatus.OK,
      consoleSessionId: s.consoleSessionId,
      bmcRandom: rakp.bmcRandom,
      guid: this.guid,
      authCode: rakp2AuthCode(rakp, this.#kuid),
    });
    return this.#reply(PayloadType.RAKP2, s.rakp2);
  }

  #rakp3(payload: Buffer, peer: string): Buffer | undefined {
    const m = decodeRakp3(payload);
    if (!m) return this.#drop(DropReason.MALFORMED);
    const s = this.#sessions.get(m.bmcSessionId);
    const answer = (status: number, consoleSessionId: number, icv = Buffer.alloc(0)) =>
      this.#reply(PayloadType.RAKP4, encodeRakp4({ tag: m.tag, status, consoleSessionId, icv }));
    if (!s || s.peer !== peer) return answer(RakpStatus.INVALID_SESSION_ID, 0);
    if (s.state === 'active' && s.rakp4) return this.#reply(PayloadType.RAKP4, s.rakp4); // retransmission
    if (s.state !== 'rakp2' || !s.rakp) return answer(RakpStatus.INACTIVE_SESSION_ID, s.consoleSessionId);
    if (m.status !== RakpStatus.OK) {
      // The console rejected our RAKP 2 (wrong password on its side): forget the session, say nothing.
      this.#sessions.delete(s.bmcSessionId);
      return undefined;
    }
    if (!sameBytes(rakp3AuthCode(s.rakp, this.#kuid), m.authCode)) {
      this.#sessions.delete(s.bmcSessionId);
      return answer(RakpStatus.INVALID_INTEGRITY_CHECK_VALUE, s.consoleSessionId);
    }
    const sik = sessionIntegrityKey(s.rakp, this.#kuid);
    const keys = deriveSessionKeys(s.suite.hash, sik);
    s.protection = { suite: s.suite, k1: keys.k1, aesKey: keys.aesKey, random: this.#random };
    s.state = 'active';
    s.lastActivity = this.#now();
    // RMCP+ sessions start at User (or the maximum, if lower) until Set Session Privilege Level.
    s.privilege = Math.min(Privilege.USER, s.maxPrivilege);
    s.rakp4 = encodeRakp4({
      tag: m.tag,
      status: RakpStatus.OK,
      consoleSessionId: s.consoleSessionId,
      icv: rakp4Icv(s.rakp, sik),
    });
    return this.#reply(PayloadType.RAKP4, s.rakp4);
  }

  async #sessionCommand(pkt: Extract<ParsedPacket, { kind: 'v2' }>, peer: string): Promise<Buffer | undefined> {
    const s = this.#sessions.get(pkt.sessionId);
    if (!s || s.state !== 'active' || !s.protection || s.peer !== peer) return this.#drop(DropReason.UNKNOWN_SESSION);
    if (!s.replay.accepts(pkt.sequence)) return this.#drop(DropReason.REPLAY);
    const opened = openV2(pkt, s.protection);
    if (!opened.ok) return this.#drop(opened.reason);
    s.replay.commit(pkt.sequence);
    s.lastActivity = this.#now();
    const req = decodeRequest(opened.payload);
    if (!req) return this.#drop(DropReason.MALFORMED);
    const key = `${req.netFn}:${req.cmd}:${req.rqSeq}:${req.data.toString('hex')}`;
    let answer: Promise<Buffer>;
    // NOTE: a console retransmits with a new session sequence number but the same rqSeq (IPMI v2.0); real
    // BMCs answer such a duplicate from the first execution, so a lost answer never power-cycles twice.
    if (s.last?.key === key) {
      answer = s.last.answer; // a retransmission: answer again, do not power-cycle twice
    } else {
      answer = this.#execute(req, s);
      s.last = { key, answer };
    }
    const message = await answer;
    const lose = this.#o.faults?.loseReplies;
    if (lose && lose.count > 0 && lose.netFn === req.netFn && lose.cmd === req.cmd) {
      lose.count -= 1;
      return undefined;
    }
    s.outSeq = (s.outSeq + 1) >>> 0 || 1;
    return encodeV2(
      { payloadType: PayloadType.IPMI, sessionId: s.consoleSessionId, sequence: s.outSeq, payload: message },
      s.protection,
    );
  }

  async #execute(req: IpmiRequest, s: ServerSession): Promise<Buffer> {
    const faults = this.#o.faults;
    if (faults?.busyAnswers && req.netFn === NetFn.CHASSIS) {
      faults.busyAnswers -= 1;
      return encodeResponse(req, BUSY);
    }
    const r = await handleCommand(req, {
      backend: this.backend,
      device: this.#device,
      boot: this.#boot,
      privilege: s.privilege,
      maxPrivilege: s.maxPrivilege,
      sessionId: s.bmcSessionId,
      setPrivilege: (level) => {
        s.privilege = level;
      },
      closeSession: () => {
        // The answer still goes out with the session's keys, which the caller holds.
        this.#sessions.delete(s.bmcSessionId);
      },
      discovery: (q) => this.#discovery(q),
    });
    return encodeResponse(req, r.cc, r.data);
  }
}
