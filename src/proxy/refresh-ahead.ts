/**
 * Refresh-ahead (`cache.refreshAhead`): an entry read again in the last part of its freshness
 * (from `startAt` of it elapsed) is being polled. That read marks it and schedules its refresh
 * to start `lead` before the entry expires, so that the new answer lands just before then: a
 * polling client keeps getting fresh hits, and the key is refreshed about once per freshness
 * period, as often as it would be by waiting for it to go stale, not once per `startAt` of it.
 *
 * - The hit path pays one comparison (entry.ts isDueForRefreshAhead) and, in the last part, one
 *   WeakSet look-up: each entry is marked once, and its refresh scheduled once (one unref'd
 *   timer per key, at most one refresh per entry, so per key per freshness period).
 * - A read already past `freshUntil − lead` refreshes at once.
 * - When the timer fires, nothing is sent if the entry was replaced, evicted or purged meanwhile
 *   (this replica's memory no longer holds the same answer), or if a fill of the key is under way
 *   or the fleet's budget is paused (`mayStart`). A refresh waits for a budget token last (only
 *   tokens nobody else waits for, fleet-budget.ts). One skipped for want of a token, or
 *   for the pause or a fill under way, leaves the entry unmarked: a later read may try again.
 * - A key polled in one period is looked at over twice the last part in the next: the answer a
 *   refresh-ahead stored has its own refresh scheduled at once, sent only if that answer is read
 *   from (2 × startAt − 1) of its freshness on (`readSinceRefresh`, set by `hit`: a property
 *   written, no look-up) or in its last part. A client polling about every (1 − startAt) × ttl
 *   would otherwise now and then read just before the last part and next just after expiry, and
 *   get a stale answer. A key not read late in a period is not refreshed again; a key nobody
 *   reads in its last part is never refreshed.
 * - `lead`: a few times how long refreshes take to land (measured here, a running estimate that
 *   rises at once and falls slowly), at least MIN_LEAD_MS, at most MAX_LEAD_SHARE of the
 *   entry's freshness; that share until a first refresh was measured.
 *
 * The timer holds a copy of the marking read's decision (its caller's credential, key and scope),
 * not the request's exchange, and a budget of its own for waiting on Redis.
 */
import { isDueForRefreshAhead, type CacheEntry } from '../cache/entry.js';
import { detachedDecision, type Decision } from './decide.js';

/** The least a refresh is started ahead of expiry (ms): a timer's and a loaded event loop's slack. */
const MIN_LEAD_MS = 50;
/** The most, as a share of the entry's freshness: the refresh costs at most this much of a period more. */
const MAX_LEAD_SHARE = 0.1;
/** Lead per expected landing time: room for a refresh several times slower than usual. */
const LEADS_PER_LANDING = 3;
/** How much a faster landing lowers the estimate (a slower one raises it at once). */
const LANDING_DECAY = 0.2;

export interface RefreshAheadOptions {
  /** `cache.refreshAhead.startAt`: the share of freshness elapsed from which a read marks the entry as polled. */
  readonly startAt: number;
  /** The entry this replica's memory holds for `key`, not counted as a use; undefined once dropped. */
  readonly held: (key: string) => CacheEntry | undefined;
  /** May a refresh of the decided key start now? (No fill of it under way, the fleet's budget not paused.) */
  readonly mayStart: (d: Decision) => boolean;
  /** Starts the refresh: settles once it landed, rejects with its failure. */
  readonly refresh: (d: Decision) => Promise<unknown>;
  /** A refresh that failed; answers true when it was only skipped for want of a budget token. */
  readonly failed: (err: unknown, key: string) => boolean;
  /** The cache's clock (entries' times are on it); default Date.now. */
  readonly now?: (() => number) | undefined;
}

interface Scheduled {
  readonly storedAt: number;
  readonly etag: string;
  readonly timer: NodeJS.Timeout;
}

export class RefreshAhead {
  readonly startAt: number;
  /** Entries whose refresh was scheduled or started (a gzip variant swapped in is a new object of the same answer). */
  readonly #marked = new WeakSet<CacheEntry>();
  /** Per key, the answer whose refresh is scheduled, and its timer. */
  readonly #scheduled = new Map<string, Scheduled>();
  /** How long refreshes take to land (ms), once one did. */
  #landingMs: number | undefined;
  #closed = false;

  /** Where a key polled in the period before is seen polled again: twice the last part (2 × startAt − 1). */
  readonly #polledFrom: number;

  constructor(private readonly o: RefreshAheadOptions) {
    this.startAt = o.startAt;
    this.#polledFrom = Math.max(0, 2 * o.startAt - 1);
  }

  /**
   * A fresh hit on `entry` (the read-through's hit path): in its last part of freshness, marked
   * and its refresh scheduled; else, on an answer a refresh-ahead stored, noted as read.
   */
  hit(d: Decision, entry: CacheEntry, now: number): void {
    if (isDueForRefreshAhead(entry, now, this.startAt)) this.polled(d, entry, now);
    else if (entry.readSinceRefresh === false && isDueForRefreshAhead(entry, now, this.#polledFrom)) entry.readSinceRefresh = true;
  }

  /** A fresh hit on `entry`, past `startAt` of its freshness (the caller compared): marked, and its refresh scheduled. */
  polled(d: Decision, entry: CacheEntry, now: number): void {
    if (this.#marked.has(entry) || this.#closed) return;
    this.#marked.add(entry);
    this.#schedule(d, entry, now, false);
  }

  /** The refresh of `entry` timed to land before it expires; `inherited`: sent only if the entry was read meanwhile. */
  #schedule(d: Decision, entry: CacheEntry, now: number, inherited: boolean): void {
    const key = d.key;
    const pending = this.#scheduled.get(key);
    if (pending !== undefined) {
      if (isSameAnswer(entry, pending)) return;
      clearTimeout(pending.timer);
      this.#scheduled.delete(key);
    }
    const job = inherited ? d : detachedDecision(d);
    const { storedAt, etag } = entry;
    const delayMs = entry.freshUntil - this.#leadMs(entry) - now;
    if (delayMs <= 0) return this.#fire(job, storedAt, etag, inherited);
    const timer = setTimeout(() => {
      this.#scheduled.delete(key);
      this.#fire(job, storedAt, etag, inherited);
    }, delayMs);
    timer.unref();
    this.#scheduled.set(key, { storedAt, etag, timer });
  }

  /** Cancels every scheduled refresh; none is scheduled from then on. */
  close(): void {
    this.#closed = true;
    for (const { timer } of this.#scheduled.values()) clearTimeout(timer);
    this.#scheduled.clear();
  }

  /** The refresh of the answer stored at `storedAt`, if memory still holds it, it is still polled, and it may start now. */
  #fire(d: Decision, storedAt: number, etag: string, inherited: boolean): void {
    const held = this.o.held(d.key);
    // Replaced (by a fill, another replica's entry), evicted or purged: nothing to refresh ahead.
    if (held === undefined || !isSameAnswer(held, { storedAt, etag })) return;
    // Scheduled when the previous refresh landed: only if read since (else no longer polled).
    if (inherited && held.readSinceRefresh !== true && !this.#marked.has(held)) return;
    if (!this.o.mayStart(d)) return void this.#marked.delete(held);
    const started = performance.now();
    this.o.refresh(d).then(
      () => {
        this.#landed(performance.now() - started);
        this.#polledNext(d, storedAt, etag);
      },
      (err: unknown) => {
        if (this.o.failed(err, d.key)) this.#marked.delete(held);
      },
    );
  }

  /** The answer a refresh-ahead stored for a polled key: its own refresh scheduled now, sent if it is read meanwhile. */
  #polledNext(d: Decision, storedAt: number, etag: string): void {
    const next = this.o.held(d.key);
    if (next === undefined || this.#closed || isSameAnswer(next, { storedAt, etag }) || this.#marked.has(next)) return;
    next.readSinceRefresh ??= false;
    this.#schedule(d, next, (this.o.now ?? Date.now)(), true);
  }

  #landed(ms: number): void {
    const estimate = this.#landingMs;
    this.#landingMs = estimate === undefined || ms > estimate ? ms : estimate + (ms - estimate) * LANDING_DECAY;
  }

  /** How long before expiry the refresh starts. */
  #leadMs(entry: CacheEntry): number {
    const most = (entry.freshUntil - entry.storedAt) * MAX_LEAD_SHARE;
    const landing = this.#landingMs;
    return landing === undefined ? most : Math.min(most, Math.max(MIN_LEAD_MS, landing * LEADS_PER_LANDING));
  }
}

function isSameAnswer(entry: CacheEntry, answer: Pick<CacheEntry, 'storedAt' | 'etag'>): boolean {
  return entry.storedAt === answer.storedAt && entry.etag === answer.etag;
}
