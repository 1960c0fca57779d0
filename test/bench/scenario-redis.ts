/**
 * Scenario 4: the Redis tier, against a private redis-server (never the shared 6379).
 *   (a) a Redis-tier hit (memory tier storing nothing: startRedisHitServer) vs a memory-tier hit;
 *   (b) bytes stored in Redis per entry vs the raw body, plain and encrypted;
 *   (c) memory-tier hit throughput with Redis enabled vs without.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { compareHits, fetchPage, header, type HitFigures, type LoadOptions, type Page } from './measure.js';
import { runCommand } from './procs.js';
import { fmt, noiseNote, noisyRows, printTable, ratioCheck, type Check } from './report.js';
import { RUNS_ROUTE } from './scenario-hit.js';
import { LOAD_CPU, startRedis, startRedisHitServer, startTmCache, type Emulator, type Redis, type Server } from './servers.js';

export interface StoredSize {
  readonly prefix: string;
  readonly encrypted: boolean;
  readonly key: string;
  readonly strlen: number;
  readonly memoryUsage: number;
  readonly ratio: number;
}

export interface RedisScenario {
  readonly rows: (HitFigures & { detail: string })[];
  /** The same memory and Redis hits for clients that accept gzip (browsers, curl --compressed, SDKs). */
  readonly gzipRows: HitFigures[];
  /** Page requests that reached the emulator during the measurement, all four servers together. */
  readonly upstreamDuringRun: number;
  readonly sizes: StoredSize[];
  readonly checks: Check[];
}

async function redisCli(redis: Redis, ...args: string[]): Promise<string> {
  const r = await runCommand('redis-cli', 'redis-cli', ['-p', String(redis.port), ...args], { cpu: LOAD_CPU, timeoutMs: 10_000 });
  if (r.code !== 0) throw new Error(`redis-cli ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.trim();
}

/** The entry keys (`<prefix>{<key>}`) under `prefix`: not locks, tags, shared values or secrets. */
async function storedSizes(redis: Redis, prefix: string, encrypted: boolean, rawBytes: number): Promise<StoredSize[]> {
  const keys = (await redisCli(redis, '--scan', '--pattern', `${prefix}{*`)).split('\n').filter((k) => /\}$/.test(k));
  const out: StoredSize[] = [];
  for (const key of keys) {
    const strlen = Number(await redisCli(redis, 'STRLEN', key));
    const memoryUsage = Number(await redisCli(redis, 'MEMORY', 'USAGE', key));
    out.push({ prefix, encrypted, key, strlen, memoryUsage, ratio: rawBytes / strlen });
  }
  return out;
}

/** Fills the page, then waits (the Redis write is fire-and-forget) until a hit says `detail=<tier>`. */
export async function assertHitFrom(server: Server, page: Page, tier: string): Promise<string> {
  await fetchPage(server.url + page.path, page.token);
  let last = '';
  for (let i = 0; i < 40; i++) {
    last = header(await fetchPage(server.url + page.path, page.token), 'cache-status');
    if (last.includes(`detail=${tier}`)) return last.replace(/; ttl=\d+/, '');
    await sleep(50);
  }
  throw new Error(`${server.name}: a repeated request answered "${last}", expected a hit with detail=${tier}`);
}

export async function runRedisScenario(emulator: Emulator, page: Page, load: LoadOptions): Promise<RedisScenario> {
  const redis = await startRedis();
  const servers: [Server, string][] = [];
  const sizes: StoredSize[] = [];
  let figures: HitFigures[];
  let gzipFigures: HitFigures[];
  let upstreamDuringRun: number;
  try {
    servers.push([await startTmCache(emulator.url, { name: 'tm-cache, memory only' }), 'memory']);
    servers.push([await startTmCache(emulator.url, { name: 'tm-cache + redis, memory hit', redisUrl: redis.url }), 'memory']);
    servers.push([await startRedisHitServer(emulator.url, redis.url, 'tmcb:', false), 'redis']);
    servers.push([await startRedisHitServer(emulator.url, redis.url, 'tmce:', true), 'redis']);
    const details = new Map<string, string>();
    for (const [server, tier] of servers) details.set(server.name, await assertHitFrom(server, page, tier));
    sizes.push(...(await storedSizes(redis, 'tmc:', false, page.body.length)));
    sizes.push(...(await storedSizes(redis, 'tmcb:', false, page.body.length)));
    sizes.push(...(await storedSizes(redis, 'tmce:', true, page.body.length)));
    await emulator.resetStats();
    figures = await compareHits(
      servers.map(([s]) => s),
      page,
      load,
    );
    // Clients that accept gzip: the memory tier sends its gzip variant, the Redis tier the stored bytes.
    gzipFigures = await compareHits([servers[1]![0], servers[2]![0]], page, { ...load, headers: { 'accept-encoding': 'gzip' } });
    upstreamDuringRun = (await emulator.stats()).by_route[RUNS_ROUTE] ?? 0;
    for (const [server, tier] of servers) {
      const after = header(await fetchPage(server.url + page.path, page.token), 'cache-status');
      if (!after.includes(`detail=${tier}`)) details.set(server.name, `${details.get(server.name)} (after the run: ${after})`);
    }
    figures = figures.map((f) => ({ ...f, detail: details.get(f.name) ?? '' }));
  } finally {
    await Promise.all(servers.map(([s]) => s.proc.stop()));
    await redis.proc.stop();
  }
  const rows = figures as RedisScenario['rows'];

  const rps = (name: string) => rows.find((r) => r.name === name)?.rps;
  const cap = (name: string) => rows.find((r) => r.name === name)?.capacityRps;
  const memoryOnly = rps('tm-cache, memory only');
  const memoryWithRedis = rps('tm-cache + redis, memory hit');
  const redisHit = rps('tm-cache redis-hit');
  const div = (a: number | undefined, b: number | undefined) => (a !== undefined && b ? a / b : undefined);
  printTable(
    `4. Redis tier: ${page.path}, ${load.connections} connections, server on core 1, private redis-server on core ${LOAD_CPU}`,
    ['server', 'Cache-Status of a hit', 'req/s', 'rounds req/s', 'p50 ms', 'p99 ms', 'server CPU %', 'CPU µs/req', '1-core req/s', 'errors'],
    rows.map((r) => [
      r.name,
      r.detail,
      fmt(r.rps, 0),
      r.roundRps.map((x) => (x / 1000).toFixed(1) + 'k').join(' '),
      fmt(r.p50Ms),
      fmt(r.p99Ms),
      fmt(r.cpuPct, 0),
      fmt(r.cpuUsPerReq, 1),
      fmt(r.capacityRps, 0),
      r.errors,
    ]),
    [
      '"tm-cache redis-hit": tm-cache serve (dist/) with cache.memory.maxEntryBytes: 1, a memory tier that stores nothing,',
      '  so every request is a Redis GET + decode (the Redis tier has its own cache.redis.maxEntryBytes).',
      `${upstreamDuringRun} page requests reached the emulator during the measurement, all four servers together.`,
      ...noiseNote(noisyRows(rows)),
    ],
  );
  printTable(
    '4b. Bytes stored in Redis per entry (the 100-run page)',
    ['stored by', 'encrypted', 'raw body B', 'STRLEN B', 'MEMORY USAGE B', 'raw ÷ stored'],
    sizes.map((s) => [
      s.prefix === 'tmc:' ? 'tm-cache serve' : 'redis-hit server',
      s.encrypted ? 'yes' : 'no',
      page.body.length,
      s.strlen,
      s.memoryUsage,
      fmt(s.ratio),
    ]),
  );
  const gzipRows = gzipFigures.map((f) => ({ ...f, name: `${f.name} (gzip client)` }));
  printTable(
    '4c. The same hits for clients that send Accept-Encoding: gzip (browsers, curl --compressed, python-requests, undici)',
    ['server', 'req/s', 'rounds req/s', 'p50 ms', 'p99 ms', 'server CPU %', 'CPU µs/req', '1-core req/s', 'errors'],
    gzipRows.map((r) => [
      r.name,
      fmt(r.rps, 0),
      r.roundRps.map((x) => (x / 1000).toFixed(1) + 'k').join(' '),
      fmt(r.p50Ms),
      fmt(r.p99Ms),
      fmt(r.cpuPct, 0),
      fmt(r.cpuUsPerReq, 1),
      fmt(r.capacityRps, 0),
      r.errors,
    ]),
    ['Both send the stored gzip bytes (Content-Encoding: gzip); neither decodes nor encodes on the hit.', ...noiseNote(noisyRows(gzipRows))],
  );
  const gzipMemory = gzipRows[0];
  const gzipRedis = gzipRows[1];
  const plain = sizes.find((s) => !s.encrypted);
  return {
    rows,
    gzipRows,
    sizes,
    upstreamDuringRun,
    checks: [
      ratioCheck('redis: redis-tier hit ÷ memory-tier hit (req/s)', div(redisHit, memoryWithRedis), 0.5),
      ratioCheck('redis: redis-tier hit ÷ memory-tier hit (1-core, CPU per hit)', div(cap('tm-cache redis-hit'), cap('tm-cache + redis, memory hit')), 0.5),
      ratioCheck(
        'redis: encrypted redis-tier hit ÷ memory-tier hit (1-core, CPU per hit)',
        div(cap('tm-cache redis-hit (encrypted)'), cap('tm-cache + redis, memory hit')),
        0.5,
      ),
      ratioCheck('redis, gzip clients: redis-tier hit ÷ memory-tier hit (req/s)', div(gzipRedis?.rps, gzipMemory?.rps), 0.5),
      ratioCheck('redis, gzip clients: redis-tier hit ÷ identity memory-tier hit (req/s)', div(gzipRedis?.rps, memoryWithRedis), undefined),
      ratioCheck('redis: encrypted redis hit ÷ plain redis hit', div(rps('tm-cache redis-hit (encrypted)'), redisHit), undefined),
      ratioCheck('redis: compression (raw ÷ stored)', plain?.ratio, 3),
      ratioCheck('redis: memory hit with redis ÷ without (req/s)', div(memoryWithRedis, memoryOnly), 0.95),
    ],
  };
}
