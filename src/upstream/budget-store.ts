/**
 * The fleet budget's bucket: its shape, its arithmetic, and the store that keeps it in memory.
 * The shared store (src/cache/redis/budget-store.ts) runs the same arithmetic as a Lua script
 * over one Redis key; one contract suite checks both agree (test/upstream/budget-store.unit.test.ts
 * and test/cache/redis-budget-store.test.ts).
 *
 * The bucket (a token bucket, refilled at the rate) hands out tokens by leases of a few at a time.
 * It holds at most the burst less LEASE_TTL_MS of the rate (`capacityOf`): a leased token may be
 * spent up to LEASE_TTL_MS after it was handed out, so a window of T may spend what was handed out
 * over T + LEASE_TTL_MS; that quarter second's worth of the rate is kept out of the bucket, and
 * the fleet sends at most burst + rate × T in any window of T (fleet-budget.ts, "Accounting").
 * A learned bucket (no `upstream.budget.requestsPerSecond`) holds LEARN_BURST_TOKENS whatever its
 * rate (its burst is that plus LEASE_TTL_MS of the rate). Its rate is learned from the instance's 429s, as botocore's adaptive retries and TCP's
 * slow start and CUBIC do (RFC 5681 §3.1, RFC 9438):
 * - start: with nothing remembered, LEARN_START_RPS and a full bucket, so a dashboard's first
 *   round goes at once;
 * - growth before any 429: once per INCREASE_INTERVAL_MS in which demand exceeded the bucket
 *   (`constrained`), GROWTH_FACTOR of the rate, by at most MAX_GROWTH_STEP_RPS. The cap bounds
 *   the overshoot: the instance's own burst hides the crossing of its limit until it is drained,
 *   and what the fleet sends past the limit meanwhile comes back as 429s (a few within a minute
 *   lock the whole account out), so the rate may not outrun the limit by much when it is found;
 * - a 429 pauses the bucket for the Retry-After, which it resumes empty. It counts when the fleet
 *   handed out at least LOW_USE_SHARE of its rate over the last whole window: the rate in use
 *   becomes the ceiling, and the rate DECREASE_FACTOR of it. A 429 at lower use (a replica's first
 *   request during a lockout, the lockout's echo, someone else's load, a first burst before a
 *   whole window) says nothing about the rate and cuts nothing; one during a pause only lengthens it;
 * - regrowth: a cubic, target − (target − from) × (1 − t / REGROW_MS)³, from the cut rate toward
 *   REGROW_SHARE of the ceiling (the rate that drew the 429 overstates the limit by what the
 *   instance's burst hid), fast at first and flat near its target; past REGROW_MS, a probe of
 *   PROBE_STEP_SHARE of the ceiling per interval of unmet demand, so the next crossing is minutes away;
 * - decay: a ceiling is forgotten FORGET_CEILING_MS after its 429, and the rate grows as at a start
 *   again (from no less than LEARN_START_RPS): a stale lesson does not starve the next start.
 * The ceiling lives with the bucket (in Redis: shared), so a new or restarted replica goes on from it.
 * A fixed budget (`upstream.budget.requestsPerSecond`) is the ceiling of the rate: it starts there,
 * a 429 cuts it by the same rules, and it regrows by them, never past it.
 *
 * Times are milliseconds on the store's clock (Redis' TIME for the shared store, so replicas' clocks
 * never meet); replies carry durations only.
 */

/**
 * A leased token not spent within this of being asked for is dropped (ms; fleet-budget.ts): the
 * lease horizon, which the bucket's capacity leaves room for.
 */
export const LEASE_TTL_MS = 250;
/** The rate a fleet without a configured budget starts from when it remembers nothing (req/s). */
export const LEARN_START_RPS = 10;
/**
 * What a learned bucket holds, whatever its rate (tokens): a dashboard's or a CI job's first
 * round goes at once, and no more than an instance with a burst of 5 takes (a hosted instance's
 * limits run from about 5 to 20 req/s). With 6, the first-minute bench's CI burst met that
 * instance with a 429 at once, by construction, and some runs with three within the minute: a lockout.
 */
export const LEARN_BURST_TOKENS = 5;
/** The ceiling of a learned rate (req/s): in practice demand bounds it, since it grows only when demand exceeds it. */
const LEARNED_MAX_RPS = 100_000;
/** The floor a run of 429s can push the rate to: one request per five seconds. */
export const MIN_RPS = 0.2;
/** The rate after a 429 that counts, as a share of the rate in use when it came (botocore's β). */
export const DECREASE_FACTOR = 0.7;
/** A 429 that came while the fleet used less than this share of its rate says nothing about the rate: it pauses, and cuts nothing. */
export const LOW_USE_SHARE = 0.5;
/** The rate grows at most once per interval, and only in one in which demand exceeded the bucket. */
export const INCREASE_INTERVAL_MS = 1_000;
/** Before any 429 is remembered the rate grows by this factor per interval (slow start)… */
export const GROWTH_FACTOR = 1.5;
/**
 * …by at most this much (req/s per interval): growth past the instance's limit shows only once the
 * instance's own burst is drained, and what the fleet sends past it meanwhile comes back as 429s.
 */
export const MAX_GROWTH_STEP_RPS = 3;
/**
 * After a 429 the rate regrows toward this share of the rate that drew it (the ceiling), never to
 * it: that rate overstates the limit by what the instance's burst hid, about √(2 × its burst × the
 * growth step) — 28 req/s drew the first 429 of an instance limited to 20 with a burst of 20
 * (`npm run bench -- first-minute`). Toward 0.9 of it (25) the fleet crossed the limit again within
 * the minute, and a third 429 in a minute locks the account out; 0.75 of it (21) is reached over
 * REGROW_MS, so any next crossing comes minutes later.
 */
export const REGROW_SHARE = 0.75;
/** The regrowth (a cubic, concave: fast at first, flat near its target) takes this long from the pause's end (ms). */
export const REGROW_MS = 60_000;
/** Past the regrowth, each interval probes up by this share of the ceiling (10 % a minute). */
export const PROBE_STEP_SHARE = 1 / 600;
/**
 * A ceiling is forgotten this long after the 429 that set it (ms): the limit may have been raised,
 * or the 429 came from someone else's load; the rate then grows as at a start again.
 */
export const FORGET_CEILING_MS = 600_000;
/** The window over which tokens handed out are counted, to know the rate actually in use when a 429 comes. */
export const MEASURE_WINDOW_MS = 1_000;

/** How the fleet's bucket is shaped (budgetShapeOf, from `upstream.budget`). */
export interface BudgetShape {
  /** The rate a new bucket starts at (req/s). */
  readonly startRps: number;
  /** The most the rate may climb to (req/s): the configured budget, or LEARNED_MAX_RPS. */
  readonly maxRps: number;
  /** The bucket's size at maxRps (scaled down with the rate after 429s); 0: one second's worth of the current rate (a learned bucket: LEARN_BURST_TOKENS). */
  readonly burst: number;
  /** The longest pause a stored value may impose (`upstream.maxRetryAfterMs`): a stale or tampered one is cut to it. */
  readonly maxPauseMs: number;
}

/** `upstream.budget` and the Retry-After cap as a bucket's shape. */
export function budgetShapeOf(budget: { readonly requestsPerSecond: number; readonly burst: number }, maxPauseMs: number): BudgetShape {
  if (budget.requestsPerSecond > 0) {
    return { startRps: budget.requestsPerSecond, maxRps: budget.requestsPerSecond, burst: budget.burst, maxPauseMs };
  }
  return { startRps: LEARN_START_RPS, maxRps: LEARNED_MAX_RPS, burst: 0, maxPauseMs };
}

/** What a lease answers: tokens granted now, how long until one may be, the pause left, and the fleet's rate. */
export interface LeaseReply {
  readonly granted: number;
  /** 0 when granted; else until the next token (at least the pause left). */
  readonly waitMs: number;
  readonly pausedMs: number;
  readonly rateRps: number;
}

/** What reporting a 429 answers: the pause left and the rate the fleet resumes at. */
export interface PauseReply {
  readonly pausedMs: number;
  readonly rateRps: number;
}

/** A lease asked for: up to `want` tokens; `constrained` when this replica's demand exceeded what it got since its last lease. */
export interface LeaseRequest {
  readonly want: number;
  readonly constrained: boolean;
}

/**
 * Where the bucket lives. An answer may come at once (memory) or later (Redis); `undefined`:
 * the store cannot answer now (Redis down), and the budget falls back to its own share.
 */
export interface BudgetStore {
  lease(request: LeaseRequest): LeaseReply | Promise<LeaseReply | undefined> | undefined;
  rateLimited(pauseMs: number): PauseReply | Promise<PauseReply | undefined> | undefined;
}

/** The bucket's state as stored; any field may be missing or garbage (a new or tampered key), so each is checked. */
export interface BucketState {
  tokens: number;
  atMs: number;
  rateRps: number;
  /** The ceiling: the rate in use when the last 429 that counted came (0: none remembered). */
  limitRps: number;
  /** When the pause of that 429 ended: the regrowth's origin, and the ceiling's age. */
  limitAtMs: number;
  /** The rate the regrowth started from. */
  regrowFromRps: number;
  increasedAtMs: number;
  pauseUntilMs: number;
  windowStartMs: number;
  windowCount: number;
  previousCount: number;
}

const finite = (value: number | undefined): value is number => typeof value === 'number' && Number.isFinite(value);
const clamp = (value: number, low: number, high: number): number => Math.min(high, Math.max(low, value));

/** A shape whose rate is learned (no fixed budget): it starts below its ceiling. */
export const isLearned = (shape: BudgetShape): boolean => shape.startRps < shape.maxRps;

/**
 * What the bucket holds at most at `rateRps`, times `scale` (a replica's share when alone): the
 * burst at that rate less LEASE_TTL_MS of the rate, which tokens leased before a window may still
 * add to it; at least one token (a burst under a quarter second of the rate plus one is as large as that).
 * A learned bucket holds LEARN_BURST_TOKENS whatever its rate (its burst is that plus LEASE_TTL_MS of the rate).
 */
function capacityOf(shape: BudgetShape, rateRps: number, scale = 1): number {
  if (isLearned(shape)) return Math.max(1, LEARN_BURST_TOKENS * scale);
  const burst = shape.burst > 0 ? (shape.burst * rateRps) / shape.maxRps : rateRps;
  return Math.max(1, (burst - (rateRps * LEASE_TTL_MS) / 1000) * scale);
}

/** A stored state made safe to use at `now`: missing fields take a new bucket's values, the rest are bounded. */
export function normalizeState(stored: Partial<BucketState>, shape: BudgetShape, now: number, scale = 1): BucketState {
  const rateRps = finite(stored.rateRps) ? clamp(stored.rateRps, MIN_RPS, shape.maxRps) : Math.min(shape.startRps, shape.maxRps);
  const pauseUntilMs = finite(stored.pauseUntilMs) ? Math.min(stored.pauseUntilMs, now + shape.maxPauseMs) : 0;
  const latest = Math.max(now, pauseUntilMs);
  const capacity = capacityOf(shape, rateRps, scale);
  const windowStartMs = finite(stored.windowStartMs) ? Math.min(stored.windowStartMs, now) : now;
  const limitRps = finite(stored.limitRps) ? clamp(stored.limitRps, 0, shape.maxRps) : 0;
  return {
    tokens: finite(stored.tokens) ? clamp(stored.tokens, 0, capacity) : capacity,
    atMs: finite(stored.atMs) ? Math.min(stored.atMs, latest) : now,
    rateRps,
    limitRps,
    limitAtMs: finite(stored.limitAtMs) ? Math.min(stored.limitAtMs, latest) : now,
    regrowFromRps: finite(stored.regrowFromRps) ? clamp(stored.regrowFromRps, MIN_RPS, Math.max(MIN_RPS, limitRps)) : rateRps,
    increasedAtMs: finite(stored.increasedAtMs) ? Math.min(stored.increasedAtMs, latest) : now,
    pauseUntilMs,
    windowStartMs,
    windowCount: finite(stored.windowCount) ? Math.max(0, stored.windowCount) : 0,
    previousCount: finite(stored.previousCount) ? Math.max(0, stored.previousCount) : 0,
  };
}

/** Starts a new counting window once the current one is over; the one before counts only if it just ended. */
function rollWindow(state: BucketState, now: number): void {
  if (now - state.windowStartMs < MEASURE_WINDOW_MS) return;
  state.previousCount = now - state.windowStartMs < 2 * MEASURE_WINDOW_MS ? state.windowCount : 0;
  state.windowStartMs = now;
  state.windowCount = 0;
}

/** A ceiling older than FORGET_CEILING_MS is forgotten: the rate grows as at a start again, from no less than the start rate. */
function forgetStaleCeiling(state: BucketState, shape: BudgetShape, now: number): void {
  if (state.limitRps === 0 || now - state.limitAtMs < FORGET_CEILING_MS) return;
  state.limitRps = 0;
  state.rateRps = Math.max(state.rateRps, Math.min(shape.startRps, shape.maxRps));
}

/**
 * The rate after one interval of growth at `now` (demand exceeded the bucket): without a ceiling,
 * GROWTH_FACTOR of it, by at most MAX_GROWTH_STEP_RPS; with one, the regrowth's cubic
 * target − (target − from) × (1 − t / REGROW_MS)³ (t since the pause ended), then a probe.
 */
function grownRate(state: BucketState, now: number): number {
  if (state.limitRps === 0) return state.rateRps + Math.min(state.rateRps * (GROWTH_FACTOR - 1), MAX_GROWTH_STEP_RPS);
  const sinceMs = now - state.limitAtMs;
  const target = state.limitRps * REGROW_SHARE;
  if (sinceMs >= REGROW_MS) return Math.max(state.rateRps, target) + Math.max(0.01, state.limitRps * PROBE_STEP_SHARE);
  const curve = target - (target - state.regrowFromRps) * (1 - Math.max(0, sinceMs) / REGROW_MS) ** 3;
  return Math.max(state.rateRps, curve);
}

/** One lease at `now`: refill, maybe grow, hand out up to `want` whole tokens. Mutates and answers. */
function leaseFrom(state: BucketState, shape: BudgetShape, request: LeaseRequest, now: number, scale = 1): LeaseReply {
  if (now < state.pauseUntilMs) {
    const pausedMs = state.pauseUntilMs - now;
    return { granted: 0, waitMs: pausedMs, pausedMs, rateRps: state.rateRps };
  }
  forgetStaleCeiling(state, shape, now);
  if (request.constrained && now - state.increasedAtMs >= INCREASE_INTERVAL_MS) {
    state.rateRps = Math.min(shape.maxRps, grownRate(state, now));
    state.increasedAtMs = now;
  }
  const localRps = state.rateRps * scale;
  state.tokens = Math.min(capacityOf(shape, state.rateRps, scale), state.tokens + (Math.max(0, now - state.atMs) * localRps) / 1000);
  state.atMs = Math.max(state.atMs, now);
  const granted = Math.max(0, Math.min(Math.floor(request.want), Math.floor(state.tokens)));
  state.tokens -= granted;
  rollWindow(state, now);
  state.windowCount += granted;
  const waitMs = granted > 0 ? 0 : Math.ceil(((1 - state.tokens) * 1000) / localRps);
  return { granted, waitMs, pausedMs: 0, rateRps: state.rateRps };
}

/**
 * A 429 at `now`: pause for `pauseMs` (at most the shape's cap), resuming with an empty bucket.
 * One during a pause only lengthens it (an echo of the same excess). A new one counts when the
 * fleet was using at least LOW_USE_SHARE of its rate (the tokens handed out over the last window):
 * the rate in use becomes the ceiling, and the rate DECREASE_FACTOR of it; one at lower use says
 * nothing about the rate (someone else's load, a lockout in progress) and cuts nothing. Mutates and answers.
 */
function rateLimitedFrom(state: BucketState, shape: BudgetShape, pauseMs: number, now: number, scale = 1): PauseReply {
  const untilMs = now + clamp(pauseMs, 0, shape.maxPauseMs);
  if (now < state.pauseUntilMs) {
    state.pauseUntilMs = Math.max(state.pauseUntilMs, untilMs);
    return { pausedMs: state.pauseUntilMs - now, rateRps: state.rateRps };
  }
  rollWindow(state, now);
  forgetStaleCeiling(state, shape, now);
  // Judged by the last whole window: a burst after a quiet spell is not a rate.
  const inUseRps = Math.max(state.previousCount, state.windowCount) / scale;
  if (state.previousCount / scale >= state.rateRps * LOW_USE_SHARE) {
    const base = Math.max(MIN_RPS, Math.min(state.rateRps, inUseRps));
    state.limitRps = base;
    state.limitAtMs = untilMs;
    state.rateRps = Math.max(MIN_RPS, base * DECREASE_FACTOR);
    state.regrowFromRps = state.rateRps;
  }
  state.pauseUntilMs = untilMs;
  state.tokens = 0;
  state.atMs = untilMs;
  state.increasedAtMs = untilMs;
  return { pausedMs: untilMs - now, rateRps: state.rateRps };
}

/**
 * The bucket in this process: the whole budget for a replica without Redis (scale 1), or its
 * `upstream.budget.fallbackShare` while Redis cannot answer. Answers at once, never undefined.
 */
export class MemoryBudgetStore implements BudgetStore {
  private state: Partial<BucketState> = {};

  constructor(
    private readonly shape: BudgetShape,
    private readonly now: () => number,
    /** The share of the fleet's rate and burst this bucket hands out (1: all of it). */
    private readonly scale = 1,
  ) {}

  lease(request: LeaseRequest): LeaseReply {
    const now = this.now();
    const state = (this.state = normalizeState(this.state, this.shape, now, this.scale));
    return leaseFrom(state, this.shape, request, now, this.scale);
  }

  rateLimited(pauseMs: number): PauseReply {
    const now = this.now();
    const state = (this.state = normalizeState(this.state, this.shape, now, this.scale));
    return rateLimitedFrom(state, this.shape, pauseMs, now, this.scale);
  }

  /**
   * Takes on what the shared bucket last said (its rate and pause), so that when Redis goes away
   * this one goes on from there: a paused fleet stays paused, a reduced rate stays reduced.
   */
  adopt(reply: { readonly rateRps: number; readonly pausedMs: number }): void {
    const now = this.now();
    const state = normalizeState(this.state, this.shape, now, this.scale);
    state.rateRps = clamp(reply.rateRps, MIN_RPS, this.shape.maxRps);
    // Empty as of now: if Redis goes away, the share starts without a burst of its own (the
    // shared bucket has just handed this replica what it could), and refills at its rate from here.
    state.tokens = 0;
    state.atMs = Math.max(state.atMs, now);
    if (reply.pausedMs > 0 && now + reply.pausedMs > state.pauseUntilMs) {
      state.pauseUntilMs = now + reply.pausedMs;
      state.tokens = 0;
      state.atMs = state.pauseUntilMs;
      state.increasedAtMs = state.pauseUntilMs;
    }
    this.state = state;
  }
}
