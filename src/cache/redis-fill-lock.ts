/**
 * The cross-replica fill lock: one replica fills a missing key from upstream, the others wait
 * for its entry to appear in the Redis tier instead of asking upstream too. Its shape is the
 * read-through's `FillLock` (src/proxy/read-through.ts).
 *
 * Invariants: a lock expires by itself (PX), so a replica that dies holding it delays the
 * others by at most its TTL; only the holder's token releases it; and when Redis cannot answer,
 * `tryLock` grants nothing and `waitFor` returns at once, so every replica fills by itself.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SharedTierBudget } from './budget.js';
import type { CacheEntry } from './entry.js';
import type { RedisConnection } from './redis-connection.js';
import type { RedisTier } from './redis-tier.js';

const WAIT_FIRST_POLL_MS = 5;
const WAIT_MAX_POLL_MS = 50;

const SCRIPTS = {
  // Deletes the lock only if it still holds our token: an expired lock taken over by another
  // replica must not be released by us.
  tmcUnlock: {
    numberOfKeys: 1,
    lua: `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`,
  },
  // -1 while the fill lock is held, else the entry (or nil): one round trip per poll, and no
  // entry bytes transferred while the other replica is still filling.
  tmcPollFill: {
    numberOfKeys: 2,
    lua: `if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
return redis.call('GET', KEYS[2])`,
  },
};

interface LockCommands {
  tmcUnlock(lockKey: string, token: string): Promise<number>;
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
  async tryLock(key: string, ttlMs: number, budget?: SharedTierBudget): Promise<string | undefined> {
    const token = randomBytes(16).toString('base64url');
    const lockKey = this.#connection.lockKey(key);
    const result = await this.#connection.call('lock', (c) => c.set(lockKey, token, 'PX', Math.max(1, Math.ceil(ttlMs)), 'NX'), budget);
    return result === 'OK' ? token : undefined;
  }

  /**
   * Releases the lock if it still holds `token`. Waits for this replica's pending write of the
   * key first: the tier's `set` is fire-and-forget, and a waiter that saw the lock gone before
   * the entry landed would fill again for nothing.
   */
  async unlock(key: string, token: string): Promise<void> {
    await this.#tier.pendingWrite(key);
    await this.#connection.call('lock', (c) => (c as unknown as LockCommands).tmcUnlock(this.#connection.lockKey(key), token));
  }

  /**
   * Waits for another replica's fill of `key`, at most `timeoutMs`; undefined at the timeout,
   * or at once if Redis is unavailable or nobody holds the lock, so the caller fills itself.
   *
   * Polling (5 ms doubling to 50 ms, one script call each) rather than a pub/sub notice on
   * fill: a notice would need a subscription per waited key or a broadcast of every fill to
   * every replica (in a cluster, to every node), and a lost message would leave waiters to the
   * timeout. Fills take an upstream round trip (tens to hundreds of ms), so a poll adds at
   * most its interval, and waiting is rare: within a replica, fills are already coalesced.
   */
  async waitFor(key: string, timeoutMs: number, budget?: SharedTierBudget): Promise<CacheEntry | undefined> {
    const deadline = performance.now() + timeoutMs;
    const [lockKey, entryKey] = [this.#connection.lockKey(key), this.#connection.entryKey(key)];
    for (let delayMs = WAIT_FIRST_POLL_MS; ; delayMs = Math.min(delayMs * 2, WAIT_MAX_POLL_MS)) {
      const polled = await this.#connection.call('lock', (c) => (c as unknown as LockCommands).tmcPollFillBuffer(lockKey, entryKey), budget);
      if (polled === undefined) return undefined;
      // The entry is checked like any read of the tier: bound to its key, valid.
      if (polled !== -1) return Buffer.isBuffer(polled) ? this.#tier.fromStored(key, polled) : undefined;
      const remainingMs = deadline - performance.now();
      if (remainingMs <= 0) return undefined;
      await sleep(Math.min(delayMs, remainingMs));
    }
  }
}
