/**
 * How one cacheable request ended: the single vocabulary that the `Cache-Status` header, the log
 * line and the metric label all show (prow's ghcache names every request's mode the same way).
 *
 * It lives below both the proxy and the management port, so that `ops/` (metrics) and `proxy/`
 * never import each other.
 */
import type { TierName } from './tier.js';

export type OutcomeKind = 'hit' | 'stale' | 'miss' | 'coalesced' | 'bypass' | 'error';

/**
 * `coalesced`: collapsed into another request's fill (RFC 9211 `collapsed`), on this replica
 * (no tier) or another one's, waited for through the Redis lock (`tier: 'redis'`): either way no
 * upstream request of its own.
 */
export interface CacheOutcome {
  readonly kind: OutcomeKind;
  /** Where the answer came from: a hit's tier, or `redis` for a request collapsed into another replica's fill. */
  readonly tier?: TierName;
  /** Why: `stale-while-revalidate`, `stale-if-error`, `rate-limited`, `no-cache`, `unknown-param`, `timeout`... */
  readonly detail?: string;
  /** The fill's answer was stored. */
  readonly stored?: boolean;
  /** Status upstream answered with, when it was asked. */
  readonly upstreamStatus?: number;
}

/** Hits are the common case: one frozen outcome per tier, no allocation per request. */
export const HIT: Readonly<Record<TierName, CacheOutcome>> = Object.freeze({
  memory: Object.freeze({ kind: 'hit', tier: 'memory' }),
  redis: Object.freeze({ kind: 'hit', tier: 'redis' }),
});
