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
    // Not a fault: the instance's CORS, as one in front of a browser dashboard answers (api.ts).
    cors: Type.Optional(
      Type.Object(
        {
          /** Origins answered with Access-Control-Allow-Origin: <the origin> and Vary: Origin. */
          origins: Type.Array(Type.String({ maxLength: 200 }), { maxItems: 20 }),
          /**
           * Every origin answered `Access-Control-Allow-Origin: *`, without Vary (an instance whose
           * answers do not depend on the Origin; no credentials mode); `origins` is then unused.
           */
          any_origin: Type.Optional(Type.Boolean()),
          /** Access-Control-Expose-Headers of the answers, e.g. "ETag, Cache-Status". */
          expose_headers: Type.Optional(Type.String({ maxLength: 200, pattern: '^[A-Za-z0-9, -]*$' })),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export type Faults = Readonly<Static<typeof FaultsSchema>>;

export type FaultAction =
  | { readonly kind: 'down' }
  | { readonly kind: 'rate_limited'; readonly retryAfterS: number; readonly escalation: Escalation }
  | { readonly kind: 'error'; readonly status: number }
  | { readonly kind: 'none' };

const DEFAULT_ERROR_STATUS = 500;

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

  /**
   * The CORS headers for a request from `origin`, or none when CORS is off or the origin is not
   * allowed: `*` for every request (`any_origin`), else an allowed origin reflected with `Vary: Origin`.
   */
  corsHeaders(origin: string | undefined): Record<string, string> | undefined {
    const cors = this.faults.cors;
    if (cors?.any_origin === true) {
      const any: Record<string, string> = { 'access-control-allow-origin': '*' };
      if (cors.expose_headers) any['access-control-expose-headers'] = cors.expose_headers;
      return any;
    }
    if (cors === undefined || origin === undefined || !cors.origins.includes(origin)) return undefined;
    const headers: Record<string, string> = { 'access-control-allow-origin': origin, 'access-control-allow-credentials': 'true', vary: 'Origin' };
    if (cors.expose_headers) headers['access-control-expose-headers'] = cors.expose_headers;
    return headers;
  }

  /** Whether CORS is on at all. */
  corsEnabled(): boolean {
    return this.faults.cors !== undefined;
  }

  /** Whether answers depend on the Origin (origins reflected): every answer then says `Vary: Origin`, as such an instance does. */
  corsVaries(): boolean {
    return this.faults.cors !== undefined && this.faults.cors.any_origin !== true;
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
