/**
 * ioredis connections tuned so that Redis can only ever cost a miss, never a slow or failed
 * request:
 * - `commandTimeout`: a command not answered in time rejects (→ a miss), instead of waiting.
 * - `enableOfflineQueue: false`: while disconnected, commands reject at once instead of
 *   queueing behind a reconnect (an unbounded queue would also grow without limit).
 * - `maxRetriesPerRequest: 0`: a command in flight when the connection drops rejects at once
 *   rather than being replayed later, when its answer no longer matters.
 * - a retry strategy that never gives up (with capped backoff), so the tier resumes by itself.
 * The subscriber connection is the exception: it holds no request, so it queues its
 * SUBSCRIBE until connected, and subscribes again itself on every 'ready' (connection.ts
 * `subscribe`), its failure counted. ioredis' own `autoResubscribe` is off: it re-subscribes with a
 * promise nobody handles, which a refusal (NOPERM) or a connection closed meanwhile rejects
 * unhandled, and an unhandled rejection ends a Node process.
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { DEFAULT_COMMAND_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, type RedisMode } from '../../config/schema.js';

export type RedisClient = Redis | Cluster;
export type ConnectionRole = 'commands' | 'subscriber';

export interface HostPort {
  host: string;
  port: number;
}

export interface RedisConnectionOptions {
  /** `redis://[:password@]host:port[/db]` or `rediss://`; required in standalone mode. */
  url?: string;
  mode?: RedisMode;
  /** Cluster seed nodes. */
  nodes?: HostPort[];
  /** Sentinels, with `name` the monitored master's name. */
  sentinels?: HostPort[];
  name?: string;
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** AUTH for the Redis servers (every mode; in standalone mode the URL may carry them instead). */
  username?: string;
  password?: string;
  /** TLS to every server (and to the sentinels), verified against Node's CAs (NODE_EXTRA_CA_CERTS adds a private one). */
  tls?: boolean;
  /** AUTH for the sentinels themselves. */
  sentinelUsername?: string;
  sentinelPassword?: string;
}

const MAX_RECONNECT_DELAY_MS = 2_000;

/** Reconnect forever: 100 ms, 200 ms, ... capped at 2 s, with jitter so replicas do not stampede. */
function reconnectDelayMs(attempt: number): number {
  const base = Math.min(100 * attempt, MAX_RECONNECT_DELAY_MS);
  return base + Math.floor(Math.random() * 100);
}

function connectionOptions(options: RedisConnectionOptions, role: ConnectionRole): RedisOptions {
  const forCommands = role === 'commands';
  return {
    connectTimeout: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    ...(forCommands ? { commandTimeout: options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS } : {}),
    enableOfflineQueue: !forCommands,
    // No auto-pipelining: each command is written as it is issued (what must happen together runs
    // as one Lua script, connection.ts). Batching the commands of one turn of the event loop cost
    // more CPU than the writes it saves: a Redis-tier hit of the 87 KB page took 129-135 µs
    // instead of 176-179 for identity clients and 50 instead of 54-55 µs for gzip clients (npm run
    // bench -- ab:redis, two runs), and a GET of 8.7 KB from 32 concurrent callers 8 µs of CPU
    // instead of 12.
    enableAutoPipelining: false,
    maxRetriesPerRequest: forCommands ? 0 : null,
    retryStrategy: reconnectDelayMs,
    autoResubscribe: false,
    lazyConnect: false,
    connectionName: `tm-cache:${role}`,
    ...credentialOptions(options),
  };
}

/** Only what is set: an empty field must not override what a standalone URL carries. */
function credentialOptions(options: RedisConnectionOptions): RedisOptions {
  return {
    ...(options.username ? { username: options.username } : {}),
    ...(options.password ? { password: options.password } : {}),
    ...(options.tls ? { tls: {} } : {}),
  };
}

/** Checks the options once, at start, naming the field (CONVENTIONS: fail fast). */
function assertConnectionOptions(options: RedisConnectionOptions): void {
  const mode = options.mode ?? 'standalone';
  if (mode === 'standalone' && !options.url) throw new Error('redis.url is required in standalone mode');
  if (mode === 'cluster' && !options.nodes?.length) throw new Error('redis.nodes must list at least one node in cluster mode');
  if (mode === 'sentinel' && (!options.sentinels?.length || !options.name)) {
    throw new Error('redis.sentinels (at least one) and redis.name are required in sentinel mode');
  }
}

export function createRedisClient(options: RedisConnectionOptions, role: ConnectionRole): RedisClient {
  assertConnectionOptions(options);
  const redisOptions = connectionOptions(options, role);
  switch (options.mode ?? 'standalone') {
    case 'cluster':
      return new Cluster(options.nodes!, clusterOptions(redisOptions));
    case 'sentinel':
      return new Redis({
        ...redisOptions,
        sentinels: options.sentinels!,
        name: options.name!,
        sentinelRetryStrategy: reconnectDelayMs,
        ...(options.sentinelUsername ? { sentinelUsername: options.sentinelUsername } : {}),
        ...(options.sentinelPassword ? { sentinelPassword: options.sentinelPassword } : {}),
        // TLS to the master and replicas the sentinels name, and to the sentinels themselves.
        ...(options.tls ? { enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
      });
    case 'standalone':
      return new Redis(options.url!, redisOptions);
  }
}

/**
 * Cluster-level retries (failover, CLUSTERDOWN, TRYAGAIN) would otherwise hold a command for
 * up to maxRedirections × 100 ms: keep them short and few, a miss is cheaper than a wait.
 */
function clusterOptions(redisOptions: RedisOptions): ClusterOptions {
  const { retryStrategy: _perNode, enableOfflineQueue, ...perNode } = redisOptions;
  return {
    redisOptions: perNode,
    enableOfflineQueue,
    clusterRetryStrategy: reconnectDelayMs,
    maxRedirections: 4,
    retryDelayOnFailover: 20,
    retryDelayOnClusterDown: 20,
    retryDelayOnTryAgain: 20,
    scaleReads: 'master',
  };
}
