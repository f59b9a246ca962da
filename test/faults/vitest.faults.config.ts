import { defineConfig } from 'vitest/config';

/** The fault campaign (SIGKILL of deploy and upgrade, resumed): `npm run test:faults`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../..', import.meta.url).pathname,
    include: ['test/faults/faults.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 7_200_000,
    hookTimeout: 3_600_000,
  },
});
