import { expect } from 'vitest';
import { StackctlError } from '../../src/core/errors.js';

/** The StackctlError a promise rejects with; fails the test when it resolves or rejects with anything else. */
export async function rejection(p: Promise<unknown>): Promise<StackctlError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StackctlError);
  return err as StackctlError;
}
