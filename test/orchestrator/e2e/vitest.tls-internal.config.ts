import { defineConfig } from 'vitest/config';

/** TLS on the internal VIP too, the whole cloud on a 1ctl-1comp lab: `npm run test:e2e:tls-internal`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../../..', import.meta.url).pathname,
    include: ['test/orchestrator/e2e/tls-internal.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 900_000,
    hookTimeout: 2_400_000,
  },
});
