/**
 * Builds every Redis role over ONE connection: the cache tier, the fill lock, the shared store,
 * the invalidation bus and the fleet's upstream budget. No secret is ever kept in Redis: the one values are checked with is
 * configured (src/config/relations.ts), so that Redis alone can neither forge nor lose it. Each role is its own object (named after what it is
 * for), so the proxy depends on the role it uses, never on "Redis".
 *
 * Ownership: the roles borrow the connection; `close()` here lets the tier's pending writes
 * land, then disconnects. Close the TieredCache using the tier first (it stops listening).
 */
import { RedisInvalidationBus } from './bus.js';
import { RedisBudgetStore } from './budget-store.js';
import { RedisConnection, type RedisConnectionSettings } from './connection.js';
import { RedisFillLock } from './fill-lock.js';
import { RedisSharedStore } from './shared-store.js';
import { RedisTier, type RedisTierOptions } from './tier.js';

/** The connection's settings (redis-connection.ts), and the tier's own (its size limit, its clock). */
export interface RedisRolesOptions extends RedisConnectionSettings, RedisTierOptions {}

export interface RedisRoles {
  readonly connection: RedisConnection;
  readonly tier: RedisTier;
  readonly fillLock: RedisFillLock;
  readonly sharedStore: RedisSharedStore;
  readonly bus: RedisInvalidationBus;
  /** The fleet's upstream budget (src/upstream/fleet-budget.ts leases from it). */
  readonly budget: RedisBudgetStore;
  /** Binds every value to its key from now on (the connection's `bind`); before it, nothing is read or written. */
  bind(hmacSecret: Buffer): void;
  close(): Promise<void>;
}

/** Connects at once (in the background); throws only for incomplete options, naming the field. */
export function createRedisRoles(options: RedisRolesOptions): RedisRoles {
  const { maxEntryBytes, now, claimLimits, ...settings } = options;
  const connection = new RedisConnection(settings);
  const tier = new RedisTier(connection, { maxEntryBytes, now, ...(claimLimits ? { claimLimits } : {}) });
  return {
    connection,
    tier,
    fillLock: new RedisFillLock(connection, tier),
    sharedStore: new RedisSharedStore(connection),
    bus: new RedisInvalidationBus(connection),
    budget: new RedisBudgetStore(connection),
    bind: (hmacSecret) => connection.bind(hmacSecret),
    close: async () => {
      await tier.close();
      connection.close();
    },
  };
}
