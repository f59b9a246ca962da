import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // the digest comes last: every failure's first and last lines, where a CI log's tail shows them
    reporters: ['default', './test/reporters/failure-digest.ts'],
  },
});
