import { defineConfig } from 'vitest/config';

/** Real guests under libvirt/QEMU TCG on a 1ctl-2comp lab (boot, reach, live migration): `npm run test:e2e:guest`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../../..', import.meta.url).pathname,
    include: ['test/orchestrator/e2e/guest-image.e2e.ts', 'test/orchestrator/e2e/guest.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 900_000,
    hookTimeout: 1_800_000,
  },
});
