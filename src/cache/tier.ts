import type { CacheEntry } from './entry.js';

/** Which tier answered a lookup; shown in `Cache-Status: ...; detail=memory|redis`. */
export type TierName = 'memory' | 'redis';

/**
 * One level of the cache. Every tier passes the same contract suite (test/cache/tier-contract.ts).
 *
 * A tier never throws at its caller: a tier that fails (Redis down, a timeout, a corrupt value)
 * answers `undefined` to `get` and does nothing on `set`, and reports the failure through its
 * own log line and counter. A failing tier is a miss, never an error.
 */
export interface CacheTier {
  readonly name: TierName;
  get(key: string): Promise<CacheEntry | undefined>;
  /** Stores the entry until `expiresAt(entry)`; larger-than-allowed entries are silently skipped. */
  set(key: string, entry: CacheEntry): Promise<void>;
  delete(key: string): Promise<void>;
  /** Drops every entry carrying `tag`. Resolves with how many entries this tier dropped. */
  invalidateTag(tag: string): Promise<number>;
  close(): Promise<void>;
}
