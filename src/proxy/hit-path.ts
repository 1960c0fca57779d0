/**
 * The hot path: a fresh memory-tier hit, answered on node's own request and response objects
 * before fastify builds a request, routes it or runs hooks.
 *
 * Dashboards poll the same URLs all day, so most requests are exactly this: a URL seen before
 * (route memo), a caller seen recently (identity memo), a fresh entry (memory tier). Each of
 * those is one Map lookup; the answer is one writeHead with a flat header array and one end
 * with the stored bytes. No hashing, no I/O, no parsing. Anything else (a first sight of a URL
 * or a token, a stale or missing entry, `Cache-Control` from the client, a write) returns
 * false and goes through fastify, where the full read-through handles it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { OperationId } from '../api/catalogue.js';
import { ageSeconds, readBody, ttlSeconds, type CacheEntry } from '../cache/entry.js';
import { ADMIN_SCOPE } from '../cache/key.js';
import { matchesIfNoneMatch, CACHE_NAME } from './headers.js';
import { acceptsGzip, askForGzipVariant, representationHeaders, type Representation } from './encoding.js';
import type { IdentityResolver } from './identity.js';
import { keyFor, type RouteMemo } from './route-memo.js';
import type { MaybePromise, TierName } from '../cache/tier.js';

export interface HitPathDeps {
  readonly routes: RouteMemo;
  readonly identity: IdentityResolver;
  readonly cache: {
    /** Synchronous when memory answers; a promise while lower tiers are asked. */
    get(key: string, now?: number): MaybePromise<{ entry: CacheEntry; tier: TierName } | undefined>;
    ensureGzip(key: string, entry: CacheEntry): void;
  };
  readonly now: () => number;
  /** Called once per hit, with the operation, the tier and the caller's user id (metrics, debug log). */
  readonly onHit: (operation: OperationId, tier: TierName, userId: number, req: IncomingMessage) => void;
}

/** What the shared-tier stage found for a request it did not answer: the full path starts from it. */
export type SharedLookup = { entry: CacheEntry; tier: TierName } | undefined;

export interface HitPaths {
  /** Fresh memory-tier hits, synchronously; false: not answered. */
  readonly fresh: (req: IncomingMessage, res: ServerResponse) => boolean;
  /**
   * Fresh shared-tier (Redis) hits, still before fastify; false: not answered, and what the
   * lookup found is kept for the full path (`takeSharedLookup`) so Redis is not asked twice.
   */
  readonly shared: (req: IncomingMessage, res: ServerResponse) => Promise<boolean>;
  readonly takeSharedLookup: (req: IncomingMessage) => SharedLookup | typeof NOT_LOOKED_UP;
}

export const NOT_LOOKED_UP = Symbol('not looked up');

interface Lookup {
  readonly key: string;
  readonly operation: OperationId;
  readonly userId: number;
  readonly t: number;
}

export function makeHitPaths(d: HitPathDeps): HitPaths {
  const { routes, identity, cache, now, onHit } = d;
  const sharedLookups = new WeakMap<IncomingMessage, SharedLookup>();
  /** Lower-tier lookups the fresh stage started (memory missed): the shared stage awaits them. */
  const pendingLookups = new WeakMap<IncomingMessage, Promise<SharedLookup>>();

  /** The key a request may be answered from, or undefined when only the full path can judge it. */
  function lookupOf(req: IncomingMessage): Lookup | undefined {
    const method = req.method;
    if (method !== 'GET' && method !== 'HEAD') return undefined;
    const headers = req.headers;
    const authorization = headers.authorization;
    // A client's Cache-Control or Pragma may ask for revalidation: the full path decides.
    if (authorization === undefined || headers['cache-control'] !== undefined || headers.pragma !== undefined) return undefined;
    const info = routes.get(req.url!);
    if (info === undefined || info.kind !== 'cacheable') return undefined;
    const t = now();
    const caller = identity.peek(authorization, t);
    if (caller === undefined) return undefined;
    const op = info.req.op;
    let scope: string = caller.scope;
    if (op.adminOnly) {
      if (!identity.isVerifiedAdmin(caller, t)) return undefined;
      scope = ADMIN_SCOPE;
    }
    return { key: keyFor(info, scope), operation: op.id, userId: caller.userId, t };
  }

  function answer(req: IncomingMessage, res: ServerResponse, entry: CacheEntry, at: Lookup, tier: TierName): boolean {
    const headers = req.headers;
    const acceptEncoding = headers['accept-encoding'];
    askForGzipVariant(cache, at.key, entry, acceptEncoding);
    const gzip = entry.gzip !== undefined && acceptsGzip(acceptEncoding);
    const body = gzip ? entry.gzip! : readBody(entry);
    if (body === undefined) return false;
    const etag = gzip ? entry.gzipEtag! : entry.etag;
    const ifNoneMatch = headers['if-none-match'];
    const t = at.t;
    if (ifNoneMatch !== undefined && matchesIfNoneMatch(ifNoneMatch, etag)) {
      res.writeHead(304, buildHead(entry, { body, etag, gzip }, t, true, tier));
      res.end();
    } else {
      res.writeHead(entry.status, tier === 'memory' ? headFor(entry, gzip, body, t) : buildHead(entry, { body, etag, gzip }, t, false, tier));
      if (req.method === 'HEAD') res.end();
      else res.end(body);
    }
    onHit(at.operation, tier, at.userId, req);
    return true;
  }

  return {
    fresh(req, res) {
      const at = lookupOf(req);
      if (at === undefined) return false;
      const found = cache.get(at.key, at.t);
      if (found instanceof Promise) {
        pendingLookups.set(req, found);
        return false;
      }
      if (found === undefined || at.t >= found.entry.freshUntil) return false;
      return answer(req, res, found.entry, at, found.tier);
    },
    async shared(req, res) {
      const at = lookupOf(req);
      if (at === undefined) return false;
      const pending = pendingLookups.get(req);
      if (pending !== undefined) pendingLookups.delete(req);
      const found = await (pending ?? cache.get(at.key));
      if (found !== undefined && now() < found.entry.freshUntil && answer(req, res, found.entry, { ...at, t: now() }, found.tier)) return true;
      sharedLookups.set(req, found);
      return false;
    },
    takeSharedLookup(req) {
      if (!sharedLookups.has(req)) return NOT_LOOKED_UP;
      const found = sharedLookups.get(req);
      sharedLookups.delete(req);
      return found;
    },
  };
}

/**
 * The response head of an entry changes only when its Age or remaining ttl (whole seconds) does:
 * it is built once per second per entry and representation, and reused by every hit in between
 * (node's writeHead reads the list and keeps no reference to it).
 */
interface HeadCache {
  readonly age: number;
  readonly ttl: number;
  identity?: string[];
  gzip?: string[];
}

const heads = new WeakMap<CacheEntry, HeadCache>();

function headFor(entry: CacheEntry, gzip: boolean, body: Buffer, t: number): string[] {
  const age = ageSeconds(entry, t);
  const ttl = ttlSeconds(entry, t);
  let cached = heads.get(entry);
  if (cached === undefined || cached.age !== age || cached.ttl !== ttl) heads.set(entry, (cached = { age, ttl }));
  if (gzip) return (cached.gzip ??= buildHead(entry, { body, etag: entry.gzipEtag!, gzip }, t, false));
  return (cached.identity ??= buildHead(entry, { body, etag: entry.etag, gzip }, t, false));
}

function buildHead(entry: CacheEntry, rep: Representation, t: number, notModified: boolean, tier: TierName = 'memory'): string[] {
  const out = representationHeaders(entry, rep, notModified);
  out.push('age', String(ageSeconds(entry, t)), 'cache-status', `${CACHE_NAME}; hit; ttl=${ttlSeconds(entry, t)}; detail=${tier}`);
  return out;
}
