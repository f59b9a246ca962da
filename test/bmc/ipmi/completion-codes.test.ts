import { describe, expect, it } from 'vitest';
import { ExitCode, RemoteError } from '../../../src/core/errors.js';
import {
  BOOT_OPTION_CODES,
  COMPLETION_CODES,
  SET_PRIVILEGE_CODES,
  completionCodeError,
  completionCodeInfo,
} from '../../../src/bmc/ipmi/completion-codes.js';

const ctx = { node: 'ctl-0', address: 'ipmi://10.1.0.11', command: 'Chassis Control' };

describe('completion code table', () => {
  for (const [value, info] of Object.entries({ ...COMPLETION_CODES, ...BOOT_OPTION_CODES })) {
    const code = Number(value);
    const specific = code < 0xc0 ? BOOT_OPTION_CODES : {};
    it(`${code.toString(16)}h becomes E_IPMI_${info.name} naming the node, the address and the code`, () => {
      const err = completionCodeError(code, ctx, specific);
      expect(err).toBeInstanceOf(RemoteError);
      expect(err.exitCode).toBe(ExitCode.REMOTE);
      expect(err.code).toBe(`E_IPMI_${info.name}`);
      expect(err.message).toContain('ctl-0');
      expect(err.message).toContain('ipmi://10.1.0.11');
      expect(err.message).toContain(`${code.toString(16).toUpperCase()}h`);
      expect(err.message).toContain(info.meaning);
      expect(err.hint).toBeTruthy();
    });
  }

  for (const [value, info] of Object.entries(SET_PRIVILEGE_CODES)) {
    it(`Set Session Privilege Level ${Number(value).toString(16)}h becomes E_IPMI_${info.name}`, () => {
      const err = completionCodeError(
        Number(value),
        { ...ctx, command: 'Set Session Privilege Level' },
        SET_PRIVILEGE_CODES,
      );
      expect(err.code).toBe(`E_IPMI_${info.name}`);
      expect(err.message).toContain(info.meaning);
    });
  }

  it('marks busy-like codes as retryable and refusals as final', () => {
    expect(completionCodeInfo(0xc0).retry).toBe(true);
    expect(completionCodeInfo(0xc3).retry).toBe(true);
    expect(completionCodeInfo(0xc1).retry).toBe(false);
    expect(completionCodeInfo(0xcc).retry).toBe(false);
    expect(completionCodeInfo(0xd4).retry).toBe(false);
  });

  it('names D4h as insufficient privilege with a hint about the user privilege', () => {
    const err = completionCodeError(0xd4, ctx);
    expect(err.code).toBe('E_IPMI_INSUFFICIENT_PRIVILEGE');
    expect(err.hint).toMatch(/operator or administrator/);
  });

  it('falls back to UNSPECIFIED with the number for codes it does not know', () => {
    const err = completionCodeError(0xa7, ctx);
    expect(err.code).toBe('E_IPMI_UNSPECIFIED');
    expect(err.message).toContain('A7h');
  });
});
