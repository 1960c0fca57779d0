/**
 * The per-caller Retry-After gate: after the instance answered a caller 429, no new upstream
 * request is made for that caller until its Retry-After (RFC 9110 §10.2.3) has passed; the
 * caller gets what is held for them, or a local 429 with the remaining wait.
 *
 * Keyed by user id: the instance rate-limits a user, whichever of their tokens asked.
 *
 * Invariant: no Retry-After imposes, or is relayed promising, more than `upstream.maxRetryAfterMs`.
 * The header is the upstream's word, and a hostile or broken one (`Retry-After: 99999999999`, a
 * date years ahead) must not lock a user out until restart nor tell a client to wait for ever.
 */
import type { UpstreamResponse } from '../../upstream/client.js';
import { parseRetryAfterMs } from '../../upstream/client.js';

export class RetryAfterGate {
  readonly #until = new Map<number, number>();

  /**
   * @param defaultWaitMs the wait when a 429 carries no readable Retry-After (`upstream.defaultRetryAfterMs`).
   * @param maxWaitMs the longest wait any Retry-After may impose (`upstream.maxRetryAfterMs`).
   */
  constructor(
    private defaultWaitMs: number,
    private maxWaitMs: number,
  ) {}

  /** New `upstream.defaultRetryAfterMs` / `maxRetryAfterMs` (a reload); waits already begun keep their end. */
  reconfigure(defaultWaitMs: number, maxWaitMs: number): void {
    this.defaultWaitMs = defaultWaitMs;
    this.maxWaitMs = maxWaitMs;
  }

  /** How long the user must still wait at `now` (0: not blocked). */
  blockedMs(userId: number, now: number): number {
    const until = this.#until.get(userId);
    if (until === undefined) return 0;
    if (until > now) return until - now;
    this.#until.delete(userId);
    return 0;
  }

  /** Records a 429 for the user; answers the wait it imposes, at most the cap. */
  block(userId: number, retryAfter: string | string[] | undefined, now: number): number {
    const waitMs = Math.min(parseRetryAfterMs(retryAfter, now, this.defaultWaitMs), this.maxWaitMs);
    this.#until.set(userId, now + waitMs);
    return waitMs;
  }

  /** The answer as relayed: a Retry-After it carries promises no more than the cap. */
  bounded(res: UpstreamResponse, now: number): UpstreamResponse {
    const value = res.headers['retry-after'];
    const capped = capRetryAfter(value, now, this.maxWaitMs);
    return capped === value ? res : { ...res, headers: { ...res.headers, 'retry-after': capped } };
  }
}

/**
 * A Retry-After value as it may be relayed: unchanged when it asks for at most `maxWaitMs` (or
 * cannot be read: then nothing here acts on it), else that cap in delay-seconds (§10.2.3 allows
 * either form). Undefined stays undefined; a repeated header is reduced to its first value.
 */
export function capRetryAfter(value: string | string[] | undefined, now: number, maxWaitMs: number): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  if (first === undefined) return undefined;
  const waitMs = parseRetryAfterMs(first, now, 0);
  return waitMs <= maxWaitMs ? first : String(Math.ceil(maxWaitMs / 1000));
}
