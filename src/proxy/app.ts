/**
 * buildProxy(config, deps): the tm-cache HTTP app. It never listens; the CLI and tests do.
 *
 *   GET/HEAD /api/v1/...  ──▶ route memo (raw URL → catalogued operation + canonical query)
 *        │ not catalogued, or no Authorization ───────────────────────▶ passthrough (never cached)
 *        ▼
 *   identity (memo; else upstream GET /user, coalesced) ── 401/403 ──▶ relayed verbatim
 *        ▼
 *   invalid parameters ─▶ 400/422 locally     unknown parameter ─▶ passthrough (`fwd=bypass`) or 422 (strict)
 *        ▼
 *   scope (u:<id> | admin) + key suffix ─▶ memory peek ─fresh─▶ hit   (the hot path: no I/O, no hashing)
 *        ▼                                  Redis ─fresh─▶ hit   (both before fastify: hit-path.ts)
 *   read-through (stale, tiers, coalesced fill, stale-if-error)
 *
 *   any other method or path ──▶ @fastify/http-proxy; a successful write drops the tags it names.
 */
import fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import httpProxy from '@fastify/http-proxy';
import { createServer } from 'node:http';
import type { Logger } from 'pino';
import { makeErrorBody } from '../api/errors.js';
import { Coalescer } from '../cache/coalesce.js';
import type { CacheEntry } from '../cache/entry.js';
import { ADMIN_SCOPE } from '../cache/key.js';
import { FreshnessPolicy } from '../cache/policy.js';
import type { Config } from '../config/schema.js';
import { UpstreamError, type Upstream, type UpstreamResponse } from '../upstream/client.js';
import { IdentityResolver, type Caller, type SharedStore } from './identity.js';
import { ageHeader, cacheStatus, matchesIfNoneMatch, wantsRevalidation } from './headers.js';
import { ReadThrough, relayedHeaders, type CacheOutcome, type FillLock, type FillResult, type ReadCache, type Served } from './read-through.js';
import { keyFor, resolveRoute, type RouteInfo, RouteMemo } from './route-memo.js';
import { makeHitPaths, NOT_LOOKED_UP, type HitPaths } from './hit-path.js';
import { askForGzipVariant, representationHeaders, selectRepresentation } from './encoding.js';

/** The cache as the app sees it: read-through operations plus invalidation. */
export interface ProxyCache extends ReadCache {
  invalidateTag(tag: string): Promise<unknown>;
  /** Memory first; with tiers behind it (Redis), hits are also looked up there before fastify. */
  readonly tiers: readonly unknown[];
}

export interface ProxyDeps {
  readonly cache: ProxyCache;
  readonly upstream: Upstream;
  readonly logger: Logger;
  readonly hmacSecret: Buffer;
  readonly shared?: SharedStore | undefined;
  readonly lock?: FillLock | undefined;
  readonly now?: () => number;
  /** Called with every request's outcome (metrics). */
  readonly onOutcome?: (outcome: CacheOutcome, operation: string) => void;
}

const EMPTY_QUERY = Object.freeze({});
const WRITE_METHODS = new Set(['DELETE', 'PATCH', 'POST', 'PUT']);

function isWrite(method: string): boolean {
  return WRITE_METHODS.has(method);
}

export async function buildProxy(config: Config, deps: ProxyDeps): Promise<FastifyInstance> {
  const now = deps.now ?? Date.now;
  // Hits are answered before fastify sees the request (hit-path.ts): fresh memory hits at once,
  // then, with Redis, fresh shared-tier hits; everything else goes on to fastify. The paths are
  // made below, once the identity resolver and the route memo exist.
  let hits: HitPaths | undefined;
  let closing = false;
  const useSharedStage = deps.cache.tiers.length > 1;
  const app = fastify({
    serverFactory: (handler) =>
      createServer((req, res) => {
        if (closing || hits === undefined) return handler(req, res);
        try {
          if (hits.fresh(req, res)) return;
        } catch (err) {
          // A bug here must cost one request the fast path, never the process.
          deps.logger.error({ err: describe(err) }, 'hit path failed');
          if (res.headersSent) return void res.destroy();
        }
        if (!useSharedStage) return handler(req, res);
        hits.shared(req, res).then(
          (answered) => answered || handler(req, res),
          (err: unknown) => {
            deps.logger.error({ err: describe(err) }, 'shared hit path failed');
            if (res.headersSent) res.destroy();
            else handler(req, res);
          },
        );
      }),
    loggerInstance: deps.logger as FastifyBaseLogger,
    // One debug line per request comes from our own hook (below), with the cache outcome in it.
    logController: new LogController({ disableRequestLogging: true }),
    // No child logger per request: nothing logs per request but `record`, which names what it needs.
    childLoggerFactory: (logger) => logger,
    // The cacheable path parses its own query string (normalize.ts); skip fastify's parse.
    routerOptions: { querystringParser: () => EMPTY_QUERY, ignoreTrailingSlash: true },
    return503OnClosing: true,
  });
  const policy = new FreshnessPolicy(config.cache.freshness, config.cache.staleIfErrorMs);
  const identity = new IdentityResolver({
    ttlMs: config.identity.ttlMs,
    accessTtlMs: config.access.ttlMs,
    maxEntries: config.identity.maxEntries,
    hmacSecret: deps.hmacSecret,
    upstream: deps.upstream,
    coalescer: new Coalescer(),
    shared: deps.shared,
    now,
  });
  const readThrough = new ReadThrough({
    cache: deps.cache,
    upstream: deps.upstream,
    coalescer: new Coalescer<FillResult>(),
    policy,
    identity,
    lock: deps.lock,
    lockWaitMs: config.cache.redis.lockWaitMs,
    maxEntryBytes: config.cache.memory.maxEntryBytes,
    defaultRetryAfterMs: config.upstream.defaultRetryAfterMs,
    now,
    onBackgroundError: (err, key) => deps.logger.warn({ err: describe(err), key }, 'background refresh failed'),
  });
  const routes = new RouteMemo(10_000);
  const honorNoCache = config.cache.honorClientNoCache;
  const onOutcome = deps.onOutcome;
  const logEachRequest = deps.logger.isLevelEnabled('debug');

  hits = makeHitPaths({
    routes,
    identity,
    cache: deps.cache,
    now,
    onHit: (operation, tier, userId, req) => {
      const outcome = tier === 'memory' ? HIT_MEMORY : HIT_REDIS;
      onOutcome?.(outcome, operation);
      if (logEachRequest) deps.logger.debug({ method: req.method, url: req.url, operation, user: userId, outcome }, 'request');
    },
  });
  app.addHook('preClose', async () => {
    closing = true; // from here on fastify answers, with 503 for new requests (return503OnClosing)
  });

  /** Every cacheable request ends here once: the metric, and at debug level one log line. */
  function record(request: FastifyRequest, outcome: CacheOutcome, operation: string, caller: Caller): void {
    onOutcome?.(outcome, operation);
    if (logEachRequest) {
      // The caller is named by user id only; the credential never reaches a log line.
      request.log.debug({ method: request.method, url: request.url, operation, user: caller.userId, outcome }, 'request');
    }
  }

  async function invalidateForWrite(url: string): Promise<void> {
    const tags = policy.tagsForWrite(url.split('?', 1)[0]!);
    await Promise.all(tags.map((tag) => deps.cache.invalidateTag(tag)));
    if (tags.length > 0) deps.logger.debug({ tags }, 'invalidated after write');
  }

  /** Lets the request fall through to @fastify/http-proxy, optionally saying why it was not cached. */
  function passthrough(_request: FastifyRequest, reply: FastifyReply, outcome?: CacheOutcome): undefined {
    if (outcome) reply.header('cache-status', cacheStatus(outcome, undefined, now()));
    return undefined;
  }

  function sendEntry(request: FastifyRequest, reply: FastifyReply, entry: CacheEntry, outcome: CacheOutcome, t: number): FastifyReply {
    const rep = selectRepresentation(entry, request.headers['accept-encoding']);
    if (rep === undefined) {
      return reply.code(502).send(makeErrorBody('A stored answer could not be decoded; it will be fetched again.'));
    }
    const notModified = matchesIfNoneMatch(request.headers['if-none-match'], rep.etag);
    const head = representationHeaders(entry, rep, notModified);
    head.push('age', ageHeader(entry, t), 'cache-status', cacheStatus(outcome, entry, t));
    // Stored bytes and a complete head: written as the hit path writes them, without fastify's
    // send pipeline (onSend hooks, header merging) in between.
    reply.hijack();
    reply.raw.writeHead(notModified ? 304 : entry.status, head);
    reply.raw.end(notModified || request.method === 'HEAD' ? undefined : rep.body);
    return reply;
  }

  function sendRelay(reply: FastifyReply, res: UpstreamResponse, outcome: CacheOutcome): FastifyReply {
    reply.headers(relayedHeaders(res));
    reply.header('cache-status', cacheStatus(outcome, undefined, now()));
    return reply.code(res.status).send(res.body);
  }

  function sendServed(request: FastifyRequest, reply: FastifyReply, served: Served): FastifyReply {
    switch (served.kind) {
      case 'entry':
        return sendEntry(request, reply, served.entry, served.outcome, now());
      case 'relay':
        return sendRelay(reply, served.response, served.outcome);
      case 'local':
        reply.headers(served.headers);
        reply.header('cache-status', cacheStatus(served.outcome, undefined, now()));
        return reply.code(served.status).send(served.body);
    }
  }

  async function resolveCaller(authorization: string, info: RouteInfo, reply: FastifyReply, request: FastifyRequest): Promise<Caller | FastifyReply> {
    try {
      const result = await identity.resolve(authorization);
      if (result.kind === 'caller') return result.caller;
      return sendRelay(reply, result.response, { kind: 'bypass', detail: 'identity', upstreamStatus: result.response.status });
    } catch (err) {
      const failure = err instanceof UpstreamError ? err : new UpstreamError('reset', String(err));
      const lapsed = identity.peekLapsed(authorization);
      if (lapsed !== undefined && info.kind === 'cacheable' && !info.req.op.adminOnly) {
        // The instance is failing: a caller we knew may still get what we hold for them.
        return sendServed(request, reply, readThrough.serveStaleOnly(keyFor(info, lapsed.scope), failure));
      }
      return sendServed(request, reply, readThrough.serveStaleOnly('', failure));
    }
  }

  /**
   * The cache, as the preHandler of every proxied route: it answers what it can (a sent reply) and
   * lets everything else fall through to @fastify/http-proxy (undefined).
   */
  async function answerFromCache(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    if (request.method !== 'GET' && request.method !== 'HEAD') return undefined;
    const authorization = request.headers.authorization;
    const info = routes.get(request.url) ?? routes.set(request.url, resolveRoute(request.url));
    if (info.kind === 'passthrough' || authorization === undefined) return passthrough(request, reply);

    const t = now();
    let caller = identity.peek(authorization, t);
    if (caller === undefined) {
      const resolved = await resolveCaller(authorization, info, reply, request);
      if (!('userId' in resolved)) return resolved;
      caller = resolved;
    }
    if (info.kind === 'invalid') {
      return reply.code(info.error.status).header('cache-status', 'tm-cache; detail=invalid-request').send(info.error.toBody());
    }
    if (info.kind === 'bypass') {
      if (config.cache.strict) return reply.code(422).send(unknownParamsBody(info.unknown));
      return passthrough(request, reply, { kind: 'bypass', detail: 'unknown-param' });
    }
    const op = info.req.op;
    const verified = !op.adminOnly || identity.isVerifiedAdmin(caller, t);
    const key = keyFor(info, op.adminOnly && verified ? ADMIN_SCOPE : caller.scope);
    const noCache = honorNoCache && wantsRevalidation(request.headers['cache-control'], request.headers.pragma);
    // A caller not yet verified as admin never reads the shared admin entries: their request goes
    // upstream under their own token (coalesced only with their own), and a 200 verifies them.
    const storeKey = op.adminOnly ? keyFor(info, ADMIN_SCOPE) : key;
    const looked = hits!.takeSharedLookup(request.raw);
    const prefetched = looked === NOT_LOOKED_UP ? undefined : { found: looked };
    const served = await readThrough.serve({ key: storeKey, fillKey: key, mayRead: verified, req: info.req, authorization, caller, noCache, prefetched });
    if (served.kind === 'entry') askForGzipVariant(deps.cache, storeKey, served.entry, request.headers['accept-encoding']);
    record(request, served.outcome, op.id, caller);
    return sendServed(request, reply, served);
  }

  await app.register(httpProxy, {
    upstream: config.upstream.url,
    prefix: '/',
    preHandler: answerFromCache,
    replyOptions: {
      onResponse: (request, reply, res) => {
        if (isWrite(request.method) && res.statusCode >= 200 && res.statusCode < 300) void invalidateForWrite(request.url);
        void reply.send(res.stream);
      },
    },
  });

  app.addHook('onClose', async () => {
    await deps.upstream.close();
  });
  return app;
}

const HIT_MEMORY: CacheOutcome = Object.freeze({ kind: 'hit', tier: 'memory' });
const HIT_REDIS: CacheOutcome = Object.freeze({ kind: 'hit', tier: 'redis' });

function unknownParamsBody(unknown: readonly string[]): ReturnType<typeof makeErrorBody> {
  const errors: Record<string, string[]> = {};
  for (const name of unknown) errors[name] = [`The ${name} parameter is not defined for this operation.`];
  return makeErrorBody('The given data was invalid.', errors);
}

function describe(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

