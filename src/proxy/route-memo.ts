/**
 * Raw request URL → what the proxy does with it, memoized.
 *
 * Dashboards and CI agents repeat the same few URLs all day, so routing, validation,
 * normalization and the key suffix are computed once per distinct URL and the hit path pays a
 * single Map lookup. The memo is bounded; when full it starts over (a miss only costs a parse).
 */
import { matchRoute } from '../api/route.js';
import { normalizeRequest, type CanonicalRequest } from '../api/normalize.js';
import { ValidationError } from '../api/errors.js';
import { makeKey, makeKeySuffix, type Scope } from '../cache/key.js';

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
    };

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
    return { kind: 'cacheable', req, suffix: makeKeySuffix(req), keys: new Map() };
  } catch (err) {
    if (err instanceof ValidationError) return { kind: 'invalid', error: err };
    throw err;
  }
}

/** The cache key of a cacheable route for a scope (`u:42`, `admin`). */
export function keyFor(info: CacheableRoute, scope: string): string {
  let key = info.keys.get(scope);
  if (key === undefined) {
    key = makeKey(scope as Scope, info.suffix);
    if (info.keys.size >= MAX_KEYS_PER_ROUTE) info.keys.clear();
    info.keys.set(scope, key);
  }
  return key;
}

const MAX_KEYS_PER_ROUTE = 1_000;

export class RouteMemo {
  private readonly memo = new Map<string, RouteInfo>();

  constructor(private readonly maxEntries: number) {}

  get(url: string): RouteInfo | undefined {
    return this.memo.get(url);
  }

  set(url: string, info: RouteInfo): RouteInfo {
    if (this.memo.size >= this.maxEntries) this.memo.clear();
    this.memo.set(url, info);
    return info;
  }
}
