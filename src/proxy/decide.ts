/**
 * The one decision: what a cacheable request from a known caller may be answered from.
 *
 * - `key`: where the answer is stored and looked up. The caller's own scope (`u:<id>`), or the
 *   shared `admin` scope for admin-only operations.
 * - `fillKey`: what concurrent identical requests coalesce on. It differs from `key` only for a
 *   caller not yet verified as admin: their request goes upstream under their own token,
 *   coalesced only with their own, and the instance's 200 (which verifies them) or 403 decides.
 * - `mayRead`: whether this caller may read what `key` holds; false for that unverified caller.
 * - `noCache`: the client asked for revalidation (RFC 9111 §5.2.1.4), when that is honoured.
 *
 * Every stage asks this function; none decides scope or key on its own.
 *
 * The Decision is also the request's budget for waiting on Redis (budget.ts): a plain field, so
 * a memory hit allocates nothing more for it.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { CanonicalRequest } from '../api/normalize.js';
import type { SharedTierBudget } from '../cache/budget.js';
import { ADMIN_SCOPE } from '../cache/key.js';
import { wantsRevalidation } from './headers.js';
import type { Caller } from './identity.js';
import { keyFor, type CacheableRoute } from './route-memo.js';

export interface Decision extends SharedTierBudget {
  readonly req: CanonicalRequest;
  readonly caller: Caller;
  readonly authorization: string;
  readonly key: string;
  readonly fillKey: string;
  readonly mayRead: boolean;
  readonly noCache: boolean;
  /** Set by the fill this request leads: how long the upstream took (ms), for its access log line. */
  upstreamMs: number | undefined;
}

export interface DecideOptions {
  /** `cache.honorClientNoCache`. */
  readonly honorNoCache: boolean;
  /** Is the caller a verified site admin at `t`? */
  readonly isVerifiedAdmin: (caller: Caller, t: number) => boolean;
}

export function decide(
  route: CacheableRoute,
  caller: Caller,
  authorization: string,
  headers: IncomingHttpHeaders,
  t: number,
  o: DecideOptions,
  budget?: SharedTierBudget,
): Decision {
  const req = route.req;
  let key: string;
  let fillKey: string;
  let mayRead = true;
  if (!req.op.adminOnly) {
    key = fillKey = keyFor(route, caller.scope);
  } else {
    key = keyFor(route, ADMIN_SCOPE);
    mayRead = o.isVerifiedAdmin(caller, t);
    fillKey = mayRead ? key : keyFor(route, caller.scope);
  }
  // Most requests carry neither header: no regex for them.
  const cacheControl = headers['cache-control'];
  const pragma = headers.pragma;
  const noCache = o.honorNoCache && (cacheControl !== undefined || pragma !== undefined) && wantsRevalidation(cacheControl, pragma);
  return { req, caller, authorization, key, fillKey, mayRead, noCache, sharedTierSpent: budget?.sharedTierSpent ?? false, upstreamMs: undefined };
}
