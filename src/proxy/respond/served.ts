/**
 * What the proxy answers a cacheable request with, before it is written: a stored entry, an
 * upstream answer relayed as it is, or an answer made locally (validation, rate limit, upstream
 * failure). Every stage produces one of these and `writer.ts` alone turns it into bytes.
 */
import type { ErrorBody } from '../../api/errors.js';
import type { CacheEntry } from '../../cache/entry.js';
import type { CacheOutcome } from '../../cache/outcome.js';
import type { UpstreamError, UpstreamResponse } from '../../upstream/client.js';

/** An answer made here: a status, the project's error body, its headers. */
export interface LocalServed {
  readonly kind: 'local';
  readonly status: number;
  readonly body: ErrorBody;
  readonly headers: Readonly<Record<string, string>>;
  readonly outcome: CacheOutcome;
}

export type Served =
  | { readonly kind: 'entry'; readonly entry: CacheEntry; readonly outcome: CacheOutcome }
  | { readonly kind: 'relay'; readonly response: UpstreamResponse; readonly outcome: CacheOutcome }
  | LocalServed;

/**
 * Headers of a relayed upstream answer worth keeping; Set-Cookie and hop-by-hop never are.
 * Location: a redirect is relayed whole, or it is no redirect at all (RFC 9110 §15.4, §10.2.2).
 */
const RELAYED_HEADERS = ['content-type', 'content-encoding', 'www-authenticate', 'retry-after', 'cache-control', 'location'] as const;

export function relayedHeaders(res: UpstreamResponse): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of RELAYED_HEADERS) {
    const v = res.headers[name];
    if (typeof v === 'string') out[name] = v;
  }
  return out;
}

/**
 * 502 for a refused/reset connection, an upstream 5xx or an answer above upstream.maxBodyBytes
 * (its message says so itself), 504 for a timeout, 503 for a full queue; 429 with a truthful
 * Retry-After when the fleet's upstream budget is spent (never a 503: the instance is not down,
 * and the client may come back when a token may be had).
 */
export function upstreamFailure(err: UpstreamError, upstreamStatus?: number): LocalServed {
  return {
    kind: 'local',
    status: err.status,
    headers: err.code === 'budget-spent' ? { 'retry-after': String(Math.max(1, Math.ceil((err.retryAfterMs ?? 1_000) / 1000))) } : {},
    body: upstreamFailureBody(err),
    outcome: { kind: 'error', detail: err.code, ...(upstreamStatus ? { upstreamStatus } : {}) },
  };
}

/** The body of every upstream failure, cached path and passthrough alike: what failed, never where. */
export function upstreamFailureBody(err: UpstreamError): ErrorBody {
  // An answer cut off for its size is not an unavailable upstream: the message says what happened.
  if (err.code === 'too-large') return { message: err.message, errors: {} };
  if (err.code === 'budget-spent') return { message: `Too many requests to the instance: ${err.message}.`, errors: {} };
  return { message: `Upstream unavailable: ${err.message}.`, errors: {} };
}

/** An answer made here, with the project's error body. */
export function localAnswer(status: number, body: ErrorBody, outcome: CacheOutcome, headers: Readonly<Record<string, string>> = {}): Served {
  return { kind: 'local', status, body, headers, outcome };
}
