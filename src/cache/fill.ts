/**
 * The fill mechanism: one upstream request per key in flight on this replica (coalescing), one
 * per key across replicas (a short lock in the shared tier, the others waiting for its entry),
 * and storing what the fill produced. It knows nothing of callers, status codes or access
 * rules: the job's `fetch` says what is an entry to store and what is anything else, which is
 * handed back unstored (policy lives in the read-through; prow's ghcache layers it the same way).
 */
import type { SharedTierBudget } from './budget.js';
import { Coalescer, type CoalescedRun } from './coalesce.js';
import { bodyLengthOf, type CacheEntry } from './entry.js';

/**
 * What a replica gets when it asks to fill a key: the lock (`token`), or the fresh entry another
 * replica stored since this one looked (`entry`: nothing to fill), or neither (another replica
 * holds the lock, or Redis cannot answer).
 */
export type LockClaim = { readonly token: string } | { readonly entry: CacheEntry } | undefined;

/** Cross-replica fill lock (the Redis tier): one replica fills, the others wait for its result. */
export interface FillLock {
  /** `acceptStored` false: the lock or nothing, never a stored entry (the fill must ask upstream). */
  claim(key: string, ttlMs: number, acceptStored: boolean, budget?: SharedTierBudget): Promise<LockClaim>;
  unlock(key: string, token: string): Promise<void>;
  waitFor(key: string, timeoutMs: number, budget?: SharedTierBudget): Promise<CacheEntry | undefined>;
}

/** Where fills are stored: `set` in every tier (the promise is the shared write), `backfill` in the local tiers only. */
export interface FillStore {
  set(key: string, entry: CacheEntry, budget?: SharedTierBudget): Promise<void> | void;
  backfill(key: string, entry: CacheEntry): void;
}

export type Fetched<R> = { readonly kind: 'entry'; readonly entry: CacheEntry } | { readonly kind: 'other'; readonly value: R };

/**
 * `storedEarlier`: the entry another replica had already stored when this one claimed the fill
 * (not fetched for this fill): its caller treats it as a Redis hit, access rules included.
 */
export type FillResult<R> =
  | { readonly kind: 'entry'; readonly entry: CacheEntry; readonly stored: boolean; readonly storedEarlier?: true }
  | { readonly kind: 'other'; readonly value: R };

export interface FillJob<R> {
  /** Where an entry is stored. */
  readonly key: string;
  /** What concurrent identical fills coalesce on. */
  readonly fillKey: string;
  /** May this fill take, or wait on, the cross-replica lock of `key`? (Only a caller who may read `key`.) */
  readonly shareable: boolean;
  /**
   * May an entry another replica stored since the look-up answer this fill? Not when the request
   * must be answered by the instance (a no-cache request, a refused access confirmation).
   */
  readonly acceptStored: boolean;
  /** The leading request's allowance for waiting on the lock's store (budget.ts). */
  readonly budget?: SharedTierBudget | undefined;
  fetch(): Promise<Fetched<R>>;
}

export interface FillerOptions {
  readonly store: FillStore;
  readonly lock?: FillLock | undefined;
  /** How long a cross-replica lock holds if its owner never releases it (`cache.redis.lockTtlMs`). */
  readonly lockTtlMs: number;
  /** How long a replica waits for another's fill before filling itself (`cache.redis.lockWaitMs`). */
  readonly lockWaitMs: number;
  /** Larger entries are answered but not stored. */
  readonly maxEntryBytes: number;
}

export class Filler<R> {
  readonly #coalescer = new Coalescer<FillResult<R>>();

  constructor(private readonly o: FillerOptions) {}

  /** Runs the job, or joins the one already running for its `fillKey`. */
  run(job: FillJob<R>): CoalescedRun<FillResult<R>> {
    return this.#coalescer.run(job.fillKey, () => this.#fill(job));
  }

  /** Is a fill for `fillKey` running on this replica? (A stale hit then needs no refresh of its own.) */
  isRunning(fillKey: string): boolean {
    return this.#coalescer.isInFlight(fillKey);
  }

  /** Runs the job on its own, not coalesced (a caller that must be judged by its own answer). */
  runAlone(job: FillJob<R>): Promise<FillResult<R>> {
    return this.#fill(job);
  }

  async #fill(job: FillJob<R>): Promise<FillResult<R>> {
    const lock = this.o.lock;
    if (lock === undefined || !job.shareable || job.key !== job.fillKey) return this.#fetchAndStore(job);
    const claim = await lock.claim(job.key, this.o.lockTtlMs, job.acceptStored, job.budget);
    // Another replica filled the key between this one's look-up and its claim: nothing to ask.
    if (claim !== undefined && 'entry' in claim) {
      this.o.store.backfill(job.key, claim.entry);
      return { kind: 'entry', entry: claim.entry, stored: true, storedEarlier: true };
    }
    if (claim === undefined) {
      const filled = await lock.waitFor(job.key, this.o.lockWaitMs, job.budget);
      if (filled === undefined) return this.#fetchAndStore(job);
      this.o.store.backfill(job.key, filled);
      return { kind: 'entry', entry: filled, stored: true };
    }
    const { token } = claim;
    let shared: Promise<void> | void = undefined;
    try {
      return await this.#fetchAndStore(job, (write) => (shared = write));
    } finally {
      // Released once the entry is in Redis, so that a replica waiting on the lock finds it there.
      void Promise.resolve(shared).then(() => lock.unlock(job.key, token));
    }
  }

  async #fetchAndStore(job: FillJob<R>, onShared?: (write: Promise<void> | void) => void): Promise<FillResult<R>> {
    const fetched = await job.fetch();
    if (fetched.kind === 'other') return fetched;
    const entry = fetched.entry;
    const stored = bodyLengthOf(entry) <= this.o.maxEntryBytes;
    if (stored) {
      const write = this.o.store.set(job.key, entry, job.budget);
      onShared?.(write);
    }
    return { kind: 'entry', entry, stored };
  }
}
