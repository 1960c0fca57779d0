/**
 * `ab:redis`: Redis-tier hits of two builds side by side (this checkout's `dist/` and `--base`'s),
 * in one run, against one private redis-server: each build serves the page from a memory tier
 * that keeps nothing (`cache.memory.maxEntryBytes: 1`, as the bench's redis-hit server), so every
 * request is a Redis GET + check + decode; and this checkout's memory-tier hit as the reference
 * the bench's target is a ratio of (Redis-tier hit ≥ 0.5× a memory hit).
 *
 *   npm run bench -- ab:redis --base /work/wt-perf-base
 *
 * Identity clients (the decode on every hit) and gzip clients (the stored bytes as they are).
 * Knobs: --duration (per server, 12), --rounds (3), --encrypted (values sealed with AES-256-GCM
 * instead of MAC-bound).
 */
import { join } from 'node:path';
import { compareHits, type HitFigures, type Page } from './measure.js';
import { fmt, printTable, ratioCheck, type Check } from './report.js';
import { assertHitFrom } from './scenario-redis.js';
import { startRedis, startRedisHitServer, startTmCache, type Emulator } from './servers.js';

interface AbRedisOptions {
  readonly base: string;
  readonly durationS: number;
  readonly rounds: number;
  readonly encrypted: boolean;
}

interface AbRedisRun {
  readonly clients: string;
  readonly figures: HitFigures[];
}

interface AbRedis {
  readonly runs: AbRedisRun[];
  readonly checks: Check[];
}

export async function runAbRedis(emulator: Emulator, page: Page, options: AbRedisOptions): Promise<AbRedis> {
  const redis = await startRedis();
  const memory = await startTmCache(emulator.url, { name: 'memory hit (this checkout)', redisUrl: redis.url });
  const base = await startRedisHitServer(emulator.url, redis.url, 'tmab:', options.encrypted, {
    name: `redis hit, base (${options.base})`,
    cli: join(options.base, 'dist/cli.js'),
  });
  const head = await startRedisHitServer(emulator.url, redis.url, 'tmah:', options.encrypted, { name: 'redis hit, this checkout' });
  await assertHitFrom(memory, page, 'memory');
  await assertHitFrom(base, page, 'redis');
  await assertHitFrom(head, page, 'redis');
  const runs: AbRedisRun[] = [];
  for (const [clients, headers] of [
    ['identity clients', {}],
    ['gzip clients', { 'accept-encoding': 'gzip' }],
  ] as const) {
    const figures = await compareHits([memory, base, head], page, {
      connections: 32,
      durationS: options.durationS,
      warmupS: 2,
      rounds: options.rounds,
      headers,
    });
    print(
      `${clients}: ${page.path}${options.encrypted ? ', values sealed (AES-256-GCM)' : ', values MAC-bound'}, 32 connections, ${options.rounds} rotating rounds`,
      figures,
    );
    runs.push({ clients, figures });
  }
  return {
    runs,
    checks: runs.flatMap(({ clients, figures: [m, b, h] }) => [
      ratioCheck(`ab:redis, ${clients}: redis hit ÷ memory hit, base (req/s)`, b!.rps / m!.rps, 0.5),
      ratioCheck(`ab:redis, ${clients}: redis hit ÷ memory hit, this (req/s)`, h!.rps / m!.rps, 0.5),
      ratioCheck(`ab:redis, ${clients}: this ÷ base (CPU per request)`, b!.cpuUsPerReq / h!.cpuUsPerReq, undefined),
    ]),
  };
}

function print(title: string, figures: HitFigures[]): void {
  const memory = figures[0]!;
  printTable(
    title,
    ['server', 'req/s', 'rounds', 'CPU µs/req', '÷ memory hit (req/s)', '÷ memory hit (1-core)', 'errors'],
    figures.map((f) => [
      f.name,
      fmt(f.rps, 0),
      f.roundRps.map((r) => `${(r / 1000).toFixed(1)}k`).join(' '),
      fmt(f.cpuUsPerReq, 1),
      fmt(f.rps / memory.rps),
      fmt(f.capacityRps / memory.capacityRps),
      f.errors,
    ]),
    ['target: a Redis-tier hit ≥ 0.5× a memory hit. Taken on a shared 2-core machine: compare rows of one run.'],
  );
}
