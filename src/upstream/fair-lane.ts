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
import { FairQueue, type LaneCaller } from './fair-queue.js';
import { UpstreamError } from './upstream-error.js';

export type { LaneCaller } from './fair-queue.js';

/** Limits of one lane: requests in flight at once, how many may wait for a slot, and one caller's share of both. */
export interface LaneLimits {
  readonly maxConcurrent: number;
  readonly maxQueue: number;
  /** At most this many of one caller's requests in flight and waiting together; absent: no per-caller bound. */
  readonly maxPerCaller?: number | undefined;
}

/** One caller's requests in the lane: how many it holds, in flight and waiting. */
interface Share {
  held: number;
}

export class FairLane {
  private active = 0;
  private readonly shares = new Map<LaneCaller, Share>();
  /** Waiters for a slot, taken round-robin between callers. */
  private readonly waiting = new FairQueue<() => void>();
  private readonly maxPerCaller: number;

  constructor(private readonly limits: LaneLimits) {
    this.maxPerCaller = limits.maxPerCaller ?? Number.POSITIVE_INFINITY;
  }

  get load(): { active: number; queued: number } {
    return { active: this.active, queued: this.waiting.size };
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
    if (this.waiting.size >= this.limits.maxQueue) {
      return Promise.reject(new UpstreamError('queue-full', 'too many requests waiting for the upstream'));
    }
    this.shareOf(caller, share).held++;
    return new Promise((resolve) => this.waiting.push(caller, resolve));
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
    while (this.waiting.size > 0) this.wakeNext();
  }

  private dispatchNext(): void {
    if (this.waiting.size > 0 && this.active < this.limits.maxConcurrent) this.wakeNext();
  }

  /** The oldest waiter of the caller whose turn it is (fair-queue.ts). */
  private wakeNext(): void {
    const wake = this.waiting.shift()!;
    this.active++;
    wake();
  }

  private shareOf(caller: LaneCaller, share: Share | undefined): Share {
    if (share !== undefined) return share;
    const created: Share = { held: 0 };
    this.shares.set(caller, created);
    return created;
  }
}
