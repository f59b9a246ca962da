import { defineConfig } from 'vitest/config';

/** The rolling update under a probe (1 controller, 2 computes): `npm run test:e2e:upgrade`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../..', import.meta.url).pathname,
    include: ['test/upgrade/update.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 3_600_000,
    hookTimeout: 3_600_000,
  },
});
