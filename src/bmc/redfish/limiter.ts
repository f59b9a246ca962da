/**
 * A small concurrency limiter. BMCs are tiny embedded web servers: many fall
 * over or start answering 503 with more than a handful of parallel requests,
 * so every request to one BMC goes through that BMC's limiter.
 */

/** The most requests stackctl keeps in flight to one BMC at a time. */
export const MAX_IN_FLIGHT_PER_BMC = 4;

/** Runs at most `max` tasks at once; the others wait in arrival order. */
export class Limiter {
  readonly max: number;
  #active = 0;
  readonly #waiting: Array<() => void> = [];

  constructor(max: number) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`limiter size must be a positive integer, not ${max}`);
    this.max = max;
  }

  /** Tasks running now. */
  get active(): number {
    return this.#active;
  }

  /** Tasks waiting for a slot. */
  get queued(): number {
    return this.#waiting.length;
  }

  /** Run `task` once a slot is free; the slot is released however the task ends. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    await this.#acquire();
    try {
      return await task();
    } finally {
      this.#release();
    }
  }

  #acquire(): Promise<void> {
    if (this.#active < this.max) {
      this.#active += 1;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  #release(): void {
    const next = this.#waiting.shift();
    // The slot passes straight to the next waiter, so `active` never dips and lets a newcomer jump the queue.
    if (next) next();
    else this.#active -= 1;
  }
}

/** One limiter per BMC (`host:port`), shared by every driver that talks to that BMC. */
export class HostLimiters {
  readonly perHost: number;
  readonly #limiters = new Map<string, Limiter>();

  constructor(perHost = MAX_IN_FLIGHT_PER_BMC) {
    this.perHost = perHost;
  }

  /** The limiter of one BMC, created on first use. */
  for(hostKey: string): Limiter {
    let limiter = this.#limiters.get(hostKey);
    if (!limiter) {
      limiter = new Limiter(this.perHost);
      this.#limiters.set(hostKey, limiter);
    }
    return limiter;
  }
}

/**
 * The process-wide default: two drivers for two systems behind one BMC (a
 * chassis manager) still share the one budget of that BMC.
 */
export const sharedHostLimiters = new HostLimiters();
