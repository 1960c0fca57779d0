/**
 * The rate_limit fault, in one of two forms:
 *   - a count: `after_n` requests are served, then 429 for `retry_after_s` seconds, then again;
 *   - an instance-wide token bucket, like a real instance's account limit: `burst` requests at
 *     once after a quiet spell, then `requests_per_s`; above that, 429 with `retry_after_s`.
 *     With `escalate_after` and `lockout_s`, the K-th of those 429s within a minute begins a
 *     lockout: every request gets 429 for `lockout_s` seconds (the account locked out).
 * Time is the emulator's wall clock, passed in by the caller, so a test's fake clock steps it.
 */
import { Type, type Static } from '@sinclair/typebox';
import { ControlError } from './control-error.js';

/**
 * The fault's fields as the route's schema checks them (types and ranges); which combinations
 * make a form is checked by makeRateLimiter, which names the fields at fault.
 */
export const RateLimitSchema = Type.Object(
  {
    retry_after_s: Type.Integer({ minimum: 0, maximum: 86_400 }),
    after_n: Type.Optional(Type.Integer({ minimum: 0 })),
    requests_per_s: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1_000_000 })),
    burst: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })),
    // Bounded: the escalation keeps one timestamp per counted 429.
    escalate_after: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
    lockout_s: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
  },
  { additionalProperties: false },
);

export type RateLimit = Readonly<Static<typeof RateLimitSchema>>;

/** What a 429 means for the lockout: none configured or not yet, the one that begins it, or inside it. */
export type Escalation = 'none' | 'lockout_begins' | 'locked_out';

export interface RateLimited {
  readonly retryAfterS: number;
  readonly escalation: Escalation;
}

export interface RateLimiter {
  /** undefined: the request goes on; else it is answered 429. */
  admit(nowMs: number): RateLimited | undefined;
}

const BUCKET_FIELDS = ['requests_per_s', 'burst', 'escalate_after', 'lockout_s'] as const;
/** "K 429s within a minute". */
const ESCALATION_WINDOW_MS = 60_000;

/** The limiter for a fault set's rate_limit; a 400 ControlError naming the fields when no form fits. */
export function makeRateLimiter(rl: RateLimit): RateLimiter {
  const bucketFields = BUCKET_FIELDS.filter((f) => rl[f] !== undefined);
  if (rl.after_n !== undefined) {
    if (bucketFields.length > 0) {
      throw new ControlError(400, ['after_n', ...bucketFields], 'The rate_limit takes after_n, or requests_per_s and burst, not both.');
    }
    return new CountLimiter(rl.after_n, rl.retry_after_s);
  }
  if (bucketFields.length === 0) throw new ControlError(400, ['after_n', 'requests_per_s'], 'The rate_limit needs after_n, or requests_per_s and burst.');
  if (rl.requests_per_s === undefined || rl.burst === undefined) {
    const missing = (['requests_per_s', 'burst'] as const).filter((f) => rl[f] === undefined);
    throw new ControlError(400, missing, `The rate_limit's token bucket needs requests_per_s and burst; ${missing.join(' and ')} missing.`);
  }
  if ((rl.escalate_after === undefined) !== (rl.lockout_s === undefined)) {
    const missing = rl.escalate_after === undefined ? 'escalate_after' : 'lockout_s';
    throw new ControlError(400, missing, 'The rate_limit escalates with both escalate_after and lockout_s, or neither.');
  }
  const escalation = rl.escalate_after === undefined ? undefined : { after: rl.escalate_after, lockoutS: rl.lockout_s! };
  return new TokenBucketLimiter(rl.requests_per_s, rl.burst, rl.retry_after_s, escalation);
}

/**
 * After `after_n` requests were served, every request gets 429 until `retry_after_s` seconds
 * have passed since the first 429; then a new window of `after_n` requests begins.
 */
class CountLimiter implements RateLimiter {
  private served = 0;
  private limitedUntilMs: number | null = null;

  constructor(
    private readonly afterN: number,
    private readonly retryAfterS: number,
  ) {}

  admit(nowMs: number): RateLimited | undefined {
    if (this.limitedUntilMs !== null && nowMs >= this.limitedUntilMs) {
      this.served = 0;
      this.limitedUntilMs = null;
    }
    if (this.served < this.afterN) {
      this.served++;
      return undefined;
    }
    this.limitedUntilMs ??= nowMs + this.retryAfterS * 1000;
    return { retryAfterS: this.retryAfterS, escalation: 'none' };
  }
}

/**
 * The bucket holds up to `burst` tokens (full at the start) and gains `requests_per_s` a second;
 * each request admitted takes one. Requests refused (429s) take none, so a client that waits
 * gets through. Only the bucket's own 429s count towards a lockout: counting the lockout's
 * would make one lockout begin the next.
 */
class TokenBucketLimiter implements RateLimiter {
  private tokens: number;
  private refilledAtMs: number | null = null;
  private lockedUntilMs: number | null = null;
  private readonly recent429s: RecentTimes | undefined;

  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    private readonly retryAfterS: number,
    private readonly escalation: { readonly after: number; readonly lockoutS: number } | undefined,
  ) {
    this.tokens = burst;
    this.recent429s = escalation && new RecentTimes(escalation.after);
  }

  admit(nowMs: number): RateLimited | undefined {
    if (this.lockedUntilMs !== null) {
      if (nowMs < this.lockedUntilMs) return { retryAfterS: Math.max(1, Math.ceil((this.lockedUntilMs - nowMs) / 1000)), escalation: 'locked_out' };
      this.lockedUntilMs = null;
    }
    this.refill(nowMs);
    if (this.tokens >= 1) {
      this.tokens--;
      return undefined;
    }
    return { retryAfterS: this.retryAfterS, escalation: this.escalate(nowMs) };
  }

  private refill(nowMs: number): void {
    // A clock stepping back adds nothing (and is not held against the bucket later).
    if (this.refilledAtMs !== null && nowMs > this.refilledAtMs) {
      this.tokens = Math.min(this.burst, this.tokens + ((nowMs - this.refilledAtMs) * this.perSecond) / 1000);
    }
    if (this.refilledAtMs === null || nowMs > this.refilledAtMs) this.refilledAtMs = nowMs;
  }

  /** Counts a 429 of the bucket; the K-th within a minute begins the lockout. */
  private escalate(nowMs: number): Escalation {
    if (!this.escalation || !this.recent429s) return 'none';
    this.recent429s.add(nowMs);
    if (!this.recent429s.allWithin(nowMs, ESCALATION_WINDOW_MS)) return 'none';
    this.lockedUntilMs = nowMs + this.escalation.lockoutS * 1000;
    this.recent429s.clear();
    return 'lockout_begins';
  }
}

/** The last `size` times recorded, in a ring. */
class RecentTimes {
  private readonly times: Float64Array;
  private next = 0;

  constructor(size: number) {
    this.times = new Float64Array(size).fill(-Infinity);
  }

  add(ms: number): void {
    this.times[this.next] = ms;
    this.next = (this.next + 1) % this.times.length;
  }

  /** True when the ring is full of times within `windowMs` before `nowMs`. */
  allWithin(nowMs: number, windowMs: number): boolean {
    return nowMs - this.times[this.next]! < windowMs; // the oldest, about to be overwritten
  }

  clear(): void {
    this.times.fill(-Infinity);
  }
}
