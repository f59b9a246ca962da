/**
 * The cryptography of RMCP+ sessions (IPMI v2.0 section 13.28-13.29): HMACs
 * for RAKP, session key derivation (SIK, K1, K2) and AES-CBC-128 payload
 * confidentiality. Only the two cipher suites stackctl accepts are described:
 * anything weaker (suite 0, MD5, RC4, no confidentiality) is refused.
 */
import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  randomBytes as nodeRandomBytes,
  timingSafeEqual,
} from 'node:crypto';

/** RAKP authentication algorithm numbers (IPMI v2.0 table 13-17). */
export const AuthAlgorithm = {
  /** No authentication: never accepted. */
  RAKP_NONE: 0x00,
  /** RAKP with HMAC-SHA1 (suite 3). */
  RAKP_HMAC_SHA1: 0x01,
  /** RAKP with HMAC-MD5: refused (weak). */
  RAKP_HMAC_MD5: 0x02,
  /** RAKP with HMAC-SHA256 (suite 17). */
  RAKP_HMAC_SHA256: 0x03,
} as const;

/** Integrity algorithm numbers (IPMI v2.0 table 13-18). */
export const IntegrityAlgorithm = {
  /** No integrity: never accepted. */
  NONE: 0x00,
  /** HMAC-SHA1 truncated to 96 bits (suite 3). */
  HMAC_SHA1_96: 0x01,
  /** HMAC-MD5-128: refused (weak). */
  HMAC_MD5_128: 0x02,
  /** MD5-128: refused (weak). */
  MD5_128: 0x03,
  /** HMAC-SHA256 truncated to 128 bits (suite 17). */
  HMAC_SHA256_128: 0x04,
} as const;

/** Confidentiality algorithm numbers (IPMI v2.0 table 13-19). */
export const ConfidentialityAlgorithm = {
  /** Clear text: never accepted. */
  NONE: 0x00,
  /** AES in CBC mode with a 128-bit key (suites 3 and 17). */
  AES_CBC_128: 0x01,
  /** RC4 with a 128-bit key: refused. */
  XRC4_128: 0x02,
  /** RC4 with a 40-bit key: refused. */
  XRC4_40: 0x03,
} as const;

/** A cipher suite stackctl is willing to use, with the sizes its algorithms imply. */
export interface CipherSuite {
  /** Cipher suite id as listed by Get Channel Cipher Suites. */
  readonly id: number;
  readonly auth: number;
  readonly integrity: number;
  readonly confidentiality: number;
  /** Hash behind RAKP, SIK/K1/K2 and the session integrity HMAC. */
  readonly hash: 'sha1' | 'sha256';
  /** Length of the RAKP 2/3 key exchange authentication codes (full HMAC). */
  readonly rakpAuthCodeLength: number;
  /** Length of the RAKP 4 integrity check value (truncated HMAC). */
  readonly rakp4IcvLength: number;
  /** Length of the AuthCode trailer on every session packet (truncated HMAC). */
  readonly integrityLength: number;
}

/** The cipher suites stackctl speaks, best first. Everything else is refused. */
export const CIPHER_SUITES: readonly CipherSuite[] = [
  {
    id: 17,
    auth: AuthAlgorithm.RAKP_HMAC_SHA256,
    integrity: IntegrityAlgorithm.HMAC_SHA256_128,
    confidentiality: ConfidentialityAlgorithm.AES_CBC_128,
    hash: 'sha256',
    rakpAuthCodeLength: 32,
    rakp4IcvLength: 16,
    integrityLength: 16,
  },
  {
    id: 3,
    auth: AuthAlgorithm.RAKP_HMAC_SHA1,
    integrity: IntegrityAlgorithm.HMAC_SHA1_96,
    confidentiality: ConfidentialityAlgorithm.AES_CBC_128,
    hash: 'sha1',
    rakpAuthCodeLength: 20,
    rakp4IcvLength: 12,
    integrityLength: 12,
  },
];

/** Look up a supported cipher suite by id. */
export function cipherSuiteById(id: number): CipherSuite | undefined {
  return CIPHER_SUITES.find((s) => s.id === id);
}

/** Look up a supported cipher suite by its three algorithm numbers. */
export function cipherSuiteByAlgorithms(auth: number, integrity: number, conf: number): CipherSuite | undefined {
  return CIPHER_SUITES.find((s) => s.auth === auth && s.integrity === integrity && s.confidentiality === conf);
}

/** HMAC of the concatenated parts. */
export function hmac(hash: CipherSuite['hash'], key: Buffer, ...parts: readonly Buffer[]): Buffer {
  const h = createHmac(hash, key);
  for (const p of parts) h.update(p);
  return h.digest();
}

/** Constant-time comparison that also accepts different lengths (as a mismatch). */
export function sameBytes(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * The user key Kuid: the password as bytes. IPMI v2.0 passwords are at most
 * 20 bytes and are zero-padded to 20; HMAC zero-pads keys shorter than its
 * block anyway, so the padded and unpadded forms give the same result.
 */
export function userKey(password: string): Buffer {
  const key = Buffer.alloc(20);
  Buffer.from(password, 'utf8').copy(key, 0, 0, 20);
  return key;
}

/** Keys of an active session. */
export interface SessionKeys {
  /** Session integrity key, from which K1 and K2 derive. */
  readonly sik: Buffer;
  /** K1: key of the per-packet integrity HMAC. */
  readonly k1: Buffer;
  /** K2: its first 16 bytes are the AES-CBC-128 key. */
  readonly k2: Buffer;
  /** AES-128 key (first 16 bytes of K2). */
  readonly aesKey: Buffer;
}

/** Derive K1, K2 and the AES key from the SIK (constants are 20 bytes of 01h and 02h for every hash). */
export function deriveSessionKeys(hash: CipherSuite['hash'], sik: Buffer): SessionKeys {
  const k1 = hmac(hash, sik, Buffer.alloc(20, 0x01));
  const k2 = hmac(hash, sik, Buffer.alloc(20, 0x02));
  return { sik, k1, k2, aesKey: k2.subarray(0, 16) };
}

/** Source of random bytes; injectable so tests can replay known vectors. */
export type RandomBytes = (size: number) => Buffer;

/** Bytes drawn from the CSPRNG at a time: one system call feeds hundreds of IVs and nonces. */
const RANDOM_POOL_SIZE = 4096;
let pool = Buffer.alloc(0);
let poolOffset = 0;

/** Default random source: the operating system's CSPRNG, drawn in blocks. */
export const defaultRandomBytes: RandomBytes = (size) => {
  if (size > RANDOM_POOL_SIZE) return nodeRandomBytes(size);
  if (poolOffset + size > pool.length) {
    pool = nodeRandomBytes(RANDOM_POOL_SIZE);
    poolOffset = 0;
  }
  // Copy out so that no two callers share (and could alter) the same bytes.
  const out = Buffer.from(pool.subarray(poolOffset, poolOffset + size));
  poolOffset += size;
  return out;
};

/**
 * Encrypt a payload with AES-CBC-128 as RMCP+ wants it: a fresh IV in front,
 * then the ciphertext of data + pad bytes 01h, 02h, … + the pad length.
 */
export function encryptPayload(aesKey: Buffer, data: Buffer, random: RandomBytes = defaultRandomBytes): Buffer {
  const padLength = (16 - ((data.length + 1) % 16)) % 16;
  const plain = Buffer.alloc(data.length + padLength + 1);
  data.copy(plain, 0);
  for (let i = 0; i < padLength; i++) plain[data.length + i] = i + 1;
  plain[plain.length - 1] = padLength;
  const iv = random(16);
  const cipher = createCipheriv('aes-128-cbc', aesKey, iv);
  cipher.setAutoPadding(false);
  return Buffer.concat([iv, cipher.update(plain), cipher.final()]);
}

/** Decrypt an AES-CBC-128 payload; undefined when its length or padding is wrong. */
export function decryptPayload(aesKey: Buffer, payload: Buffer): Buffer | undefined {
  if (payload.length < 32 || payload.length % 16 !== 0) return undefined;
  const decipher = createDecipheriv('aes-128-cbc', aesKey, payload.subarray(0, 16));
  decipher.setAutoPadding(false);
  const plain = Buffer.concat([decipher.update(payload.subarray(16)), decipher.final()]);
  const padLength = plain[plain.length - 1] ?? 0;
  if (padLength > 15 || padLength + 1 > plain.length) return undefined;
  const end = plain.length - 1 - padLength;
  for (let i = 0; i < padLength; i++) if (plain[end + i] !== i + 1) return undefined;
  return plain.subarray(0, end);
}
