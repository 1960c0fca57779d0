/**
 * Raw request URL → what the proxy does with it, memoized.
 *
 * Dashboards and CI agents repeat the same few URLs all day, so routing, validation,
 * normalization and the key suffix are computed once per distinct URL and the hit path pays a
 * single LRU lookup. Invariants: the memo is bounded in bytes
 * (`server.routeMemoMaxBytes`; a URL pushed out only costs a parse), and the pipeline fills it
 * only for a recognized caller, so requests without a credential, or with one the instance
 * refuses, leave nothing behind however many distinct URLs they send.
 */
import { matchRoute } from '../api/route.js';
import { normalizeRequest, type CanonicalRequest } from '../api/normalize.js';
import { ValidationError } from '../api/errors.js';
import { makeKey, makeKeySuffix, type Scope } from '../cache/key.js';
import { resourceOfIdParam } from '../api/catalogue.js';
import { areaMask } from './callers/access-grants.js';
import { BoundedMemo, type MemoStats } from './bounded-memo.js';

export type RouteInfo =
  /** Not one of the 19 catalogued operations: forwarded untouched. */
  | { readonly kind: 'passthrough' }
  /** Catalogued, but with parameters the catalogue does not know: forwarded uncached (or 422 when strict). */
  | { readonly kind: 'bypass'; readonly unknown: readonly string[] }
  /** Catalogued with an invalid parameter: answered locally once the caller is authenticated. */
  | { readonly kind: 'invalid'; readonly error: ValidationError }
  | {
      readonly kind: 'cacheable';
      readonly req: CanonicalRequest;
      readonly suffix: string;
      /**
       * scope → the full key, made once: the hit path then looks up the same string object every
       * time (V8 keeps its hash), instead of concatenating and hashing a new one per request.
       */
      readonly keys: Map<string, string>;
      /** The areas of a project its answer reveals (access-grants.ts `areaMask`). */
      readonly areas: number;
      /**
       * The resource its path names whose project the path does not (`run:7` for a run's results),
       * looked up in what the instance told tm-cache; undefined when the path names the project.
       */
      readonly placedBy: string | undefined;
      /** The project's scope and key, once the project is known (`cache.sharing: project`; decide.ts). */
      placement: Placement | undefined;
    };

/** Where a project's answer is shared: the project, its scope (`p:4`) and the route's key in it. Made once per route. */
export interface Placement {
  readonly projectId: number;
  readonly key: string;
}

export type CacheableRoute = Extract<RouteInfo, { kind: 'cacheable' }>;

const PASSTHROUGH: RouteInfo = Object.freeze({ kind: 'passthrough' });

export function resolveRoute(url: string): RouteInfo {
  const q = url.indexOf('?');
  const pathname = q < 0 ? url : url.slice(0, q);
  try {
    const match = matchRoute(pathname);
    if (match === undefined) return PASSTHROUGH;
    const req = normalizeRequest(match.op, match.ids, q < 0 ? '' : url.slice(q + 1));
    if (req.unknown.length > 0) return { kind: 'bypass', unknown: req.unknown };
    return { kind: 'cacheable', req, suffix: makeKeySuffix(req), keys: new Map(), areas: areaMask(req), placedBy: placedBy(req), placement: undefined };
  } catch (err) {
    if (err instanceof ValidationError) return { kind: 'invalid', error: err };
    throw err;
  }
}

/** The resource tag (`run:7`) a route's project is learned by, when its path names no project. */
function placedBy(req: CanonicalRequest): string | undefined {
  if (req.op.pathIds.length !== 1 || req.op.pathIds[0] === 'project_id') return undefined;
  const name = req.op.pathIds[0]!;
  return `${resourceOfIdParam(name)}:${req.ids[name]!}`;
}

/** The cache key of a cacheable route for a scope (`u:42`, `admin`). */
export function keyFor(info: CacheableRoute, scope: string): string {
  let key = info.keys.get(scope);
  if (key === undefined) {
    key = makeKey(scope as Scope, info.suffix);
    // Past the bound the oldest scope's key goes (a Map iterates in insertion order), one at a
    // time: no cliff where every scope's key is made again at once. Not an LRUCache per route:
    // each would allocate its arrays for MAX_KEYS_PER_ROUTE slots, times every memoized URL.
    if (info.keys.size >= MAX_KEYS_PER_ROUTE) info.keys.delete(info.keys.keys().next().value!);
    info.keys.set(scope, key);
  }
  return key;
}

const MAX_KEYS_PER_ROUTE = 1_000;

/**
 * What a memoized routing costs besides its strings: the LRU's slots, the RouteInfo and its
 * canonical request objects, and a few scope keys. An estimate; the strings are counted apart.
 */
const ROUTE_ENTRY_OVERHEAD_BYTES = 1024;

/** The URL, and for a cacheable route the canonical query and key suffix held beside it. */
function routeSizeBytes(info: RouteInfo, url: string): number {
  const derived = info.kind === 'cacheable' ? info.req.query.length + info.suffix.length : 0;
  return ROUTE_ENTRY_OVERHEAD_BYTES + url.length + derived;
}

export class RouteMemo {
  readonly #memo: BoundedMemo<RouteInfo>;

  constructor(maxBytes: number) {
    this.#memo = new BoundedMemo(maxBytes, routeSizeBytes);
  }

  get(url: string): RouteInfo | undefined {
    return this.#memo.get(url);
  }

  set(url: string, info: RouteInfo): RouteInfo {
    return this.#memo.set(url, info);
  }

  stats(): MemoStats {
    return this.#memo.stats();
  }
}
