import { defineConfig } from 'vitest/config';

/** The HA scenario (3 controllers, 2 computes, failover): `npm run test:e2e:ha`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../../..', import.meta.url).pathname,
    include: ['test/orchestrator/e2e/ha.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 600_000,
    hookTimeout: 900_000,
  },
});
