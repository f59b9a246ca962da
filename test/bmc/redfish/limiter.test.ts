import { describe, expect, it } from 'vitest';
import { HostLimiters, Limiter, MAX_IN_FLIGHT_PER_BMC, sharedHostLimiters } from '../../../src/bmc/redfish/limiter.js';

describe('Limiter', () => {
  it('never runs more than its size at once and runs every task in arrival order', async () => {
    const limiter = new Limiter(4);
    let running = 0;
    let peak = 0;
    const started: number[] = [];
    const tasks = Array.from({ length: 20 }, (_, i) =>
      limiter.run(async () => {
        started.push(i);
        running += 1;
        peak = Math.max(peak, running);
        await new Promise((resolve) => setTimeout(resolve, 2));
        running -= 1;
        return i;
      }),
    );
    expect(await Promise.all(tasks)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(peak).toBe(4);
    expect(started).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(limiter.active).toBe(0);
    expect(limiter.queued).toBe(0);
  });

  it('frees the slot of a task that throws', async () => {
    const limiter = new Limiter(1);
    await expect(limiter.run(() => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await limiter.run(async () => 'next')).toBe('next');
  });

  it('rejects a size that is not a positive integer', () => {
    expect(() => new Limiter(0)).toThrow(RangeError);
  });
});

describe('HostLimiters', () => {
  it('gives one limiter per host, shared between callers', () => {
    const limiters = new HostLimiters();
    expect(limiters.for('a:443')).toBe(limiters.for('a:443'));
    expect(limiters.for('a:443')).not.toBe(limiters.for('b:443'));
    expect(limiters.for('a:443').max).toBe(MAX_IN_FLIGHT_PER_BMC);
    expect(sharedHostLimiters.perHost).toBe(4);
  });
});
