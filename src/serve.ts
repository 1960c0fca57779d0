/**
 * The composition root of `tm-cache serve`: config → upstream client, tiers, HMAC secret,
 * metrics → the proxy app and the management app, both listening. `close()` drains: the
 * management port reports not-ready, in-flight requests finish (bounded by shutdownGraceMs),
 * then connections, Redis and the upstream pool close.
 */
import { randomBytes } from 'node:crypto';
import { ConfigError } from './config/errors.js';
import { MAKE_SECRET_HINT, usesRedis } from './config/relations.js';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { applyReloadable } from './config/reload.js';
import { decodeSecret } from './config/secrets.js';
import type { Config } from './config/schema.js';
import { deriveIdentitySecret } from './cache/redis/codec.js';
import { MemoryTier } from './cache/memory-tier.js';
import { DerivationIndex } from './cache/derive/index.js';
import { claimLimitsOf } from './cache/policy.js';
import { createRedisRoles, type RedisRoles } from './cache/redis/roles.js';
import { TieredCache, type RemoteClear, type TierList } from './cache/tiered.js';
import type { Keyring } from './cache/redis/keyring.js';
import type { HostPort } from './cache/redis/client.js';
import type { RedisTier } from './cache/redis/tier.js';
import type { SharedSources } from './proxy/derive/deriver.js';
import { createMetrics, type Metrics } from './ops/metrics.js';
import { buildManagement } from './ops/management.js';
import { Recorder } from './ops/recorder.js';
import { IDENTITY_OPERATION, RequestStats } from './ops/stats.js';
import { observeUpstream, UpstreamHealth, type UpstreamObserver } from './ops/upstream-health.js';
import { VERSION } from './version.js';
import { UPSTREAM_HEADERS, UpstreamClient } from './upstream/client.js';
import { budgetShapeOf } from './upstream/budget-store.js';
import { FleetBudget } from './upstream/fleet-budget.js';
import { buildProxy } from './proxy/app.js';
import { ServedCertificates } from './certificates.js';
import type { ReloadResult } from './config/reload.js';
import type { Server as TlsServer } from 'node:tls';
import { usesTls } from './config/tls-files.js';
import type { ReadinessCheck } from './ops/readiness.js';
import { startTracing, stopTracing } from './trace/tracing.js';

export interface RunningProxy {
  readonly url: string;
  readonly managementUrl: string;
  readonly app: FastifyInstance;
  readonly cache: TieredCache;
  /** The settings in force (after reloads). */
  readonly config: Config;
  /**
   * Applies a reloaded config's runtime-changeable settings (reload.ts RELOADABLE) and keeps the
   * rest as they are; answers nothing, the caller logs what changed.
   */
  reconfigure(next: Config): void;
  /** Counts how a reload ended (`tm_cache_reloads_total`). */
  countReload(result: ReloadResult): void;
  close(): Promise<void>;
}

export interface StartOptions {
  readonly logger: Logger;
  /** Sets the logger's level on a reload (`server.logLevel`); default: the logger's own `level`. */
  readonly setLogLevel?: (level: Config['server']['logLevel']) => void;
  readonly now?: () => number;
}

// eslint-disable-next-line max-lines-per-function -- the composition root: every part built in the order it depends on, read top to bottom in one place
export async function startProxy(config: Config, options: StartOptions): Promise<RunningProxy> {
  const { logger } = options;
  const now = options.now ?? Date.now;
  const startedAt = now();
  let current = config;
  const metrics = createMetrics({ version: VERSION, redis: usesRedis(config) });
  // Off unless the OTEL_* environment names where spans go: then the SDK is loaded, before any request.
  await startTracing(process.env, logger, VERSION);
  // Before anything connects: a shared Redis is refused without a secret it does not hold.
  const hmacSecret = resolveHmacSecret(config);
  // Before anything listens: a certificate that cannot be served stops tm-cache (exit 2).
  const certificates = usesTls(config.server.tls)
    ? ServedCertificates.load(config.server.tls, { logger, now, onReload: (result) => metrics.certificateReload(result) })
    : undefined;
  const redis = usesRedis(config) ? makeRedisRoles(config, logger, now, (kind, seconds) => metrics.redisCommand(kind, seconds)) : undefined;
  if (redis && Object.keys(config.cache.redis.encryptionKeys).length === 0) {
    logger.warn('cache.redis.encryptionKeys is empty: entries are stored in Redis compressed but not encrypted');
  }
  // Derived answers (cache.derive.enabled): the memory tier's list pages, indexed as they are stored and dropped.
  const derivations = config.cache.derive.enabled ? new DerivationIndex() : undefined;
  const memory = new MemoryTier({
    maxBytes: config.cache.memory.maxBytes,
    maxEntryBytes: config.cache.memory.maxEntryBytes,
    now,
    onEvict: () => metrics.eviction('memory'),
    observer: derivations,
  });
  const tiers: TierList = redis ? [memory, redis.tier] : [memory];
  // Across replicas: a list page written to Redis is recorded under what it can answer (redis/derive-sets.ts).
  if (redis && derivations) redis.tier.recordDerivable((key, entry) => derivations.sharedNames(key, entry));
  const cache = new TieredCache({ tiers, now, ...(redis ? { bus: redis.bus } : {}), onRemoteClear: (why, entries) => logRemoteClear(logger, why, entries) });
  const stats = new RequestStats(now);
  // The budget's clock is monotonic and real (its bucket refills as time passes), plus any step an
  // injected clock (`options.now`, tests) takes ahead of real time: a test stepping past a pause ends it.
  const budget = makeFleetBudget(config, redis, metrics, logger, options.now && steppedClock(options.now), () => stats.budgetSkipped(now()));
  const client = new UpstreamClient(config.upstream, budget);
  const health = new UpstreamHealth({
    now,
    probeMs: config.health.upstreamProbeMs,
    // Any HTTP answer (a 401 without credentials) says the instance is there.
    // The lowest priority: a probe is skipped, never queued, when the budget has no token at hand.
    probe: () => client.get('/api/v1/user', UPSTREAM_HEADERS, undefined, 'ahead'),
    requireUpstream: () => current.health.requireUpstream,
  });
  // Every upstream request of the cache path, counted where it is made and attributed to its
  // operation and user (stats.ts); identity look-ups under their own name in the figures.
  const observe =
    (attributedTo?: string): UpstreamObserver =>
    (operation, status, seconds, caller) => {
      metrics.upstream(operation, status, seconds);
      stats.upstream(now(), attributedTo ?? operation, typeof caller === 'number' ? caller : undefined);
    };
  const upstream = observeUpstream(client, health, observe());
  // Identity look-ups get their own budget over the same pool: junk tokens cannot starve fills.
  const identityUpstream = observeUpstream(
    client.withLane({ maxConcurrent: config.identity.maxConcurrent, maxQueue: config.identity.maxQueue }),
    health,
    observe(IDENTITY_OPERATION),
  );
  const recorder = new Recorder(metrics, stats, logger, config.log);
  // A replica starts with its shared tier when Redis is there: before listening, it waits at most
  // connectTimeoutMs for the connection (and the bus's subscription).
  // Otherwise its first requests would each miss Redis and ask upstream for what others hold.
  if (redis && !(await redis.connection.ready(config.cache.redis.connectTimeoutMs))) {
    logger.warn({ connectTimeoutMs: config.cache.redis.connectTimeoutMs }, 'Redis is not connected yet: serving from memory and upstream until it is');
  }
  // Before any request: every value read from Redis is checked against its key from now on.
  redis?.bind(hmacSecret);
  const proxy = await buildProxy(config, {
    cache,
    upstream,
    identityUpstream,
    watchMemos: (read) => metrics.watchMemos(read),
    logger,
    hmacSecret,
    shared: redis?.sharedStore,
    sharedLocks: redis?.sharedStore,
    bus: redis?.bus,
    lock: redis?.fillLock,
    now,
    recorder,
    onIdentityLookup: (result) => metrics.identityLookup(result),
    sharing: metrics.sharing,
    onPassthroughAnswer: (status, error) => health.record(status, error),
    tls: certificates?.serverOptions('proxy'),
    budget,
    derivations,
    onDerived: (operation, rule) => metrics.derived(operation, rule),
    sharedDerivations: redis && derivations ? sharedSources(redis.tier, cache) : undefined,
  });
  const app = proxy.app;
  metrics.watchServing({
    memory: () => cache.memory.stats(),
    memoryMaxBytes: () => cache.memory.maxBytes,
    upstream: () => client.load,
    upstreamUp: () => health.state !== 'down',
    identityUpstream: () => identityUpstream.load,
  });
  if (redis) {
    metrics.watchRedis({
      errors: () => redis.connection.stats().errors,
      rejected: () => rejectedOf(redis),
      up: () => redis.connection.degradedReason() === undefined,
    });
  }
  if (certificates) metrics.watchCertificate(() => certificates.notAfterMs);

  // Redis down is a degradation, not an outage: the memory tier keeps serving.
  const redisCheck: ReadinessCheck | undefined = redis && {
    name: 'redis',
    check: () => {
      const reason = redis.connection.degradedReason();
      return reason === undefined ? { status: 'ok' } : { status: 'degraded', detail: reason };
    },
  };
  const checks: ReadinessCheck[] = redisCheck ? [health.readiness(), redisCheck] : [health.readiness()];
  const { app: management, startDraining } = buildManagement(
    metrics,
    checks,
    {
      token: () => current.admin.token,
      viewerToken: () => current.admin.viewerToken,
      cache,
      metrics,
      stats,
      health,
      upstreamLoad: () => client.load,
      budget: () => budget.snapshot(),
      redis: redis && redisCheck && { check: redisCheck, errors: () => redis.connection.stats().errors },
      logger,
      now,
      version: VERSION,
      startedAt,
    },
    config.server.tls.management ? certificates?.serverOptions('management') : undefined,
  );
  const url = await app.listen({ host: config.server.host, port: config.server.port });
  const managementUrl = await management.listen({ host: config.server.managementHost, port: config.server.managementPort });
  if (certificates) {
    certificates.attach(app.server as unknown as TlsServer, 'proxy');
    if (config.server.tls.management) certificates.attach(management.server as unknown as TlsServer, 'management');
    certificates.watch();
  }

  return {
    url,
    managementUrl,
    app,
    cache,
    get config() {
      return current;
    },
    reconfigure(next) {
      current = applyReloadable(current, next);
      proxy.reconfigure(current);
      redis?.tier.limitClaims(claimLimitsOf(current.cache.freshness, current.cache.staleIfErrorMs));
      recorder.access = current.log;
      (options.setLogLevel ?? ((level) => (logger.level = level)))(current.server.logLevel);
      // The files keep their paths until a restart; what they hold may have been renewed.
      certificates?.reload('SIGHUP');
    },
    countReload: (result) => metrics.reload(result),
    close: async () => {
      certificates?.close();
      startDraining();
      // Keep-alive connections that finish their last response after close() began stay open
      // until their keep-alive timeout; close them as they go idle, and all of them at the deadline.
      const sweeper = setInterval(() => app.server.closeIdleConnections(), 50);
      await withDeadline(app.close(), config.server.shutdownGraceMs, () => app.server.closeAllConnections());
      clearInterval(sweeper);
      await management.close();
      await cache.close();
      budget.close();
      await redis?.close();
      // Last: the spans of the requests drained above are exported before the process ends.
      await stopTracing();
    },
  };
}

/**
 * The fleet's upstream budget (fleet-budget.ts): shared through Redis when it is configured, this
 * replica's own otherwise; its events counted (metrics.ts) and its pauses logged, start and end.
 */
const MIN_CLOCK_STEP_MS = 1_000;

/** performance.now(), plus the steps (over a second each) `now` took beyond real time since the first call: monotonic. */
function steppedClock(now: () => number): () => number {
  let lastNow = now();
  let lastReal = performance.now();
  let aheadMs = 0;
  return () => {
    const [n, real] = [now(), performance.now()];
    const stepMs = n - lastNow - (real - lastReal);
    if (stepMs > MIN_CLOCK_STEP_MS) aheadMs += stepMs; // a step, not two clocks' jitter
    [lastNow, lastReal] = [n, real];
    return real + aheadMs;
  };
}

// eslint-disable-next-line max-params -- the composition root's wiring: each argument is one of the parts built above it
function makeFleetBudget(
  config: Config,
  redis: RedisRoles | undefined,
  metrics: Metrics,
  logger: Logger,
  now: (() => number) | undefined,
  skipped: () => void,
): FleetBudget {
  const b = config.upstream.budget;
  let resumeCheck: NodeJS.Timeout | undefined;
  const budget: FleetBudget = new FleetBudget({
    shape: budgetShapeOf(b, config.upstream.maxRetryAfterMs),
    shared: redis?.budget.forShape(budgetShapeOf(b, config.upstream.maxRetryAfterMs)),
    fallbackShare: b.fallbackShare,
    maxWaitMs: b.maxWaitMs,
    defaultPauseMs: config.upstream.defaultRetryAfterMs,
    // Every request that may wait for a token: fills' and identity look-ups' queues together.
    maxQueue: config.upstream.maxQueue + config.identity.maxQueue,
    maxPerCaller: config.upstream.maxPerUser,
    ...(now ? { now } : {}),
    events: {
      ...metrics.budget,
      skipped(priority) {
        metrics.budget.skipped(priority);
        skipped(); // the status page's figure: refresh-ahead skipped per second (stats.ts)
      },
      paused(pauseMs) {
        metrics.budget.paused(pauseMs);
        logger.warn(
          { pauseMs: Math.round(pauseMs), rateRps: budget.snapshot().rateRps },
          "the instance answered 429: the fleet's upstream requests are paused",
        );
        watchResume();
      },
      modeChanged(mode) {
        metrics.budget.modeChanged(mode);
        logger.warn(
          { mode },
          mode === 'shared'
            ? "upstream budget: leasing from the fleet's shared bucket again"
            : "upstream budget: Redis cannot answer, leasing from this replica's fallback share",
        );
      },
    },
  });
  // The pause may be lengthened (another 429, another replica's): the resume is logged when it has really ended.
  function watchResume(): void {
    clearTimeout(resumeCheck);
    const leftMs = budget.pausedForMs();
    resumeCheck = setTimeout(
      () => {
        if (budget.pausedForMs() > 0) return watchResume();
        logger.warn({ rateRps: budget.snapshot().rateRps }, "the fleet's upstream requests resume after the pause");
      },
      Math.max(1, Math.ceil(leftMs)),
    );
    resumeCheck.unref();
  }
  metrics.watchBudget(() => budget.snapshot());
  return budget;
}

/** Sources of derived answers other replicas stored: found in the Redis tier's sets, read through the tiers as any lookup. */
function sharedSources(tier: RedisTier, cache: TieredCache): SharedSources {
  return {
    candidates: (name, query, budget) => tier.derivableFrom(name, query, budget),
    read: async (key, now, budget) => (await cache.get(key, now, budget))?.entry,
  };
}

function makeRedisRoles(config: Config, logger: Logger, now: () => number, onCommand: (kind: string, seconds: number) => void): RedisRoles {
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
    username: r.username,
    password: r.password,
    tls: r.tls,
    sentinelUsername: r.sentinelUsername,
    sentinelPassword: r.sentinelPassword,
    commandTimeoutMs: r.commandTimeoutMs,
    connectTimeoutMs: r.connectTimeoutMs,
    breakerThreshold: r.breakerThreshold,
    breakerCooldownMs: r.breakerCooldownMs,
    keyPrefix: r.keyPrefix,
    maxEntryBytes: config.cache.redis.maxEntryBytes,
    claimLimits: claimLimitsOf(config.cache.freshness, config.cache.staleIfErrorMs),
    ...(keyring ? { keyring } : {}),
    logger: logger.child({ tier: 'redis' }),
    now,
    onCommand,
  });
}

/** A memory tier emptied by the bus is a cold start for this replica's hit ratio: said, with why. */
function logRemoteClear(logger: Logger, why: RemoteClear, entries: number): void {
  const reason =
    why === 'invalidations-missed'
      ? 'the invalidation subscription was lost and is back; invalidations published meanwhile may have been missed, so nothing held may be trusted'
      : 'another replica purged everything (POST /admin/purge)';
  logger.warn({ reason: why, entries }, `memory tier cleared: ${reason}`);
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
 * The HMAC secret for credentials, and the root of trust of values in Redis (the MAC key is
 * derived from it): configured; else derived from the current encryption key (codec.ts
 * `deriveIdentitySecret`); else, without Redis, random for this process. With a shared Redis and
 * neither, refused (as config validation does, relations.ts): a secret kept in Redis could be
 * read and forged with by anyone who can read Redis, and lost with it.
 */
function resolveHmacSecret(config: Config): Buffer {
  if (config.identity.hmacSecret !== '') return decodeSecret(config.identity.hmacSecret)!;
  const { encryptionKeys, encryptionKeyId } = config.cache.redis;
  const current = encryptionKeys[encryptionKeyId];
  if (current !== undefined) return deriveIdentitySecret(decodeSecret(current)!);
  if (usesRedis(config))
    throw new ConfigError(`identity.hmacSecret or cache.redis.encryptionKeys: a shared Redis needs a secret that Redis does not hold: ${MAKE_SECRET_HINT}`);
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
