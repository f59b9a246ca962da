import { describe, expect, it } from 'vitest';
import { ReplayWindow } from '../../../src/bmc/ipmi/replay.js';

describe('replay window on inbound session sequence numbers', () => {
  it('accepts each number once and never zero', () => {
    const w = new ReplayWindow();
    expect(w.accepts(0)).toBe(false);
    expect(w.accepts(5)).toBe(true);
    w.commit(5);
    expect(w.accepts(5)).toBe(false);
    expect(w.accepts(6)).toBe(true);
  });

  it('accepts late packets inside the window but not beyond it', () => {
    const w = new ReplayWindow(15, 16);
    for (const n of [1, 2, 3, 20]) w.commit(n);
    expect(w.accepts(10)).toBe(true); // late but within 15 below 20
    expect(w.accepts(3)).toBe(false); // seen
    expect(w.accepts(4)).toBe(false); // 16 below: out of the window
    expect(w.accepts(36)).toBe(true); // 16 ahead
    expect(w.accepts(37)).toBe(false); // too far ahead: likely forged or from another session
  });
});
