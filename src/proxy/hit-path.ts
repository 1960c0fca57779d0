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
import { acceptsGzip, representationHeaders, type Representation } from './encoding.js';
import type { IdentityResolver } from './identity.js';
import { keyFor, type RouteMemo } from './route-memo.js';

export interface HitPathDeps {
  readonly routes: RouteMemo;
  readonly identity: IdentityResolver;
  readonly cache: { peek(key: string, now?: number): CacheEntry | undefined; ensureGzip(key: string, entry: CacheEntry): void };
  readonly now: () => number;
  /** Called once per hit, with the operation and the caller's user id (metrics, debug log). */
  readonly onHit: (operation: OperationId, userId: number, req: IncomingMessage) => void;
}

export type HitPath = (req: IncomingMessage, res: ServerResponse) => boolean;

export function makeHitPath(d: HitPathDeps): HitPath {
  const { routes, identity, cache, now, onHit } = d;
  return function serveFreshHit(req, res) {
    const method = req.method;
    if (method !== 'GET' && method !== 'HEAD') return false;
    const headers = req.headers;
    const authorization = headers.authorization;
    // A client's Cache-Control or Pragma may ask for revalidation: the full path decides.
    if (authorization === undefined || headers['cache-control'] !== undefined || headers.pragma !== undefined) return false;
    const info = routes.get(req.url!);
    if (info === undefined || info.kind !== 'cacheable') return false;
    const t = now();
    const caller = identity.peek(authorization, t);
    if (caller === undefined) return false;
    const op = info.req.op;
    let scope: string = caller.scope;
    if (op.adminOnly) {
      if (!identity.isVerifiedAdmin(caller, t)) return false;
      scope = ADMIN_SCOPE;
    }
    const key = keyFor(info, scope);
    const entry = cache.peek(key, t);
    if (entry === undefined || t >= entry.freshUntil) return false;

    const acceptEncoding = headers['accept-encoding'];
    if (entry.gzip === undefined && acceptsGzip(acceptEncoding)) cache.ensureGzip(key, entry);
    const gzip = entry.gzip !== undefined && acceptsGzip(acceptEncoding);
    const body = gzip ? entry.gzip! : readBody(entry);
    if (body === undefined) return false;
    const ifNoneMatch = headers['if-none-match'];
    if (ifNoneMatch !== undefined && matchesIfNoneMatch(ifNoneMatch, gzip ? entry.gzipEtag! : entry.etag)) {
      res.writeHead(304, buildHead(entry, { body, etag: gzip ? entry.gzipEtag! : entry.etag, gzip }, t, true));
      res.end();
    } else {
      res.writeHead(entry.status, headFor(entry, gzip, body, t));
      if (method === 'HEAD') res.end();
      else res.end(body);
    }
    onHit(op.id, caller.userId, req);
    return true;
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

function buildHead(entry: CacheEntry, rep: Representation, t: number, notModified: boolean): string[] {
  const out = representationHeaders(entry, rep, notModified);
  out.push('age', String(ageSeconds(entry, t)), 'cache-status', `${CACHE_NAME}; hit; ttl=${ttlSeconds(entry, t)}; detail=memory`);
  return out;
}
