/**
 * One level of the cache, and the one vocabulary every level speaks. Every tier passes the same
 * contract suite (test/cache/tier-contract.ts); TieredCache (tiered.ts) chains them in order.
 *
 * Each method answers `MaybePromise`: the memory tier answers synchronously, so that a memory
 * hit costs no promise and no microtask; Redis answers with a promise. Callers that do not care
 * simply `await` (which accepts a plain value too).
 *
 * A tier never throws and never rejects: a tier that fails (Redis down, a timeout, a corrupt
 * value) answers `undefined` to `get`/`peek` and does nothing on `set`, and reports the failure
 * through its own log line and counter. A failing tier is a miss, never an error.
 */
import type { SharedTierBudget } from './budget.js';
import type { CacheEntry } from './entry.js';

export type MaybePromise<T> = T | Promise<T>;

/** Which tier answered a lookup; shown in `Cache-Status: ...; detail=memory|redis`. */
export type TierName = 'memory' | 'redis';

export interface CacheTier {
  readonly name: TierName;
  /** Entries with a larger body are not stored by this tier. */
  readonly maxEntryBytes: number;
  /**
   * The live entry under `key`, or undefined. Counts as a use (recency, hit counters): call it
   * for a lookup that will serve what it finds. `now` (ms since epoch) is the caller's clock
   * reading, passed so the hot path reads the clock once; the tier's own clock otherwise.
   * `budget`: the request's allowance for waiting on a shared tier (budget.ts); a local tier
   * ignores it.
   */
  get(key: string, now?: number, budget?: SharedTierBudget): MaybePromise<CacheEntry | undefined>;
  /** Like `get`, without counting as a use (lru-cache's `peek`): for looking, not serving. */
  peek(key: string, now?: number): MaybePromise<CacheEntry | undefined>;
  /**
   * Stores the entry until `expiresAt(entry)`; larger-than-allowed or already expired entries
   * are silently skipped. A tier that knows at once may answer whether it stored the entry.
   */
  set(key: string, entry: CacheEntry, budget?: SharedTierBudget): MaybePromise<boolean | void>;
  /** A tier that knows at once may answer whether an entry was there. */
  delete(key: string): MaybePromise<boolean | void>;
  /** Drops every entry carrying `tag`; answers how many entries this tier dropped. */
  invalidateTag(tag: string): MaybePromise<number>;
  /**
   * Drops everything. Only a tier private to this process offers it (clearing a shared tier
   * would empty every replica's cache): TieredCache applies invalidations received from other
   * replicas to exactly the tiers that have it.
   */
  clear?(): MaybePromise<void>;
  /**
   * Drops every entry of a shared tier (the admin API's purge of everything), leaving what is not
   * an entry (identities, secrets) alone; answers how many entries it dropped.
   */
  purgeAll?(): Promise<number>;
  /**
   * A shared tier's invalidations that say whether they reached it: `undefined` (or false) when
   * it could not be told (a timeout, a stall, a disconnection), so that TieredCache retries
   * them and does not trust what the tier holds for them meanwhile (pending-invalidations.ts).
   */
  tryInvalidateTag?(tag: string): Promise<number | undefined>;
  tryDelete?(key: string): Promise<boolean>;
  tryPurgeAll?(): Promise<number | undefined>;
  /** Lets work in flight finish; the tier answers nothing useful afterwards. */
  close(): MaybePromise<void>;
}

/** What an operation did in each tier (entries dropped, say), by tier name. */
export type TierCounts = Partial<Record<TierName, number>>;
