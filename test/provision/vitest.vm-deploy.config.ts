import { defineConfig } from 'vitest/config';

/**
 * `stackctl deploy` on a VM lab: a powered-off QEMU node enrolled, inspected, provisioned and
 * given memcached by one deploy. `npm run test:e2e:vm-deploy`, on demand: under TCG it takes
 * 10-13 minutes on this kind of machine, too long for every CI run.
 */
export default defineConfig({
  test: {
    root: new URL('../..', import.meta.url).pathname,
    include: ['test/provision/deploy-vm-lab.e2e.ts'],
    reporters: ['default', './test/reporters/failure-digest.ts'],
    testTimeout: 1_800_000,
    hookTimeout: 1_800_000,
  },
});
