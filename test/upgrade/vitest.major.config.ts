import { defineConfig } from 'vitest/config';

/** The major upgrade zed -> epoxy with --fast-forward (1 controller, 1 compute): `npm run test:e2e:major`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../..', import.meta.url).pathname,
    include: ['test/upgrade/major.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 3_600_000,
    hookTimeout: 3_600_000,
  },
});
