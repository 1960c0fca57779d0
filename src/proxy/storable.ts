/**
 * What of an upstream answer is stored, and in which form. Policy, not mechanism: the fill
 * (fill.ts) stores whatever this returns and relays everything else.
 *
 * Stored: a JSON 200 in identity coding. An answer encoded despite `accept-encoding: identity` is
 * relayed as it is, never stored: entries hold identity bytes (their gzip variant is made here).
 *
 * The Read API answers JSON, so an answer that is not JSON is not the API speaking (an SSO login
 * page in front of the instance, a captive portal): it is never stored nor taken as a verdict on
 * the caller, and the read-through answers 502 naming what came back (upstream/answer.ts).
 */
import { hash } from 'node:crypto';
import type { CanonicalRequest } from '../api/normalize.js';
import type { SharedTierBudget } from '../cache/budget.js';
import { FIELD_VALUE, type CacheEntry } from '../cache/entry.js';
import { operationTag, type Scope } from '../cache/key.js';
import type { FreshnessPolicy } from '../cache/policy.js';
import { classifyAnswer } from '../upstream/answer.js';
import type { UpstreamResponse } from '../upstream/client.js';
import { projectOfTags, userProjectTag } from './callers/access-confirmation.js';
import { variesOnAnything, variesOnOrigin } from './origin-keying.js';

export function isStorable(res: UpstreamResponse): boolean {
  // `Vary: *`: a stored answer would never match a later request (RFC 9111 §4.1).
  if (classifyAnswer(res) !== 'ok' || variesOnAnything(res)) return false;
  const coding = res.headers['content-encoding'];
  return coding === undefined || coding === 'identity';
}

/**
 * An entry's tags: the policy's (resources in its path and body), and for purges by the admin
 * API its operation (`op:listRuns:5`) and its user's scope (`u:7`); a user's entry of a project
 * also carries `<scope>|project:<id>` (access-confirmation.ts).
 */
function entryTags(req: CanonicalRequest, tags: readonly string[], scope: Scope | undefined, projectId: number | undefined): string[] {
  const out = [...tags, operationTag(req.op, req.ids)];
  if (scope !== undefined) out.push(scope);
  if (projectId !== undefined) out.push(userProjectTag(scope!, projectId));
  return out;
}

/**
 * The entry for a storable answer: freshness and tags from the policy, a strong ETag of the body.
 * A user's entry of a project also carries `<scope>|project:<id>`, so that a revoked access drops
 * exactly that user's entries of the project (access-confirmation.ts). `budget`: the filling
 * request's (budget.ts), under which what the answer taught the policy is shared.
 */
// eslint-disable-next-line max-params -- a fill's request, answer, policy, clock, scope and budget: all six are the fill's own, read once each
export function makeEntry(
  req: CanonicalRequest,
  res: UpstreamResponse,
  policy: FreshnessPolicy,
  now: number,
  scope?: Scope,
  budget?: SharedTierBudget,
): CacheEntry {
  const decided = policy.decide(req, res.body, budget);
  const projectId = scope === undefined ? undefined : projectOfTags(decided.tags);
  const etag = etagOf(res.body);
  const contentType = res.headers['content-type'];
  const freshUntil = now + decided.ttlMs;
  return {
    status: 200,
    headers: {
      ...keptHeaders(res, policy.storedHeaders),
      'content-type': typeof contentType === 'string' ? contentType : 'application/json',
      etag,
      // Answers are per caller: no shared cache downstream may store them (RFC 9111 §5.2.2.7).
      'cache-control': 'private',
      // The instance's answer depends on the Origin: the cached one says so too, as its key does (origin-keying.ts).
      vary: variesOnOrigin(res) ? 'Authorization, Accept-Encoding, Origin' : 'Authorization, Accept-Encoding',
    },
    body: res.body,
    etag,
    storedAt: now,
    freshUntil,
    staleWhileRevalidateUntil: freshUntil + decided.staleWhileRevalidateMs,
    staleIfErrorUntil: freshUntil + decided.staleIfErrorMs,
    tags: entryTags(req, decided.tags, scope, projectId),
  };
}

/**
 * The instance's headers that `cache.storedHeaders` keeps (CORS by default), as it sent them; one
 * it sent twice, or with a value node would refuse to write (a control character), is left out.
 */
function keptHeaders(res: UpstreamResponse, names: readonly string[]): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const name of names) {
    const value = res.headers[name];
    if (typeof value === 'string' && FIELD_VALUE.test(value)) kept[name] = value;
  }
  return kept;
}

/**
 * A strong validator of the body (RFC 9110 §8.8.3): SHA-256, 162 bits of it in base64url. The
 * one-shot `crypto.hash` (Node ≥ 20.12): no Hash object per miss.
 */
export function etagOf(body: Buffer): string {
  return `"${hash('sha256', body, 'base64url').slice(0, 27)}"`;
}
