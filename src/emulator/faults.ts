/**
 * Injected faults, applied to /api/v1 requests only (the control plane always answers).
 * Order per request: down (socket destroyed) → latency + jitter → rate limit → random error.
 * Random draws (jitter, error_rate) come from a PRNG reseeded on every PUT, so a given fault
 * set fails the same requests in the same order every time.
 */
import { ControlError, asObject, intField } from './control-error.js';
import { Prng } from './prng.js';

export interface RateLimit {
  readonly after_n: number;
  readonly retry_after_s: number;
}

export interface Faults {
  readonly latency_ms?: number;
  readonly jitter_ms?: number;
  readonly error_rate?: number;
  readonly error_status?: number;
  readonly down?: boolean;
  readonly rate_limit?: RateLimit;
}

export type FaultAction =
  | { readonly kind: 'down' }
  | { readonly kind: 'rate_limited'; readonly retryAfterS: number }
  | { readonly kind: 'error'; readonly status: number }
  | { readonly kind: 'none' };

const FIELDS = ['latency_ms', 'jitter_ms', 'error_rate', 'error_status', 'down', 'rate_limit'];
export const DEFAULT_ERROR_STATUS = 500;

/** Validates a PUT body; unknown fields are rejected so a typo does not silently do nothing. */
export function parseFaults(raw: unknown): Faults {
  const body = asObject(raw);
  for (const key of Object.keys(body)) if (!FIELDS.includes(key)) throw new ControlError(400, key, `Unknown fault ${key}.`);
  const out: { -readonly [K in keyof Faults]: Faults[K] } = {};
  if (body.latency_ms !== undefined) out.latency_ms = intField(body, 'latency_ms', { min: 0, max: 600_000 });
  if (body.jitter_ms !== undefined) out.jitter_ms = intField(body, 'jitter_ms', { min: 0, max: 600_000 });
  if (body.error_status !== undefined) out.error_status = intField(body, 'error_status', { min: 400, max: 599 });
  if (body.error_rate !== undefined) {
    const r = body.error_rate;
    if (typeof r !== 'number' || !(r >= 0 && r <= 1)) throw new ControlError(400, 'error_rate', 'The error_rate must be a number between 0 and 1.');
    out.error_rate = r;
  }
  if (body.down !== undefined) {
    if (typeof body.down !== 'boolean') throw new ControlError(400, 'down', 'The down must be a boolean.');
    out.down = body.down;
  }
  if (body.rate_limit !== undefined) {
    const rl = asObject(body.rate_limit, 'rate_limit');
    out.rate_limit = {
      after_n: intField(rl, 'after_n', { min: 0 }) ?? 0,
      retry_after_s: intField(rl, 'retry_after_s', { min: 0, max: 86_400 }) ?? 0,
    };
  }
  return out;
}

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
