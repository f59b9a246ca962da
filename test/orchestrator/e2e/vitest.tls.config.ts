import { defineConfig } from 'vitest/config';

/** HTTPS on the public VIP of a 1ctl-1comp lab (identity tier): `npm run test:e2e:tls`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../../..', import.meta.url).pathname,
    include: ['test/orchestrator/e2e/tls.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 600_000,
    hookTimeout: 1_800_000,
  },
});
