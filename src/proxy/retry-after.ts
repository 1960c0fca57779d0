/**
 * The per-caller Retry-After gate: after the instance answered a caller 429, no new upstream
 * request is made for that caller until its Retry-After (RFC 9110 §10.2.3) has passed; the
 * caller gets what is held for them, or a local 429 with the remaining wait.
 *
 * Keyed by user id: the instance rate-limits a user, whichever of their tokens asked.
 */
import { parseRetryAfterMs } from '../upstream/client.js';

export class RetryAfterGate {
  readonly #until = new Map<number, number>();

  /** @param defaultWaitMs the wait when a 429 carries no readable Retry-After (`upstream.defaultRetryAfterMs`). */
  constructor(private readonly defaultWaitMs: number) {}

  /** How long the user must still wait at `now` (0: not blocked). */
  blockedMs(userId: number, now: number): number {
    const until = this.#until.get(userId);
    if (until === undefined) return 0;
    if (until > now) return until - now;
    this.#until.delete(userId);
    return 0;
  }

  /** Records a 429 for the user; answers the wait it imposes. */
  block(userId: number, retryAfter: string | string[] | undefined, now: number): number {
    const waitMs = parseRetryAfterMs(retryAfter, now, this.defaultWaitMs);
    this.#until.set(userId, now + waitMs);
    return waitMs;
  }
}
