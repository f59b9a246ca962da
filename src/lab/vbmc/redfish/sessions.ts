import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Secret } from '../../../core/secret.js';

/** One Redfish session held by a virtual BMC. */
export interface LabSession {
  readonly id: string;
  readonly token: string;
  readonly userName: string;
  /** Last use, for the idle timeout. */
  lastUsed: number;
}

/**
 * Sessions and credentials of one virtual BMC. Each BMC has its own user and
 * password, like real hardware; tokens are random and die after an idle timeout.
 */
export class SessionStore {
  readonly #username: string;
  readonly #password: Secret;
  readonly #timeoutMs: number;
  readonly #now: () => number;
  readonly #byToken = new Map<string, LabSession>();
  #nextId = 1;

  constructor(username: string, password: Secret, timeoutSeconds: number, now: () => number) {
    this.#username = username;
    this.#password = password;
    this.#timeoutMs = timeoutSeconds * 1000;
    this.#now = now;
  }

  /** Compare credentials in constant time (per length-normalised digest). */
  checkCredentials(userName: string, password: string): boolean {
    const userOk = sameText(userName, this.#username);
    const passOk = sameText(password, this.#password.reveal());
    return userOk && passOk;
  }

  /** Open a session for a user whose credentials were checked. */
  create(userName: string): LabSession {
    const session: LabSession = {
      id: String(this.#nextId++),
      token: randomBytes(24).toString('hex'),
      userName,
      lastUsed: this.#now(),
    };
    this.#byToken.set(session.token, session);
    return session;
  }

  /** The live session of a token (touching it), or undefined when unknown or idle too long. */
  lookup(token: string): LabSession | undefined {
    const session = this.#byToken.get(token);
    if (!session) return undefined;
    if (this.#now() - session.lastUsed > this.#timeoutMs) {
      this.#byToken.delete(token);
      return undefined;
    }
    session.lastUsed = this.#now();
    return session;
  }

  /** Live sessions, oldest first. */
  list(): LabSession[] {
    return [...this.#byToken.values()];
  }

  /** A session by its id. */
  byId(id: string): LabSession | undefined {
    return this.list().find((s) => s.id === id);
  }

  /** End one session; true when it existed. */
  delete(id: string): boolean {
    const session = this.byId(id);
    if (!session) return false;
    return this.#byToken.delete(session.token);
  }

  /** Drop every session, as a BMC reboot or timeout does; clients see 401 next. */
  expireAll(): void {
    this.#byToken.clear();
  }
}

function sameText(a: string, b: string): boolean {
  const da = createHash('sha256').update(a).digest();
  const db = createHash('sha256').update(b).digest();
  return timingSafeEqual(da, db);
}
