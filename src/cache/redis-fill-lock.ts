/**
 * The cross-replica fill lock: one replica fills a missing key from upstream, the others wait
 * for its entry to appear in the Redis tier instead of asking upstream too. Its shape is the
 * read-through's `FillLock` (src/proxy/read-through.ts).
 *
 * Invariants: a lock expires by itself (PX), so a replica that dies holding it delays the
 * others by at most its TTL; only the holder's token releases it; and when Redis cannot answer,
 * `tryLock` grants nothing and `waitFor` returns at once, so every replica fills by itself.
 */
import type { SharedTierBudget } from './budget.js';
import type { CacheEntry } from './entry.js';
import { STILL_LOCKED, type RedisConnection } from './redis-connection.js';
import type { RedisTier } from './redis-tier.js';

const SCRIPTS = {
  // -1 while the fill lock is held, else the entry (or nil): one round trip per poll, and no
  // entry bytes transferred while the other replica is still filling.
  tmcPollFill: {
    numberOfKeys: 2,
    lua: `if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
return redis.call('GET', KEYS[2])`,
  },
};

interface LockCommands {
  tmcPollFillBuffer(lockKey: string, entryKey: string): Promise<number | Buffer | null>;
}

export class RedisFillLock {
  readonly #connection: RedisConnection;
  /** Where the filled entries land: waitFor reads them, unlock waits for this replica's write. */
  readonly #tier: RedisTier;

  constructor(connection: RedisConnection, tier: RedisTier) {
    this.#connection = connection;
    this.#tier = tier;
    connection.defineScripts(SCRIPTS);
  }

  /**
   * SET NX PX: the token if this replica may fill `key`, undefined if another one holds the
   * lock, or if Redis cannot answer (then `waitFor` returns at once).
   */
  tryLock(key: string, ttlMs: number, budget?: SharedTierBudget): Promise<string | undefined> {
    return this.#connection.tryLock(this.#connection.lockKey(key), ttlMs, budget);
  }

  /**
   * Releases the lock if it still holds `token`. Waits for this replica's pending write of the
   * key first: the tier's `set` is fire-and-forget, and a waiter that saw the lock gone before
   * the entry landed would fill again for nothing.
   */
  async unlock(key: string, token: string): Promise<void> {
    await this.#tier.pendingWrite(key);
    await this.#connection.unlock(this.#connection.lockKey(key), token);
  }

  /**
   * Waits for another replica's fill of `key`, at most `timeoutMs`; undefined at the timeout,
   * or at once if Redis is unavailable or nobody holds the lock, so the caller fills itself.
   * One script call per poll (RedisConnection.whileLocked).
   */
  waitFor(key: string, timeoutMs: number, budget?: SharedTierBudget): Promise<CacheEntry | undefined> {
    const [lockKey, entryKey] = [this.#connection.lockKey(key), this.#connection.entryKey(key)];
    return this.#connection.whileLocked(timeoutMs, async () => {
      const polled = await this.#connection.call('lock', (c) => (c as unknown as LockCommands).tmcPollFillBuffer(lockKey, entryKey), budget);
      if (polled === -1) return STILL_LOCKED;
      // The entry is checked like any read of the tier: bound to its key, valid.
      return Buffer.isBuffer(polled) ? this.#tier.fromStored(key, polled) : undefined;
    });
  }
}
