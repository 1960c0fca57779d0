import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Two tiers. `unit`: pure functions and mechanisms against fakes below them (no socket, no
 * process, no redis-server), seconds in all: `npm run test:unit`. `integration`: everything that
 * talks to real servers (emulator, proxy, redis-server, Chromium) on loopback. `npm test` runs both.
 */
const UNIT = [
  'test/api/*.test.ts',
  'test/cache/{breaker,codec,coalesce,fill,memory-tier,policy,shared-fill}.test.ts',
  'test/config/*.test.ts',
  'test/emulator/dataset.test.ts',
  'test/helm/chart.test.ts',
  'test/ops/management.test.ts',
  'test/proxy/{access-confirmation,headers,judge,read-through-units,refresh-ahead-units}.test.ts',
  'test/bench/{docs,mix,options}.test.ts',
  'test/upstream/{answer,fair-lane,budget-store,fleet-budget}.test.ts',
  'test/cache/claims.test.ts',
];

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
