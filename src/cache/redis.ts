/**
 * Builds every Redis role over ONE connection: the cache tier, the fill lock, the shared store,
 * the secrets and the invalidation bus. Each role is its own object (named after what it is
 * for), so the proxy depends on the role it uses, never on "Redis".
 *
 * Ownership: the roles borrow the connection; `close()` here lets the tier's pending writes
 * land, then disconnects. Close the TieredCache using the tier first (it stops listening).
 */
import type { TierLogger } from './failure-log.js';
import type { Keyring } from './keyring.js';
import { RedisInvalidationBus } from './redis-bus.js';
import type { RedisConnectionOptions } from './redis-client.js';
import { RedisConnection } from './redis-connection.js';
import { RedisFillLock } from './redis-fill-lock.js';
import { RedisSecrets } from './redis-secrets.js';
import { RedisSharedStore } from './redis-shared-store.js';
import { RedisTier } from './redis-tier.js';

export interface RedisRolesOptions extends RedisConnectionOptions {
  /** Prepended to every key and to the invalidation channel; default `tmc:`. */
  keyPrefix?: string;
  /** Seals every stored value (AES-256-GCM); without it values are compressed, not encrypted. */
  keyring?: Keyring;
  logger?: TierLogger;
  /** At most one log line per failure kind per this interval. */
  logIntervalMs?: number;
  /** The tier's limit: entries with a larger body are not stored in Redis. */
  maxEntryBytes?: number;
  /** Clock in ms since epoch for the tier's TTLs and expiry; injectable for tests. */
  now?: () => number;
}

export interface RedisRoles {
  readonly connection: RedisConnection;
  readonly tier: RedisTier;
  readonly fillLock: RedisFillLock;
  readonly sharedStore: RedisSharedStore;
  readonly secrets: RedisSecrets;
  readonly bus: RedisInvalidationBus;
  close(): Promise<void>;
}

/** Connects at once (in the background); throws only for incomplete options, naming the field. */
export function createRedisRoles(options: RedisRolesOptions): RedisRoles {
  const { maxEntryBytes, now, ...settings } = options;
  const connection = new RedisConnection(settings);
  const tier = new RedisTier(connection, { maxEntryBytes, now });
  return {
    connection,
    tier,
    fillLock: new RedisFillLock(connection, tier),
    sharedStore: new RedisSharedStore(connection),
    secrets: new RedisSecrets(connection),
    bus: new RedisInvalidationBus(connection),
    close: async () => {
      await tier.close();
      connection.close();
    },
  };
}
