import { defineConfig } from 'vitest/config';

/** Heavier deploy scenarios (large images pushed and pulled): run on demand, not in the default suite. */
export default defineConfig({
  test: {
    root: new URL('../../..', import.meta.url).pathname,
    include: ['test/orchestrator/e2e/**/*.e2e.ts'],
    // the HA scenario has its own script (npm run test:e2e:ha, vitest.ha.config.ts)
    exclude: ['test/orchestrator/e2e/ha.e2e.ts'],
    testTimeout: 300_000,
    hookTimeout: 900_000,
  },
});
