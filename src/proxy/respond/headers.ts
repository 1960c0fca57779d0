/**
 * Response headers that describe the cache: `Cache-Status` (RFC 9211), `Age` (RFC 9111 §5.1), and
 * conditional requests with `ETag`/`If-None-Match` (RFC 9110 §13.1.2), so polling dashboards get a
 * body-less 304 when nothing changed.
 */
import { ttlSeconds, type CacheEntry } from '../../cache/entry.js';
import type { CacheOutcome } from '../../cache/outcome.js';

const CACHE_NAME = 'tm-cache';

/** The `Cache-Status` member for one outcome, e.g. `tm-cache; hit; ttl=12; detail=memory`. */
export function cacheStatus(outcome: CacheOutcome, entry: CacheEntry | undefined, now: number, shared?: SharedKey): string {
  const line = cacheStatusOf(outcome, entry, now);
  // Which scope answered, when it is a project's (`cache.sharing: project`): `key=project`.
  return shared === undefined ? line : `${line}; key=${shared}`;
}

/** The shared scope a Cache-Status names (`key=project`); a user's own and the admin scope are not named, as before sharing by project. */
export type SharedKey = 'project';

function cacheStatusOf(outcome: CacheOutcome, entry: CacheEntry | undefined, now: number): string {
  const ttl = entry === undefined ? '' : `; ttl=${ttlSeconds(entry, now)}`;
  switch (outcome.kind) {
    case 'hit':
      // A derived answer (derive/deriver.ts) says so instead of its source's tier.
      return `${CACHE_NAME}; hit${ttl}; detail=${outcome.detail ?? outcome.tier ?? 'memory'}`;
    case 'stale':
      // Served from cache without a fresh answer: RFC 9211 §2.2 `fwd=stale`.
      return `${CACHE_NAME}; fwd=stale${fwdStatus(outcome)}${ttl}; detail=${outcome.detail ?? 'stale'}`;
    case 'miss':
    case 'coalesced': {
      const fwd = outcome.detail === 'no-cache' ? 'request' : 'uri-miss';
      const stored = outcome.stored ? '; stored' : '';
      const collapsed = outcome.kind === 'coalesced' ? '; collapsed' : '';
      // Collapsed into another replica's fill: where its answer came from (`detail=redis`).
      const from = outcome.tier === undefined ? '' : `; detail=${outcome.tier}`;
      return `${CACHE_NAME}; fwd=${fwd}${fwdStatus(outcome)}${stored}${collapsed}${ttl}${from}`;
    }
    case 'bypass':
      return `${CACHE_NAME}; fwd=bypass; detail=${outcome.detail ?? 'bypass'}`;
    case 'error':
      // Rejected here, without asking upstream: nothing was forwarded.
      if (outcome.detail === 'invalid-request') return `${CACHE_NAME}; detail=invalid-request`;
      return `${CACHE_NAME}; fwd=uri-miss${fwdStatus(outcome)}; detail=${outcome.detail ?? 'error'}`;
  }
}

function fwdStatus(outcome: CacheOutcome): string {
  return outcome.upstreamStatus === undefined ? '' : `; fwd-status=${outcome.upstreamStatus}`;
}

/**
 * Does `If-None-Match` match the entry's strong ETag? Weak comparison, as RFC 9110 §13.1.2 asks
 * for If-None-Match: `W/"x"` matches `"x"`; `*` matches any stored answer.
 */
export function matchesIfNoneMatch(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header === etag) return true;
  if (header.trim() === '*') return true;
  for (const candidate of header.split(',')) {
    const tag = candidate.trim();
    if (tag === etag || (tag.startsWith('W/') && tag.slice(2) === etag)) return true;
  }
  return false;
}

/** `Cache-Control: no-cache` (or HTTP/1.0 `Pragma: no-cache`) from the client (RFC 9111 §5.2.1.4). */
export function wantsRevalidation(cacheControl: string | undefined, pragma: string | undefined): boolean {
  if (cacheControl !== undefined) return /(?:^|,)\s*(?:no-cache|max-age=0)\s*(?:,|$)/i.test(cacheControl);
  return pragma !== undefined && /no-cache/i.test(pragma);
}
