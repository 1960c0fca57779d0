/**
 * How the cache's own upstream requests fail: a code, and the HTTP status the proxy answers with
 * (RFC 9110 §15.6.5 and §15.6.3: the gateway's statuses; 503 when tm-cache declines to ask).
 */

/**
 * `bad-answer`: the upstream answered, but not as the API does (not JSON where JSON is due); `too-large`: above upstream.maxBodyBytes;
 * `budget-spent`: the fleet's upstream budget had no token within the wait allowed (fleet-budget.ts): a 429 with a Retry-After, never a 503.
 */
export type UpstreamErrorCode = 'timeout' | 'connect' | 'reset' | 'bad-answer' | 'queue-full' | 'closed' | 'too-large' | 'budget-spent';

export class UpstreamError extends Error {
  readonly code: UpstreamErrorCode;
  readonly status: 429 | 502 | 503 | 504;
  /** `budget-spent` only: how long until a token may be had (the Retry-After's basis). */
  readonly retryAfterMs: number | undefined;

  constructor(code: UpstreamErrorCode, message: string, options?: { cause?: unknown; retryAfterMs?: number }) {
    super(message, options);
    this.name = 'UpstreamError';
    this.code = code;
    this.status = code === 'timeout' ? 504 : code === 'queue-full' ? 503 : code === 'budget-spent' ? 429 : 502;
    this.retryAfterMs = options?.retryAfterMs;
  }
}
