import { defineConfig } from 'vitest/config';

/** The outage drills (3 controllers: HAProxy killed, Galera after a full outage): `npm run test:e2e:galera`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../../..', import.meta.url).pathname,
    include: ['test/orchestrator/e2e/galera.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 600_000,
    hookTimeout: 1_800_000,
  },
});
