import { defineConfig } from 'vitest/config';

/** Tenant networking (OVS/OVN, a namespaced port, a floating IP) on a 1ctl-2comp lab: `npm run test:e2e:ovn`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../../..', import.meta.url).pathname,
    include: ['test/orchestrator/e2e/ovn.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 600_000,
    hookTimeout: 1_800_000,
  },
});
