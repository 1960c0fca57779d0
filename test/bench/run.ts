/**
 * `npm run bench`: tm-cache against baselines measured in the same run, reported as ratios.
 *
 *   npm run bench                  # builds, then: tsx test/bench/run.ts
 *   BENCH_DURATION_S=5 npx tsx test/bench/run.ts   # shorter runs (dist/ must be built)
 *   BENCH_ONLY=security npx tsx test/bench/run.ts  # only the named scenarios (comma-separated)
 *
 * Scenarios, in run order: hit, miss (with nginx proxy_pass as the baseline, and coalescing),
 * redis, emulator, dashboards, capacity, ci-burst, security. Their knobs: BENCH_MISS_PAIRS (300),
 * BENCH_DASH_SCALE (0.2: every clock of the dashboards scenario × 0.2), BENCH_DASH_PERIODS (3),
 * BENCH_CAPACITY_S (12), BENCH_CAPACITY_STALE (3,000 stale lists), BENCH_CI_AGENTS (200),
 * BENCH_CI_USERS (20). All of them at their defaults take about 5–6 minutes.
 *
 * Layout on a 2-core machine: every server under test alone on core 1 (`taskset -c 1`); wrk, the
 * emulator (upstream, medium scale, seed 42), redis-server and this runner on core 0. Every load
 * loop is bounded in time; every child runs in its own process group and is killed on exit.
 * Figures are printed per scenario, then every ratio against its target (informative: the exit
 * code is 0 unless something broke), and saved to .bench/results.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { choosePage, type LoadOptions } from './measure.js';
import { INSTALL_HINT, makeNginxPassConf, startNginx } from './peers.js';
import { canPin, findBinary, freePort, installCleanup, pinSelf, stopAll, type Proc } from './procs.js';
import { envNumber, printSummary, type Check } from './report.js';
import { runDashboardsScenario } from './scenario-dashboards.js';
import { runEmulatorScenario } from './scenario-emulator.js';
import { runHitScenario } from './scenario-hit.js';
import { runCapacityScenario } from './scenario-capacity.js';
import { runCiBurstScenario } from './scenario-ci-burst.js';
import { runCoalesceScenario, runMissScenario } from './scenario-miss.js';
import { runRedisScenario } from './scenario-redis.js';
import { runSecurityScenario } from './scenario-security.js';
import { LOAD_CPU, ROOT, SERVER_CPU, startEmulator, startTmCache, type Emulator } from './servers.js';

const DURATION_S = envNumber('BENCH_DURATION_S', 12);
const WARMUP_S = envNumber('BENCH_WARMUP_S', 2);
const REDIS_DURATION_S = envNumber('BENCH_REDIS_DURATION_S', Math.min(DURATION_S, 9));
const MISS_PAIRS = envNumber('BENCH_MISS_PAIRS', 300);
const COALESCE_CONCURRENT = envNumber('BENCH_COALESCE', 1_000);
const ROUNDS = envNumber('BENCH_ROUNDS', 4);
const CI_AGENTS = envNumber('BENCH_CI_AGENTS', 200);
const CI_USERS = envNumber('BENCH_CI_USERS', 20);
const CAPACITY_S = envNumber('BENCH_CAPACITY_S', 12);
const CAPACITY_STALE = envNumber('BENCH_CAPACITY_STALE', 3_000);
/** Dashboards: every clock × this (0.2: poll every 2 s, ttl 6 s; at 0.1 this 2-core machine saturates), and freshness periods measured after the warm-up. */
const DASH_SCALE = envNumber('BENCH_DASH_SCALE', 0.2);
const DASH_PERIODS = envNumber('BENCH_DASH_PERIODS', 3);
const HIT_CONNECTIONS = 32;
const ONLY = (process.env['BENCH_ONLY'] ?? '').split(',').filter((name) => name !== '');

async function scenario<T extends { checks: Check[] }>(name: string, ctx: { results: Record<string, unknown>; checks: Check[]; failures: string[]; keep: Proc[] }, fn: () => Promise<T>): Promise<T | undefined> {
  if (ONLY.length > 0 && !ONLY.includes(name)) return undefined;
  const t0 = performance.now();
  console.log(`\n-- ${name} ...`);
  try {
    const result = await fn();
    ctx.results[name] = { ...result, elapsedS: (performance.now() - t0) / 1_000 };
    ctx.checks.push(...result.checks);
    return result;
  } catch (err) {
    const message = err instanceof Error ? (err.stack ?? err.message) : String(err);
    console.error(`   ${name} FAILED: ${message}`);
    ctx.results[name] = { error: message };
    ctx.failures.push(name);
    return undefined;
  } finally {
    // Whatever the scenario started and did not stop (it threw midway), but not the emulator.
    await stopAll(ctx.keep).catch(() => undefined);
  }
}

async function main(): Promise<number> {
  installCleanup();
  const started = Date.now();
  const pinned = canPin() && pinSelf(LOAD_CPU);
  console.log(`tm-cache bench — node ${process.version}, ${cpus().length} cores (${cpus()[0]?.model ?? '?'})`);
  console.log(pinned ? `servers on core ${SERVER_CPU}; wrk, emulator, redis and this runner on core ${LOAD_CPU}` : 'taskset not available: NOTHING IS PINNED, figures are less comparable');
  if (cpus().length < 2) console.log('WARNING: fewer than 2 cores: servers and load share a core');

  const results: Record<string, unknown> = {};
  const checks: Check[] = [];
  const failures: string[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'tm-cache-bench-'));
  const hasWrk = findBinary('wrk') !== undefined;
  if (!hasWrk) console.log(`wrk not found: throughput scenarios skipped (install: ${INSTALL_HINT})`);
  const load: LoadOptions = { connections: HIT_CONNECTIONS, durationS: DURATION_S, warmupS: WARMUP_S, rounds: ROUNDS };
  const redisLoad: LoadOptions = { ...load, durationS: REDIS_DURATION_S, rounds: Math.min(ROUNDS, 3) };

  let emulator: Emulator | undefined;
  try {
    emulator = await startEmulator();
    const em = emulator;
    const ctx = { results, checks, failures, keep: [em.proc] };
    const page = await choosePage(em);
    console.log(`emulator ${em.url} (medium, seed 42); page ${page.path} for a member token: ${page.body.length} B, ${page.contentType}`);
    results['setup'] = { node: process.version, cores: cpus().length, pinned, page: { path: page.path, bytes: page.body.length, contentType: page.contentType }, durationS: DURATION_S, warmupS: WARMUP_S };

    if (hasWrk) await scenario('hit', ctx, () => runHitScenario(dir, em, page, load));
    await scenario('miss', ctx, async () => {
      const proxy = await startTmCache(em.url, { name: 'tm-cache (miss)' });
      const nginx = await startNginx(dir, await freePort(), { host: '127.0.0.1', port: Number(new URL(em.url).port) }, SERVER_CPU, makeNginxPassConf, 'nginx proxy_pass');
      if (typeof nginx === 'string') console.log(`   nginx proxy_pass baseline skipped: ${nginx}`);
      const miss = await runMissScenario(em, proxy, page, MISS_PAIRS, typeof nginx === 'string' ? undefined : nginx);
      const coalesce = await runCoalesceScenario(em, proxy, page, COALESCE_CONCURRENT);
      return { miss, coalesce, checks: [...miss.checks, ...coalesce.checks] };
    });
    if (hasWrk && findBinary('redis-server')) {
      await scenario('redis', ctx, () => runRedisScenario(em, page, redisLoad));
    } else if (hasWrk) {
      console.log('redis-server not found: Redis scenario skipped (install: apt-get install redis-server)');
    }
    if (hasWrk) await scenario('emulator', ctx, () => runEmulatorScenario(dir, em, page, 4));
    await scenario('dashboards', ctx, () =>
      runDashboardsScenario(dir, { dashboards: 50, usersPerDashboard: 4, scale: DASH_SCALE, periods: DASH_PERIODS, conditionalShare: 0.5 }),
    );
    if (hasWrk) {
      await scenario('capacity', ctx, () => runCapacityScenario(dir, em, { durationS: CAPACITY_S, rounds: 2, staleCount: CAPACITY_STALE }));
    }
    if (findBinary('redis-server')) {
      await scenario('ci-burst', ctx, () => runCiBurstScenario(em, { agents: CI_AGENTS, users: CI_USERS, replicas: 3 }));
    }
    await scenario('security', ctx, () => runSecurityScenario(em, { token: page.token, path: page.path }));
  } catch (err) {
    failures.push('setup');
    console.error('bench setup failed:', err instanceof Error ? (err.stack ?? err.message) : err);
  } finally {
    await stopAll().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }

  printSummary(checks);
  const elapsedS = (Date.now() - started) / 1_000;
  console.log(`\ntotal ${elapsedS.toFixed(0)} s${failures.length ? `; BROKEN: ${failures.join(', ')}` : ''}`);
  const out = join(ROOT, '.bench');
  mkdirSync(out, { recursive: true });
  const json = { startedAt: new Date(started).toISOString(), elapsedS, checks, failures, results };
  writeFileSync(join(out, 'results.json'), `${JSON.stringify(json, (_k, v: any) => (v?.type === 'Buffer' && Array.isArray(v.data) ? `<${v.data.length} bytes>` : v), 2)}\n`);
  console.log(`results: .bench/results.json`);
  return failures.length > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
