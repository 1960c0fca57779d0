import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Every test talks to real servers (emulator, proxy, redis-server) on loopback; on a
    // 2-core CI machine a few workers is the sweet spot.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
