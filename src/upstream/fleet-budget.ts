/**
 * One upstream budget for the whole fleet: every request tm-cache sends upstream takes a token
 * first. Tokens come from one bucket shared by every replica through Redis (budget-store.ts's
 * arithmetic, src/cache/redis/budget-store.ts's script), leased a few at a time so that no request
 * costs a Redis round trip of its own; a replica without Redis has the bucket to itself.
 *
 * - Redis down (or a lease unanswered within the command timeout): the replica
 *   leases from its own bucket, starting empty (no burst on top of the shared bucket's), `upstream.budget.fallbackShare` of the
 *   fleet's rate and burst, going on from the rate and pause the shared bucket last told it:
 *   never unlimited, and a paused fleet stays paused.
 * - A 429 from the instance (`onRateLimited`) pauses this replica at once and the whole fleet
 *   through the shared bucket, which every replica reads with its next lease (not per request);
 *   a 429 that came while the fleet used its rate lowers it, and it regrows toward (not to) the
 *   rate that drew it; one at low use (a lockout's echo) only pauses (budget-store.ts: the rules).
 * - Priorities: `client` (a known caller waits for it: fills, access look-ups, the renewal of an
 *   identity seen before, a passthrough request under a credential this replica verified) before
 *   `unverified` (the first look-up of a credential never seen, a passthrough request under one)
 *   before `background` (refreshes of stale entries) before `ahead` (refresh-ahead): junk
 *   credentials never make a known caller wait. A token goes to the highest priority waiting; a request never takes a token
 *   at once while one of its priority or higher waits. Refresh-ahead waits in room of its own
 *   (AHEAD_QUEUE_SHARE of `maxQueue`), never counted against anyone else's: it takes only the
 *   tokens nobody else waits for.
 * - Fairness: within a priority, waiters are served round-robin between callers (fair-queue.ts,
 *   as the fair lane's slots), and one caller may hold at most `maxPerCaller` waiters: a caller's
 *   flood gets its turn like everyone else, never the whole budget. (Fair within a replica: the
 *   shared bucket knows replicas' leases, not callers.)
 * - Waiting is bounded: at most `maxWaitMs` (`upstream.budget.maxWaitMs`), and not at all when
 *   the fleet is paused for longer; then `BudgetSpentError` carries how long until a token may be
 *   had (a truthful Retry-After). `tryAcquire` never waits: for work better skipped than queued.
 *
 * Fast path: a token at hand is taken synchronously, with no promise and no allocation.
 *
 * Accounting (one token per request sent): the shared bucket refills at the rate and holds at most
 * the burst less LEASE_TTL_MS of the rate (budget-store.ts, `capacityOf`; a learned bucket holds
 * LEARN_BURST_TOKENS, its burst being that plus LEASE_TTL_MS of the rate), so it hands out at
 * most burst − rate × LEASE_TTL_MS + rate × T tokens in any T. A lease takes about
 * LEASE_WINDOW_MS of the rate however many wait, and a leased token not taken within LEASE_TTL_MS
 * of being asked for is dropped (an answer read late included): the tokens taken in a window of T
 * were handed out within T + LEASE_TTL_MS, so the fleet takes at most burst + rate × T in any
 * window of T. A lease is never hoarded into a burst of its own, nor spent through a pause another
 * replica learned of since. The same holds of a replica's own bucket (no Redis) and of its fallback
 * share (`fallbackShare` of both terms); a burst under rate × LEASE_TTL_MS + 1 counts as that (the
 * bucket holds at least one token). Outside this bound: a replica whose leases go unanswered
 * takes its fallback share, refilled from the first of them, on top of what the others lease
 * meanwhile (one lease answered late costs nothing extra); a request that finds every slot of
 * its lane busy (fair-lane.ts: `upstream.maxConcurrent` in flight) waits for one after taking its
 * token. Passthrough requests (writes, uncached paths) take a token like any other
 * (passthrough/budgeted.ts).
 */
import { FairQueue, type LaneCaller } from './fair-queue.js';
import {
  LEASE_TTL_MS,
  MemoryBudgetStore,
  isLearned,
  type BudgetShape,
  type BudgetStore,
  type LeaseReply,
  type LeaseRequest,
  type PauseReply,
} from './budget-store.js';

export type BudgetPriority = 'client' | 'unverified' | 'background' | 'ahead';
/** Highest first: the order tokens go to waiters in. */
const BUDGET_PRIORITIES: readonly BudgetPriority[] = ['client', 'unverified', 'background', 'ahead'];
const AHEAD_RANK = BUDGET_PRIORITIES.indexOf('ahead');
/**
 * Refresh-ahead's waiters have room of their own, this share of `maxQueue` (at least one), and are
 * never counted against another priority's room or a caller's share of it: a poller's refreshes
 * never crowd out a request someone waits for, and they wait only for tokens nobody else wants.
 */
const AHEAD_QUEUE_SHARE = 0.25;

/** Where this replica's tokens come from: the fleet's shared bucket, its fallback share (Redis down), or its own (no Redis). */
export type BudgetMode = 'shared' | 'fallback' | 'local';

/** A lease asks for about this much of the fleet's rate (ms), within MIN/MAX_LEASE_TOKENS. */
const LEASE_WINDOW_MS = 100;
const MIN_LEASE_TOKENS = 2;
const MAX_LEASE_TOKENS = 20;
/**
 * The most a lease takes while the rate is learned (no fixed budget): tokens leased are spent
 * before the replica hears of another's 429, so a big lease near the instance's limit turns one
 * 429 into several, and the instance escalates several within a minute into a lockout. With the
 * growth capped (budget-store.ts, MAX_GROWTH_STEP_RPS) what a replica sends after the instance's
 * first refusal and before it hears of it is at most these tokens plus what it had in flight.
 */
export const LEARNING_MAX_LEASE_TOKENS = 2;
/** Bounds on the wait before asking the bucket again when it had nothing (ms): a pause is re-read at least every second. */
const MIN_LEASE_RETRY_MS = 5;
const MAX_LEASE_RETRY_MS = 1_000;

export type BudgetSpentReason = 'paused' | 'timeout' | 'queue-full' | 'closed';

/** No token within the wait allowed: `retryAfterMs` is how long until one may be had (the pause left, or an estimate). */
export class BudgetSpentError extends Error {
  readonly code = 'budget-spent';

  constructor(
    readonly reason: BudgetSpentReason,
    readonly retryAfterMs: number,
  ) {
    super(`the upstream budget is spent (${reason}); a token may be had in ${retryAfterMs} ms`);
    this.name = 'BudgetSpentError';
  }
}

/** What the budget reports (metrics.ts implements it; every hook optional). */
export interface BudgetEvents {
  /** A token taken, at once or after a wait. */
  taken(priority: BudgetPriority): void;
  /** A wait ended: with a token, or spent (timed out, refused for a pause longer than the wait, or a full queue). */
  waited(priority: BudgetPriority, result: 'granted' | 'spent'): void;
  /** `tryAcquire` found no token at hand, or a refresh ahead got none within its wait (it is skipped). */
  skipped(priority: BudgetPriority): void;
  /** This replica learned of a new fleet pause (its own 429, or another replica's through the shared bucket). */
  paused(pauseMs: number): void;
  /** Tokens now come from elsewhere (Redis lost or back). */
  modeChanged(mode: BudgetMode): void;
}

export interface FleetBudgetOptions {
  readonly shape: BudgetShape;
  /** The bucket every replica shares (Redis); absent: this replica's own, all of the budget. */
  readonly shared?: BudgetStore | undefined;
  /** The share of the fleet's rate and burst this replica keeps alone while the shared bucket cannot answer (0–1]. */
  readonly fallbackShare: number;
  /** The longest a request waits for a token (`upstream.budget.maxWaitMs`), unless `acquire` is told otherwise. */
  readonly maxWaitMs: number;
  /** The pause after a 429 without Retry-After (`upstream.defaultRetryAfterMs`); any pause is at most `shape.maxPauseMs`. */
  readonly defaultPauseMs: number;
  /** At most this many requests wait, of every priority but `ahead` (past it: spent at once); refresh-ahead waits in a quarter of that again. */
  readonly maxQueue: number;
  /** At most this many of one caller's requests wait; absent: no per-caller bound. */
  readonly maxPerCaller?: number | undefined;
  readonly now?: () => number;
  readonly events?: Partial<BudgetEvents>;
}

export interface BudgetSnapshot {
  readonly mode: BudgetMode;
  /** The fleet's rate as last known (req/s); this replica's part of it is `fallbackShare` of it in fallback. */
  readonly rateRps: number;
  /**
   * The most the rate may climb to (req/s): the configured budget (`upstream.budget.requestsPerSecond`);
   * 0 when the rate is learned, whose ceiling is what a 429 taught the bucket (budget-store.ts).
   */
  readonly ceilingRps: number;
  readonly pausedMs: number;
  readonly tokensAtHand: number;
  readonly queued: Readonly<Record<BudgetPriority, number>>;
  /** The pause under way (absent: none): how long ago this replica learned of it, and why. */
  readonly pause?: BudgetPause;
}

/** Why the fleet is paused: this replica's 429 (with its Retry-After, null when it had none) or the fleet's, read from the shared bucket. */
export interface PauseCause {
  readonly from: 'this-replica' | 'fleet';
  readonly retryAfterMs: number | null;
}

export interface BudgetPause extends PauseCause {
  /** How long ago the pause began, as this replica learned of it (ms). */
  readonly sinceMsAgo: number;
}

const FLEET_PAUSE: PauseCause = { from: 'fleet', retryAfterMs: null };

interface Waiter {
  readonly priority: number;
  readonly caller: LaneCaller;
  readonly deadline: number;
  readonly resolve: () => void;
  readonly reject: (err: BudgetSpentError) => void;
  timer: ReturnType<typeof setTimeout> | undefined;
}

const isPromise = <T>(value: T | Promise<T>): value is Promise<T> => typeof (value as { then?: unknown } | undefined)?.then === 'function';

export class FleetBudget {
  readonly #options: FleetBudgetOptions;
  readonly #now: () => number;
  readonly #shared: BudgetStore | undefined;
  /** The whole budget without Redis; the fallback share with it. */
  readonly #own: MemoryBudgetStore;
  readonly #queues = BUDGET_PRIORITIES.map(() => new FairQueue<Waiter>());
  readonly #maxPerCaller: number;
  /** The most one lease asks the shared bucket for. */
  readonly #maxLeaseTokens: number;
  #mode: BudgetMode;
  #tokens = 0;
  #tokensUntil = 0;
  #pausedUntil = 0;
  /** When the pause under way began (this replica's clock) and why: recorded only on a 429, never on the hit path. */
  #pausedSince = 0;
  #pauseCause: PauseCause = FLEET_PAUSE;
  #rateRps: number;
  #leasing = false;
  #nextLease: ReturnType<typeof setTimeout> | undefined;
  /** The last lease granted fewer tokens than asked for. */
  #leaseWasShort = false;
  /** Since the last lease, a request found no token at hand: with a short lease, demand exceeded the bucket. */
  #wanted = false;
  #closed = false;

  constructor(options: FleetBudgetOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
    this.#shared = options.shared;
    this.#own = new MemoryBudgetStore(options.shape, this.#now, options.shared === undefined ? 1 : options.fallbackShare);
    this.#maxPerCaller = options.maxPerCaller ?? Number.POSITIVE_INFINITY;
    // Without a fixed budget the rate starts below its ceiling and is learned from 429s.
    this.#maxLeaseTokens = isLearned(options.shape) ? LEARNING_MAX_LEASE_TOKENS : MAX_LEASE_TOKENS;
    this.#mode = options.shared === undefined ? 'local' : 'shared';
    this.#rateRps = Math.min(options.shape.startRps, options.shape.maxRps);
  }

  /**
   * A token for `caller` at `priority`: undefined when one was at hand (taken at once, no
   * promise); else a promise of one within `maxWaitMs`, rejected with BudgetSpentError when none
   * comes in time, when the fleet is paused for longer than that, or when the queue is full.
   */
  acquire(priority: BudgetPriority, caller: LaneCaller, maxWaitMs = this.#options.maxWaitMs): Promise<void> | undefined {
    const rank = BUDGET_PRIORITIES.indexOf(priority);
    if (this.#takeAtOnce(rank)) {
      this.#options.events?.taken?.(priority);
      return undefined;
    }
    this.#wanted = true;
    const refusal = this.#refusalFor(caller, maxWaitMs, rank);
    if (refusal !== undefined) {
      this.#options.events?.waited?.(priority, 'spent');
      if (rank === AHEAD_RANK) this.#options.events?.skipped?.(priority);
      this.#ensureLease();
      return Promise.reject(refusal);
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { priority: rank, caller, deadline: this.#now() + maxWaitMs, resolve, reject, timer: undefined };
      waiter.timer = setTimeout(() => this.#expire(waiter), maxWaitMs);
      waiter.timer.unref?.();
      this.#queues[rank]!.push(caller, waiter);
      this.#ensureLease();
    });
  }

  /** A token if one is at hand now (true), else false and nothing queued: for work better skipped than delayed. */
  tryAcquire(priority: BudgetPriority, caller: LaneCaller): boolean {
    void caller; // nothing is queued, so no share is taken: the same signature as acquire all the same
    if (this.#takeAtOnce(BUDGET_PRIORITIES.indexOf(priority))) {
      this.#options.events?.taken?.(priority);
      return true;
    }
    this.#wanted = true;
    this.#options.events?.skipped?.(priority);
    this.#ensureLease();
    return false;
  }

  /**
   * The instance answered 429: this replica stops at once, the fleet at its next leases, for the
   * Retry-After (`defaultPauseMs` when absent), at most the cap.
   */
  onRateLimited(retryAfterMs?: number): void {
    if (this.#closed) return;
    const pauseMs = Math.min(retryAfterMs ?? this.#options.defaultPauseMs, this.#options.shape.maxPauseMs);
    const cause: PauseCause = { from: 'this-replica', retryAfterMs: retryAfterMs ?? null };
    const own = this.#own.rateLimited(pauseMs);
    if (this.#mode !== 'shared') this.#rateRps = own.rateRps;
    this.#learnPause(own.pausedMs, cause);
    if (this.#shared === undefined) return;
    const told = this.#shared.rateLimited(pauseMs);
    if (isPromise(told))
      told.then(
        (reply) => this.#afterSharedPause(reply, cause),
        () => undefined,
      );
    else this.#afterSharedPause(told, cause);
  }

  /** How long the fleet is still paused, as this replica knows (0: not paused). */
  pausedForMs(): number {
    return Math.max(0, this.#pausedUntil - this.#now());
  }

  /** How long until a token may be had: the pause left, else the queue ahead at the current rate (a Retry-After's basis). */
  retryAfterMs(): number {
    const pausedMs = this.pausedForMs();
    if (pausedMs > 0) return Math.ceil(pausedMs);
    const rateRps = this.#mode === 'fallback' ? this.#rateRps * this.#options.fallbackShare : this.#rateRps;
    return Math.ceil(((this.#waiting() + 1) * 1000) / rateRps);
  }

  snapshot(): BudgetSnapshot {
    const [client, unverified, background, ahead] = this.#queues.map((q) => q.size) as [number, number, number, number];
    const pausedMs = this.pausedForMs();
    return {
      mode: this.#mode,
      rateRps: this.#rateRps,
      ceilingRps: isLearned(this.#options.shape) ? 0 : this.#options.shape.maxRps,
      pausedMs,
      tokensAtHand: this.#tokens,
      queued: { client, unverified, background, ahead },
      ...(pausedMs > 0 ? { pause: { ...this.#pauseCause, sinceMsAgo: this.#now() - this.#pausedSince } } : {}),
    };
  }

  /** Refuses every waiter (`closed`) and stops asking the bucket. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#nextLease);
    for (const queue of this.#queues) for (const waiter of queue.drain()) this.#refuse(waiter, new BudgetSpentError('closed', 0));
  }

  /** A token at once for a request of `rank`, unless one of that priority or higher waits (no jumping the queue). */
  #takeAtOnce(rank: number): boolean {
    if (this.#closed || this.#waitingUpTo(rank)) return false;
    if (this.#takeAtHand()) return true;
    // Without Redis the bucket answers at once: ask it now rather than queue.
    if (this.#shared !== undefined || this.#leasing) return false;
    this.#apply(this.#own.lease({ want: 1, constrained: false }), 1, 'local', this.#now());
    return this.#takeAtHand();
  }

  #takeAtHand(): boolean {
    if (this.#tokens === 0) return false;
    const now = this.#now();
    if (now >= this.#tokensUntil || now < this.#pausedUntil) {
      this.#tokens = 0;
      return false;
    }
    this.#tokens--;
    return true;
  }

  #refusalFor(caller: LaneCaller, maxWaitMs: number, rank: number): BudgetSpentError | undefined {
    if (this.#closed) return new BudgetSpentError('closed', 0);
    const pausedMs = this.pausedForMs();
    if (pausedMs > maxWaitMs) return new BudgetSpentError('paused', Math.ceil(pausedMs));
    // Refresh-ahead counts in its own room (AHEAD_QUEUE_SHARE), every other priority in the rest.
    const ahead = rank === AHEAD_RANK;
    const [from, to] = ahead ? [AHEAD_RANK, AHEAD_RANK + 1] : [0, AHEAD_RANK];
    let mine = 0;
    let waiting = 0;
    for (let i = from; i < to; i++) {
      mine += this.#queues[i]!.sizeOf(caller);
      waiting += this.#queues[i]!.size;
    }
    const room = ahead ? Math.max(1, Math.floor(this.#options.maxQueue * AHEAD_QUEUE_SHARE)) : this.#options.maxQueue;
    if (waiting >= room || mine >= this.#maxPerCaller) return new BudgetSpentError('queue-full', this.retryAfterMs());
    return undefined;
  }

  #waiting(): number {
    let waiting = 0;
    for (const queue of this.#queues) waiting += queue.size;
    return waiting;
  }

  #waitingUpTo(rank: number): boolean {
    for (let r = 0; r <= rank; r++) if (this.#queues[r]!.size > 0) return true;
    return false;
  }

  /** Asks the bucket for tokens unless a lease is under way or due: for the waiters, or a few ahead of demand. */
  #ensureLease(): void {
    if (this.#leasing || this.#nextLease !== undefined || this.#closed) return;
    const waiting = this.#waiting();
    // From the shared bucket, about LEASE_WINDOW_MS of the rate however many wait: a replica whose
    // event loop stalls spends its lease late, on top of what the others take meanwhile, so a big
    // lease becomes a burst the bucket never allowed.
    const want = this.#shared === undefined ? Math.max(1, waiting) : this.#leaseSize();
    const request: LeaseRequest = { want, constrained: this.#leaseWasShort && this.#wanted };
    this.#wanted = false;
    const askedAt = this.#now();
    if (this.#shared === undefined) return this.#apply(this.#own.lease(request), want, 'local', askedAt);
    this.#leasing = true;
    const pending = this.#shared.lease(request);
    if (isPromise(pending))
      pending.then(
        (reply) => this.#afterSharedLease(reply, request, askedAt),
        () => this.#afterSharedLease(undefined, request, askedAt),
      );
    else this.#afterSharedLease(pending, request, askedAt);
  }

  /** About LEASE_WINDOW_MS of the fleet's rate. */
  #leaseSize(): number {
    return Math.min(this.#maxLeaseTokens, Math.max(MIN_LEASE_TOKENS, Math.ceil((this.#rateRps * LEASE_WINDOW_MS) / 1000)));
  }

  /** The shared bucket's answer, or (none: Redis cannot answer) this replica's fallback share's. */
  #afterSharedLease(reply: LeaseReply | undefined, request: LeaseRequest, askedAt: number): void {
    this.#leasing = false;
    if (this.#closed) return;
    if (reply === undefined) {
      // Lost just now: the share starts empty from here, not from the last lease, so a lease Redis
      // is slow to answer adds nothing to what the others take from the shared bucket meanwhile.
      if (this.#mode === 'shared') this.#own.adopt({ rateRps: this.#rateRps, pausedMs: this.pausedForMs() });
      return this.#apply(this.#own.lease(request), request.want, 'fallback', this.#now());
    }
    this.#own.adopt(reply);
    this.#apply(reply, request.want, 'shared', askedAt);
  }

  #afterSharedPause(reply: PauseReply | undefined, cause: PauseCause): void {
    if (reply === undefined || this.#closed) return;
    this.#own.adopt(reply);
    this.#rateRps = reply.rateRps;
    this.#learnPause(reply.pausedMs, cause);
  }

  /**
   * Takes a lease's answer: the fleet's rate and pause, the tokens; hands them to waiters; asks
   * again while some wait. The tokens live LEASE_TTL_MS from when they were asked for (`askedAt`),
   * not from when the answer was read: an answer read late (a stalled event loop) was granted
   * long ago, and spending it now would add it to what the bucket has handed out since.
   */
  #apply(reply: LeaseReply, want: number, mode: BudgetMode, askedAt: number): void {
    if (mode !== this.#mode) {
      this.#mode = mode;
      this.#options.events?.modeChanged?.(mode);
    }
    this.#rateRps = reply.rateRps;
    this.#learnPause(reply.pausedMs);
    if (reply.granted > 0) {
      this.#tokens += reply.granted;
      this.#tokensUntil = askedAt + LEASE_TTL_MS;
    }
    this.#leaseWasShort = reply.granted < want;
    this.#grantWaiters();
    if (this.#waiting() === 0) return;
    if (!this.#leaseWasShort) return this.#ensureLease();
    this.#nextLease = setTimeout(
      () => {
        this.#nextLease = undefined;
        this.#ensureLease();
      },
      Math.min(MAX_LEASE_RETRY_MS, Math.max(MIN_LEASE_RETRY_MS, reply.waitMs)),
    );
    this.#nextLease.unref?.();
  }

  /** Tokens at hand to waiters: highest priority first, round-robin between callers within it. */
  #grantWaiters(): void {
    while (this.#waiting() > 0 && this.#takeAtHand()) {
      const queue = this.#queues.find((q) => q.size > 0)!;
      const waiter = queue.shift()!;
      clearTimeout(waiter.timer);
      const priority = BUDGET_PRIORITIES[waiter.priority]!;
      this.#options.events?.taken?.(priority);
      this.#options.events?.waited?.(priority, 'granted');
      waiter.resolve();
    }
  }

  /**
   * A pause of `pausedMs` from now, if it ends later than the one known: tokens at hand dropped,
   * waiters it outlasts refused. `cause`: this replica's 429, else the fleet's (a lease's answer);
   * a lease's answer that lengthens a pause under way (the shared bucket's clock, or another
   * replica's 429) keeps the cause the pause began with.
   */
  #learnPause(pausedMs: number, cause: PauseCause = FLEET_PAUSE): void {
    if (!(pausedMs > 0)) return;
    const now = this.#now();
    const until = now + pausedMs;
    if (until <= this.#pausedUntil) return;
    const wasPaused = now < this.#pausedUntil;
    if (!wasPaused) this.#pausedSince = now;
    if (!wasPaused || cause !== FLEET_PAUSE) this.#pauseCause = cause;
    this.#pausedUntil = until;
    this.#tokens = 0;
    if (!wasPaused) this.#options.events?.paused?.(pausedMs);
    this.#refuseWaitersBefore(until);
  }

  /** Waiters whose wait ends before `until` cannot be served: refused now, with the truth about when. */
  #refuseWaitersBefore(until: number): void {
    for (const queue of this.#queues) {
      if (queue.size === 0) continue;
      for (const waiter of queue.drain()) {
        if (waiter.deadline < until) this.#refuse(waiter, new BudgetSpentError('paused', Math.ceil(until - this.#now())));
        else queue.push(waiter.caller, waiter);
      }
    }
  }

  #expire(waiter: Waiter): void {
    if (this.#queues[waiter.priority]!.delete(waiter.caller, waiter)) this.#refuse(waiter, new BudgetSpentError('timeout', this.retryAfterMs()));
  }

  #refuse(waiter: Waiter, error: BudgetSpentError): void {
    clearTimeout(waiter.timer);
    const priority = BUDGET_PRIORITIES[waiter.priority]!;
    this.#options.events?.waited?.(priority, 'spent');
    // A refresh ahead that got no token is skipped: the entry is refreshed when it goes stale.
    if (waiter.priority === AHEAD_RANK) this.#options.events?.skipped?.(priority);
    waiter.reject(error);
  }
}
