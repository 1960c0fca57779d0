/**
 * Fills of cache entries: the shared fill (shared-fill.ts: one upstream request per key in flight
 * on this replica, one per key across replicas through the lock role, the others waiting for its
 * entry) with what is particular to entries: storing what the fill produced, up to
 * `maxEntryBytes`, and backfilling the local tiers with an entry another replica stored. It knows
 * nothing of callers, status codes or access rules: the job's `fetch` says what is an entry to
 * store and what is anything else, which is handed back unstored (policy lives in the
 * read-through; prow's ghcache layers it the same way).
 */
import type { SharedTierBudget } from './budget.js';
import type { CoalescedRun } from './coalesce.js';
import { bodyLengthOf, type CacheEntry } from './entry.js';
import { SharedFill, type ShareWrite, type SharedFillJob, type SharedLock } from './shared-fill.js';
import { tracing, type Span, type Tracing } from '../trace/tracing.js';

/** Cross-replica fill lock (the Redis tier): the lock role over entries. */
export type FillLock = SharedLock<CacheEntry>;

/** Where fills are stored: `set` in every tier (the promise is the shared write), `backfill` in the local tiers only. */
export interface FillStore {
  set(key: string, entry: CacheEntry, budget?: SharedTierBudget): Promise<void> | void;
  backfill(key: string, entry: CacheEntry): void;
}

/** `keep: false`: an entry answered but not stored (it does not belong under the job's key). */
export type Fetched<R> = { readonly kind: 'entry'; readonly entry: CacheEntry; readonly keep?: false } | { readonly kind: 'other'; readonly value: R };

/**
 * `storedEarlier`: the entry another replica had already stored when this one claimed the fill
 * (not fetched for this fill): its caller treats it as a Redis hit, access rules included.
 * `collapsed`: the entry of another replica's fill, waited for under its lock (RFC 9211
 * `collapsed`): this replica asked nothing upstream.
 */
export type FillResult<R> =
  | { readonly kind: 'entry'; readonly entry: CacheEntry; readonly stored: boolean; readonly storedEarlier?: true; readonly collapsed?: true }
  | { readonly kind: 'other'; readonly value: R };

export interface FillJob<R> {
  /** Where an entry is stored. */
  readonly key: string;
  /** What concurrent identical fills coalesce on. */
  readonly fillKey: string;
  /** May this fill take, or wait on, the cross-replica lock of `key`? (Only a caller who may read `key`.) */
  readonly shareable: boolean;
  /**
   * The cross-replica lock of a fill that is not `shareable` but still stores under `key`: taken
   * and waited on as `lockOwner`'s (shared-fill.ts), so that only that owner's fills wait on it;
   * its caller judges what it waited for before serving it.
   */
  readonly lockKey?: string | undefined;
  readonly lockOwner?: string | undefined;
  /** The key whose fill this one may wait on once, never holding its lock (shared-fill.ts `waitKey`); its caller judges what it waited for. */
  readonly waitKey?: string | undefined;
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
  /** How long a replica waits on a fill it may adopt but never claims (`cache.redis.lockWaitMs`). */
  readonly lockWaitMs: number;
  /** How long a replica follows another's fill while that one holds its lock (shared-fill.ts `followMs`). */
  readonly followMs?: number | undefined;
  /** Larger entries are answered but not stored. */
  readonly maxEntryBytes: number;
}

export class Filler<R> {
  readonly #fill: SharedFill<CacheEntry, FillResult<R>>;
  /** Tracing on: the span of each fill this replica leads, by fill key, for the requests that join it to link. */
  readonly #leading = new Map<string, Span>();

  constructor(private readonly o: FillerOptions) {
    this.#fill = new SharedFill({ lock: o.lock, lockTtlMs: o.lockTtlMs, lockWaitMs: o.lockWaitMs, followMs: o.followMs });
  }

  /** Runs the job, or joins the one already running for its `fillKey`. */
  run(job: FillJob<R>): CoalescedRun<FillResult<R>> {
    if (tracing !== undefined) return this.#traced(tracing, job);
    return this.#fill.run(this.#shared(job));
  }

  /**
   * Tracing on: a fill this request leads is a span (its upstream request and Redis round trips
   * below it); a request that joins one in flight is linked from that span (a span link per
   * request that waited on it: their traces meet at the fill).
   */
  #traced(t: Tracing, job: FillJob<R>): CoalescedRun<FillResult<R>> {
    const leading = this.#leading.get(job.fillKey);
    if (leading !== undefined && this.#fill.isRunning(job.fillKey)) {
      t.linkActive(leading);
      return this.#fill.run(this.#shared(job));
    }
    const span = t.child('cache fill', 'internal', { 'tm_cache.fill.shareable': job.shareable });
    if (span === undefined) return this.#fill.run(this.#shared(job));
    const run = t.withSpan(span, () => this.#fill.run(this.#shared(job)));
    if (!run.leader) {
      // Joined a fill that began before tracing did: nothing of its own to trace.
      t.end(span);
      return run;
    }
    this.#leading.set(job.fillKey, span);
    // Only our own: a later fill of the key may have registered its span by now.
    const release = (): void => void (this.#leading.get(job.fillKey) === span && this.#leading.delete(job.fillKey));
    run.promise.then(
      (result) => {
        release();
        span.setAttributes(result.kind === 'entry' ? { 'tm_cache.fill.stored': result.stored, 'tm_cache.fill.collapsed': result.collapsed === true } : {});
        t.end(span);
      },
      (error: unknown) => {
        release();
        t.end(span, error);
      },
    );
    return run;
  }

  /** Is a fill for `fillKey` running on this replica? (A stale hit then needs no refresh of its own.) */
  isRunning(fillKey: string): boolean {
    return this.#fill.isRunning(fillKey);
  }

  /** The fill of `fillKey` running on this replica, to wait on (a derived answer's source being refreshed); undefined when none is. */
  running(fillKey: string): Promise<unknown> | undefined {
    return this.#fill.running(fillKey);
  }

  /** Runs the job on its own, not coalesced (a caller that must be judged by its own answer). */
  runAlone(job: FillJob<R>): Promise<FillResult<R>> {
    return this.#fill.runAlone(this.#shared(job));
  }

  /** The fill as a shared-fill job: locked on its key only when the caller may share it and it is the key's own fill, or when the job names its lock (and whose). */
  #shared(job: FillJob<R>): SharedFillJob<CacheEntry, FillResult<R>> {
    return {
      key: job.fillKey,
      lockKey: job.lockKey ?? (job.shareable && job.key === job.fillKey ? job.key : undefined),
      lockOwner: job.lockOwner,
      waitKey: job.waitKey,
      acceptStored: job.acceptStored,
      budget: job.budget,
      adopt: (entry, how) => {
        this.o.store.backfill(job.key, entry);
        return how === 'stored' ? { kind: 'entry', entry, stored: true, storedEarlier: true } : { kind: 'entry', entry, stored: true, collapsed: true };
      },
      produce: (share) => this.#fetchAndStore(job, share),
    };
  }

  async #fetchAndStore(job: FillJob<R>, share: ShareWrite): Promise<FillResult<R>> {
    const fetched = await job.fetch();
    if (fetched.kind === 'other') return fetched;
    const entry = fetched.entry;
    const stored = fetched.keep !== false && bodyLengthOf(entry) <= this.o.maxEntryBytes;
    // The write to every tier; the lock (if this fill holds it) is released once it landed.
    if (stored) share(this.o.store.set(job.key, entry, job.budget));
    return { kind: 'entry', entry, stored };
  }
}
