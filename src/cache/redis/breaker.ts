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

  /** Why Redis is skipped now, for readiness, in words; undefined while the breaker is closed. */
  openReason(): string | undefined {
    const waitMs = this.msUntilProbe();
    if (waitMs === undefined) return undefined;
    const next = this.#probing ? 'trying it again now' : `trying it again in ${Math.ceil(waitMs / 1_000)} s`;
    return `did not answer ${this.#consecutive} commands in a row (${redisFailureInWords(this.#lastFailure)}): skipped, ${next}`;
  }

  /** How long until a probe may be sent (0: now, or one is in flight); undefined while the breaker is closed. */
  msUntilProbe(): number | undefined {
    if (this.#consecutive < this.#threshold) return undefined;
    return Math.max(0, Math.ceil(this.#openUntil - this.#now()));
  }
}

/**
 * A Redis client's failure message (ioredis', node's) as an operator reads it: what happened,
 * not the library's wording. The message itself goes to the log (failure-log.ts).
 */
export function redisFailureInWords(message: string): string {
  if (/timed? ?out|ETIMEDOUT/i.test(message)) return 'timed out';
  if (/ECONNREFUSED/.test(message)) return 'connection refused';
  if (/ENOTFOUND|EAI_AGAIN/.test(message)) return 'host not found';
  if (/WRONGPASS|NOAUTH|NOPERM|invalid password/i.test(message)) return 'authentication refused';
  if (/certificate|SSL|TLS|self[- ]signed/i.test(message)) return 'TLS certificate not accepted';
  if (/ECONNRESET|EPIPE|closed|lost|end of stream/i.test(message)) return 'connection lost';
  if (/LOADING|MASTERDOWN|READONLY|CLUSTERDOWN|TRYAGAIN/.test(message)) return 'not serving yet (loading or failing over)';
  return 'failed';
}
