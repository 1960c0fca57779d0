/**
 * The cache as the read-through sees it: memory first, then Redis (optional), with promotion.
 *
 * - `peek` is the hit path: memory only, synchronous.
 * - A Redis hit is copied into memory for the rest of its life, so the next request for it on
 *   this replica is a memory hit.
 * - `set` writes memory at once and Redis in the background: the response never waits for it.
 * - Invalidations (a tag or a key) drop locally, in Redis, and through the Redis channel on
 *   every other replica's memory tier; if the channel was interrupted, memory is cleared,
 *   since invalidations published meanwhile were lost.
 * - Without Redis, or with Redis down, this is a memory cache: a failing tier is a miss.
 */
import type { CacheEntry } from './entry.js';
import { withGzipVariant } from './codec.js';
import { MemoryTier, type MemoryTierStats } from './memory-tier.js';
import type { InvalidationMessage, RedisTier, RedisTierStats } from './redis-tier.js';
import type { TierName } from './tier.js';

export interface TieredCacheOptions {
  memory?: MemoryTier;
  redis?: RedisTier;
}

export interface TieredHit {
  entry: CacheEntry;
  /** Where it was found: shown as `detail=` in Cache-Status. */
  tier: TierName;
}

export interface TieredStats {
  memory: MemoryTierStats;
  redis?: RedisTierStats;
}

export class TieredCache {
  readonly memory: MemoryTier;
  /** The shared tier, when configured; also the fill lock and the shared store of the proxy. */
  readonly redis: RedisTier | undefined;
  readonly #unsubscribe: (() => void) | undefined;
  /** Entries whose gzip variant is being made (weak: a dropped entry is simply forgotten). */
  readonly #compressing = new WeakSet<CacheEntry>();

  constructor(options: TieredCacheOptions = {}) {
    this.memory = options.memory ?? new MemoryTier();
    this.redis = options.redis;
    this.#unsubscribe = this.redis?.onInvalidate((message) => this.#applyRemote(message));
  }

  hasSharedTier(): boolean {
    return this.redis !== undefined;
  }

  /** Memory only, synchronous: the per-request hit path. */
  peek(key: string, now?: number): CacheEntry | undefined {
    return this.memory.get(key, now);
  }

  async get(key: string): Promise<TieredHit | undefined> {
    const local = this.memory.get(key);
    if (local) return { entry: local, tier: 'memory' };
    if (!this.redis) return undefined;
    const shared = await this.#getShared(key);
    if (!shared) return undefined;
    // A fill on this replica may have stored a newer entry while Redis answered: keep it.
    const current = this.memory.get(key);
    if (current && current.storedAt >= shared.storedAt) return { entry: current, tier: 'memory' };
    this.memory.set(key, shared);
    return { entry: shared, tier: 'redis' };
  }

  /**
   * Memory is written before this returns; the returned promise is the Redis write, which
   * never rejects: callers may ignore it (fire-and-forget) or await it (tests, shutdown).
   */
  set(key: string, entry: CacheEntry): Promise<void> {
    this.memory.set(key, entry);
    // Redis stores the gzip variant, so with Redis it is made at once (in the background); a
    // memory-only cache makes it when the first client that accepts gzip asks (ensureGzip).
    return this.redis ? this.#addGzipAndShare(key, entry) : Promise.resolve();
  }

  /**
   * Makes the gzip variant of the entry under `key` in the background, once, for clients that
   * accept gzip: this answer goes out as identity, the next ones compressed.
   */
  ensureGzip(key: string, entry: CacheEntry): void {
    if (entry.gzip !== undefined || this.#compressing.has(entry)) return;
    this.#compressing.add(entry);
    withGzipVariant(entry).then(
      (withGzip) => {
        if (withGzip !== entry) this.memory.replace(key, entry, withGzip);
      },
      () => undefined, // no variant: identity it stays
    );
  }

  /** Keeps an entry another replica stored in Redis in this replica's memory too (no Redis write). */
  promote(key: string, entry: CacheEntry): void {
    this.memory.set(key, entry);
  }

  /** Drops `key` here, in Redis and on every other replica. */
  async delete(key: string): Promise<void> {
    this.memory.delete(key);
    await this.redis?.delete(key);
  }

  /** Drops every entry tagged `tag` here, in Redis and on every other replica. */
  async invalidateTag(tag: string): Promise<{ memory: number; redis: number }> {
    const memory = this.memory.invalidateTag(tag);
    const redis = (await this.redis?.invalidateTag(tag)) ?? 0;
    return { memory, redis };
  }

  /** Readiness: true without Redis; with it, true once connected and listening (bounded wait). */
  async ready(timeoutMs: number): Promise<boolean> {
    return this.redis ? this.redis.ready(timeoutMs) : true;
  }

  stats(): TieredStats {
    const stats: TieredStats = { memory: this.memory.stats() };
    if (this.redis) stats.redis = this.redis.stats();
    return stats;
  }

  async close(): Promise<void> {
    this.#unsubscribe?.();
    await this.redis?.close();
    this.memory.close();
  }

  /**
   * In the background: the gzip variant (for clients that accept gzip, and the stored form in
   * Redis), swapped into memory if the entry is still the one there, then the Redis write.
   */
  async #addGzipAndShare(key: string, entry: CacheEntry): Promise<void> {
    let shared = entry;
    try {
      shared = await withGzipVariant(entry);
    } catch {
      // zlib failing is no reason to lose the entry: it is kept and shared without the variant.
    }
    if (shared !== entry) this.memory.replace(key, entry, shared);
    await this.redis?.set(key, shared);
  }

  async #getShared(key: string): Promise<CacheEntry | undefined> {
    try {
      return await this.redis?.get(key);
    } catch {
      // RedisTier never rejects; this only guards the rule "a failing tier is a miss".
      return undefined;
    }
  }

  #applyRemote(message: InvalidationMessage): void {
    if (message.kind === 'tag') this.memory.invalidateTag(message.tag);
    else if (message.kind === 'key') this.memory.delete(message.key);
    else this.memory.clear();
  }
}
