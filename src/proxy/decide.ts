/**
 * The one decision: what a cacheable request from a known caller may be answered from.
 *
 * - `scope`: whose entry it is. The caller's own (`u:<id>`), the shared `admin` scope for
 *   admin-only operations, or with `cache.sharing: project` the project's (`p:<id>`) for every
 *   answer of a project whose project is known (from its path, or learned from the instance's
 *   answers for a run, milestone, session or source): `GET /user` and `GET /projects` stay the
 *   caller's own, and so does an answer whose project is not known yet.
 * - `gate`: what, besides freshness, must hold before this caller is served the entry (`EntryGate`).
 * - `key`: where the answer is stored and looked up, in `scope`.
 * - `fillKey`: what concurrent identical requests coalesce on. It differs from `key` only for a
 *   caller not yet verified as admin: their request goes upstream under their own token,
 *   coalesced only with their own, and the instance's 200 (which verifies them) or 403 decides.
 * - `mayRead`: whether this caller may read what `key` holds; false for that unverified caller.
 *   A project's shared answer is read only with proof, judged on each read (judge.ts).
 * - `ownKey`: the caller's own key of the question: what a member without proof coalesces on
 *   (only with their own requests).
 * - `projectId`, `areas`: for a project's shared answer, its project and the areas it reveals
 *   (access-grants.ts); 0 otherwise. Kept when a member's question is answered from their own
 *   key (`decideOwn`): a refusal of it is still a refusal of the project's area (access.ts).
 *   `unplaced`: the resource whose project is not known yet.
 * - `noCache`: the client asked for revalidation (RFC 9111 §5.2.1.4), when that is honoured.
 *
 * Every stage asks this module; none decides scope, key or gate on its own (an operation's
 * `adminOnly` is read here and nowhere else in the proxy). A caller whose identity lapsed is
 * given a key by `lapsedKey`, here too.
 *
 * `decide` writes the Decision into the request's exchange (exchange.ts), which is also the
 * request's state (its budget for waiting on Redis, budget.ts): a memory hit allocates nothing for
 * either. A Decision is never written after `decide` returns it: a member's question answered from
 * their own key is a second Decision (`decideOwn`), made here too.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { CanonicalRequest } from '../api/normalize.js';
import type { SharedTierBudget } from '../cache/budget.js';
import type { Operation } from '../api/catalogue.js';
import { ADMIN_SCOPE, projectScope, type Scope } from '../cache/key.js';
import type { Sharing } from '../config/schema.js';
import { wantsRevalidation } from './respond/headers.js';
import { keyFor, type CacheableRoute, type Placement, type RouteInfo } from './route-memo.js';
import type { Caller } from './callers/caller.js';
import type { UpstreamResponse } from '../upstream/client.js';
import { ANY_ORIGIN_SEGMENT, type OriginKeying } from './origin-keying.js';

/**
 * What, besides freshness, must hold before a caller is served an entry:
 * - `admin`: an admin-only answer, shared among verified admins: the caller verified as a site
 *   admin within `access.ttlMs` (`mayRead`). A 200 of the operation verifies them, a 403 clears it.
 * - `project`: an answer that reveals a project: the caller's access to it confirmed within
 *   `access.projectConfirmMs` (access-confirmation.ts). A fresh 200 of the project confirms it.
 * - `identity`: the caller's identity alone (`GET /user` names nobody but the caller).
 * - `member`: a project's shared answer (`cache.sharing: project`): the caller's access to the
 *   project confirmed within `access.projectConfirmMs`, a grant for every area the answer
 *   reveals within `access.grantTtlMs`, and no refusal since (access-grants.ts).
 */
export type EntryGate = 'admin' | 'project' | 'identity' | 'member';

/**
 * What one request carries through every stage besides its decision: its allowance for waiting on
 * Redis (budget.ts) and what its fill did. Mutable, per request: the exchange (exchange.ts) is one,
 * and a refresh ahead (refresh-ahead.ts) has its own.
 */
export interface RequestState extends SharedTierBudget {
  /** A member without proof whose fill already waited on another replica's fill of the shared key: it does not wait again (read-through.ts). */
  ownWaited: boolean;
  /** A member without proof who waited for their proof of the area under way (another question's), or is proving it: they do not wait (again). */
  proofWaited: boolean;
  /** A derivable question that waited for its source's fill under way (read-through.ts): it does not wait again. */
  sourceWaited: boolean;
  /** Set by the fill this request leads: how long the upstream took (ms), for its access log line. */
  upstreamMs: number | undefined;
  /** What gates the Decision that answers: the first one's, or `decideOwn`'s (Cache-Status, the access log). */
  answeredGate: EntryGate | undefined;
  /**
   * The instance's answer to this very question, already asked under this caller's credential by
   * the identity look-up the request triggered (`GET /user`, pipeline.ts): its fill takes it
   * instead of asking again, once.
   */
  prefetched: UpstreamResponse | undefined;
}

/** The Decision: made by this module alone, read by every later stage, never written after. */
export interface Decision {
  /** The request's route (route-memo.ts): its keys per scope. */
  readonly route: CacheableRoute;
  readonly canonical: CanonicalRequest;
  readonly caller: Caller;
  readonly authorization: string;
  readonly scope: Scope;
  readonly gate: EntryGate;
  readonly key: string;
  readonly fillKey: string;
  readonly mayRead: boolean;
  readonly noCache: boolean;
  /** The browser's Origin, when the key names it (`keysOnOrigin`, origin-keying.ts): the fill asks the instance with it. */
  readonly origin?: string | undefined;
  readonly ownKey: string;
  readonly projectId: number;
  readonly areas: number;
  /** `cache.sharing: project`, and the project of the resource this names (`run:7`) not known yet: answered in the caller's own scope meanwhile. */
  readonly unplaced: string | undefined;
  /** The request this decides: its Redis allowance and what its fill did. */
  readonly request: RequestState;
}

export interface DecideOptions {
  /** `cache.honorClientNoCache`. */
  readonly honorNoCache: boolean;
  /**
   * Entries keep Access-Control-Allow-Origin (`keysOnOrigin`): a request's Origin is part of its
   * key, one per origin or one for every origin as learned per operation (origin-keying.ts).
   * Undefined: no Origin is ever keyed.
   */
  readonly originKeying?: OriginKeying | undefined;
  /** Is the caller a verified site admin at `t`? */
  readonly isVerifiedAdmin: (caller: Caller, t: number) => boolean;
  /** `cache.sharing` */
  readonly sharing: Sharing;
  /** The project the instance said a resource (`run:7`) belongs to, if learned (policy.ts). */
  readonly projectOfResource: (tag: string) => number | undefined;
}

/** Where `decide` writes: the request's exchange (exchange.ts), the one object a hit allocates, which is its own RequestState too. */
export type DecisionSlots = { -readonly [K in keyof Decision]: Decision[K] } & RequestState;

/** Decides a cacheable request from a known caller, at `t`, into `into` (the request's exchange); answers it as the Decision. */
// eslint-disable-next-line max-params -- the one decision (scope, key, gate) written into the exchange a hit allocates anyway: an options object would be a second allocation per hit
export function decide(
  route: CacheableRoute,
  caller: Caller,
  authorization: string,
  headers: IncomingHttpHeaders,
  t: number,
  o: DecideOptions,
  into: DecisionSlots,
): Decision {
  const canonical = route.req;
  let gate = gateOf(canonical.op);
  let scope: Scope;
  let key: string;
  let fillKey: string;
  let mayRead = true;
  let projectId = 0;
  let areas = 0;
  const placement = gate === 'project' && o.sharing === 'project' ? placementOf(route, o) : undefined;
  if (placement !== undefined) {
    gate = 'member';
    scope = projectScope(placement.projectId);
    key = fillKey = placement.key;
    projectId = placement.projectId;
    areas = route.areas;
  } else if (gate !== 'admin') {
    scope = caller.scope;
    key = fillKey = keyFor(route, scope);
  } else {
    scope = ADMIN_SCOPE;
    key = keyFor(route, scope);
    mayRead = o.isVerifiedAdmin(caller, t);
    fillKey = mayRead ? key : keyFor(route, caller.scope);
  }
  let origin: string | undefined;
  let originPart = '';
  // Requests without an Origin (SDKs, CI, same-origin pages: nearly all) pay one property read.
  if (headers.origin !== undefined && o.originKeying !== undefined) {
    origin = SERIALIZED_ORIGIN.test(headers.origin) ? headers.origin : undefined;
    // A malformed Origin keeps its own entries (asked for without an Origin: no CORS headers).
    originPart = origin !== undefined && o.originKeying.sharesOrigins(canonical.op.id) ? ANY_ORIGIN_SEGMENT : originSegment(origin);
    key += originPart;
    fillKey += originPart;
  }
  // Most requests carry neither header: no regex for them.
  const cacheControl = headers['cache-control'];
  const pragma = headers.pragma;
  const noCache = o.honorNoCache && (cacheControl !== undefined || pragma !== undefined) && wantsRevalidation(cacheControl, pragma);
  into.route = route;
  into.canonical = canonical;
  into.caller = caller;
  into.authorization = authorization;
  into.scope = scope;
  into.gate = gate;
  into.key = key;
  into.fillKey = fillKey;
  into.mayRead = mayRead;
  into.noCache = noCache;
  into.origin = origin;
  // The caller's own key, for a member filled under their own token: the origin keyed as above.
  into.ownKey = scope === caller.scope ? key : originPart === '' ? keyFor(route, caller.scope) : keyFor(route, caller.scope) + originPart;
  into.projectId = projectId;
  into.areas = areas;
  into.unplaced = gate === 'project' && o.sharing === 'project' ? route.placedBy : undefined;
  into.ownWaited = false;
  into.proofWaited = false;
  into.sourceWaited = false;
  into.answeredGate = gate;
  into.request = into;
  return into;
}

/**
 * A member's question answered from their own key: it expands an area they hold no grant for, and
 * a 200 to it proves only its operation's own area (read-through.ts), so it is the caller's own
 * request, as in `user` mode: their own scope and key, their access to the project confirmed as any
 * user's. The question's project and areas stay: a refusal of it is still a refusal of the
 * project's area (access.ts). A new Decision (this path is rare): the first is never rewritten.
 */
export function decideOwn(d: Decision): Decision {
  d.request.answeredGate = 'project';
  return copyOf(d, d.request, { gate: 'project', scope: d.caller.scope, key: d.ownKey, fillKey: d.ownKey });
}

/**
 * A request decided before its resource's project was known here (`unplaced`), once it is (the
 * shared store told it, read-through.ts): the same question in the project's scope, a member's,
 * as `decide` would decide it now. Undefined while the project is still unknown.
 */
export function decidePlaced(d: Decision, projectOfResource: DecideOptions['projectOfResource']): Decision | undefined {
  const placement = placedAfterFill(d, projectOfResource);
  if (placement === undefined) return undefined;
  d.request.answeredGate = 'member';
  const { key, projectId } = placement;
  return copyOf(d, d.request, { gate: 'member', scope: projectScope(projectId), key, fillKey: key, projectId, areas: d.route.areas, unplaced: undefined });
}

/** The decision alone, apart from the request's exchange (which holds the request and its socket), with a request state of its own (refresh-ahead.ts). */
export function detachedDecision(d: Decision): Decision {
  return copyOf(
    d,
    { ownWaited: false, proofWaited: false, sourceWaited: false, upstreamMs: undefined, sharedTierSpent: false, answeredGate: d.gate, prefetched: undefined },
    {},
  );
}

/** Every field of a Decision, taken from `d` unless `changes` says otherwise. */
function copyOf(
  d: Decision,
  request: RequestState,
  changes: Partial<Pick<Decision, 'gate' | 'scope' | 'key' | 'fillKey' | 'projectId' | 'areas' | 'unplaced'>>,
): Decision {
  return {
    route: d.route,
    canonical: d.canonical,
    caller: d.caller,
    authorization: d.authorization,
    scope: changes.scope ?? d.scope,
    gate: changes.gate ?? d.gate,
    key: changes.key ?? d.key,
    fillKey: changes.fillKey ?? d.fillKey,
    mayRead: d.mayRead,
    noCache: d.noCache,
    origin: d.origin,
    ownKey: d.ownKey,
    projectId: changes.projectId ?? d.projectId,
    areas: changes.areas ?? d.areas,
    unplaced: 'unplaced' in changes ? changes.unplaced : d.unplaced,
    request,
  };
}

/**
 * Whether a browser's Origin may need to be part of the key: when entries keep the instance's
 * Access-Control-Allow-Origin, an answer filled for one origin may name that origin (an instance
 * that reflects the Origin answers `Vary: Origin`), and served to another a browser refuses it.
 * Which operations do is learned from the instance's answers (origin-keying.ts). Only requests
 * that carry an Origin (browsers, cross-origin) are keyed on it: an SDK, a CI job or a
 * same-origin page send none and share one entry as before.
 */
export function keysOnOrigin(storedHeaders: readonly string[]): boolean {
  return storedHeaders.includes('access-control-allow-origin');
}

/**
 * RFC 6454 serialized origin (`https://dash.example.com:8443`) or `null`. Anything else is keyed
 * as one "other" origin and asked for without an Origin: no instance allows a malformed one.
 */
const SERIALIZED_ORIGIN = /^(?:null|[a-z][a-z0-9+.-]*:\/\/[A-Za-z0-9.\-[\]:]{1,253})$/;

function originSegment(origin: string | undefined): string {
  return `|origin=${origin ?? '?'}`;
}

/**
 * Where a project's answer is shared, made once per route: its project from the path, else from
 * what the instance said of the resource the path names; none for `GET /projects` (many
 * projects), nor while the project is unknown (the caller's own scope answers meanwhile).
 */
function placementOf(route: CacheableRoute, o: Pick<DecideOptions, 'projectOfResource'>): Placement | undefined {
  if (route.placement !== undefined) return route.placement;
  const op = route.req.op;
  if (op.pathIds.length === 0) return undefined;
  const projectId = route.placedBy === undefined ? route.req.ids['project_id'] : o.projectOfResource(route.placedBy);
  if (projectId === undefined) return undefined;
  return (route.placement = { projectId, key: keyFor(route, projectScope(projectId)) });
}

/**
 * Where an answer of a request not placed when decided (`unplaced`: `/runs/7` before the run's
 * project was known) belongs once its own answer told the project: the project scope's key, the
 * origin keyed as the request's. Undefined while the project is still unknown.
 */
export function placedAfterFill(d: Decision, projectOfResource: DecideOptions['projectOfResource']): Placement | undefined {
  if (d.unplaced === undefined) return undefined;
  const placement = placementOf(d.route, { projectOfResource });
  if (placement === undefined) return undefined;
  const originPart = d.key.slice(keyFor(d.route, d.scope).length);
  return originPart === '' ? placement : { projectId: placement.projectId, key: placement.key + originPart };
}

/**
 * What gates an operation's answers. Every operation but the admin-only ones (users, roles,
 * groups: they name no project) and `GET /user` (the caller themself) reveals something of a
 * project.
 */
function gateOf(op: Operation): EntryGate {
  if (op.adminOnly) return 'admin';
  return op.resource === 'current_user' ? 'identity' : 'project';
}

/**
 * The key a caller whose identity lapsed (it cannot be verified while the instance fails) may be
 * served stale from: their own scope's, as `decide` would give it. None for an admin-only
 * operation: its shared entries are for verified admins only.
 */
export function lapsedKey(route: RouteInfo, lapsed: Caller | undefined): string | undefined {
  if (lapsed === undefined || route.kind !== 'cacheable' || gateOf(route.req.op) === 'admin') return undefined;
  return keyFor(route, lapsed.scope);
}

/** The scope an entry's tags name its owner by (storable.ts): a user's own entry's; none for a shared one (admin, project). */
export function ownerOf(d: Decision): Scope | undefined {
  return d.gate === 'admin' || d.gate === 'member' ? undefined : d.scope;
}
