/**
 * Sliding replay window for inbound session sequence numbers (IPMI v2.0
 * section 6.12.13): a packet is accepted once, and only when its number lies
 * at most `behind` below or `ahead` above the highest number accepted so far.
 */
export class ReplayWindow {
  #highest = 0;
  /** Bit i set: sequence number `highest - i` was accepted. */
  #seen = 0n;
  readonly behind: number;
  readonly ahead: number;

  constructor(behind = 15, ahead = 16) {
    this.behind = behind;
    this.ahead = ahead;
  }

  /** True when `sequence` may be accepted (check before the integrity test, commit after it). */
  accepts(sequence: number): boolean {
    if (sequence === 0) return false; // zero is reserved for packets outside a session
    if (this.#highest === 0) return true;
    const diff = sequence - this.#highest;
    if (diff > 0) return diff <= this.ahead;
    if (-diff > this.behind) return false;
    return (this.#seen & (1n << BigInt(-diff))) === 0n;
  }

  /** Record an accepted sequence number. */
  commit(sequence: number): void {
    if (this.#highest === 0) {
      this.#highest = sequence;
      this.#seen = 1n;
      return;
    }
    const diff = sequence - this.#highest;
    if (diff > 0) {
      this.#seen = ((this.#seen << BigInt(diff)) | 1n) & ((1n << 64n) - 1n);
      this.#highest = sequence;
    } else {
      this.#seen |= 1n << BigInt(-diff);
    }
  }
}
