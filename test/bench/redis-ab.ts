/**
 * Redis-tier hits of two builds side by side (this checkout's `dist/` and `BENCH_AB_BASE`'s), in
 * one run, against one private redis-server: each build serves the page from a memory tier that
 * keeps nothing (`cache.memory.maxEntryBytes: 1`, as the bench's redis-hit server), so every
 * request is a Redis GET + check + decode; and this checkout's memory-tier hit as the reference
 * the bench's target is a ratio of (Redis-tier hit ≥ 0.5× a memory hit, issue 10).
 *
 *   npm run build && BENCH_AB_BASE=/work/wt-perf-base npx tsx test/bench/redis-ab.ts
 *
 * Identity clients (the decode on every hit) and gzip clients (the stored bytes as they are).
 * Options: BENCH_DURATION_S (per server, default 12), BENCH_ROUNDS (default 3), BENCH_ENCRYPTED=1
 * (values sealed with AES-256-GCM instead of MAC-bound).
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { choosePage, compareHits, fetchPage, header, type HitFigures, type Page } from './measure.js';
import { installCleanup, pinSelf, stopAll } from './procs.js';
import { envNumber, fmt, printTable } from './report.js';
import { CLI, LOAD_CPU, startEmulator, startRedis, startTmCache, type Server } from './servers.js';

const BASE = process.env['BENCH_AB_BASE'];
if (!BASE || !existsSync(join(BASE, 'dist/cli.js'))) {
  console.error('BENCH_AB_BASE must name a checkout with a built dist/cli.js (see the header of test/bench/ab.ts)');
  process.exit(2);
}
const DURATION_S = envNumber('BENCH_DURATION_S', 12);
const ROUNDS = envNumber('BENCH_ROUNDS', 3);
const ENCRYPTED = process.env['BENCH_ENCRYPTED'] === '1';

/** Fills the page, then waits for the fire-and-forget Redis write until a repeat says `detail=<tier>`. */
async function assertHitFrom(server: Server, page: Page, tier: string): Promise<void> {
  await fetchPage(server.url + page.path, page.token);
  for (let i = 0; i < 40; i++) {
    if (header(await fetchPage(server.url + page.path, page.token), 'cache-status').includes(`detail=${tier}`)) return;
    await sleep(50);
  }
  throw new Error(`${server.name}: no hit with detail=${tier}`);
}

installCleanup();
pinSelf(LOAD_CPU);
const dir = mkdtempSync(join(tmpdir(), 'tm-cache-redis-ab-'));
try {
  const emulator = await startEmulator();
  const page = await choosePage(emulator);
  const redis = await startRedis();
  const config = join(dir, 'redis-hit.yaml');
  const keys: Record<string, string> = ENCRYPTED ? { TM_CACHE_REDIS_ENCRYPTION_KEYS: `bench:${randomBytes(32).toString('hex')}`, TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'bench' } : {};
  const redisHit = (name: string, cli: string, prefix: string): Promise<Server> => {
    writeFileSync(`${config}.${prefix}`, `cache:\n  memory:\n    maxEntryBytes: 1\n  redis:\n    keyPrefix: ${JSON.stringify(prefix)}\n`);
    return startTmCache(emulator.url, { name, cli, redisUrl: redis.url, env: { TM_CACHE_CONFIG: `${config}.${prefix}`, ...keys } });
  };
  const memory = await startTmCache(emulator.url, { name: 'memory hit (this checkout)', redisUrl: redis.url });
  const base = await redisHit(`redis hit, base (${BASE})`, join(BASE, 'dist/cli.js'), 'tmab:');
  const head = await redisHit('redis hit, this checkout', CLI, 'tmah:');
  await assertHitFrom(memory, page, 'memory');
  await assertHitFrom(base, page, 'redis');
  await assertHitFrom(head, page, 'redis');
  for (const [title, headers] of [['identity clients', {}], ['gzip clients', { 'accept-encoding': 'gzip' }]] as const) {
    const figures = await compareHits([memory, base, head], page, { connections: 32, durationS: DURATION_S, warmupS: 2, rounds: ROUNDS, headers });
    print(`${title}: ${page.path}${ENCRYPTED ? ', values sealed (AES-256-GCM)' : ', values MAC-bound'}, 32 connections, ${ROUNDS} rotating rounds`, figures);
  }
} finally {
  await stopAll();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);

function print(title: string, figures: HitFigures[]): void {
  const memory = figures[0]!;
  printTable(
    title,
    ['server', 'req/s', 'rounds', 'CPU µs/req', '÷ memory hit (req/s)', '÷ memory hit (1-core)', 'errors'],
    figures.map((f) => [f.name, fmt(f.rps, 0), f.roundRps.map((r) => `${(r / 1000).toFixed(1)}k`).join(' '), fmt(f.cpuUsPerReq, 1), fmt(f.rps / memory.rps), fmt(f.capacityRps / memory.capacityRps), f.errors]),
    ['target (issue 10): a Redis-tier hit ≥ 0.5× a memory hit. Taken on a shared 2-core machine: compare rows of one run.'],
  );
}
