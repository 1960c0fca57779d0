/**
 * The composition root of `tm-cache serve`: config → upstream client, tiers, HMAC secret,
 * metrics → the proxy app and the management app, both listening. `close()` drains: the
 * management port reports not-ready, in-flight requests finish (bounded by shutdownGraceMs),
 * then connections, Redis and the upstream pool close.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { decodeSecret } from '../config/secrets.js';
import type { Config } from '../config/schema.js';
import { MemoryTier } from '../cache/memory-tier.js';
import { createRedisRoles, type RedisRoles } from '../cache/redis.js';
import { TieredCache, type TierList } from '../cache/tiered.js';
import type { Keyring } from '../cache/keyring.js';
import type { HostPort } from '../cache/redis-client.js';
import { createMetrics } from '../ops/metrics.js';
import { buildManagement, type ReadinessCheck } from '../ops/management.js';
import { UpstreamClient } from '../upstream/client.js';
import { buildProxy } from './app.js';

export interface RunningProxy {
  readonly url: string;
  readonly managementUrl: string;
  readonly app: FastifyInstance;
  readonly cache: TieredCache;
  close(): Promise<void>;
}

export interface StartOptions {
  readonly logger: Logger;
  readonly now?: () => number;
}

export async function startProxy(config: Config, options: StartOptions): Promise<RunningProxy> {
  const { logger } = options;
  const now = options.now ?? Date.now;
  const redis = config.cache.redis.url !== '' || config.cache.redis.mode !== 'standalone' ? makeRedisRoles(config, logger, now) : undefined;
  if (redis && Object.keys(config.cache.redis.encryptionKeys).length === 0) {
    logger.warn('cache.redis.encryptionKeys is empty: entries are stored in Redis compressed but not encrypted');
  }
  const memory = new MemoryTier({ maxBytes: config.cache.memory.maxBytes, maxEntryBytes: config.cache.memory.maxEntryBytes, now });
  const tiers: TierList = redis ? [memory, redis.tier] : [memory];
  const cache = new TieredCache({ tiers, ...(redis ? { bus: redis.bus } : {}) });
  const upstream = new UpstreamClient(config.upstream);
  // Identity look-ups get their own budget over the same pool: junk tokens cannot starve fills (item 6).
  const identityUpstream = upstream.withLane({ maxConcurrent: config.identity.maxConcurrent, maxQueue: config.identity.maxQueue });
  const metrics = createMetrics();
  const hmacSecret = await resolveHmacSecret(config, redis, logger);
  // Before any request: every value read from Redis is checked against its key from now on.
  redis?.bind(hmacSecret);
  const app = await buildProxy(config, {
    cache,
    upstream,
    identityUpstream,
    gauge: (name, help, read) => metrics.gauge(name, help, read),
    logger,
    hmacSecret,
    shared: redis?.sharedStore,
    bus: redis?.bus,
    lock: redis?.fillLock,
    now,
    onOutcome: (outcome, operation) => metrics.recordOutcome(outcome, operation),
  });
  metrics.gauge('tm_cache_memory_entries', 'Entries in the memory tier.', () => cache.memory.stats().entries);
  metrics.gauge('tm_cache_memory_bytes', 'Bytes held by the memory tier.', () => cache.memory.stats().bytes);
  metrics.gauge('tm_cache_upstream_active', 'Upstream requests in flight.', () => upstream.load.active);
  metrics.gauge('tm_cache_upstream_queued', 'Upstream requests waiting for a slot.', () => upstream.load.queued);
  metrics.gauge('tm_cache_identity_upstream_active', 'Identity look-ups (GET /user) in flight.', () => identityUpstream.load.active);
  metrics.gauge('tm_cache_identity_upstream_queued', 'Identity look-ups waiting for a slot.', () => identityUpstream.load.queued);
  if (redis) metrics.gauge('tm_cache_redis_errors_total', 'Redis errors, timeouts and disconnections.', () => redis.connection.stats().errors);
  if (redis) metrics.gauge('tm_cache_redis_rejected_total', 'Values read from Redis that did not belong under their key or were invalid (deleted).', () => rejectedOf(redis));

  const checks: ReadinessCheck[] = [];
  if (redis) {
    checks.push({
      name: 'redis',
      // Redis down is a degradation, not an outage: the memory tier keeps serving.
      check: () => {
        const reason = redis.connection.degradedReason();
        return reason === undefined ? { status: 'ok' } : { status: 'degraded', detail: reason };
      },
    });
  }
  const { app: management, startDraining } = buildManagement(metrics, checks);
  const url = await app.listen({ host: config.server.host, port: config.server.port });
  const managementUrl = await management.listen({ host: config.server.managementHost, port: config.server.managementPort });

  return {
    url,
    managementUrl,
    app,
    cache,
    close: async () => {
      startDraining();
      // Keep-alive connections that finish their last response after close() began stay open
      // until their keep-alive timeout; close them as they go idle, and all of them at the deadline.
      const sweeper = setInterval(() => app.server.closeIdleConnections(), 50);
      await withDeadline(app.close(), config.server.shutdownGraceMs, () => app.server.closeAllConnections());
      clearInterval(sweeper);
      await management.close();
      await cache.close();
      await redis?.close();
    },
  };
}

function makeRedisRoles(config: Config, logger: Logger, now: () => number): RedisRoles {
  const r = config.cache.redis;
  const keys = Object.entries(r.encryptionKeys);
  const keyring: Keyring | undefined =
    keys.length === 0 ? undefined : { keys: Object.fromEntries(keys.map(([id, text]) => [id, decodeSecret(text)!])), current: r.encryptionKeyId };
  return createRedisRoles({
    ...(r.url !== '' ? { url: r.url } : {}),
    mode: r.mode,
    nodes: r.nodes.map(parseHostPort),
    sentinels: r.sentinels.map(parseHostPort),
    name: r.sentinelName,
    commandTimeoutMs: r.commandTimeoutMs,
    connectTimeoutMs: r.connectTimeoutMs,
    breakerThreshold: r.breakerThreshold,
    breakerCooldownMs: r.breakerCooldownMs,
    keyPrefix: r.keyPrefix,
    maxEntryBytes: config.cache.redis.maxEntryBytes,
    ...(keyring ? { keyring } : {}),
    logger: logger.child({ tier: 'redis' }),
    now,
  });
}

function rejectedOf(redis: RedisRoles): number {
  const { byKind } = redis.connection.stats();
  return (byKind['tampered'] ?? 0) + (byKind['invalid'] ?? 0);
}

function parseHostPort(text: string): HostPort {
  const i = text.lastIndexOf(':');
  return { host: text.slice(0, i), port: Number(text.slice(i + 1)) };
}

/**
 * The HMAC secret for credentials: configured, else shared through Redis so every replica computes
 * the same digests, else (memory only, or Redis unreachable at start) random for this process.
 * It is also the root of trust for values in Redis (the MAC key is derived from it): a generated
 * one is only as safe as Redis itself, so configure it where Redis is shared with anyone untrusted.
 */
async function resolveHmacSecret(config: Config, redis: RedisRoles | undefined, logger: Logger): Promise<Buffer> {
  if (config.identity.hmacSecret !== '') return decodeSecret(config.identity.hmacSecret)!;
  if (redis) {
    await redis.connection.ready(config.cache.redis.connectTimeoutMs);
    const shared = await redis.secrets.getOrCreateSecret('hmac');
    if (shared) return shared;
    logger.warn('could not read the shared HMAC secret from Redis: using a per-process one (identities are not shared until restart)');
  }
  return randomBytes(32);
}

async function withDeadline(work: Promise<unknown>, ms: number, onTimeout: () => void): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      onTimeout();
      resolve();
    }, ms);
    timer.unref();
  });
  await Promise.race([work.then(() => undefined), deadline]);
  clearTimeout(timer);
}
