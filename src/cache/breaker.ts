/**
 * The circuit breaker of the Redis connection: after `threshold` consecutive timeouts or
 * connection errors it opens for `cooldownMs`, and while open every Redis role answers
 * "nothing there" at once, without sending (a Redis that stalls would otherwise cost every
 * request a command timeout). After the cool-down one command at a time is let through as a
 * probe: its success closes the breaker, its failure opens it again for another cool-down.
 *
 * Invariant: a probe always ends (commands are bounded by the command timeout, and the caller
 * reports every command it was allowed to send), so the breaker cannot stay half-open.
 */
export interface BreakerSettings {
  /** Consecutive timeouts/errors that open the breaker (`cache.redis.breakerThreshold`). */
  readonly threshold: number;
  /** How long it stays open before a probe (`cache.redis.breakerCooldownMs`). */
  readonly cooldownMs: number;
  readonly now?: () => number;
}

export class CircuitBreaker {
  readonly #threshold: number;
  readonly #cooldownMs: number;
  readonly #now: () => number;
  #consecutive = 0;
  #openUntil = 0;
  #probing = false;
  #skipped = 0;
  #lastFailure = '';

  constructor(settings: BreakerSettings) {
    this.#threshold = settings.threshold;
    this.#cooldownMs = settings.cooldownMs;
    this.#now = settings.now ?? (() => performance.now());
  }

  /** May a command be sent now? Counts the ones it refuses. */
  allows(): boolean {
    if (this.#consecutive < this.#threshold) return true;
    if (this.#probing || this.#now() < this.#openUntil) {
      this.#skipped++;
      return false;
    }
    this.#probing = true;
    return true;
  }

  /** Redis answered (a reply error is an answer too). */
  succeeded(): void {
    this.#consecutive = 0;
    this.#probing = false;
  }

  /** A timeout or connection error of a command `allows()` let through. */
  failed(message: string): void {
    this.#probing = false;
    this.#lastFailure = message;
    if (++this.#consecutive >= this.#threshold) this.#openUntil = this.#now() + this.#cooldownMs;
  }

  /** Commands not sent because the breaker was open. */
  get skipped(): number {
    return this.#skipped;
  }

  /** Why Redis is skipped now, for readiness; undefined while the breaker is closed. */
  openReason(): string | undefined {
    if (this.#consecutive < this.#threshold) return undefined;
    const waitMs = Math.max(0, Math.ceil(this.#openUntil - this.#now()));
    return `circuit open after ${this.#consecutive} consecutive failures (last: ${this.#lastFailure}); next probe in ${waitMs} ms`;
  }
}
