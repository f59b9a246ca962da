/**
 * The host image's inputs: kernel arguments a lab adds (`images build host --kernel-arg`) change the
 * inputs' hash, so an image with them is its own build; without them the hash is the definition's
 * alone; a word that is not a kernel argument is refused before anything is built.
 */
import { describe, expect, it } from 'vitest';
import { TCG_HOST_KERNEL_ARGS, defaultHostSourceDir, hostInputs } from '../../src/images/host.js';
import type { Mirrors } from '../../src/images/rootfs.js';

const MIRRORS: Mirrors = { archive: 'http://deb.example/debian', security: 'http://deb.example/debian-security' };

describe('host image inputs', () => {
  it('keep the hash of the definition alone without extra kernel arguments', () => {
    const plain = hostInputs(defaultHostSourceDir(), MIRRORS);
    expect(plain.inputs.extraKernelArgs).toBeUndefined();
    expect(hostInputs(defaultHostSourceDir(), MIRRORS, []).inputsHash).toBe(plain.inputsHash);
  });

  it("make an image with a lab's kernel arguments a build of its own", () => {
    const plain = hostInputs(defaultHostSourceDir(), MIRRORS);
    const lab = hostInputs(defaultHostSourceDir(), MIRRORS, TCG_HOST_KERNEL_ARGS);
    expect(lab.inputs.extraKernelArgs).toEqual(['cryptomgr.notests']);
    expect(lab.inputsHash).not.toBe(plain.inputsHash);
  });

  it('refuse a word that is not one kernel argument, naming it', () => {
    expect(() => hostInputs(defaultHostSourceDir(), MIRRORS, ['quiet; rm -rf /'])).toThrow(
      expect.objectContaining({ code: 'E_OPTION', message: expect.stringContaining("'quiet; rm -rf /'") }),
    );
  });
});
