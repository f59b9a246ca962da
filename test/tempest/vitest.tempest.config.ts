import { defineConfig } from 'vitest/config';

/** Tempest's smoke tests against a lab cloud deployed by stackctl: `npm run test:tempest`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../..', import.meta.url).pathname,
    include: ['test/tempest/tempest.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 3_600_000,
    hookTimeout: 2_700_000,
  },
});
