/**
 * A bench-only tm-cache whose memory tier stores nothing, so that every request after the first
 * is a Redis-tier hit (memory peek misses → Redis GET → decode → served with `detail=redis`).
 *
 * `tm-cache serve` cannot be configured that way: src/proxy/server.ts gives the Redis tier the
 * memory tier's `maxEntryBytes`, so a memory tier too small for the page also keeps the page out
 * of Redis (and the read-through's `maxEntryBytes` gate would skip the fill's store as well).
 * This script wires the same BUILT parts (dist/) the way startProxy does, except for the tiny
 * memory tier.
 *
 *   node --import tsx test/bench/redis-hit-server.ts --upstream URL --port P --redis redis://127.0.0.1:PORT \
 *     [--prefix tmc:] [--encryption-key <64 hex chars>]
 *
 * BENCH_DIST=/path/to/another/dist runs another build (an A/B experiment on a patched copy).
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { pino } from 'pino';

type Schema = typeof import('../../src/config/schema.js');
type MemoryTierModule = typeof import('../../src/cache/memory-tier.js');
type RedisModule = typeof import('../../src/cache/redis.js');
type TieredModule = typeof import('../../src/cache/tiered.js');
type ClientModule = typeof import('../../src/upstream/client.js');
type AppModule = typeof import('../../src/proxy/app.js');

const DIST = process.env['BENCH_DIST'] || resolve(import.meta.dirname, '../../dist');
const load = <T>(path: string): Promise<T> => import(pathToFileURL(resolve(DIST, path)).href) as Promise<T>;

const { values } = parseArgs({
  options: {
    upstream: { type: 'string' },
    port: { type: 'string' },
    redis: { type: 'string' },
    prefix: { type: 'string', default: 'tmc:' },
    'encryption-key': { type: 'string' },
  },
});

const { DEFAULT_CONFIG } = await load<Schema>('config/schema.js');
const { MemoryTier } = await load<MemoryTierModule>('cache/memory-tier.js');
const { createRedisRoles } = await load<RedisModule>('cache/redis.js');
const { TieredCache } = await load<TieredModule>('cache/tiered.js');
const { UpstreamClient } = await load<ClientModule>('upstream/client.js');
const { buildProxy } = await load<AppModule>('proxy/app.js');

const config = structuredClone(DEFAULT_CONFIG) as any;
config.upstream.url = values.upstream!;
config.server.port = Number(values.port);
const logger = pino({ level: 'warn' });
const key = values['encryption-key'];

const redis = createRedisRoles({
  url: values.redis!,
  keyPrefix: values.prefix!,
  commandTimeoutMs: config.cache.redis.commandTimeoutMs,
  connectTimeoutMs: config.cache.redis.connectTimeoutMs,
  ...(key ? { keyring: { keys: { bench: Buffer.from(key, 'hex') }, current: 'bench' } } : {}),
  logger: logger.child({ tier: 'redis' }),
});
if (!(await redis.connection.ready(config.cache.redis.connectTimeoutMs))) throw new Error(`redis at ${values.redis} is not ready`);
// maxEntryBytes 0: nothing is ever stored in memory, so no request is a memory hit.
const cache = new TieredCache({ tiers: [new MemoryTier({ maxBytes: 4096, maxEntryBytes: 0 }), redis.tier], bus: redis.bus });
const upstream = new UpstreamClient(config.upstream);
const hmacSecret = (await redis.secrets.getOrCreateSecret('hmac')) ?? Buffer.alloc(32, 7);
const app = await buildProxy(config, { cache, upstream, logger, hmacSecret, shared: redis.sharedStore, lock: redis.fillLock });
await app.listen({ host: '127.0.0.1', port: config.server.port });

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => void app.close().then(() => cache.close()).then(() => redis.close()).then(() => process.exit(0)));
}
