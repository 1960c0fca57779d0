/**
 * Injected faults, applied to /api/v1 requests only (the control plane always answers).
 * Order per request (api.ts): latency + jitter → down (socket destroyed) → rate limit → random error.
 * Random draws (jitter, error_rate) come from a PRNG reseeded on every PUT, so a given fault
 * set fails the same requests in the same order every time.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Prng } from './prng.js';

const ms = () => Type.Optional(Type.Integer({ minimum: 0, maximum: 600_000 }));

/**
 * The PUT body, checked by the route before it reaches set(). Unknown fields are rejected so a
 * typo does not silently do nothing; both rate_limit fields are required (no default window).
 */
export const FaultsSchema = Type.Object(
  {
    latency_ms: ms(),
    jitter_ms: ms(),
    error_rate: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    error_status: Type.Optional(Type.Integer({ minimum: 400, maximum: 599 })),
    down: Type.Optional(Type.Boolean()),
    rate_limit: Type.Optional(
      Type.Object(
        { after_n: Type.Integer({ minimum: 0 }), retry_after_s: Type.Integer({ minimum: 0, maximum: 86_400 }) },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export type Faults = Readonly<Static<typeof FaultsSchema>>;
export type RateLimit = Readonly<NonNullable<Faults['rate_limit']>>;

export type FaultAction =
  | { readonly kind: 'down' }
  | { readonly kind: 'rate_limited'; readonly retryAfterS: number }
  | { readonly kind: 'error'; readonly status: number }
  | { readonly kind: 'none' };

export const DEFAULT_ERROR_STATUS = 500;

export class FaultInjector {
  private faults: Faults = {};
  private rng = new Prng(0);
  private served = 0;
  private limitedUntilMs: number | null = null;

  constructor(private readonly seed: number) {}

  /** Replaces the whole fault set (PUT semantics) and restarts the rate-limit window. */
  set(faults: Faults): void {
    this.faults = faults;
    this.rng = new Prng(this.seed);
    this.served = 0;
    this.limitedUntilMs = null;
  }

  clear(): void {
    this.set({});
  }

  current(): Faults {
    return this.faults;
  }

  delayMs(): number {
    const { latency_ms = 0, jitter_ms = 0 } = this.faults;
    return latency_ms + (jitter_ms > 0 ? Math.floor(this.rng.next() * (jitter_ms + 1)) : 0);
  }

  /** Decides the fate of one request after its delay. */
  decide(nowMs: number): FaultAction {
    const f = this.faults;
    if (f.down) return { kind: 'down' };
    if (f.rate_limit) {
      const limited = this.checkRateLimit(f.rate_limit, nowMs);
      if (limited) return limited;
    }
    if (f.error_rate !== undefined && f.error_rate > 0 && this.rng.next() < f.error_rate) {
      return { kind: 'error', status: f.error_status ?? DEFAULT_ERROR_STATUS };
    }
    return { kind: 'none' };
  }

  /**
   * After `after_n` requests were served, every request gets 429 until `retry_after_s` seconds
   * have passed since the first 429; then a new window of `after_n` requests begins.
   */
  private checkRateLimit(rl: RateLimit, nowMs: number): FaultAction | undefined {
    if (this.limitedUntilMs !== null && nowMs >= this.limitedUntilMs) {
      this.served = 0;
      this.limitedUntilMs = null;
    }
    if (this.served < rl.after_n) {
      this.served++;
      return undefined;
    }
    this.limitedUntilMs ??= nowMs + rl.retry_after_s * 1000;
    return { kind: 'rate_limited', retryAfterS: rl.retry_after_s };
  }
}
