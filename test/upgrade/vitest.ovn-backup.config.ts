import { defineConfig } from 'vitest/config';

/** ovn-central's declared backups against real OVN databases: `npm run test:e2e:ovn-backup`, on demand only. */
export default defineConfig({
  test: {
    root: new URL('../..', import.meta.url).pathname,
    include: ['test/upgrade/ovn-backup.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 600_000,
    hookTimeout: 600_000,
  },
});
