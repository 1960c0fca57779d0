/**
 * What of an upstream answer is stored, and in which form. Policy, not mechanism: the fill
 * (fill.ts) stores whatever this returns and relays everything else.
 *
 * Stored: a 200 in identity coding. An answer encoded despite `accept-encoding: identity` is
 * relayed as it is, never stored: entries hold identity bytes (their gzip variant is made here).
 */
import { createHash } from 'node:crypto';
import type { CanonicalRequest } from '../api/normalize.js';
import type { CacheEntry } from '../cache/entry.js';
import type { FreshnessPolicy } from '../cache/policy.js';
import type { UpstreamResponse } from '../upstream/client.js';

export function isStorable(res: UpstreamResponse): boolean {
  if (res.status !== 200) return false;
  const coding = res.headers['content-encoding'];
  return coding === undefined || coding === 'identity';
}

/** The entry for a storable answer: freshness and tags from the policy, a strong ETag of the body. */
export function makeEntry(req: CanonicalRequest, res: UpstreamResponse, policy: FreshnessPolicy, now: number): CacheEntry {
  const decided = policy.decide(req, res.body);
  const etag = `"${createHash('sha256').update(res.body).digest('base64url').slice(0, 27)}"`;
  const contentType = res.headers['content-type'];
  const freshUntil = now + decided.ttlMs;
  return {
    status: 200,
    headers: {
      'content-type': typeof contentType === 'string' ? contentType : 'application/json',
      etag,
      // Answers are per caller: no shared cache downstream may store them (RFC 9111 §5.2.2.7).
      'cache-control': 'private',
      vary: 'Authorization, Accept-Encoding',
    },
    body: res.body,
    etag,
    storedAt: now,
    freshUntil,
    staleWhileRevalidateUntil: freshUntil + decided.staleWhileRevalidateMs,
    staleIfErrorUntil: freshUntil + decided.staleIfErrorMs,
    tags: decided.tags,
  };
}
