import { describe, expect, it } from 'vitest';
import { cipherSuiteById, deriveSessionKeys } from '../../../src/bmc/ipmi/crypto.js';
import { decodeRequest, decodeResponse, encodeRequest, encodeResponse } from '../../../src/bmc/ipmi/message.js';
import { DropReason, PayloadType, encodeV2, openV2, parsePacket } from '../../../src/bmc/ipmi/packet.js';

function protection(id: number) {
  const suite = cipherSuiteById(id);
  if (!suite) throw new Error('no suite');
  const keys = deriveSessionKeys(suite.hash, Buffer.alloc(suite.hash === 'sha1' ? 20 : 32, 7));
  return { suite, k1: keys.k1, aesKey: keys.aesKey };
}

const request = encodeRequest({ netFn: 0x00, cmd: 0x01, rqSeq: 9, data: Buffer.alloc(0) });

describe('IPMI message framing', () => {
  it('round-trips requests and responses and rejects a bad checksum', () => {
    const req = decodeRequest(request);
    expect(req).toMatchObject({ netFn: 0, cmd: 1, rqSeq: 9 });
    if (!req) return;
    const res = decodeResponse(encodeResponse(req, 0x00, Buffer.from([1, 0, 0])));
    expect(res).toMatchObject({ netFn: 0, cmd: 1, rqSeq: 9, completionCode: 0 });
    const broken = Buffer.from(request);
    broken[3] = (broken[3] ?? 0) ^ 1;
    expect(decodeRequest(broken)).toBeUndefined();
  });
});

for (const id of [3, 17]) {
  describe(`protected session packets, suite ${id}`, () => {
    const p = protection(id);
    const packet = encodeV2({ payloadType: PayloadType.IPMI, sessionId: 0x1234, sequence: 7, payload: request }, p);

    it('round-trip: authenticated, encrypted, and the header fields survive', () => {
      const parsed = parsePacket(packet);
      expect(parsed.kind).toBe('v2');
      if (parsed.kind !== 'v2') return;
      expect(parsed).toMatchObject({ sessionId: 0x1234, sequence: 7, authenticated: true, encrypted: true });
      expect((packet.length - 4) % 4).toBe(p.suite.integrityLength % 4); // integrity pad aligns the covered part
      expect(openV2(parsed, p)).toEqual({ ok: true, payload: request });
    });

    it('every single flipped bit after the RMCP header is caught, never accepted, never thrown', () => {
      for (let i = 4; i < packet.length; i++) {
        const bad = Buffer.from(packet);
        bad[i] = (bad[i] ?? 0) ^ 0x01;
        const parsed = parsePacket(bad);
        if (parsed.kind === 'v2') expect(openV2(parsed, p).ok).toBe(false);
        else expect(parsed.kind).not.toBe('v15');
      }
    });

    it('every truncation is dropped as malformed or failing integrity', () => {
      for (let n = 0; n < packet.length; n++) {
        const parsed = parsePacket(packet.subarray(0, n));
        if (parsed.kind === 'v2') expect(openV2(parsed, p).ok).toBe(false);
        else expect(parsed.kind).toBe('drop');
      }
    });

    it('a packet from another session key fails integrity', () => {
      const other = protection(id === 3 ? 17 : 3);
      const forged = encodeV2(
        { payloadType: PayloadType.IPMI, sessionId: 0x1234, sequence: 8, payload: request },
        other,
      );
      const parsed = parsePacket(forged);
      if (parsed.kind !== 'v2') throw new Error('expected v2');
      const r = openV2(parsed, p);
      expect(r.ok).toBe(false);
      if (!r.ok) expect([DropReason.BAD_INTEGRITY, DropReason.MALFORMED]).toContain(r.reason);
    });

    it('a clear packet in a protected session is refused as unprotected', () => {
      const clear = encodeV2({ payloadType: PayloadType.IPMI, sessionId: 0x1234, sequence: 9, payload: request });
      const parsed = parsePacket(clear);
      if (parsed.kind !== 'v2') throw new Error('expected v2');
      expect(openV2(parsed, p)).toEqual({ ok: false, reason: DropReason.UNPROTECTED });
    });
  });
}

describe('garbage datagrams', () => {
  it('are classified without throwing', () => {
    const samples = [
      Buffer.alloc(0),
      Buffer.from([0x06]),
      Buffer.from([0x06, 0x00, 0xff, 0x07]),
      Buffer.from([0x06, 0x00, 0xff, 0x07, 0x02, 0, 0, 0, 0, 0, 0, 0, 0]), // v1.5 MD5: refused
      Buffer.from([0x06, 0x00, 0xff, 0x07, 0x06, 0x02]), // OEM payload
      Buffer.from('GET / HTTP/1.1\r\n\r\n'),
      Buffer.alloc(600, 0xff),
    ];
    for (const s of samples) expect(parsePacket(s).kind).toBe('drop');
  });
});
