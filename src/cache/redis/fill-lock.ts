/**
 * The cross-replica fill lock: one replica fills a missing key from upstream, the others wait
 * for its entry to appear in the Redis tier instead of asking upstream too: the lock role of
 * shared-fill.ts over entries (fill.ts's `FillLock`).
 *
 * A key's fill has its own lock, which every replica that may share the entry takes or waits on,
 * and may have an owner's lock beside it (a caller who may not hold the key's own: read-through.ts):
 * either one's waiters read the same entry.
 *
 * Invariants: a lock expires by itself (PX), so a replica that dies holding it delays the
 * others by at most its TTL; only the holder's token releases it; and when Redis cannot answer,
 * `claim` grants nothing and `waitFor` returns at once, so every replica fills by itself.
 */
import type { SharedTierBudget } from '../budget.js';
import { isFresh, type CacheEntry } from '../entry.js';
import { newLock, STILL_LOCKED, type RedisConnection } from './connection.js';
import type { RedisTier } from './tier.js';
import type { LockClaim, SharedLock } from '../shared-fill.js';

const SCRIPTS = {
  // The stored entry with whether the lock is still held ({entry, 0|1}); else -1 while the lock
  // is held, nil once it is not. The entry is looked at first: a holder whose unlock was lost (a
  // timed-out command) has still stored it, and waiters need not wait out the lock. One round
  // trip per poll; no entry bytes while there is none.
  tmcPollFill: {
    numberOfKeys: 2,
    lua: `local entry = redis.call('GET', KEYS[2])
local held = redis.call('EXISTS', KEYS[1])
if entry then return {entry, held} end
if held == 1 then return -1 end
return false`,
  },
  // The entry if one is stored (another replica filled it since this one looked), else 1 when
  // the lock was taken (SET NX PX), 0 when another replica holds it. The entry key and its lock
  // share a hash tag, so this runs in one slot of a cluster.
  tmcClaimFill: {
    numberOfKeys: 2,
    lua: `local entry = redis.call('GET', KEYS[2])
if entry then return entry end
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 1 end
return 0`,
  },
};

interface LockCommands {
  tmcPollFillBuffer(lockKey: string, entryKey: string): Promise<number | [Buffer, number] | null>;
  tmcClaimFillBuffer(lockKey: string, entryKey: string, token: string, ttlMs: number): Promise<number | Buffer | null>;
}

export class RedisFillLock implements SharedLock<CacheEntry> {
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
  tryLock(key: string, ttlMs: number, budget?: SharedTierBudget, owner?: string): Promise<string | undefined> {
    return this.#connection.tryLock(this.#connection.lockKey(key, owner), ttlMs, budget);
  }

  /**
   * The lock, or the entry another replica stored meanwhile, in one round trip: a replica that
   * missed in Redis a moment ago and takes the lock after the filler released it would otherwise
   * fill again for nothing (a CI burst's extra upstream requests). A stored entry that is not
   * fresh (or not valid for its key) is no answer to a fill: then the lock is asked for alone.
   */
  async claim(key: string, ttlMs: number, acceptStored: boolean, budget?: SharedTierBudget, owner?: string): Promise<LockClaim<CacheEntry>> {
    if (!acceptStored) {
      const token = await this.tryLock(key, ttlMs, budget, owner);
      return token === undefined ? undefined : { token };
    }
    const [lockKey, entryKey] = [this.#connection.lockKey(key, owner), this.#connection.entryKey(key)];
    const { token, px } = newLock(ttlMs);
    const claimed = await this.#connection.call('lock', (c) => (c as unknown as LockCommands).tmcClaimFillBuffer(lockKey, entryKey, token, px), budget);
    if (claimed === 1) return { token };
    if (!Buffer.isBuffer(claimed)) return undefined;
    const entry = await this.#freshEntry(key, claimed);
    if (entry !== undefined) return { entry };
    const locked = await this.tryLock(key, ttlMs, budget, owner);
    return locked === undefined ? undefined : { token: locked };
  }

  /**
   * Releases the lock if it still holds `token`. Waits for this replica's pending write of the
   * key first: the tier's `set` is fire-and-forget, and a waiter that saw the lock gone before
   * the entry landed would fill again for nothing.
   */
  async unlock(key: string, token: string, owner?: string): Promise<void> {
    await this.#tier.pendingWrite(key);
    await this.#connection.unlock(this.#connection.lockKey(key, owner), token);
  }

  /** Keeps this replica's lock of `key` for another `ttlMs` while its fill is at work. */
  extend(key: string, token: string, ttlMs: number, owner?: string): Promise<boolean> {
    return this.#connection.extendLock(this.#connection.lockKey(key, owner), token, ttlMs);
  }

  /**
   * Waits for another replica's fill of `key`, at most `timeoutMs`; undefined at the timeout,
   * or at once if Redis is unavailable or nobody holds the lock, so the caller fills itself.
   * One script call per poll (RedisConnection.whileLocked).
   */
  waitFor(key: string, timeoutMs: number, budget?: SharedTierBudget, owner?: string): Promise<CacheEntry | undefined> {
    const [lockKey, entryKey] = [this.#connection.lockKey(key, owner), this.#connection.entryKey(key)];
    return this.#connection.whileLocked(timeoutMs, async () => {
      const polled = await this.#connection.call('lock', (c) => (c as unknown as LockCommands).tmcPollFillBuffer(lockKey, entryKey), budget);
      if (polled === -1) return STILL_LOCKED;
      if (!Array.isArray(polled)) return undefined; // nothing stored, nobody filling (or no answer)
      // The stale entry a refresh replaces is no result, nor is it once the holder gave up.
      const [stored, held] = polled;
      return this.#freshEntry(key, stored) ?? (held === 1 ? STILL_LOCKED : undefined);
    });
  }

  /** A stored value as a fill's result: checked like any read of the tier (bound to its key, valid), and fresh. */
  #freshEntry(key: string, stored: Buffer): CacheEntry | undefined {
    const entry = this.#tier.fromStored(key, stored);
    return entry !== undefined && isFresh(entry, this.#tier.now()) ? entry : undefined;
  }
}
