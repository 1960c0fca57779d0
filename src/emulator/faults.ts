/**
 * Injected faults, applied to /api/v1 requests only (the control plane always answers).
 * Order per request (api.ts): latency + jitter → down (socket destroyed) → rate limit → random error.
 * Random draws (jitter, error_rate) come from a PRNG reseeded on every PUT, so a given fault
 * set fails the same requests in the same order every time.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Prng } from './prng.js';
import { RateLimitSchema, makeRateLimiter, type Escalation, type RateLimiter } from './rate-limit.js';

const ms = () => Type.Optional(Type.Integer({ minimum: 0, maximum: 600_000 }));

/**
 * The PUT body, checked by the route before it reaches set(). Unknown fields are rejected so a
 * typo does not silently do nothing; rate_limit's forms (rate-limit.ts) have no defaults.
 */
export const FaultsSchema = Type.Object(
  {
    latency_ms: ms(),
    jitter_ms: ms(),
    error_rate: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    error_status: Type.Optional(Type.Integer({ minimum: 400, maximum: 599 })),
    down: Type.Optional(Type.Boolean()),
    rate_limit: Type.Optional(RateLimitSchema),
  },
  { additionalProperties: false },
);

export type Faults = Readonly<Static<typeof FaultsSchema>>;

export type FaultAction =
  | { readonly kind: 'down' }
  | { readonly kind: 'rate_limited'; readonly retryAfterS: number; readonly escalation: Escalation }
  | { readonly kind: 'error'; readonly status: number }
  | { readonly kind: 'none' };

export const DEFAULT_ERROR_STATUS = 500;

export class FaultInjector {
  private faults: Faults = {};
  private rng = new Prng(0);
  private limiter: RateLimiter | undefined;

  constructor(private readonly seed: number) {}

  /**
   * Replaces the whole fault set (PUT semantics) and restarts the rate limit (a full bucket, no
   * lockout). A rate_limit of no form throws a ControlError before anything changes.
   */
  set(faults: Faults): void {
    const limiter = faults.rate_limit && makeRateLimiter(faults.rate_limit);
    this.faults = faults;
    this.rng = new Prng(this.seed);
    this.limiter = limiter;
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
    const limited = this.limiter?.admit(nowMs);
    if (limited) return { kind: 'rate_limited', ...limited };
    if (f.error_rate !== undefined && f.error_rate > 0 && this.rng.next() < f.error_rate) {
      return { kind: 'error', status: f.error_status ?? DEFAULT_ERROR_STATUS };
    }
    return { kind: 'none' };
  }
}
