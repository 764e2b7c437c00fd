import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 600_000,
    // Tests spawn real CLIs and Python workers on a 2-core machine: run files one at a time.
    fileParallelism: false,
  },
});
