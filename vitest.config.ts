import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Two tiers, chosen by file name. `unit` (`*.unit.test.ts`): pure functions and mechanisms against
 * fakes below them (no socket, no process, no redis-server), seconds in all: `npm run test:unit`.
 * `integration` (every other `*.test.ts`): everything that talks to real servers (emulator, proxy,
 * redis-server, Chromium) on loopback. `npm test` runs both.
 */
const UNIT = ['test/**/*.unit.test.ts'];

export default defineConfig({
  test: {
    // Every integration test talks to real servers on loopback; on a 2-core CI machine a few
    // workers is the sweet spot.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT } },
      { extends: true, test: { name: 'integration', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...UNIT] } },
    ],
  },
});
