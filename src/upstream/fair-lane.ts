/**
 * A bound on concurrent upstream requests with a bounded queue, shared fairly among callers.
 *
 * - Global bounds, as before: at most `maxConcurrent` in flight, at most `maxQueue` waiting;
 *   past the queue, `queue-full` at once.
 * - A share per caller (the user id): at most `maxPerCaller` of one caller's requests in the lane,
 *   in flight and waiting together. Past it, that caller's next request is `queue-full` at once,
 *   whatever room is left, so one member asking thousands of distinct cold questions cannot take
 *   the whole queue from the others.
 * - Round-robin when a slot frees: the next request is the oldest waiting one of the caller whose
 *   turn it is, not the oldest of all, so another member's few misses do not wait behind the
 *   flooder's hundreds (deficit-free round-robin over one FIFO per caller).
 *
 * Requests with no caller (the health probe, identity look-ups of unknown tokens) share one
 * share of their own. Nothing here is touched by a cache hit: only requests that go upstream.
 */
import { UpstreamError } from './upstream-error.js';

/** Limits of one lane: requests in flight at once, how many may wait for a slot, and one caller's share of both. */
export interface LaneLimits {
  readonly maxConcurrent: number;
  readonly maxQueue: number;
  /** At most this many of one caller's requests in flight and waiting together; absent: no per-caller bound. */
  readonly maxPerCaller?: number | undefined;
}

/** Whose share a request takes: a user id, or undefined for requests made on nobody's behalf. */
export type LaneCaller = number | undefined;

/** One caller's requests in the lane: how many it holds (in flight + waiting), and its waiters in arrival order. */
interface Share {
  held: number;
  readonly waiting: Array<() => void>;
}

export class FairLane {
  private active = 0;
  private queued = 0;
  private readonly shares = new Map<LaneCaller, Share>();
  /**
   * Callers with a waiter, in turn order: a Set iterates in insertion order, so taking the first
   * and re-adding it when it still waits moves it to the back (round-robin, O(1) per turn).
   */
  private readonly turns = new Set<LaneCaller>();
  private readonly maxPerCaller: number;

  constructor(private readonly limits: LaneLimits) {
    this.maxPerCaller = limits.maxPerCaller ?? Number.POSITIVE_INFINITY;
  }

  get load(): { active: number; queued: number } {
    return { active: this.active, queued: this.queued };
  }

  /** A caller's requests in the lane, in flight and waiting (0 when none). */
  heldBy(caller: LaneCaller): number {
    return this.shares.get(caller)?.held ?? 0;
  }

  /**
   * A slot for `caller`: undefined when one was free (taken at once, no promise), else a promise
   * of one; a rejection (`queue-full`) when the caller's share or the queue is full. Every slot
   * taken, at once or later, is given back once with `release(caller)`.
   */
  acquire(caller: LaneCaller): Promise<void> | undefined {
    const share = this.shares.get(caller);
    if (share !== undefined && share.held >= this.maxPerCaller) {
      return Promise.reject(new UpstreamError('queue-full', 'too many of this caller’s requests waiting for the upstream'));
    }
    if (this.active < this.limits.maxConcurrent) {
      this.active++;
      this.shareOf(caller, share).held++;
      return undefined;
    }
    if (this.queued >= this.limits.maxQueue) {
      return Promise.reject(new UpstreamError('queue-full', 'too many requests waiting for the upstream'));
    }
    const mine = this.shareOf(caller, share);
    mine.held++;
    this.queued++;
    this.turns.add(caller);
    return new Promise((resolve) => mine.waiting.push(resolve));
  }

  /** Gives back `caller`'s slot and hands it to the next caller in turn. */
  release(caller: LaneCaller): void {
    this.active--;
    const share = this.shares.get(caller);
    if (share !== undefined && --share.held === 0) this.shares.delete(caller);
    this.dispatchNext();
  }

  /** Lets every waiter go (on close: their dispatch then fails as `closed`, and releases its slot). */
  wakeAll(): void {
    while (this.queued > 0) this.wakeNext();
  }

  private dispatchNext(): void {
    if (this.queued > 0 && this.active < this.limits.maxConcurrent) this.wakeNext();
  }

  /** The oldest waiter of the caller whose turn it is; that caller goes to the back if it still waits. */
  private wakeNext(): void {
    const caller = this.turns.values().next().value as LaneCaller;
    this.turns.delete(caller);
    const share = this.shares.get(caller)!;
    const wake = share.waiting.shift()!;
    if (share.waiting.length > 0) this.turns.add(caller);
    this.queued--;
    this.active++;
    wake();
  }

  private shareOf(caller: LaneCaller, share: Share | undefined): Share {
    if (share !== undefined) return share;
    const created: Share = { held: 0, waiting: [] };
    this.shares.set(caller, created);
    return created;
  }
}
