/**
 * The cache as the proxy sees it: an ordered list of tiers (Souin's Storer chain), this
 * process's memory tier first, then the shared ones (Redis).
 *
 * - `get` asks the tiers in order and answers SYNCHRONOUSLY while they do: a memory hit costs
 *   one lookup and a two-field object, no promise. The first tier that answers with a promise
 *   turns the rest of the lookup asynchronous.
 * - A lower tier's hit is backfilled into the tiers above it, for the rest of its life, so the
 *   next request for it is answered higher up; an entry a fill stored in memory meanwhile is
 *   newer and wins.
 * - `set` writes memory at once and the lower tiers in the background (with the gzip variant,
 *   the form Redis stores): the response never waits for them. The gzip variant is made at the
 *   fill when Redis stores it, else when a gzip client first asks (and waits for it), so that a
 *   client sees one ETag per representation from its first answer (`gzipVariant`).
 * - Invalidations (a tag or a key) drop in every tier, then go out on the bus; what other
 *   replicas publish is applied to the process-private tiers (those with `clear`), and a bus
 *   that may have lost messages makes them forget everything.
 * - An invalidation the shared tiers or the bus could not take (Redis stalled) is retried with
 *   backoff; the caller waits at most `invalidationWaitMs` and learns what was not reached, and
 *   until it gets through, this replica does not serve from Redis what it covers
 *   (pending-invalidations.ts).
 * - A failing tier is a miss: a lookup that throws or rejects counts as "not there".
 */
import type { SharedTierBudget } from './budget.js';
import type { CacheEntry } from './entry.js';
import { withGzipVariant } from './redis/codec.js';
import type { InvalidationBus, InvalidationMessage } from './invalidation.js';
import { MemoryTier, type MemoryTierStats } from './memory-tier.js';
import { PendingInvalidations, type Attempt, type SharedInvalidation } from './pending-invalidations.js';
import type { CacheTier, MaybePromise, TierName } from './tier.js';
import type { TierCounts } from './tier.js';

/** Fastest first; the first is always this process's memory tier (the hit path, gzip swaps). */
export type TierList = readonly [MemoryTier, ...CacheTier[]];

export interface TieredCacheOptions {
  /** Default: a memory tier alone. */
  tiers?: TierList;
  /** Carries invalidations to and from the other replicas; none: this replica is alone. */
  bus?: InvalidationBus;
  /** The clock entries' `storedAt` is read on (pending invalidations are compared with it); default Date.now. */
  now?: () => number;
  /** How long an invalidation waits for Redis and the bus before it answers what it could not reach; default 2 s. */
  invalidationWaitMs?: number;
  /** Told when the bus made this replica clear its private tiers, why, and how many entries memory held (the log). */
  onRemoteClear?: (why: RemoteClear, memoryEntries: number) => void;
}

/** Why the bus cleared this replica's memory: another replica's purge, or messages missed while the subscription was down. */
export type RemoteClear = 'purged-by-another-replica' | 'invalidations-missed';

/**
 * Long enough to outlast a stall of Redis of a few hundred ms (a failover, a `CLIENT PAUSE`)
 * many command timeouts over, short enough for an operator's purge to answer.
 */
const INVALIDATION_WAIT_MS = 2_000;

/** What an invalidation dropped, and what it could not reach within the wait (retried in the background). */
export interface Invalidated {
  readonly dropped: TierCounts;
  /** Shared tiers (`redis`) or `replicas` (the bus) not told yet; empty when everything was. */
  readonly unreached: readonly string[];
}

export interface TieredHit {
  entry: CacheEntry;
  /** Where it was found: shown as `detail=` in Cache-Status. */
  tier: TierName;
}

/** Entries dropped per tier name (tiers sharing a name add up). */

export interface TieredStats {
  memory: MemoryTierStats;
}

export class TieredCache {
  readonly tiers: TierList;
  /** The first tier; also read by the metrics. */
  readonly memory: MemoryTier;
  /** The largest entry some tier stores: a fill answered with a larger one stores nothing. */
  readonly maxEntryBytes: number;
  readonly #lower: readonly CacheTier[];
  /** The tiers no other replica sees: remote invalidations are applied to them. */
  readonly #private: readonly CacheTier[];
  readonly #bus: InvalidationBus | undefined;
  readonly #unsubscribe: (() => void) | undefined;
  /** Invalidations not yet taken by the shared tiers and the bus; none when there are neither. */
  readonly #pending: PendingInvalidations | undefined;
  readonly #invalidationWaitMs: number;
  readonly #onRemoteClear: TieredCacheOptions['onRemoteClear'];
  /** Each entry's gzip variant, made once (weak: a dropped entry is simply forgotten). */
  readonly #variants = new WeakMap<CacheEntry, Promise<CacheEntry>>();

  constructor(options: TieredCacheOptions = {}) {
    this.tiers = options.tiers ?? [new MemoryTier()];
    this.memory = this.tiers[0];
    this.maxEntryBytes = Math.max(...this.tiers.map((tier) => tier.maxEntryBytes));
    this.#lower = this.tiers.slice(1);
    this.#private = this.tiers.filter((tier) => tier.clear !== undefined);
    this.#bus = options.bus;
    this.#unsubscribe = this.#bus?.onInvalidate((message) => this.#applyRemote(message));
    this.#invalidationWaitMs = options.invalidationWaitMs ?? INVALIDATION_WAIT_MS;
    this.#onRemoteClear = options.onRemoteClear;
    const shared = this.#lower.length > 0 || this.#bus !== undefined;
    this.#pending = shared ? new PendingInvalidations({ attempt: (m) => this.#attempt(m), now: options.now ?? Date.now }) : undefined;
  }

  /**
   * The first tier holding a live entry for `key`, and its name. Synchronous when the memory
   * tier has it (the hit path: no promise), and when every tier asked answered synchronously.
   */
  get(key: string, now?: number, budget?: SharedTierBudget): MaybePromise<TieredHit | undefined> {
    const local = this.memory.get(key, now);
    if (local !== undefined) return { entry: local, tier: 'memory' };
    return this.#getFrom(1, key, now, budget);
  }

  /** What memory holds for `key`, not counted as a use (lru-cache's `peek`); the lower tiers are not asked. */
  peekMemory(key: string): CacheEntry | undefined {
    return this.memory.peek(key);
  }

  /**
   * Memory is written before this returns; the returned promise is the lower tiers' writes,
   * which never reject: callers may ignore it (fire-and-forget) or await it (tests, shutdown).
   */
  set(key: string, entry: CacheEntry, budget?: SharedTierBudget): Promise<void> {
    this.memory.set(key, entry);
    // Lower tiers store the gzip variant, so it is made at once (codec.ts withGzipVariant) and
    // memory has it by the next hit. Memory only, it is made when a client that accepts gzip first
    // asks for the entry (pipeline.ts #finish waits for it, so that client's first answer carries
    // the ETag of every later one): compressing a 90 KB answer costs more CPU than the rest of a
    // miss, wasted where no client asks for gzip (SDKs, CI agents).
    if (this.#lower.length === 0) return Promise.resolve();
    return this.#share(key, this.gzipVariant(key, entry), budget);
  }

  /**
   * The entry under `key` with its gzip variant, made once per entry (codec.ts: compressed at once or on the libuv
   * pool) and swapped into memory if the entry is still the one there. Never rejects: an entry
   * zlib could not compress stays identity only, for every client alike.
   */
  gzipVariant(key: string, entry: CacheEntry): Promise<CacheEntry> {
    let variant = this.#variants.get(entry);
    if (variant === undefined) {
      variant = withGzipVariant(entry).then(
        (withGzip) => {
          if (withGzip !== entry) this.memory.replace(key, entry, withGzip);
          return withGzip;
        },
        () => entry, // zlib failing is no reason to lose the entry: kept (and shared) without the variant
      );
      this.#variants.set(entry, variant);
    }
    return variant;
  }

  /**
   * Keeps in memory an entry that already is in the lower tiers (another replica's fill, seen
   * through the fill lock): nothing is written below.
   */
  backfill(key: string, entry: CacheEntry): void {
    this.#backfill(key, entry, 1);
  }

  /** Drops `key` in every tier, then on every other replica. */
  async delete(key: string): Promise<void> {
    await this.invalidate({ kind: 'key', key });
  }

  /** Drops every entry tagged `tag` in every tier, then on every other replica. */
  async invalidateTag(tag: string): Promise<TierCounts> {
    return (await this.invalidate({ kind: 'tag', tag })).dropped;
  }

  /**
   * Drops every entry in every tier (the admin API's purge of everything), then on every other
   * replica (their private tiers clear on the bus's `all`). Answers what each tier dropped.
   */
  async purgeAll(): Promise<TierCounts> {
    return (await this.invalidate({ kind: 'all' })).dropped;
  }

  /**
   * A key, a tag or everything: dropped from memory at once, then from the shared tiers and on
   * the other replicas, retried until they take it; answers once they did, or after
   * `invalidationWaitMs` naming what they did not (still retried; not trusted here meanwhile).
   */
  async invalidate(message: SharedInvalidation): Promise<Invalidated> {
    const dropped: TierCounts = { memory: this.#dropFromMemory(message) };
    if (this.#pending === undefined) return { dropped, unreached: [] };
    const attempt = await this.#pending.send(message, this.#invalidationWaitMs);
    if ('counts' in attempt) return { dropped: { ...attempt.counts, ...dropped, memory: dropped.memory! + (attempt.counts.memory ?? 0) }, unreached: [] };
    for (const tier of this.#lower) dropped[tier.name] ??= 0;
    return { dropped, unreached: attempt.unreached };
  }

  /** Readiness: true without a bus; with one, once it can send and listens (bounded wait). */
  async ready(timeoutMs: number): Promise<boolean> {
    return this.#bus ? this.#bus.ready(timeoutMs) : true;
  }

  stats(): TieredStats {
    return { memory: this.memory.stats() };
  }

  /** Stops listening and lets every tier finish what it has in flight. */
  async close(): Promise<void> {
    this.#unsubscribe?.();
    this.#pending?.close();
    await Promise.all(this.tiers.map((tier) => settle(() => tier.close(), undefined)));
  }

  /** Asks tiers[start..] in order, synchronously until one answers with a promise. */
  #getFrom(start: number, key: string, now: number | undefined, budget: SharedTierBudget | undefined): MaybePromise<TieredHit | undefined> {
    for (let i = start; i < this.tiers.length; i++) {
      const found = settle(() => this.tiers[i]!.get(key, now, budget), undefined);
      if (found instanceof Promise) return this.#awaitFrom(i, found, key, now, budget);
      if (found !== undefined && this.#trusts(key, found)) return this.#hitBelow(i, key, found, now);
    }
    return undefined;
  }

  async #awaitFrom(
    i: number,
    pending: Promise<CacheEntry | undefined>,
    key: string,
    now: number | undefined,
    budget: SharedTierBudget | undefined,
  ): Promise<TieredHit | undefined> {
    const found = await pending;
    return found !== undefined && this.#trusts(key, found) ? this.#hitBelow(i, key, found, now) : this.#getFrom(i + 1, key, now, budget);
  }

  /** A shared tier's entry that no pending invalidation covers (else a miss: it was to be dropped). */
  #trusts(key: string, entry: CacheEntry): boolean {
    return this.#pending === undefined || this.#pending.trusts(key, entry);
  }

  /** What memory drops for `message`: how many entries. */
  #dropFromMemory(message: SharedInvalidation): number {
    if (message.kind === 'tag') return this.memory.invalidateTag(message.tag);
    if (message.kind === 'key') return this.memory.delete(message.key) ? 1 : 0;
    const entries = this.memory.stats().entries;
    this.memory.clear();
    return entries;
  }

  /** One try at the shared tiers, then (once they took it) the bus: a replica told must not read back from them what was dropped. */
  async #attempt(message: SharedInvalidation): Promise<Attempt> {
    const counts: TierCounts = {};
    const unreached: string[] = [];
    await Promise.all(
      this.#lower.map(async (tier) => {
        const dropped = await settle(() => dropFrom(tier, message), undefined);
        if (dropped === undefined) unreached.push(tier.name);
        else if (dropped !== NOT_COUNTED) counts[tier.name] = (counts[tier.name] ?? 0) + dropped;
      }),
    );
    if (unreached.length === 0 && this.#bus && !(await settle(() => this.#bus!.publish(message), false))) unreached.push('replicas');
    return unreached.length === 0 ? { counts } : { unreached: [...new Set(unreached)] };
  }

  /** A hit in tiers[i] (i ≥ 1), backfilled above, unless memory meanwhile got a newer entry. */
  #hitBelow(i: number, key: string, entry: CacheEntry, now: number | undefined): TieredHit {
    // A fill on this replica may have stored a newer entry while the lower tier answered: every
    // local write lands in memory first, so that is where it shows.
    const current = this.memory.get(key, now);
    if (current !== undefined && current.storedAt >= entry.storedAt) return { entry: current, tier: 'memory' };
    this.#backfill(key, entry, i);
    return { entry, tier: this.tiers[i]!.name };
  }

  /** Writes `entry` into tiers[0..below): the ones above where it was found. */
  #backfill(key: string, entry: CacheEntry, below: number): void {
    for (let i = 0; i < below; i++) {
      const tier = this.tiers[i]!;
      void settle(() => tier.set(key, entry), undefined);
    }
  }

  /** In the background: once the gzip variant is made (the form the lower tiers store), the writes. */
  async #share(key: string, variant: Promise<CacheEntry>, budget: SharedTierBudget | undefined): Promise<void> {
    const shared = await variant;
    await Promise.all(this.#lower.map((tier) => settle(() => tier.set(key, shared, budget), undefined)));
  }

  #applyRemote(message: InvalidationMessage): void {
    if (message.kind === 'forget' || message.kind === 'access-refused') return; // about callers, not entries
    if (message.kind === 'all') this.#onRemoteClear?.(message.missed ? 'invalidations-missed' : 'purged-by-another-replica', this.memory.stats().entries);
    const apply = (tier: CacheTier): MaybePromise<unknown> =>
      message.kind === 'tag' ? tier.invalidateTag(message.tag) : message.kind === 'key' ? tier.delete(message.key) : tier.clear!();
    for (const tier of this.#private) void settle(() => apply(tier), undefined);
  }
}

/** A tier that keeps nothing to purge: its count is left out. */
const NOT_COUNTED = -1;

/** What a lower tier drops for `message`; undefined when it could not be told (only a tier with `try*` knows). */
async function dropFrom(tier: CacheTier, message: SharedInvalidation): Promise<number | undefined> {
  if (message.kind === 'tag') return tier.tryInvalidateTag ? tier.tryInvalidateTag(message.tag) : tier.invalidateTag(message.tag);
  if (message.kind === 'key') {
    if (tier.tryDelete) return (await tier.tryDelete(message.key)) ? 0 : undefined;
    await tier.delete(message.key);
    return 0;
  }
  if (tier.tryPurgeAll) return tier.tryPurgeAll();
  if (tier.purgeAll) return tier.purgeAll();
  if (tier.clear) return (void (await tier.clear()), 0);
  return NOT_COUNTED;
}

/**
 * Runs one tier call under the rule "a failing tier is a miss": a throw or a rejection becomes
 * `fallback`. Tiers never fail by contract; this keeps one broken tier from failing a request
 * (or, fire-and-forget, from becoming an unhandled rejection). Synchronous answers stay so.
 */
function settle<T, F>(call: () => MaybePromise<T>, fallback: F): MaybePromise<T | F> {
  try {
    const answer = call();
    return answer instanceof Promise ? answer.catch(() => fallback) : answer;
  } catch {
    return fallback;
  }
}
